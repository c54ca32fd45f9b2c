//! Queue allocation strategies (Java's `AllocateMessageQueueStrategy` family).
//!
//! Every member of a group computes its own share from the same inputs: the topic's
//! queues sorted as Java's `MessageQueue.compareTo` and the client ids sorted as Java's
//! `String.compareTo` (UTF-16 units). The strategies reproduce Java's arithmetic exactly,
//! so Rust, Java, C++ and Go members of one group agree on who owns what.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::body::MessageQueue;

/// How a clustering group divides a topic's queues among its members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AllocateStrategy {
    /// `AllocateMessageQueueAveragely` (Java's default): contiguous blocks, the first
    /// `queues % clients` members taking one more.
    #[default]
    Averagely,
    /// `AllocateMessageQueueAveragelyByCircle`: queue `i` goes to member `i % clients`.
    AveragelyByCircle,
    /// `AllocateMessageQueueConsistentHash` with this many virtual nodes per member
    /// (Java: 10), MD5 ring over the client ids.
    ConsistentHash {
        /// Virtual nodes per client.
        virtual_nodes: u32,
    },
    /// `AllocateMessageQueueByConfig`: always these queues, whatever the group.
    ByConfig(Vec<MessageQueue>),
}

impl AllocateStrategy {
    /// Java's strategy name (`getName()`), reported in running info.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Averagely => "AVG",
            Self::AveragelyByCircle => "AVG_BY_CIRCLE",
            Self::ConsistentHash { .. } => "CONSISTENT_HASH",
            Self::ByConfig(_) => "CONFIG",
        }
    }

    /// The queues of `mq_all` that `current` owns among `cid_all`. Both lists must be
    /// sorted (see [`sort_queues`], [`sort_client_ids`]); a client not in the list gets
    /// nothing, as in Java.
    pub fn allocate(
        &self,
        current: &str,
        mq_all: &[MessageQueue],
        cid_all: &[String],
    ) -> Vec<MessageQueue> {
        if let Self::ByConfig(list) = self {
            return list.clone();
        }
        if current.is_empty() || mq_all.is_empty() || cid_all.is_empty() {
            return Vec::new();
        }
        let Some(index) = cid_all.iter().position(|c| c == current) else {
            return Vec::new();
        };
        match self {
            Self::Averagely => averagely(index, mq_all, cid_all.len()),
            Self::AveragelyByCircle => (index..mq_all.len())
                .filter(|i| i % cid_all.len() == index)
                .map(|i| mq_all[i].clone())
                .collect(),
            Self::ConsistentHash { virtual_nodes } => {
                let ring = ring(cid_all, *virtual_nodes);
                mq_all
                    .iter()
                    .filter(|mq| route(&ring, &java_to_string(mq)) == Some(current))
                    .cloned()
                    .collect()
            }
            Self::ByConfig(_) => Vec::new(),
        }
    }
}

fn averagely(index: usize, mq_all: &[MessageQueue], clients: usize) -> Vec<MessageQueue> {
    // Java's int arithmetic, kept signed: `range` goes negative for surplus clients.
    let (n, c, i) = (mq_all.len() as i64, clients as i64, index as i64);
    let m = n % c;
    let average = if n <= c {
        1
    } else if m > 0 && i < m {
        n / c + 1
    } else {
        n / c
    };
    let start = if m > 0 && i < m {
        i * average
    } else {
        i * average + m
    };
    let range = average.min(n - start);
    (0..range.max(0))
        .map(|k| mq_all[((start + k) % n) as usize].clone())
        .collect()
}

/// Java's `MessageQueue.toString()`, the consistent-hash key of a queue.
pub fn java_to_string(mq: &MessageQueue) -> String {
    format!(
        "MessageQueue [topic={}, brokerName={}, queueId={}]",
        mq.topic, mq.broker_name, mq.queue_id
    )
}

fn ring(cid_all: &[String], virtual_nodes: u32) -> BTreeMap<u64, &str> {
    let mut ring = BTreeMap::new();
    for cid in cid_all {
        for i in 0..virtual_nodes {
            // VirtualNode.getKey() = physical key + "-" + replica index; later puts win.
            ring.insert(md5_hash(&format!("{cid}-{i}")), cid.as_str());
        }
    }
    ring
}

fn route<'a>(ring: &BTreeMap<u64, &'a str>, key: &str) -> Option<&'a str> {
    let h = md5_hash(key);
    ring.range(h..)
        .next()
        .or_else(|| ring.iter().next())
        .map(|(_, c)| *c)
}

/// `ConsistentHashRouter.MD5Hash`: the first 4 digest bytes, big-endian.
fn md5_hash(key: &str) -> u64 {
    let d = md5(key.as_bytes());
    u64::from(u32::from_be_bytes([d[0], d[1], d[2], d[3]]))
}

/// Sorts queues as Java's `MessageQueue.compareTo`: topic, broker name, queue id.
pub fn sort_queues(mqs: &mut [MessageQueue]) {
    mqs.sort_by(|a, b| {
        java_cmp(&a.topic, &b.topic)
            .then_with(|| java_cmp(&a.broker_name, &b.broker_name))
            .then(a.queue_id.cmp(&b.queue_id))
    });
}

/// Sorts client ids as Java's `String.compareTo` and drops duplicates.
pub fn sort_client_ids(ids: &mut Vec<String>) {
    ids.sort_by(|a, b| java_cmp(a, b));
    ids.dedup();
}

fn java_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// MD5 (RFC 1321); small enough to keep here rather than add a dependency.
fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let mut h: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    for chunk in msg.chunks_exact(64) {
        let m: Vec<u32> = chunk
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let [mut a, mut b, mut c, mut d] = h;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mqs(n: i32) -> Vec<MessageQueue> {
        (0..n)
            .map(|i| MessageQueue::new("T", "broker-a", i))
            .collect()
    }

    fn cids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}@c")).collect()
    }

    fn ids(s: &AllocateStrategy, cur: &str, q: &[MessageQueue], c: &[String]) -> Vec<i32> {
        s.allocate(cur, q, c).iter().map(|m| m.queue_id).collect()
    }

    #[test]
    fn md5_matches_known_digests() {
        let hex = |d: [u8; 16]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        let long = vec![b'a'; 1000];
        assert_eq!(hex(md5(&long)), "cabe45dcc9ae5b66ba86600cca6b8ba8");
    }

    // Expected values computed by hand from Java's AllocateMessageQueueAveragely.
    #[test]
    fn averagely_matches_java() {
        let s = AllocateStrategy::Averagely;
        let (q8, c3) = (mqs(8), cids(3));
        // 8 queues, 3 clients: mod 2 → sizes 3, 3, 2.
        assert_eq!(ids(&s, &c3[0], &q8, &c3), [0, 1, 2]);
        assert_eq!(ids(&s, &c3[1], &q8, &c3), [3, 4, 5]);
        assert_eq!(ids(&s, &c3[2], &q8, &c3), [6, 7]);
        // 2 queues, 3 clients: the third gets nothing.
        let q2 = mqs(2);
        assert_eq!(ids(&s, &c3[0], &q2, &c3), [0]);
        assert_eq!(ids(&s, &c3[1], &q2, &c3), [1]);
        assert!(ids(&s, &c3[2], &q2, &c3).is_empty());
        // 4 queues, 2 clients; unknown client gets nothing.
        let c2 = cids(2);
        assert_eq!(ids(&s, &c2[1], &mqs(4), &c2), [2, 3]);
        assert!(ids(&s, "stranger", &mqs(4), &c2).is_empty());
        // 3 queues, 3 clients: one each.
        assert_eq!(ids(&s, &c3[2], &mqs(3), &c3), [2]);
    }

    #[test]
    fn averagely_by_circle_matches_java() {
        let s = AllocateStrategy::AveragelyByCircle;
        let (q8, c3) = (mqs(8), cids(3));
        assert_eq!(ids(&s, &c3[0], &q8, &c3), [0, 3, 6]);
        assert_eq!(ids(&s, &c3[1], &q8, &c3), [1, 4, 7]);
        assert_eq!(ids(&s, &c3[2], &q8, &c3), [2, 5]);
    }

    #[test]
    fn every_queue_has_exactly_one_owner() {
        for s in [
            AllocateStrategy::Averagely,
            AllocateStrategy::AveragelyByCircle,
            AllocateStrategy::ConsistentHash { virtual_nodes: 10 },
        ] {
            for (nq, nc) in [(8, 3), (2, 5), (16, 4), (7, 7), (1, 1)] {
                let (q, c) = (mqs(nq), cids(nc));
                let mut all: Vec<i32> = c.iter().flat_map(|id| ids(&s, id, &q, &c)).collect();
                all.sort_unstable();
                assert_eq!(all, (0..nq).collect::<Vec<_>>(), "{s:?} {nq}q {nc}c");
            }
        }
    }

    // Ring positions from Java's MD5Hash (first 4 bytes of MD5, big-endian), computed
    // independently with Python's hashlib for these keys.
    #[test]
    fn consistent_hash_matches_java_ring() {
        assert_eq!(md5_hash("c1-0"), 0xe7a7_eb0b);
        assert_eq!(
            md5_hash("MessageQueue [topic=T, brokerName=broker-a, queueId=0]"),
            0x612f_4674
        );
        let s = AllocateStrategy::ConsistentHash { virtual_nodes: 10 };
        let c = vec!["c1".to_string(), "c2".to_string()];
        let q = mqs(4);
        assert_eq!(ids(&s, "c1", &q, &c), EXPECTED_C1);
        assert_eq!(ids(&s, "c2", &q, &c), EXPECTED_C2);
    }

    const EXPECTED_C1: [i32; 2] = [0, 3];
    const EXPECTED_C2: [i32; 2] = [1, 2];

    #[test]
    fn by_config_ignores_the_group() {
        let s = AllocateStrategy::ByConfig(mqs(2));
        assert_eq!(ids(&s, "anyone", &mqs(8), &cids(3)), [0, 1]);
    }

    #[test]
    fn sorting_follows_java_compare_to() {
        let mut c = vec!["b@1".to_string(), "a@2".into(), "B@0".into(), "a@2".into()];
        sort_client_ids(&mut c);
        assert_eq!(c, ["B@0", "a@2", "b@1"]);
        let mut q = mqs(3);
        q.reverse();
        sort_queues(&mut q);
        assert_eq!(q[0].queue_id, 0);
    }
}
