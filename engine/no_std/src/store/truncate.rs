//! Truncation at a consistent point: a replica rejoining its broker-set (RocketMQ 5's
//! controller mode) cuts its log at the offset its epochs agree with the master's, and
//! forgets everything past it, in queues and index too.
//!
//! # Crash safety
//!
//! A crash at any point leaves one of two stores, never a mix: the whole log as it was
//! (the truncation never happened; the caller runs it again), or exactly the records below
//! the cut, none lost. The steps, in order:
//!
//! 1. Flush the log: every record below the cut is durable from here on.
//! 2. Write and flush a checkpoint that claims at most the cut (dispatched and flushed
//!    offsets capped by it, no clean end): any recovery from now on scans the log from a
//!    point at or below the cut, and rebuilds queues and index from there.
//! 3. Zero and flush the head of the record at the cut ([`CommitLog::truncate`]). This
//!    is the commit point: recovery's scan stops at the first head that is not a record,
//!    so a crash after it finds the log ending at the cut (and zeroes the rest itself).
//!    Then the rest of the log past the cut is zeroed and later segments removed.
//! 4. Cut every consume queue and the index to entries below the cut, and move the
//!    dispatched offset back. A crash in here is recovered as any crash: entries past the
//!    checkpoint's dispatched offset are dropped on open.
//! 5. Dispatch what was below the cut but not yet dispatched, then checkpoint (everything
//!    flushed): the store is as if it had been opened on a log ending at the cut.
//!
//! A failure after step 1 fails the store ([`Engine::is_failed`]): reopening recovers it
//! to one of the two stores above.

use super::{Engine, QueueTable, Res};
use crate::checkpoint::Checkpoint;
use crate::error::Error;
use crate::media::{Directory, Media};

/// What [`Engine::truncate_log`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Truncated {
    /// The log's end before the cut.
    pub end_before: u64,
    /// Records below the cut that had not been dispatched yet and were, after it.
    pub redispatched: u64,
}

impl<L, I, Q, C> Engine<L, I, Q, C>
where
    L: Directory,
    I: Directory<Error = L::Error>,
    Q: QueueTable,
    Q::Dir: Directory<Error = L::Error>,
    C: Media<Error = L::Error>,
{
    /// Cuts the log at `offset` and forgets everything past it: queue entries, index
    /// entries, queue counters, the dispatched offset; the next append lands at `offset`
    /// with the queue offsets that follow the records kept. `offset` must be a record
    /// boundary between the log's start and end (the end itself only flushes):
    /// [`Error::OutOfRange`] outside them, [`Error::NotRecordBoundary`] inside but between
    /// records, and the store is untouched then. On return every record below `offset` is
    /// durable and the cut is too; see the module docs for what a crash leaves. `scratch`
    /// is for dispatch, as in [`Engine::dispatch`].
    ///
    /// Flushes log, queues and index in the caller's lock: a rare operation (a role
    /// change), made before appends resume.
    pub fn truncate_log(&mut self, offset: u64, scratch: &mut [u8]) -> Res<Truncated, L::Error> {
        self.refuse_if_failed()?;
        let end_before = self.log.max_offset();
        if offset < self.log.min_offset() || offset > end_before {
            return Err(Error::OutOfRange);
        }
        if !self.log.is_record_boundary(offset)? {
            return Err(Error::NotRecordBoundary);
        }
        let mut done = Truncated {
            end_before,
            redispatched: 0,
        };
        // 1. Nothing below the cut may be lost once the cut is made (nor, for a cut at
        // the end, once this returns).
        let r = self.log.flush();
        self.fail_on_err(r)?;
        if offset == end_before {
            return Ok(done);
        }
        // 2. Recovery from now on starts at or below the cut.
        let claim = Checkpoint {
            physic_timestamp: self.last_dispatched_timestamp,
            logics_timestamp: self.last_dispatched_timestamp,
            index_timestamp: self.index.end_timestamp(),
            flushed_offset: offset,
            dispatched_offset: self.checkpointed.min(offset),
            clean_end: None,
        };
        let r = claim.write(&mut self.checkpoint_media);
        self.fail_on_err(r)?;
        self.checkpointed = claim.dispatched_offset;
        // 3. The commit point, then the rest of the log.
        let r = self.log.truncate(offset);
        self.fail_on_err(r)?;
        debug_assert_eq!(
            self.log.max_offset(),
            offset,
            "the log did not end at the cut"
        );
        // A two-phase checkpoint begun before targets entries that are gone now.
        self.checkpoint_epoch += 1;
        // 4. Queues, their counters, the index.
        let r = self.queues.for_each_mut(&mut |_, _, slot| {
            slot.queue.truncate_to_log(offset)?;
            slot.next_offset = slot.queue.max_offset();
            Ok(())
        });
        self.fail_on_err(r)?;
        let r = self.index.truncate_to_log(&self.log, offset);
        self.fail_on_err(r)?;
        self.dispatched = self.dispatched.min(offset);
        // 5. Records below the cut not dispatched yet: their queue offsets set the
        // counters the next appends take.
        let r = self.dispatch(scratch, &mut |_| {});
        done.redispatched = self.fail_on_err(r)?;
        debug_assert_eq!(self.dispatched, offset, "dispatch did not reach the cut");
        self.checkpoint()?;
        self.check_cut(offset);
        Ok(done)
    }

    /// After a truncation: no queue or index entry points at or past the cut.
    fn check_cut(&mut self, offset: u64) {
        debug_assert!(
            self.index.end_phy_offset() < offset as i64,
            "index entry past the cut"
        );
        if cfg!(debug_assertions) {
            let _ = self.queues.for_each_mut(&mut |_, _, slot| {
                debug_assert!(
                    slot.queue.max_physical_end() <= offset,
                    "queue entry past the cut"
                );
                debug_assert_eq!(slot.next_offset, slot.queue.max_offset());
                Ok(())
            });
        }
    }
}
