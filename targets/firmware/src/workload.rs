//! The messages the program puts, and the model of what the store acknowledged.
//!
//! Every message is a pure function of its sequence number (queue aside, which batching
//! decides), so the checks rebuild any body or key instead of keeping copies: the model
//! holds only where each message landed.

use core::fmt::Write;

use heapless::{String, Vec};
use tern_engine::properties::{self, key};
use tern_engine::record::{Host, MessageIn};
use tern_engine::testkit;

use crate::FwEngine;
use crate::report::{ensure, must};

/// The queues messages go to: three topics, four queues, as a gateway's uplink might
/// have (orders spread over two queues, one telemetry stream, one alarm stream).
pub const QUEUES: [(&str, i32); 4] = [
    ("orders", 0),
    ("orders", 1),
    ("telemetry", 0),
    ("alarms", 0),
];
/// Telemetry is put in batches, as a sensor gateway would send readings.
const TELEMETRY: usize = 2;
/// Alarms carry a tag, so their queue entries carry a tag code.
const ALARMS: usize = 3;
/// Messages per telemetry batch at most.
pub const BATCH_MAX: usize = 4;
/// Longest body.
pub const BODY_MAX_BYTES: usize = 112;
/// Room for one message's properties (UNIQ_KEY, KEYS and TAGS).
const PROPS_CAP_BYTES: usize = 64;
/// Messages the model can remember; more puts than this fail the run.
pub const MAX_SENT: usize = 512;
/// Store time of sequence number 0 (ms since the epoch); each message is 7 ms later.
const CLOCK_START_MS: i64 = 1_700_000_000_000;

/// Where one acknowledged message landed.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// Sequence number: the message's body and keys derive from it.
    pub seq: u32,
    /// Index into [`QUEUES`].
    pub queue: u8,
    /// Commit-log offset the put returned.
    pub offset: u64,
    /// Queue offset the put returned.
    pub queue_offset: u64,
}

/// What the store acknowledged, in put order, and the next sequence number.
#[derive(Debug)]
pub struct Model {
    /// Acknowledged messages (after a power cut: those that survived).
    pub sent: Vec<Sent, MAX_SENT>,
    /// Sequence numbers are never reused, even for messages a power cut took, so a lost
    /// message's keys must stay unfindable.
    pub next_seq: u32,
}

impl Model {
    /// An empty model, for a static.
    pub const fn new() -> Self {
        Self {
            sent: Vec::new(),
            next_seq: 0,
        }
    }
}

/// SplitMix64's finaliser: a well-mixed 64-bit value per sequence number.
fn mix(seq: u32) -> u64 {
    let mut z = u64::from(seq).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The queue a new message goes to when it is not part of a batch.
fn pick_queue(seq: u32) -> usize {
    (mix(seq) >> 8) as usize % QUEUES.len()
}

/// Whether the message carries a business key (`KEYS`): about half do.
pub fn keyed(seq: u32) -> bool {
    (mix(seq) >> 40) & 1 == 1
}

/// Fills `out` with the message's body and returns it: 16 to 112 bytes, starting with the
/// sequence number so a misplaced body is easy to recognise.
pub fn body(seq: u32, out: &mut [u8; BODY_MAX_BYTES]) -> &[u8] {
    let h = mix(seq);
    let len = 16 + (h % (BODY_MAX_BYTES as u64 - 15)) as usize;
    out[..4].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in out[4..len].iter_mut().enumerate() {
        *b = (h.rotate_left(i as u32 % 64) as u8) ^ (i as u8);
    }
    &out[..len]
}

/// The message's unique key, as a producer's `UNIQ_KEY`.
pub fn uniq_key(seq: u32) -> String<12> {
    let mut s = String::new();
    // 9 characters for any u32 below 10^8; a longer number fails the checks, not here.
    let _ = write!(s, "U{seq:08}");
    s
}

/// The message's business key, for those that carry one.
pub fn business_key(seq: u32) -> String<12> {
    let mut s = String::new();
    let _ = write!(s, "k{seq}");
    s
}

/// Store time of a message, in ms.
pub fn clock_ms(seq: u32) -> i64 {
    CLOCK_START_MS + i64::from(seq) * 7
}

/// One message's body and properties, encoded on the stack.
struct Encoded {
    seq: u32,
    queue: usize,
    body: [u8; BODY_MAX_BYTES],
    body_len: usize,
    props: [u8; PROPS_CAP_BYTES],
    props_len: usize,
}

impl Encoded {
    fn new(seq: u32, queue: usize) -> Self {
        let mut e = Encoded {
            seq,
            queue,
            body: [0; BODY_MAX_BYTES],
            body_len: 0,
            props: [0; PROPS_CAP_BYTES],
            props_len: 0,
        };
        e.body_len = body(seq, &mut e.body).len();
        let mut ok = properties::append(
            &mut e.props,
            &mut e.props_len,
            key::UNIQ_KEY,
            &uniq_key(seq),
        );
        if keyed(seq) {
            ok = ok.and_then(|()| {
                properties::append(
                    &mut e.props,
                    &mut e.props_len,
                    key::KEYS,
                    &business_key(seq),
                )
            });
        }
        if queue == ALARMS {
            ok = ok.and_then(|()| {
                properties::append(&mut e.props, &mut e.props_len, key::TAGS, "alarm")
            });
        }
        ensure!(
            ok.is_some(),
            "properties of #{seq} exceed {PROPS_CAP_BYTES} bytes"
        );
        e
    }

    fn message(&self) -> MessageIn<'_> {
        let (topic, queue_id) = QUEUES[self.queue];
        let (body, props) = (&self.body[..self.body_len], &self.props[..self.props_len]);
        MessageIn {
            born_timestamp: clock_ms(self.seq) - 3,
            // A device on a local network, storing for itself.
            born_host: Host::V4 {
                ip: [192, 168, 7, 20],
                port: 50_000,
            },
            store_host: Host::V4 {
                ip: [192, 168, 7, 1],
                port: 10_911,
            },
            ..testkit::message(topic, queue_id, body, props)
        }
    }
}

/// Puts `count` more messages: single puts, and telemetry in batches of up to
/// [`BATCH_MAX`] (cut short so exactly `count` are put). Records each in the model.
pub fn put(store: &mut FwEngine<'_>, model: &mut Model, count: usize) {
    let mut left = count;
    while left > 0 {
        let seq = model.next_seq;
        let queue = pick_queue(seq);
        let n = if queue == TELEMETRY {
            BATCH_MAX.min(left)
        } else {
            1
        };
        ensure!(
            model.sent.len() + n <= MAX_SENT,
            "the model holds {MAX_SENT} messages; raise MAX_SENT"
        );
        // Encoded messages live on the stack for the put; a batch shares one queue.
        let mut batch: Vec<Encoded, BATCH_MAX> = Vec::new();
        for i in 0..n {
            // Cannot overflow: n <= BATCH_MAX.
            let _ = batch.push(Encoded::new(seq + i as u32, queue));
        }
        let mut landed: Vec<Sent, BATCH_MAX> = Vec::new();
        if n == 1 {
            let stored = must!(store.put(&batch[0].message(), clock_ms(seq)), "put #{seq}");
            let _ = landed.push(Sent {
                seq,
                queue: queue as u8,
                offset: stored.at.offset,
                queue_offset: stored.queue_offset,
            });
        } else {
            let mut msgs: Vec<MessageIn<'_>, BATCH_MAX> = Vec::new();
            for e in &batch {
                let _ = msgs.push(e.message());
            }
            let mut i = 0u32;
            must!(
                store.put_batch(&msgs, clock_ms(seq), &mut |stored| {
                    let _ = landed.push(Sent {
                        seq: seq + i,
                        queue: queue as u8,
                        offset: stored.at.offset,
                        queue_offset: stored.queue_offset,
                    });
                    i += 1;
                }),
                "put batch #{seq}..#{}",
                seq + n as u32 - 1
            );
        }
        ensure!(
            landed.len() == n,
            "put of #{seq}: {n} messages, {} acknowledged",
            landed.len()
        );
        for s in landed {
            // Room was checked above.
            let _ = model.sent.push(s);
        }
        model.next_seq += n as u32;
        left -= n;
    }
}
