//! The idempotent-produce window (`duplicateCheckWindowSeconds`): a send whose UNIQ_KEY
//! was stored in the same topic within the window is answered with the first copy's
//! offsets and not stored again. Neither RocketMQ nor rocketmq-rust has one; Kafka's
//! idempotent producer and NATS JetStream's `Msg-Id` window are the models (JetStream's
//! shape: a key, a window counted from the first copy's store time, a bound on keys).
//!
//! Which messages it covers: those [`BrokerCtx::put`](crate::BrokerCtx::put) stores into
//! a user topic with a UNIQ_KEY — producers' sends, delayed sends (keyed by their real
//! topic) and transaction commits. Not the broker's own records: half messages and op
//! records, retries and dead letters (a message that fails twice is retried twice, with
//! the same UNIQ_KEY), nor a delayed message's delivery (its key is in the window from
//! the send).
//!
//! A key is reserved before the append and published after it ([`Window::claim`], then
//! [`Claim::settle`]), so two connections racing with one key store one copy: the second
//! waits for the first's append, then answers as a duplicate, or claims the key itself
//! when the first failed. A batch reserves all its keys at once or none, so two batches
//! never hold one key each while waiting for the other's.
//!
//! Memory is bounded by `duplicateCheckMaxKeys`: past it the oldest key goes before its
//! time (logged). At start the window is rebuilt from the commit log's records of the
//! last window ([`Window::rebuild`]), so it survives a restart and `kill -9`.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;
use tern_shell::sync::{CondvarExt, MutexExt};

use tern_engine::delay::SCHEDULE_TOPIC;
use tern_engine::properties::{self, key};
use tern_engine::record::MessageIn;
use tern_engine::store::Stored;

use crate::transaction::half::{CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC};

mod rebuild;

pub use rebuild::Rebuilt;

/// Most expired keys one claim drops: the sweep is spread over sends, so a send after a
/// long quiet spell does not pay for the whole window. Expired keys that are still held
/// are never answered from (each hit checks its age).
const EXPIRE_PER_CLAIM: usize = 256;

/// Where a message's first copy went: what a duplicate is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstCopy {
    /// Its record and queue offset, as the put returned them.
    pub stored: Stored,
    /// The queue the send was answered with (the requested one; for a delayed message not
    /// the schedule queue its record waits in).
    pub queue_id: i32,
    /// When it was stored (ms since the epoch): the window counts from here.
    store_ms: i64,
}

/// What a claim found for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Not covered (no UNIQ_KEY, a system topic, or the window is off): stored as it is.
    Unkeyed,
    /// Its key is reserved for this claim: stored, then published.
    New,
    /// Stored in the window before.
    Duplicate(FirstCopy),
    /// Same key as an earlier message of this batch.
    SameAs(usize),
}

/// A key's state in the window.
#[derive(Debug)]
enum Slot {
    /// A send is appending it now.
    Pending,
    /// Its first copy.
    Stored(FirstCopy),
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<Arc<str>, Slot, Hasher>,
    /// Published keys in store order, for expiry and the count bound.
    order: VecDeque<(i64, Arc<str>)>,
    /// Keys dropped by the count bound before their time (logged on the first and every
    /// 100 000th).
    evicted_early: u64,
    /// Claims waiting for a pending key: only then is [`Window::resolved`] signalled (a
    /// futex wake is a system call, which every send would pay otherwise).
    waiting: usize,
}

/// The window: see the module docs.
#[derive(Debug)]
pub struct Window {
    /// 0 when off.
    window_ms: i64,
    max_keys: usize,
    state: Mutex<State>,
    /// Signalled whenever a pending key is published or released.
    resolved: Condvar,
}

/// The hasher of the window's tables: keys come from producers, so seeded per process;
/// foldhash rather than SipHash, which showed in the send path's profile.
type Hasher = foldhash::fast::RandomState;

/// The window's key for a message of `topic` with properties `props`, if the window
/// covers it, written into `buf` (reused across a batch, so a key costs one allocation,
/// its `Arc`).
fn key_of(buf: &mut String, topic: &str, props: &[u8]) -> Option<Arc<str>> {
    if !covers(topic) {
        return None;
    }
    // A recall marker carries the UNIQ_KEY of the message it cancels: not a copy of it.
    if properties::get(props, key::TIMER_DEL_UNIQKEY).is_some() {
        return None;
    }
    let uniq = properties::get(props, key::UNIQ_KEY).filter(|u| !u.is_empty())?;
    // 0x01 cannot occur in a property value (it separates name from value), so the pair
    // is unambiguous.
    buf.clear();
    buf.push_str(topic);
    buf.push('\u{1}');
    buf.push_str(uniq);
    Some(Arc::from(buf.as_str()))
}

/// Whether messages stored into `topic` are covered: user topics only.
fn covers(topic: &str) -> bool {
    !(topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || [
            SCHEDULE_TOPIC,
            tern_engine::timer::TIMER_TOPIC,
            HALF_TOPIC,
            OP_TOPIC,
            CHECK_MAX_TOPIC,
        ]
        .contains(&topic))
}

/// Whether `f` is still inside the window at `now_ms`.
fn live(f: &FirstCopy, now_ms: i64, window_ms: i64) -> bool {
    now_ms < f.store_ms.saturating_add(window_ms)
}

impl State {
    /// Drops up to `max` expired keys from the front.
    fn expire(&mut self, now_ms: i64, window_ms: i64, max: usize) {
        for _ in 0..max {
            match self.order.front() {
                Some((t, _)) if now_ms >= t.saturating_add(window_ms) => self.pop_oldest(),
                _ => return,
            }
        }
    }

    /// Forgets the oldest published key (unless it was published again since).
    fn pop_oldest(&mut self) {
        let Some((t, k)) = self.order.pop_front() else {
            return;
        };
        if let Entry::Occupied(e) = self.slots.entry(k) {
            if matches!(e.get(), Slot::Stored(f) if f.store_ms == t) {
                e.remove();
            }
        }
    }

    /// Records `first` as `k`'s first copy, keeping the count bound.
    fn publish(&mut self, k: Arc<str>, first: FirstCopy, max_keys: usize) {
        while self.order.len() >= max_keys {
            self.pop_oldest();
            self.evicted_early += 1;
            if self.evicted_early % 100_000 == 1 {
                log::warn!(
                    "duplicate check: more than duplicateCheckMaxKeys={max_keys} keys in the \
                     window; the oldest are forgotten early ({} so far)",
                    self.evicted_early
                );
            }
        }
        self.order.push_back((first.store_ms, k.clone()));
        self.slots.insert(k, Slot::Stored(first));
    }
}

impl Window {
    /// A window of `window` (zero: off) holding at most `max_keys` keys.
    pub fn new(window: Duration, max_keys: usize) -> Window {
        Window {
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
            max_keys: max_keys.max(1),
            state: Mutex::default(),
            resolved: Condvar::new(),
        }
    }

    /// Whether sends are checked.
    pub fn is_on(&self) -> bool {
        self.window_ms > 0
    }

    /// Keys held now (published ones).
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements; a panic elsewhere leaves it usable.
        self.state.guard()
    }

    /// Looks up `msgs` (one send, or one batch in order) and reserves the keys not seen.
    /// Waits while another send holds one of them pending: that send is inside its
    /// append on another thread, which ends by publishing or releasing the key.
    pub fn claim(&self, msgs: &[MessageIn<'_>], now_ms: i64) -> Claim<'_> {
        let mut claim = Claim {
            window: self,
            seen: vec![Seen::Unkeyed; msgs.len()],
            keys: Vec::new(),
            published: false,
        };
        if !self.is_on() {
            return claim;
        }
        let mut buf = String::new();
        let keys: Vec<Option<Arc<str>>> = msgs
            .iter()
            .map(|m| key_of(&mut buf, m.topic, m.properties))
            .collect();
        if keys.iter().all(Option::is_none) {
            return claim;
        }
        let mut st = self.lock();
        loop {
            st.expire(now_ms, self.window_ms, EXPIRE_PER_CLAIM);
            let busy = keys
                .iter()
                .flatten()
                .any(|k| matches!(st.slots.get(k), Some(Slot::Pending)));
            if !busy {
                break;
            }
            st.waiting += 1;
            st = self.resolved.wait_guard(st);
            st.waiting -= 1;
        }
        // Earlier messages of this batch by key: a batch may repeat a key.
        let batch = keys.len() > 1;
        let mut in_batch: HashMap<&str, usize, Hasher> = HashMap::default();
        if batch {
            in_batch.reserve(keys.len());
        }
        for (i, k) in keys.iter().enumerate() {
            let Some(k) = k else { continue };
            if batch {
                if let Some(&j) = in_batch.get(&**k) {
                    claim.seen[i] = Seen::SameAs(j);
                    continue;
                }
                in_batch.insert(k, i);
            }
            let first = match st.slots.get(k) {
                Some(Slot::Stored(f)) => Some(*f),
                _ => None,
            };
            match first {
                Some(f) if live(&f, now_ms, self.window_ms) => {
                    claim.seen[i] = Seen::Duplicate(f);
                }
                _ => {
                    st.slots.insert(k.clone(), Slot::Pending);
                    claim.keys.push((i, k.clone()));
                    claim.seen[i] = Seen::New;
                }
            }
        }
        drop(st);
        claim
    }
}

/// The keys one send reserved, and what it found for each message. Dropping it without
/// [`Claim::settle`] (the append failed) releases the reservations, so a waiting or later
/// send with the same key stores it.
#[derive(Debug)]
pub struct Claim<'w> {
    window: &'w Window,
    seen: Vec<Seen>,
    keys: Vec<(usize, Arc<str>)>,
    published: bool,
}

impl Claim<'_> {
    /// Whether message `i` is to be stored (not a duplicate).
    pub fn is_fresh(&self, i: usize) -> bool {
        matches!(self.seen[i], Seen::Unkeyed | Seen::New)
    }

    /// Publishes the stored copies (`stored`: one per fresh message, in order; `msgs` as
    /// claimed) and returns where every message of the send is, in order: a duplicate
    /// where its first copy is.
    pub fn settle(
        mut self,
        msgs: &[MessageIn<'_>],
        stored: &[Stored],
        now_ms: i64,
    ) -> Vec<crate::Put> {
        let mut fresh = stored.iter();
        let mut out: Vec<crate::Put> = Vec::with_capacity(self.seen.len());
        for (i, seen) in self.seen.iter().enumerate() {
            let put = match *seen {
                Seen::Unkeyed | Seen::New => match fresh.next() {
                    Some(s) => crate::Put {
                        stored: *s,
                        queue_id: msgs[i].queue_id,
                        duplicate: false,
                        timed: None,
                    },
                    // The store returned fewer records than were given: nothing to
                    // publish for the rest (their keys are released on drop).
                    None => break,
                },
                Seen::Duplicate(f) => crate::Put {
                    stored: f.stored,
                    queue_id: f.queue_id,
                    duplicate: true,
                    timed: None,
                },
                Seen::SameAs(j) => match out.get(j) {
                    Some(p) => crate::Put {
                        duplicate: true,
                        ..*p
                    },
                    None => break,
                },
            };
            out.push(put);
        }
        if self.keys.is_empty() {
            return out;
        }
        let mut st = self.window.lock();
        for (i, k) in std::mem::take(&mut self.keys) {
            match out.get(i) {
                Some(p) => {
                    let first = FirstCopy {
                        stored: p.stored,
                        queue_id: p.queue_id,
                        store_ms: now_ms,
                    };
                    st.publish(k, first, self.window.max_keys);
                }
                None => {
                    st.slots.remove(&k);
                }
            }
        }
        let wake = st.waiting > 0;
        drop(st);
        self.published = true;
        if wake {
            self.window.resolved.notify_all();
        }
        out
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.published || self.keys.is_empty() {
            return;
        }
        let mut st = self.window.lock();
        for (_, k) in self.keys.drain(..) {
            if matches!(st.slots.get(&k), Some(Slot::Pending)) {
                st.slots.remove(&k);
            }
        }
        let wake = st.waiting > 0;
        drop(st);
        if wake {
            self.window.resolved.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use tern_engine::commitlog::Appended;

    use super::*;

    fn msg<'a>(topic: &'a str, props: &'a [u8]) -> MessageIn<'a> {
        tern_engine::testkit::message(topic, 2, b"b", props)
    }

    fn stored(offset: u64, queue_offset: u64) -> Stored {
        Stored {
            at: Appended { offset, size: 100 },
            queue_offset,
        }
    }

    #[test]
    fn a_second_send_of_a_key_is_answered_with_the_first_copy() {
        let w = Window::new(Duration::from_secs(10), 100);
        let m = [msg("T", b"UNIQ_KEY\x01K1\x02")];
        let c = w.claim(&m, 1_000);
        assert!(c.is_fresh(0));
        let first = c.settle(&m, &[stored(0, 7)], 1_000);
        assert!(!first[0].duplicate);
        let c = w.claim(&m, 2_000);
        assert!(!c.is_fresh(0));
        let again = c.settle(&m, &[], 2_000);
        assert!(again[0].duplicate);
        assert_eq!((again[0].stored, again[0].queue_id), (stored(0, 7), 2));
        // Another topic, same key: not a duplicate.
        let other = [msg("U", b"UNIQ_KEY\x01K1\x02")];
        assert!(w.claim(&other, 2_000).is_fresh(0));
    }

    #[test]
    fn keys_expire_by_store_time_and_the_count_bound_holds() {
        let w = Window::new(Duration::from_secs(1), 2);
        let put = |k: &'static [u8], at: i64| {
            let m = [msg("T", k)];
            let c = w.claim(&m, at);
            let fresh = c.is_fresh(0);
            c.settle(&m, &[stored(at as u64, 0)], at);
            fresh
        };
        assert!(put(b"UNIQ_KEY\x01A\x02", 0));
        assert!(put(b"UNIQ_KEY\x01B\x02", 500));
        assert!(!put(b"UNIQ_KEY\x01A\x02", 999), "inside the window");
        assert!(put(b"UNIQ_KEY\x01A\x02", 1_000), "expired: stored again");
        assert_eq!(w.len(), 2);
        // A third key over the bound of two pushes out the oldest (B) before its time.
        assert!(put(b"UNIQ_KEY\x01C\x02", 1_001));
        assert_eq!(w.len(), 2);
        assert!(
            put(b"UNIQ_KEY\x01B\x02", 1_002),
            "evicted by the count bound"
        );
    }

    #[test]
    fn a_batch_repeating_a_key_stores_it_once() {
        let w = Window::new(Duration::from_secs(10), 100);
        let m = [
            msg("T", b"UNIQ_KEY\x01A\x02"),
            msg("T", b"UNIQ_KEY\x01A\x02"),
            msg("T", b""),
        ];
        let c = w.claim(&m, 0);
        assert_eq!(
            (0..3).map(|i| c.is_fresh(i)).collect::<Vec<_>>(),
            [true, false, true]
        );
        let out = c.settle(&m, &[stored(0, 5), stored(100, 6)], 0);
        assert_eq!(out[1].stored, out[0].stored);
        assert_eq!(out[2].stored, stored(100, 6));
    }

    #[test]
    fn a_failed_append_releases_its_keys() {
        let w = Window::new(Duration::from_secs(10), 100);
        let m = [msg("T", b"UNIQ_KEY\x01A\x02")];
        drop(w.claim(&m, 0));
        assert!(w.claim(&m, 0).is_fresh(0));
    }

    #[test]
    fn system_topics_and_messages_without_a_key_are_not_covered() {
        let w = Window::new(Duration::from_secs(10), 100);
        for t in ["%RETRY%g", "%DLQ%g", SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC] {
            let m = [msg(t, b"UNIQ_KEY\x01A\x02")];
            w.claim(&m, 0).settle(&m, &[stored(0, 0)], 0);
            assert!(w.claim(&m, 0).is_fresh(0), "{t}");
        }
        assert!(w.is_empty());
    }
}
