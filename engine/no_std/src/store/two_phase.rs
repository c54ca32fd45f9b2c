//! The two-phase checkpoint: an owner that syncs files itself, outside the lock that
//! serialises the store, asks [`Engine::checkpoint_begin`] which regions to sync, syncs
//! them, then records the result with [`Engine::checkpoint_finish`].

use super::{Engine, QueueTable, Res};
use crate::checkpoint::Checkpoint;
use crate::error::MediaResult;
use crate::layout::CHECKPOINT_FILE_SIZE;
use crate::media::{Directory, Media};

/// Which structure a region of a two-phase checkpoint belongs to
/// ([`Engine::checkpoint_begin`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Part {
    /// A commit-log segment.
    Log,
    /// A consume-queue file.
    Queue,
    /// An index file.
    Index,
}

/// What [`Engine::checkpoint_finish`] may claim: fixed by [`Engine::checkpoint_begin`], so
/// appends and dispatches made between the two phases are not claimed. The queues' own
/// targets live in the queues (a plan holds no table).
#[derive(Debug)]
#[must_use = "a plan does nothing until checkpoint_finish"]
pub struct CheckpointPlan {
    /// Which `checkpoint_begin` made it: queue targets belong to the newest only.
    epoch: u64,
    /// The log's end at begin: its unflushed tail up to here was handed out.
    log_to: u64,
    /// The log's rewinds at begin: after a truncation the range handed out may hold
    /// bytes written since, and is not marked flushed.
    log_rewinds: u64,
    /// Dispatched offset at begin: every entry below it was in a region handed out (or
    /// flushed before).
    dispatched: u64,
    /// Store time of the newest record dispatched at begin.
    logics_timestamp: i64,
    /// Store time of the newest record indexed at begin.
    index_timestamp: i64,
    /// The index's flush target, if its newest file was handed out.
    index_target: Option<u64>,
}

impl<L, I, Q, C> Engine<L, I, Q, C>
where
    L: Directory,
    I: Directory<Error = L::Error>,
    Q: QueueTable,
    Q::Dir: Directory<Error = L::Error>,
    C: Media<Error = L::Error>,
{
    /// First phase of a checkpoint whose flushes the owner makes itself, outside its lock
    /// (an fdatasync of duplicated file handles). Under the lock: calls `region` for every
    /// media holding bytes written since the last checkpoint (the log's unflushed tail per
    /// segment, each queue's unflushed files, the newest index file if it changed), with
    /// the byte range within that media, and fixes what [`Engine::checkpoint_finish`] may
    /// then claim. If the owner's sync fails, it calls [`Engine::mark_failed`] and drops
    /// the plan.
    #[allow(clippy::type_complexity)]
    pub fn checkpoint_begin(
        &mut self,
        region: &mut dyn FnMut(Part, &L::Media, core::ops::Range<u64>),
    ) -> Res<CheckpointPlan, L::Error>
    where
        I: Directory<Media = L::Media>,
        Q::Dir: Directory<Media = L::Media>,
    {
        self.refuse_if_failed()?;
        self.checkpoint_epoch += 1;
        let (from, log_to) = self.log.unflushed();
        self.log
            .regions(from, log_to, &mut |m, r| region(Part::Log, m, r));
        self.queues.for_each_mut(&mut |_, _, slot| {
            slot.queue
                .begin_flush(&mut |m, r| region(Part::Queue, m, r));
            Ok(())
        })?;
        let r = self
            .index
            .begin_flush(&mut |m, r| region(Part::Index, m, r));
        let index_target = self.fail_on_err(r)?;
        Ok(CheckpointPlan {
            epoch: self.checkpoint_epoch,
            log_to,
            log_rewinds: self.log.rewinds(),
            dispatched: self.dispatched,
            logics_timestamp: self.last_dispatched_timestamp,
            index_timestamp: self.index.end_timestamp(),
            index_target,
        })
    }

    /// Second phase, after the owner made every region of `plan` durable: marks them
    /// flushed and writes and flushes the checkpoint record. It claims the dispatched
    /// offset as of [`Engine::checkpoint_begin`] (capped by the log's flushed offset, and
    /// never below what the last checkpoint claimed); appends and dispatches made between
    /// the phases are not claimed. A plan superseded by a newer begin still finishes
    /// correctly, without marking queues.
    pub fn checkpoint_finish(&mut self, plan: CheckpointPlan) -> Res<(), L::Error> {
        let written = self.checkpoint_write(plan)?;
        let r = self.checkpoint_media.flush(0..CHECKPOINT_FILE_SIZE).media();
        self.fail_on_err(r)?;
        self.checkpoint_synced(written);
        Ok(())
    }

    /// [`Engine::checkpoint_finish`] for an owner that also syncs the checkpoint file
    /// itself, outside its lock: marks the plan's regions flushed and writes the record
    /// without flushing it. Once the owner made [`Engine::checkpoint_media`] durable it
    /// hands the result to [`Engine::checkpoint_synced`]; until then nothing relies on the
    /// new record (retention keeps what the previous one needs), and a crash finds the
    /// previous record or the new one, each true.
    pub fn checkpoint_write(&mut self, plan: CheckpointPlan) -> Res<CheckpointWritten, L::Error> {
        self.refuse_if_failed()?;
        // The log moved back since begin (a truncation): what the plan handed out may
        // hold bytes, entries and index changes made after it, and its dispatched offset
        // may lie past the cut. It claims nothing new then; the truncation wrote its own
        // checkpoint.
        let rewound = plan.log_rewinds != self.log.rewinds();
        if !rewound {
            self.log.mark_flushed(plan.log_to);
        }
        if plan.epoch == self.checkpoint_epoch && !rewound {
            self.queues.for_each_mut(&mut |_, _, slot| {
                slot.queue.finish_flush();
                Ok(())
            })?;
        }
        if let (Some(target), false) = (plan.index_target, rewound) {
            self.index.mark_flushed(target);
        }
        let flushed = self.log.flushed_offset();
        let claim = if rewound {
            self.checkpointed
        } else {
            plan.dispatched.min(flushed).max(self.checkpointed)
        };
        let c = Checkpoint {
            physic_timestamp: plan.logics_timestamp,
            logics_timestamp: plan.logics_timestamp,
            index_timestamp: plan.index_timestamp,
            flushed_offset: flushed,
            dispatched_offset: claim,
            clean_end: None,
        };
        let r = c.write_unsynced(&mut self.checkpoint_media);
        self.fail_on_err(r)?;
        Ok(CheckpointWritten {
            dispatched: c.dispatched_offset,
        })
    }

    /// The record of a [`Engine::checkpoint_write`] is durable: retention may rely on it.
    /// Nothing changes on a failed store.
    pub fn checkpoint_synced(&mut self, written: CheckpointWritten) {
        if !self.is_failed() {
            self.checkpointed = self.checkpointed.max(written.dispatched);
        }
    }

    /// The checkpoint file, for an owner that syncs it itself.
    pub fn checkpoint_media(&self) -> &C {
        &self.checkpoint_media
    }
}

/// A checkpoint record written but not yet durable ([`Engine::checkpoint_write`]).
#[derive(Debug)]
#[must_use = "retention goes on relying on the previous checkpoint until checkpoint_synced"]
pub struct CheckpointWritten {
    /// The dispatched offset the record claims.
    dispatched: u64,
}
