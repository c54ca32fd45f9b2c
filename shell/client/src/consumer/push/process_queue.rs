//! The process queue of one assigned queue (Java's `ProcessQueue`): the messages pulled
//! and not yet consumed, by queue offset. The committable offset is always the lowest
//! offset still in it (or one past the highest ever put when it is empty), so a message
//! still being consumed is never skipped by a commit, whatever order workers finish in.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tern_shell::sync::MutexExt;

use tern_shell::message::MessageExt;
use tern_shell::runtime::Shutdown;

#[derive(Debug, Default)]
struct State {
    msgs: BTreeMap<i64, MessageExt>,
    bytes: u64,
    /// Highest offset ever put; −1 before the first.
    max_put: i64,
}

/// Messages of one queue between pull and consume.
#[derive(Debug)]
pub struct ProcessQueue {
    state: Mutex<State>,
    /// Triggered when the queue is taken away (rebalance, shutdown): its pull loop and
    /// consume tasks stop, and results of running listener calls are no longer committed.
    dropped: Shutdown,
    /// Orderly: the broker lock is held.
    locked: AtomicBool,
    /// Orderly: when the lock was last granted, ms since the epoch.
    last_lock_ms: AtomicU64,
    /// Orderly: a consume task for this queue is queued or running.
    scheduled: AtomicBool,
    /// Orderly: held for the whole of a listener call, so a rebalance can wait for it
    /// before giving the queue (and its broker lock) away.
    pub consume_lock: Mutex<()>,
    /// Created at (for running info).
    pub created: Instant,
}

impl Default for ProcessQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessQueue {
    /// An empty, live queue.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                max_put: -1,
                ..State::default()
            }),
            dropped: Shutdown::new(),
            locked: AtomicBool::new(false),
            last_lock_ms: AtomicU64::new(0),
            scheduled: AtomicBool::new(false),
            consume_lock: Mutex::new(()),
            created: Instant::now(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.guard()
    }

    /// Adds pulled messages; those already present are ignored. Returns how many were new.
    pub fn put(&self, msgs: Vec<MessageExt>) -> usize {
        let mut guard = self.state();
        let s = &mut *guard;
        let mut added = 0;
        for m in msgs {
            let off = m.queue_offset;
            s.max_put = s.max_put.max(off);
            if let std::collections::btree_map::Entry::Vacant(e) = s.msgs.entry(off) {
                s.bytes += m.body.len() as u64;
                e.insert(m);
                added += 1;
            }
        }
        added
    }

    /// Removes consumed messages; returns the offset that may now be committed, or
    /// `None` when nothing was ever put.
    pub fn remove(&self, offsets: &[i64]) -> Option<i64> {
        let mut s = self.state();
        for off in offsets {
            if let Some(m) = s.msgs.remove(off) {
                s.bytes = s.bytes.saturating_sub(m.body.len() as u64);
            }
        }
        if s.max_put < 0 {
            return None;
        }
        Some(s.msgs.keys().next().copied().unwrap_or(s.max_put + 1))
    }

    /// The first `n` messages in offset order (orderly consumption), cloned.
    pub fn first(&self, n: usize) -> Vec<MessageExt> {
        self.state().msgs.values().take(n).cloned().collect()
    }

    /// Orderly retry: counts one more reconsume on these messages.
    pub fn bump_reconsume(&self, offsets: &[i64]) {
        let mut s = self.state();
        for off in offsets {
            if let Some(m) = s.msgs.get_mut(off) {
                m.reconsume_times = m.reconsume_times.saturating_add(1);
            }
        }
    }

    /// Cached message count and bytes.
    pub fn cached(&self) -> (usize, u64) {
        let s = self.state();
        (s.msgs.len(), s.bytes)
    }

    /// Offsets between the first and last cached message (flow control).
    pub fn span(&self) -> i64 {
        let s = self.state();
        match (s.msgs.keys().next(), s.msgs.keys().next_back()) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        }
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.state().msgs.is_empty()
    }

    /// Takes the queue away.
    pub fn drop_queue(&self) {
        self.dropped.trigger();
    }

    /// True once taken away.
    pub fn is_dropped(&self) -> bool {
        self.dropped.is_triggered()
    }

    /// Triggered when the queue is taken away.
    pub(crate) fn dropped(&self) -> &Shutdown {
        &self.dropped
    }

    /// Orderly: records the broker's answer to a lock request.
    pub fn set_locked(&self, locked: bool) {
        if locked {
            self.last_lock_ms.store(now_ms(), Ordering::Release);
        }
        self.locked.store(locked, Ordering::Release);
    }

    /// Orderly: the lock is held and was renewed within `max_live_ms`.
    pub fn is_locked(&self, max_live_ms: u64) -> bool {
        self.locked.load(Ordering::Acquire)
            && now_ms().saturating_sub(self.last_lock_ms.load(Ordering::Acquire)) <= max_live_ms
    }

    /// Orderly: claims the right to schedule this queue's consume task.
    pub fn try_schedule(&self) -> bool {
        !self.scheduled.swap(true, Ordering::AcqRel)
    }

    /// Orderly: releases that right.
    pub fn unschedule(&self) {
        self.scheduled.store(false, Ordering::Release);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(off: i64) -> MessageExt {
        crate::consumer::stored_message(off, vec![0; 10])
    }

    #[test]
    fn commit_offset_stops_at_the_lowest_unconsumed_message() {
        let pq = ProcessQueue::new();
        assert_eq!(pq.remove(&[]), None);
        assert_eq!(pq.put((10..15).map(msg).collect()), 5);
        assert_eq!(pq.put(vec![msg(12)]), 0, "duplicates are ignored");
        assert_eq!(pq.cached(), (5, 50));
        // 12 and 14 finish first: 10 is still in flight.
        assert_eq!(pq.remove(&[12, 14]), Some(10));
        assert_eq!(pq.remove(&[10]), Some(11));
        assert_eq!(pq.span(), 2);
        assert_eq!(pq.remove(&[11, 13]), Some(15));
        assert!(pq.is_empty());
        assert_eq!(pq.cached(), (0, 0));
    }

    #[test]
    fn orderly_state_flags() {
        let pq = ProcessQueue::new();
        assert!(!pq.is_locked(30_000));
        pq.set_locked(true);
        assert!(pq.is_locked(30_000));
        assert!(pq.try_schedule());
        assert!(!pq.try_schedule());
        pq.unschedule();
        assert!(pq.try_schedule());
        pq.put(vec![msg(1), msg(2)]);
        pq.bump_reconsume(&[1]);
        assert_eq!(pq.first(1)[0].reconsume_times, 1);
        pq.drop_queue();
        assert!(pq.is_dropped());
    }
}
