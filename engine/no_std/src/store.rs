//! The engine ([`Engine`]): commit log, consume queues and index together, and recovery.
//!
//! Recovery, in the order it runs, for every state the media promises allow:
//! 1. Read the checkpoint. A torn or missing one means "nothing is known": scan from 0.
//! 2. Find the log's end. After a clean shutdown the checkpoint names it. Otherwise scan
//!    from the segment holding the checkpoint's dispatched offset, verifying every record
//!    (magic, sizes, position, CRC); the first failure is the end, and the bytes after it
//!    are zeroed so no later scan can see them. The part the scan found past the
//!    checkpoint's flushed offset is written again and flushed: after a failed flush in
//!    the last run, reads may return bytes that are not durable.
//! 3. Open each consume queue: cut entries that point past the log's end or are torn.
//! 4. Open the index: drop files past the log's end, rebuild the newest file's slots and
//!    header from its entries after a crash.
//! 5. Dispatch from the checkpoint's dispatched offset to the log's end. Dispatch is
//!    idempotent (queues and index skip records they hold), so starting early is safe.
//! 6. Flush what dispatch wrote to queues and index, then write a checkpoint that marks
//!    the store open (no clean end). It claims the re-dispatched entries, so they must be
//!    durable first: a second power cut right after recovery would otherwise lose them
//!    below the checkpoint's dispatched offset, where no recovery looks again.
//!
//! # Checkpoints
//!
//! A checkpoint claims that queues and index hold every record below its dispatched
//! offset durably, so recovery keeps them and dispatches only from there. It may claim
//! only what a flush that returned `Ok` covered, and never more than the log's flushed
//! offset. [`Engine::checkpoint`] flushes everything itself, in the caller's lock. An owner
//! that would rather sync outside its lock uses two phases: [`Engine::checkpoint_begin`]
//! (under the lock) hands out every region written since the last checkpoint and fixes
//! what may be claimed; the owner syncs them (`fdatasync` on duplicated handles) without
//! the lock while appends and dispatch go on; [`Engine::checkpoint_finish`] (under the lock
//! again) marks them flushed and writes the checkpoint, claiming nothing done in between.
//! Retention deletes nothing above the last checkpoint's claim.
//!
//! # Failed flushes
//!
//! Fail-stop (see the crate docs): after any failed flush, or one the owner reports with
//! [`Engine::mark_failed`], writes and checkpoints are refused with
//! [`Error::FlushFailed`] until the store is reopened.

use crate::checkpoint::Checkpoint;
use crate::commitlog::{Appended, CommitLog, Recovery, RecoveryReport};
use crate::consumequeue::ConsumeQueue;
use crate::delay::DelayLevels;
use crate::error::Error;
use crate::index::{Index, IndexConfig};
use crate::media::{Directory, Media};
use crate::record::{
    MessageIn, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK,
};

/// Geometry of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Bytes per commit-log segment.
    pub log_segment_size: u64,
    /// Entries per consume-queue file.
    pub queue_entries_per_file: u64,
    /// Index file geometry.
    pub index: IndexConfig,
    /// Delay of each level: dispatch writes a delayed record's delivery time as its
    /// schedule-queue entry's tag code ([`crate::delay`]).
    pub delay_levels: DelayLevels,
}

impl StoreConfig {
    /// RocketMQ's server geometry: 1 GiB log segments, 300,000-entry queue files,
    /// 5,000,000-slot / 20,000,000-entry index files.
    pub const SERVER: StoreConfig = StoreConfig {
        log_segment_size: crate::commitlog::DEFAULT_SEGMENT_SIZE,
        queue_entries_per_file: crate::consumequeue::DEFAULT_ENTRIES_PER_FILE,
        index: IndexConfig::SERVER,
        delay_levels: DelayLevels::ROCKETMQ,
    };
}

/// A consume queue and the next queue offset to assign to a new record.
///
/// The counter runs ahead of the queue between an append and its dispatch.
#[derive(Debug)]
pub struct QueueSlot<D: Directory> {
    /// The queue.
    pub queue: ConsumeQueue<D>,
    /// Queue offset the next appended record gets.
    pub next_offset: u64,
}

/// The caller's table of consume queues, one per (topic, queue id).
///
/// A broker holds thousands (a hash map on the heap); a gateway a few (a fixed table).
/// The engine only needs these operations.
pub trait QueueTable {
    /// Directory type of each queue.
    type Dir: Directory;

    /// The queue of (topic, queue id), if it exists.
    fn get(&self, topic: &str, queue_id: i32) -> Option<&QueueSlot<Self::Dir>>;

    /// The queue of (topic, queue id), if it exists, for writing.
    fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut QueueSlot<Self::Dir>>;

    /// Makes storage for a new queue. The engine then opens it and hands it to `insert`.
    fn create_dir(
        &mut self,
        topic: &str,
        queue_id: i32,
    ) -> Result<Self::Dir, Error<<Self::Dir as Directory>::Error>>;

    /// Adds a queue.
    fn insert(
        &mut self,
        topic: &str,
        queue_id: i32,
        slot: QueueSlot<Self::Dir>,
    ) -> Result<(), Error<<Self::Dir as Directory>::Error>>;

    /// Opens every queue present in storage: for each, passes its directory to `open`
    /// and keeps what it returns.
    #[allow(clippy::type_complexity)]
    fn open_existing(
        &mut self,
        open: &mut dyn FnMut(
            Self::Dir,
        ) -> Result<
            QueueSlot<Self::Dir>,
            Error<<Self::Dir as Directory>::Error>,
        >,
    ) -> Result<(), Error<<Self::Dir as Directory>::Error>>;

    /// Visits every queue.
    #[allow(clippy::type_complexity)]
    fn for_each_mut(
        &mut self,
        f: &mut dyn FnMut(
            &str,
            i32,
            &mut QueueSlot<Self::Dir>,
        ) -> Result<(), Error<<Self::Dir as Directory>::Error>>,
    ) -> Result<(), Error<<Self::Dir as Directory>::Error>>;
}

/// What opening found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The store had not been closed cleanly.
    pub crashed: bool,
    /// The checkpoint was missing or torn.
    pub checkpoint_lost: bool,
    /// What the commit-log scan found.
    pub log: RecoveryReport,
    /// Records dispatched during recovery.
    pub redispatched: u64,
}

/// Where a put landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Commit-log offset and size.
    pub at: Appended,
    /// Queue offset assigned (0 for half messages and rollback markers).
    pub queue_offset: u64,
}

/// Commit log, consume queues, index and checkpoint over the caller's directories: `L`
/// the log's, `I` the index's, `Q` the table of queues (a [`QueueTable`]), `C` the
/// checkpoint's media, all with one error type.
///
/// The struct asks of them only what its fields need; the bounds that make it a store
/// are stated once per `impl` block (here and in `dispatch`, `truncate`, `two_phase`),
/// where the compiler needs them, rather than once more here.
#[derive(Debug)]
pub struct Engine<L: Directory, I: Directory, Q, C> {
    config: StoreConfig,
    log: CommitLog<L>,
    index: Index<I>,
    queues: Q,
    checkpoint_media: C,
    /// Log offset up to which records are in queues and index.
    dispatched: u64,
    /// Store time of the newest record dispatched.
    last_dispatched_timestamp: i64,
    /// The dispatched offset the last checkpoint written claims durable. Retention deletes
    /// nothing above it: recovery restarts dispatch there, and queue entries between it
    /// and a later log start would be dropped with no record left to rebuild them from.
    checkpointed: u64,
    /// Counts `checkpoint_begin` calls: a plan older than the newest finishes without
    /// marking queues (their targets were moved by the newer begin).
    checkpoint_epoch: u64,
    /// A flush of queues, index or checkpoint failed, or the owner's own sync did
    /// ([`Engine::mark_failed`]): nothing written since can be claimed durable, so writes
    /// and checkpoints are refused until the store is reopened.
    failed: bool,
    /// Dispatch stops before an index roll that would flush under the owner's lock
    /// ([`Engine::defer_index_rolls`]).
    defer_index_rolls: bool,
}

type Res<T, E> = Result<T, Error<E>>;

mod dispatch;
mod truncate;
mod two_phase;
pub use dispatch::{DISPATCH_PASS_RECORDS, Dispatched};
pub use truncate::Truncated;
pub use two_phase::{CheckpointPlan, CheckpointWritten, Part};

impl<L, I, Q, C> Engine<L, I, Q, C>
where
    L: Directory,
    I: Directory<Error = L::Error>,
    Q: QueueTable,
    Q::Dir: Directory<Error = L::Error>,
    C: Media<Error = L::Error>,
{
    /// Opens a store, recovering it (see the module docs). `crashed` says whether the
    /// previous run ended without a clean close (the abort marker was present).
    /// `scratch` is needed only by media that are not memory: one record's worth.
    pub fn open(
        config: StoreConfig,
        log_dir: L,
        index_dir: I,
        mut queues: Q,
        checkpoint_media: C,
        crashed: bool,
        scratch: &mut [u8],
    ) -> Res<(Self, OpenReport), L::Error> {
        let checkpoint = Checkpoint::read(&checkpoint_media)?;
        let mut report = OpenReport {
            crashed,
            checkpoint_lost: checkpoint.is_none(),
            ..Default::default()
        };
        let recovery = match checkpoint {
            Some(Checkpoint {
                clean_end: Some(end),
                ..
            }) if !crashed => Recovery::Clean { end },
            Some(c) => Recovery::Scan {
                from: c.dispatched_offset.min(c.flushed_offset),
            },
            None => Recovery::Scan { from: 0 },
        };
        let (mut log, log_report) = CommitLog::open(log_dir, config.log_segment_size, recovery)?;
        if let Recovery::Scan { .. } = recovery {
            // The scan read the tail from what reads see, which after a failed flush of
            // the last run may not be what is durable: write it again before calling it
            // flushed. Below the checkpoint's flushed offset it was durable.
            log.rewrite_tail(checkpoint.map_or(0, |c| c.flushed_offset))?;
        }
        report.log = log_report;
        let entries = config.queue_entries_per_file;
        let durable_below = match (recovery, checkpoint) {
            (Recovery::Clean { .. }, _) => None,
            (_, Some(c)) => Some(c.dispatched_offset),
            (_, None) => Some(0),
        };
        queues.open_existing(&mut |dir| {
            let queue = ConsumeQueue::open(dir, entries, &log, durable_below)?;
            let next_offset = queue.max_offset();
            Ok(QueueSlot { queue, next_offset })
        })?;
        let index = Index::open(index_dir, config.index, &log, durable_below)?;
        let dispatched = match (recovery, checkpoint) {
            (Recovery::Clean { end }, _) => end.min(log.max_offset()),
            (_, Some(c)) => c
                .dispatched_offset
                .min(log.max_offset())
                .max(log.min_offset()),
            (_, None) => log.min_offset(),
        };
        let mut store = Self {
            config,
            log,
            index,
            queues,
            checkpoint_media,
            dispatched,
            last_dispatched_timestamp: checkpoint.map_or(0, |c| c.logics_timestamp),
            checkpointed: 0,
            checkpoint_epoch: 0,
            failed: false,
            defer_index_rolls: false,
        };
        report.redispatched = store.dispatch(scratch, &mut |_| {})?;
        // Not just the record: it claims what dispatch just wrote (step 6).
        store.checkpoint()?;
        Ok((store, report))
    }

    /// Appends one message. Its queue offset comes from the queue's counter, except for
    /// half messages and rollback markers, which take 0 and no queue position.
    pub fn put(&mut self, msg: &MessageIn<'_>, store_timestamp: i64) -> Res<Stored, L::Error> {
        self.put_with_crc(msg, crate::hash::body_crc(msg.body), store_timestamp)
    }

    /// Like [`Engine::put`] with the body CRC computed by the caller, before it took
    /// whatever lock serialises the store (hashing a 4 MiB body takes a millisecond).
    pub fn put_with_crc(
        &mut self,
        msg: &MessageIn<'_>,
        body_crc: i32,
        store_timestamp: i64,
    ) -> Res<Stored, L::Error> {
        self.refuse_if_failed()?;
        let queued = !matches!(
            msg.sys_flag & SYSFLAG_TRANSACTION_MASK,
            SYSFLAG_TRANSACTION_PREPARED | SYSFLAG_TRANSACTION_ROLLBACK
        );
        let queue_offset = if queued {
            self.slot(msg.topic, msg.queue_id)?.next_offset
        } else {
            0
        };
        let at = self
            .log
            .append_with_crc(msg, body_crc, queue_offset as i64, store_timestamp)?;
        if queued {
            self.slot(msg.topic, msg.queue_id)?.next_offset += 1;
        }
        Ok(Stored { at, queue_offset })
    }

    /// Appends a batch to one queue with consecutive queue offsets; `landed` is told where
    /// each record went.
    pub fn put_batch(
        &mut self,
        msgs: &[MessageIn<'_>],
        store_timestamp: i64,
        landed: &mut dyn FnMut(Stored),
    ) -> Res<(), L::Error> {
        let crc = |_: usize, m: &MessageIn<'_>| crate::hash::body_crc(m.body);
        self.put_batch_with(msgs, &crc, store_timestamp, landed)
    }

    /// Like [`Engine::put_batch`] with each body CRC given by `crc(i, m)`, computed by the
    /// caller before whatever lock serialises the store.
    pub fn put_batch_with(
        &mut self,
        msgs: &[MessageIn<'_>],
        crc: &dyn Fn(usize, &MessageIn<'_>) -> i32,
        store_timestamp: i64,
        landed: &mut dyn FnMut(Stored),
    ) -> Res<(), L::Error> {
        self.refuse_if_failed()?;
        let Some(first) = msgs.first() else {
            return Ok(());
        };
        let (topic, queue_id) = (first.topic, first.queue_id);
        if msgs
            .iter()
            .any(|m| m.topic != topic || m.queue_id != queue_id)
        {
            return Err(Error::OutOfRange);
        }
        let base = self.slot(topic, queue_id)?.next_offset;
        let mut n = 0u64;
        self.log
            .append_batch_with(msgs, crc, base as i64, store_timestamp, &mut |at| {
                landed(Stored {
                    at,
                    queue_offset: base + n,
                });
                n += 1;
            })?;
        self.slot(topic, queue_id)?.next_offset = base + n;
        Ok(())
    }

    /// Appends bytes of a master's log, which start at log offset `at` (HA replication;
    /// see [`CommitLog::append_replicated`]). An empty store first moves to where the
    /// master's stream begins, which must be a segment boundary. Dispatch then follows
    /// these records as it follows appends. Returns the offset the bytes were consumed to.
    pub fn append_replicated(&mut self, at: u64, bytes: &[u8]) -> Res<u64, L::Error> {
        self.refuse_if_failed()?;
        let end = self.log.max_offset();
        if at != end && self.log.segment_span().is_none() && self.dispatched == end {
            self.log.start_replica_at(at)?;
            self.dispatched = at;
        }
        self.log.append_replicated(at, bytes)
    }

    fn slot(&mut self, topic: &str, queue_id: i32) -> Res<&mut QueueSlot<Q::Dir>, L::Error> {
        if self.queues.get(topic, queue_id).is_none() {
            let dir = self.queues.create_dir(topic, queue_id)?;
            let queue =
                ConsumeQueue::open(dir, self.config.queue_entries_per_file, &self.log, None)?;
            let next_offset = queue.max_offset();
            self.queues
                .insert(topic, queue_id, QueueSlot { queue, next_offset })?;
        }
        self.queues.get_mut(topic, queue_id).ok_or(Error::TableFull)
    }

    /// Makes every appended record durable (the flush service; group commit). Returns
    /// the flushed offset.
    pub fn flush_log(&mut self) -> Res<u64, L::Error> {
        self.log.flush()
    }

    /// Flushes queues and index, then records in the checkpoint how far recovery may
    /// trust them. A failed flush of any of them is fail-stop, as the log's is: the store
    /// refuses writes and checkpoints from then on ([`Engine::is_failed`]).
    pub fn checkpoint(&mut self) -> Res<(), L::Error> {
        self.refuse_if_failed()?;
        self.flush_log()?;
        let r = self
            .queues
            .for_each_mut(&mut |_, _, slot| slot.queue.flush());
        self.fail_on_err(r)?;
        let r = self.index.flush();
        self.fail_on_err(r)?;
        self.write_checkpoint(None)
    }

    /// Records that a sync the owner made itself failed (an fdatasync of duplicated file
    /// handles, outside the engine): what it covered may never reach the media, so the
    /// store and its log refuse writes, flushes and checkpoints from now on, and the
    /// flushed offset stays where it is. Reopening the store recovers.
    pub fn mark_failed(&mut self) {
        self.failed = true;
        self.log.mark_flush_failed();
    }

    /// Whether a flush failed since the store was opened (its own, its log's, its
    /// index's, or one reported by [`Engine::mark_failed`]). Reads and dispatch go on;
    /// `put`, `put_batch`, `append_replicated`, `checkpoint` and `seal` return
    /// [`Error::FlushFailed`].
    pub fn is_failed(&self) -> bool {
        self.failed || self.log.is_failed() || self.index.is_failed()
    }

    fn refuse_if_failed(&self) -> Res<(), L::Error> {
        if self.is_failed() {
            Err(Error::FlushFailed)
        } else {
            Ok(())
        }
    }

    /// Passes `r` on, marking the store failed if it is an error of a flush step.
    fn fail_on_err<T>(&mut self, r: Res<T, L::Error>) -> Res<T, L::Error> {
        if r.is_err() {
            self.failed = true;
            crate::trace::log_warn!("store flush failed; refusing writes until reopened");
        }
        r
    }

    fn write_checkpoint(&mut self, clean_end: Option<u64>) -> Res<(), L::Error> {
        let c = Checkpoint {
            physic_timestamp: self.last_dispatched_timestamp,
            logics_timestamp: self.last_dispatched_timestamp,
            index_timestamp: self.index.end_timestamp(),
            flushed_offset: self.log.flushed_offset(),
            dispatched_offset: self.dispatched.min(self.log.flushed_offset()),
            clean_end,
        };
        let r = c.write(&mut self.checkpoint_media);
        self.fail_on_err(r)?;
        self.checkpointed = c.dispatched_offset;
        Ok(())
    }

    /// Closes cleanly: dispatches the rest, flushes everything, and writes a checkpoint
    /// with the log's end so the next open skips the scan. Returns the parts.
    pub fn close(mut self, scratch: &mut [u8]) -> Res<(L, I, Q, C), L::Error> {
        self.seal(scratch)?;
        Ok(self.into_parts())
    }

    /// Everything [`Engine::close`] makes durable, without giving the parts back: the next
    /// open skips the scan. Nothing may be appended after it (the checkpoint names the
    /// end); callers that cannot hand the store over refuse writes from then on.
    pub fn seal(&mut self, scratch: &mut [u8]) -> Res<(), L::Error> {
        self.refuse_if_failed()?;
        self.dispatch(scratch, &mut |_| {})?;
        self.checkpoint()?;
        let end = self.log.max_offset();
        self.write_checkpoint(Some(end))
    }

    /// Stops without flushing anything, as a crash would; for tests and for callers whose
    /// media failed.
    pub fn into_parts(self) -> (L, I, Q, C) {
        (
            self.log.into_dir(),
            self.index.into_dir(),
            self.queues,
            self.checkpoint_media,
        )
    }

    /// Deletes log segments that end at or before `offset` (retention), then queue files
    /// and index files that only point into them. Returns segments removed.
    ///
    /// Only records the last checkpoint counts as dispatched go: recovery re-dispatches
    /// from that offset, which must still be in the log (queue entries between it and a
    /// later log start would be dropped with nothing to rebuild them from). When a
    /// segment past it could go, this checkpoints first (flushing in the caller's lock,
    /// at most once per segment); a failed store deletes only below its last checkpoint.
    pub fn delete_before(&mut self, offset: u64) -> Res<u32, L::Error> {
        let offset = offset.min(self.dispatched);
        // The last segment end at or below `offset`: whole segments go up to there.
        let cut = offset - offset % self.log.segment_size();
        let first = self.log.segment_span().map_or(u64::MAX, |(first, _)| first);
        if cut > first && cut > self.checkpointed && !self.is_failed() {
            self.checkpoint()?;
        }
        let offset = offset.min(self.checkpointed);
        let removed = self.log.delete_segments_before(offset)?;
        if removed > 0 {
            let min = self.log.min_offset();
            self.queues
                .for_each_mut(&mut |_, _, slot| slot.queue.delete_before_log(min))?;
            self.index.delete_before_log(min)?;
        }
        Ok(removed)
    }

    /// The dispatched offset the last durable checkpoint claims: retention deletes no
    /// segment past it without checkpointing first ([`Engine::delete_before`]).
    pub fn checkpointed(&self) -> u64 {
        self.checkpointed
    }

    /// The commit log, for callers that flush it themselves ([`CommitLog::mark_flushed`]).
    pub fn log_mut(&mut self) -> &mut CommitLog<L> {
        &mut self.log
    }
    /// The commit log.
    pub fn log(&self) -> &CommitLog<L> {
        &self.log
    }
    /// The index.
    pub fn index(&self) -> &Index<I> {
        &self.index
    }
    /// The queue table.
    pub fn queues(&self) -> &Q {
        &self.queues
    }
    /// The queue table, for an owner that removes queues (a deleted topic's, or one
    /// whose every record is gone from the log). A removed queue's records stay in the
    /// log; a queue removed while records for it remain undispatched is made again by
    /// dispatch, so the owner removes only what dispatch has passed.
    pub fn queues_mut(&mut self) -> &mut Q {
        &mut self.queues
    }
    /// The consume queue of (topic, queue id), if it exists.
    pub fn queue(&self, topic: &str, queue_id: i32) -> Option<&ConsumeQueue<Q::Dir>> {
        self.queues.get(topic, queue_id).map(|s| &s.queue)
    }
    /// Log offset up to which records are dispatched.
    pub fn dispatched_offset(&self) -> u64 {
        self.dispatched
    }
    /// The geometry.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }
}
