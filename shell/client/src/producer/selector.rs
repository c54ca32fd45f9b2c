//! Which queue a message goes to: the writable queues of a route (or of TBW102's route for
//! a topic not created yet), round-robin with the last failed broker avoided, or a
//! caller's [`QueueSelector`] for ordering.

use std::sync::atomic::{AtomicUsize, Ordering};

use tern_shell::body::{MessageQueue, TopicRouteData};
use tern_shell::message::Message;

use crate::instance::PERM_WRITE;

/// Chooses a queue for a message (Java's `MessageQueueSelector`).
pub trait QueueSelector: Send + Sync {
    /// Index into `queues` (taken modulo its length).
    fn select(&self, queues: &[MessageQueue], msg: &Message) -> usize;
}

/// Messages with the same key go to the same queue, so they keep their order
/// (Java's `SelectMessageQueueByHash` with the key as argument: `abs(key.hashCode() % n)`).
#[derive(Debug, Clone)]
pub struct HashSelector(pub String);

impl QueueSelector for HashSelector {
    fn select(&self, queues: &[MessageQueue], _msg: &Message) -> usize {
        hash_index(&self.0, queues.len())
    }
}

/// Java's `abs(key.hashCode() % n)`, the index `SelectMessageQueueByHash` picks.
pub fn hash_index(key: &str, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    (java_hash(key) % n).unsigned_abs() as usize
}

/// Java `String.hashCode` over UTF-16 units with 32-bit wrap (tag codes, selectors).
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
}

/// The queues a producer may write to for a topic (Java's `TopicPublishInfo`).
#[derive(Debug, Default)]
pub struct PublishInfo {
    /// Writable queues whose broker has a master, sorted by broker then queue id.
    pub queues: Vec<MessageQueue>,
    /// True when the queues come from TBW102's route (send with `defaultTopic`).
    pub from_default_topic: bool,
    next: AtomicUsize,
}

impl PublishInfo {
    /// Writable queues of `route` for `topic`. With `max_queues`, each broker contributes
    /// at most that many (auto-creation: min(producer default, TBW102 write queues)).
    pub fn from_route(topic: &str, route: &TopicRouteData, max_queues: Option<i32>) -> Self {
        let mut datas: Vec<_> = route
            .queue_datas
            .iter()
            .filter(|q| q.perm & PERM_WRITE != 0)
            .filter(|q| {
                route
                    .broker_datas
                    .iter()
                    .any(|b| b.broker_name == q.broker_name && b.master_addr().is_some())
            })
            .collect();
        datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
        let mut queues = Vec::new();
        for q in datas {
            let n = match max_queues {
                Some(m) => q.write_queue_nums.min(m),
                None => q.write_queue_nums,
            };
            for id in 0..n.max(0) {
                queues.push(MessageQueue {
                    topic: topic.to_owned(),
                    broker_name: q.broker_name.clone(),
                    queue_id: id,
                });
            }
        }
        Self {
            queues,
            from_default_topic: max_queues.is_some(),
            next: AtomicUsize::new(start_index()),
        }
    }

    /// The next queue round-robin, skipping `avoid_broker` when another broker exists.
    pub fn pick(&self, avoid_broker: Option<&str>) -> Option<MessageQueue> {
        let n = self.queues.len();
        if n == 0 {
            return None;
        }
        if let Some(avoid) = avoid_broker {
            for _ in 0..n {
                let q = &self.queues[self.next.fetch_add(1, Ordering::Relaxed) % n];
                if q.broker_name != avoid {
                    return Some(q.clone());
                }
            }
        }
        Some(self.queues[self.next.fetch_add(1, Ordering::Relaxed) % n].clone())
    }

    /// The next queue round-robin that satisfies `ok`, if any does.
    pub fn pick_where(&self, ok: impl Fn(&MessageQueue) -> bool) -> Option<MessageQueue> {
        let n = self.queues.len();
        (0..n)
            .map(|_| &self.queues[self.next.fetch_add(1, Ordering::Relaxed) % n])
            .find(|q| ok(q))
            .cloned()
    }
}

/// A varying start so that many short-lived producers do not all hit queue 0 first.
fn start_index() -> usize {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::body::{BrokerData, NumKeyMap, QueueData};

    fn route() -> TopicRouteData {
        let qd = |b: &str, n, perm| QueueData {
            broker_name: b.into(),
            read_queue_nums: n,
            write_queue_nums: n,
            perm,
            topic_sys_flag: 0,
        };
        let bd = |b: &str, master: bool| BrokerData {
            broker_name: b.into(),
            broker_addrs: NumKeyMap(
                [(if master { 0 } else { 1 }, "1.2.3.4:5".to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        };
        TopicRouteData {
            queue_datas: vec![qd("b", 2, 6), qd("a", 3, 6), qd("ro", 4, 4), qd("s", 4, 6)],
            broker_datas: vec![bd("a", true), bd("b", true), bd("ro", true), bd("s", false)],
            ..Default::default()
        }
    }

    #[test]
    fn publish_info_keeps_writable_queues_of_brokers_with_a_master() {
        let p = PublishInfo::from_route("T", &route(), None);
        let names: Vec<_> = p
            .queues
            .iter()
            .map(|q| format!("{}{}", q.broker_name, q.queue_id))
            .collect();
        assert_eq!(names, ["a0", "a1", "a2", "b0", "b1"]);
        let capped = PublishInfo::from_route("T", &route(), Some(1));
        assert_eq!(capped.queues.len(), 2);
        assert!(capped.from_default_topic);
    }

    #[test]
    fn pick_avoids_the_failed_broker() {
        let p = PublishInfo::from_route("T", &route(), None);
        for _ in 0..10 {
            assert_eq!(p.pick(Some("a")).unwrap().broker_name, "b");
        }
    }

    #[test]
    fn hash_selector_matches_java() {
        assert_eq!(java_hash("hello"), 99_162_322);
        assert_eq!(java_hash("polygenelubricants"), i32::MIN);
        assert_eq!(hash_index("polygenelubricants", 3), 2);
        assert_eq!(hash_index("k", 4), hash_index("k", 4));
    }
}
