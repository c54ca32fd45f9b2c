//! What a [`super::driver::TimerDriver`]'s owner gives it and gets back: the source it
//! reads the store through, the sink it stores copies through, and what a round reports.
//! The broker's timer task and the crash simulation each implement the two traits.

use crate::error::Error;

/// The timer queue's entry: where its record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueEntry {
    /// The record's commit-log offset.
    pub offset: u64,
    /// Its size.
    pub size: u32,
}

/// A timer-queue entry that cannot be read now (the owner logged why): filing retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unreadable;

/// What the driver reads: the timer topic's queue (`rmq_sys_wheel_timer`/0) and the
/// commit log.
pub trait TimerSource {
    /// The timer queue's first and next offsets.
    fn queue_bounds(&self) -> (u64, u64);
    /// Entry `q` of the timer queue; `None` when there is none (a hole, or gone).
    fn queue_entry(&self, q: u64) -> Result<Option<QueueEntry>, Unreadable>;
    /// Calls `f` with the record of `size` bytes at `offset`; `false` when it is gone
    /// (retention) or unreadable.
    fn with_record(&self, offset: u64, size: u32, f: &mut dyn FnMut(&[u8])) -> bool;
    /// The log is durable below this offset.
    fn durable_end(&self) -> u64;
    /// The log's end: everything stored so far is below it.
    fn log_end(&self) -> u64;
}

/// What to store for a timer record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// The delivered copy in its real topic and queue: `REAL_*` removed,
    /// `TIMER_ENQUEUE_MS` = `enqueued_ms` (`i64::MAX`: due on arrival, never filed) and
    /// `TIMER_DEQUEUE_MS` = `now_ms` added (RocketMQ's `convert`).
    Deliver {
        /// When the unit was filed.
        enqueued_ms: i64,
        /// Now.
        now_ms: i64,
    },
    /// The delay's next leg: the record again in the timer topic, queue 0, with
    /// `TIMER_ROLL_TIMES` counted up.
    Roll,
}

/// Why a copy was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Never storable: dropped (the sink logs why).
    Drop,
    /// Not now (disk full, store failed, shutting down): tried again later.
    Later,
}

/// Something the owner may want to log; the counts are in [`DriverStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Timer-queue entries `from..to` were deleted before they were filed.
    EntriesDeleted {
        /// First lost entry.
        from: u64,
        /// The queue's first entry now.
        to: u64,
    },
    /// The record of a unit or entry at this commit-log offset is gone (retention).
    RecordGone {
        /// Its commit-log offset.
        offset: u64,
    },
    /// The record at this offset is not a timer message (no `TIMER_OUT_MS` or
    /// `REAL_TOPIC`): dropped.
    NotTimer {
        /// Its commit-log offset.
        offset: u64,
    },
    /// The slot holds more units than [`RECALL_SCAN_LIMIT`](super::driver::RECALL_SCAN_LIMIT), or more markers than
    /// [`MAX_RECALLS_PER_SLOT`](super::driver::MAX_RECALLS_PER_SLOT): recalls past them are not applied.
    RecallsCut {
        /// The slot.
        slot_ms: i64,
    },
}

/// Where copies go: the store, through the owner (which builds the copy from the record).
pub trait TimerSink {
    /// Stores `put` for the timer record `record`; returns the log's end past it.
    fn store(&mut self, record: &[u8], put: Put) -> Result<u64, Refusal>;
    /// Hears of something worth a log line.
    fn note(&mut self, _event: Event) {}
}

/// What the driver did, summed since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Units filed in the wheel.
    pub filed: u64,
    /// Copies delivered (filed units and entries due on arrival).
    pub delivered: u64,
    /// Roll legs put back into the timer topic.
    pub rolled: u64,
    /// Messages not delivered because a marker recalled them.
    pub recalled: u64,
    /// Entries and units dropped: gone, not timer messages, refused, late markers.
    pub dropped: u64,
}

/// Why the driver stopped; the timer cannot go on (a failed sync is not retried).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure<E> {
    /// Filing a unit failed.
    File(Error<E>),
    /// Syncing the timer log failed.
    SyncLog(Error<E>),
    /// Reading the slot at this time failed.
    ReadSlot(i64, Error<E>),
    /// Writing the checkpoint failed.
    Checkpoint(Error<E>),
}

/// Says which step failed, then the engine's error.
impl<E: core::fmt::Display> core::fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Failure::File(e) => write!(f, "filing a timer: {e}"),
            Failure::SyncLog(e) => write!(f, "syncing the timer log: {e}"),
            Failure::ReadSlot(t, e) => write!(f, "reading timer slot {t}: {e}"),
            Failure::Checkpoint(e) => write!(f, "writing the timer checkpoint: {e}"),
        }
    }
}

/// The engine's error, for code that acts on its kind; the Display text already says it.
impl<E: core::error::Error + 'static> core::error::Error for Failure<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Failure::File(e)
            | Failure::SyncLog(e)
            | Failure::ReadSlot(_, e)
            | Failure::Checkpoint(e) => Some(e),
        }
    }
}

/// A round's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    /// Run the next round at this ms (sooner on a wake).
    pub next_ms: i64,
    /// A checkpoint was written.
    pub checkpointed: bool,
}
