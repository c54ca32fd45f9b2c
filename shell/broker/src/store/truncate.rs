//! Truncating the log at a consistent point (controller mode: a broker rejoining its
//! broker-set as a slave, or taking over as master with a torn tail, cuts its log where
//! its epochs agree with the master's and streams from there).
//!
//! The engine does the cut and makes it crash-safe (`Engine::truncate_log`); this module
//! makes everything the service published agree with it:
//!
//! - the flush and checkpoint tasks are kept out for the whole cut (`sync_gate`): a flush
//!   begun before could otherwise mark bytes written after the cut flushed, or raise the
//!   published `flushed` watermark past the new end with a value read before;
//! - under the append lock, the published log end moves to the cut first (so the task
//!   that makes the next segment picks its base from the new end: see
//!   `FsStore::truncate_log`), the engine cuts, and then `written`, `dispatched`,
//!   `flushed`, each queue's bounds and the index headers are published as the engine
//!   left them;
//! - readers that copy published bytes without the lock are told by the [`CutFence`]: a
//!   read that overlapped a cut is refused (or answered empty) rather than returning
//!   bytes from past the cut, or bytes written at the cut's offsets since, mixed with
//!   what it read before.
//!
//! Consumer offsets are not touched: the offset table clamps on read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use tern_engine_fs::fs_store::FsStoreError;
use tern_shell::runtime;
use tern_shell::sync::RwLockExt;

use super::StoreService;

/// Longest a truncation waits for reput to pass what was appended before it, so the
/// dispatch left for the cut itself (under the lock) is short.
const CATCH_UP: Duration = Duration::from_secs(2);

/// Why a truncation was refused or failed.
///
/// Not [`super::PutError`]: its variants are about appends (disk full, over budget, a
/// broker rule's response code) and cannot happen here, while a cut has its own caller
/// mistakes, an offset outside the log or between records, that the HA follower must
/// tell apart from a failed store (it drops the connection for the first, the broker
/// needs a restart for the second).
#[derive(Debug)]
pub enum TruncateError {
    /// `offset` is outside `[min, end]`: nothing changed.
    OutOfRange {
        /// The offset asked for.
        offset: u64,
        /// The log's first offset.
        min: u64,
        /// The log's end.
        end: u64,
    },
    /// No record starts at `offset`: nothing changed.
    NotRecordBoundary {
        /// The offset asked for.
        offset: u64,
    },
    /// The store takes local puts (controller mode's master): its log is cut only while
    /// it follows a master.
    Leading,
    /// The store is sealed (shutting down).
    ShuttingDown,
    /// A flush failed earlier, or this truncation failed part way: the store refuses
    /// writes until the broker restarts, and recovery finishes or undoes the cut.
    Failed(Arc<str>),
    /// The store could not do it (a file operation failed before anything changed).
    Store(FsStoreError),
}

impl std::fmt::Display for TruncateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TruncateError::OutOfRange { offset, min, end } => {
                write!(f, "cannot cut the log at {offset}: it holds [{min}, {end}]")
            }
            TruncateError::NotRecordBoundary { offset } => {
                write!(f, "cannot cut the log at {offset}: no record starts there")
            }
            TruncateError::Leading => {
                f.write_str("the log is a master's: it is cut only while it follows one")
            }
            TruncateError::ShuttingDown => f.write_str("the store is shutting down"),
            TruncateError::Failed(why) => write!(f, "the store failed: {why}"),
            TruncateError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TruncateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TruncateError::Store(e) => Some(e),
            TruncateError::OutOfRange { .. }
            | TruncateError::NotRecordBoundary { .. }
            | TruncateError::Leading
            | TruncateError::ShuttingDown
            | TruncateError::Failed(_) => None,
        }
    }
}

/// Tells readers that copy published bytes without the lock whether a truncation ran
/// while they read (a sequence lock: odd while a cut is under way).
///
/// A reader takes a ticket ([`CutFence::enter`], refused while a cut runs), reads, and
/// keeps what it read only if [`CutFence::unchanged`] says no cut began since. The cut
/// moves the count to odd before it changes any byte or bound, and to even after it
/// published the new ones. Bytes are read with `pread`, a system call: no load of the
/// reader's moves past the fence in `unchanged`, nor any store of the cut before the
/// count's increment that precedes it.
#[derive(Debug, Default)]
pub(crate) struct CutFence {
    seq: AtomicU64,
}

/// A reader's look at the [`CutFence`] before it read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket(u64);

impl CutFence {
    /// A ticket for a read starting now; `None` while a truncation runs.
    pub(crate) fn enter(&self) -> Option<Ticket> {
        let seq = self.seq.load(Ordering::Acquire);
        (seq % 2 == 0).then_some(Ticket(seq))
    }

    /// Whether no truncation began since `ticket` was taken: what was read since is
    /// from one version of the log.
    pub(crate) fn unchanged(&self, ticket: Ticket) -> bool {
        fence(Ordering::SeqCst);
        self.seq.load(Ordering::Acquire) == ticket.0
    }

    fn begin(&self) {
        let was = self.seq.fetch_add(1, Ordering::SeqCst);
        assert!(was % 2 == 0, "truncations overlap");
    }

    fn end(&self) {
        let was = self.seq.fetch_add(1, Ordering::SeqCst);
        assert!(was % 2 == 1, "a truncation ended twice");
    }
}

impl StoreService {
    /// Cuts the log at `offset` (a record boundary between the log's start and end)
    /// and forgets everything past it: queue entries, index entries, the dispatched
    /// offset, the segment made ahead. The next append lands at `offset` with the queue
    /// offsets that follow the records kept. The cut is durable when this returns, and a
    /// crash part way leaves either the whole log or exactly the records below `offset`
    /// (see `Engine::truncate_log`). The disk work runs on the blocking pool.
    pub async fn truncate_log(self: &Arc<Self>, offset: u64) -> Result<(), TruncateError> {
        self.refuse_truncation()?;
        // Reput passes what was appended first, outside the lock; what it has not reached
        // in time is dispatched by the cut itself.
        self.await_caught_up(CATCH_UP).await;
        let me = Arc::clone(self);
        runtime::spawn_blocking(move || me.truncate_now(offset)).await
    }

    fn refuse_truncation(&self) -> Result<(), TruncateError> {
        if let Some(why) = self.failure() {
            return Err(TruncateError::Failed(why));
        }
        if self.sealed.load(Ordering::Acquire) {
            return Err(TruncateError::ShuttingDown);
        }
        if self.leads() {
            return Err(TruncateError::Leading);
        }
        Ok(())
    }

    /// The cut itself, on a blocking thread.
    fn truncate_now(&self, offset: u64) -> Result<(), TruncateError> {
        // No flush or checkpoint in flight, none starting: they take it shared.
        let _gate = self.sync_gate.write_guard();
        let mut s = self.lock();
        self.refuse_truncation()?;
        let log = s.engine().log();
        let (min, end) = (log.min_offset(), log.max_offset());
        if offset < min || offset > end {
            return Err(TruncateError::OutOfRange { offset, min, end });
        }
        let boundary = log
            .is_record_boundary(offset)
            .map_err(|e| TruncateError::Store(s.error("truncate", e)))?;
        if !boundary {
            return Err(TruncateError::NotRecordBoundary { offset });
        }
        let held = Instant::now();
        self.cut_fence.begin();
        // Before the engine moves the next segment's generation on (FsStore::truncate_log).
        self.written.store(offset.min(end), Ordering::Release);
        let r = s.truncate_log(offset);
        // Publish what the store holds now, whether the cut succeeded or not: on failure
        // the store is failed and the next start recovers it.
        let log = s.engine().log();
        let (end, flushed) = (log.max_offset(), log.flushed_offset());
        self.written.store(end, Ordering::Release);
        // Stored, not raised: the watermark moves back with the log. No flush runs now.
        self.flushed.store(flushed.min(end), Ordering::Release);
        self.dispatched
            .store(s.engine().dispatched_offset(), Ordering::Release);
        self.note_reached(s.engine().dispatched_offset());
        let page = rustix::param::page_size() as u64;
        self.released.fetch_min(end / page * page, Ordering::AcqRel);
        // A segment the cut removed and a later roll makes again is mapped afresh.
        self.populated.fetch_min(end, Ordering::AcqRel);
        for (topic, queue_id) in s.engine().queues().keys() {
            self.publish_queue(&s, &topic, queue_id);
        }
        self.publish_index(&s);
        self.cut_fence.end();
        let failed = s.engine().is_failed();
        drop(s);
        super::note_slow_hold("truncation", held);
        // Tasks and waiters look again: reput at the new end, the preparer at the new
        // next segment, flush waiters at the new watermark.
        self.appended.notify(usize::MAX);
        self.dispatch_done.notify(usize::MAX);
        self.warm_wanted.notify(usize::MAX);
        match r {
            Ok(done) => {
                log::warn!(
                    "commit log truncated at {offset} (it ended at {}); {} record(s) below the cut dispatched by it",
                    done.end_before,
                    done.redispatched
                );
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                if failed {
                    self.fail(format!("truncating the log at {offset}: {why}"));
                    Err(TruncateError::Failed(Arc::from(why.as_str())))
                } else {
                    Err(TruncateError::Store(e))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
