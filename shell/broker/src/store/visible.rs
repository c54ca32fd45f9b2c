//! What readers may see: the offset reput has dispatched to, the confirm offset that
//! bounds it, and the waits for reput to pass a point.
//!
//! In controller mode with `allAckInSyncStateSet` a master dispatches (puts into
//! consume queues and the index) only records every member of its SyncStateSet holds,
//! and a slave only what its master confirmed (RocketMQ's `confirmOffset`, which bounds
//! its `ReputMessageService`). A record a consumer read is then in the log of any replica
//! the controllers may elect: a failover never takes back a message somebody consumed.
//! Everywhere else the bound is `u64::MAX` and reput follows the log's end.
//!
//! A bound often falls inside a record (acknowledgements cover HA chunks, not records):
//! reput stops before that record, and says how far it got, so a wait for "everything
//! appended so far" ends when reput did all the bound allows rather than at its timeout.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tern_shell::runtime;

use super::StoreService;

impl StoreService {
    /// Log offset up to which records are in queues and index.
    pub fn dispatched_offset(&self) -> u64 {
        self.dispatched.load(Ordering::Acquire)
    }

    /// Sets the confirm offset (`u64::MAX`: no bound). Risen, it wakes reput; lowered,
    /// the waiters whose wait it may end.
    pub fn set_confirm(&self, offset: u64) {
        let was = self.confirm.swap(offset, Ordering::AcqRel);
        if was < offset {
            self.appended.notify(usize::MAX);
        } else if was > offset {
            self.dispatch_done.notify(usize::MAX);
        }
    }

    /// The confirm offset as a replica reports it: the log's end, or the bound below it.
    pub fn confirm_offset(&self) -> u64 {
        self.log_end().min(self.confirm.load(Ordering::Acquire))
    }

    /// The bound reput's passes are given.
    pub(super) fn dispatch_bound(&self) -> u64 {
        self.confirm.load(Ordering::Acquire)
    }

    /// Notes a reput pass that left nothing it may dispatch below `reached` undone.
    pub(super) fn note_reached(&self, reached: u64) {
        self.reached.store(reached, Ordering::Release);
    }

    /// Whether reput dispatched every record below `offset` that it may: all of them,
    /// or all below the confirm offset.
    pub fn dispatched_to(&self, offset: u64) -> bool {
        self.dispatched_offset() >= offset
            || self.reached.load(Ordering::Acquire)
                >= offset.min(self.confirm.load(Ordering::Acquire))
    }

    /// Whether reput dispatched what it may of the log appended so far.
    pub fn caught_up(&self) -> bool {
        self.dispatched_to(self.log_end())
    }

    /// Waits (at most `within`) until reput dispatched what it may of what was appended
    /// before the call; at once when it did. For readers: what waits for the confirm
    /// offset is not theirs to see yet.
    pub async fn await_caught_up(&self, within: Duration) {
        let end = self.log_end();
        runtime::wait_on(&self.dispatch_done, within, || self.dispatched_to(end)).await;
    }

    /// Waits (at most `within`) until every record below `offset` is dispatched, the
    /// confirm offset notwithstanding; returns whether they are. For work that must see
    /// them all: revive pairing acks with checkpoints, a topic's deletion.
    pub async fn await_dispatched(&self, offset: u64, within: Duration) -> bool {
        runtime::wait_on(&self.dispatch_done, within, || {
            self.dispatched_offset() >= offset
        })
        .await;
        self.dispatched_offset() >= offset
    }
}
