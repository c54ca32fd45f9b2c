//! The store's errors: what an append refused or failed, why a read found nothing, why a
//! sync failed.
//!
//! One convention for every broker error (and the engine's): the Display text is the
//! whole story on one line, the inner error's text included, because the broker prints an
//! error once, as a log line or a client's remark (`format!("{e}")`), and nothing walks
//! the chain to print it; `source()` returns the inner error wherever there is one, so
//! code that acts on its kind (a downcast, [`FsError::is_no_space`]) reaches it without
//! reading text. So print `{e}`, never `e` followed by its sources: that says it twice.

use std::path::PathBuf;
use std::sync::Arc;

use rustix::io::Errno;
use tern_engine::record::RecordError;
use tern_engine::store::Part;
use tern_engine_fs::fs_store::FsStoreError;
use tern_engine_fs::{FsError, ReadError};

/// Why an append failed.
#[derive(Debug)]
pub enum PutError {
    /// Writes are refused: the disk is past its hard watermark.
    DiskFull,
    /// Writes are refused: what is stored but not yet taken away (an edge gateway's
    /// unforwarded backlog) is over its budget.
    OverBudget,
    /// The message cannot be stored (too large for a segment, bad layout).
    Illegal(String),
    /// A broker rule refuses the message, answered with RocketMQ's code and remark for
    /// it (a timer message past `timerMaxDelaySec`, timers switched off).
    Refused(tern_shell::ResponseCode, String),
    /// The broker is shutting down and the store is sealed.
    ShuttingDown,
    /// The store failed.
    Store(FsStoreError),
    /// A flush failed earlier: the store refuses writes until the broker restarts.
    Failed(Arc<str>),
}

/// What the store refused or failed, for a log line or a remark after "ack not stored: ";
/// the send processor's refusals (`From<PutError> for Refusal`) add RocketMQ's codes.
impl std::fmt::Display for PutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutError::DiskFull => {
                f.write_str("the broker's disk is full, writes are refused until space is freed")
            }
            // Only the edge gateway sets a budget (`StoreService::set_write_limit`), so the
            // hint holds wherever this text shows: a send's remark, a POP ack's, a log line.
            PutError::OverBudget => f.write_str(
                "the stored backlog is over its budget (an edge gateway whose uplink is down); \
                 writes resume as it drains",
            ),
            PutError::Illegal(why) => write!(f, "message cannot be stored: {why}"),
            PutError::Refused(_, remark) => f.write_str(remark),
            PutError::ShuttingDown => f.write_str("the broker is shutting down"),
            PutError::Store(e) => write!(f, "append failed: {e}"),
            PutError::Failed(why) => write!(
                f,
                "the store failed ({why}); writes are refused until the broker is restarted"
            ),
        }
    }
}

impl std::error::Error for PutError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PutError::Store(e) => Some(e),
            PutError::DiskFull
            | PutError::OverBudget
            | PutError::Illegal(_)
            | PutError::Refused(..)
            | PutError::ShuttingDown
            | PutError::Failed(_) => None,
        }
    }
}

/// Why a read of the log by offset found no bytes or no record there (VIEW_MESSAGE_BY_ID,
/// send-back, transactions, the HA stream, the duplicate window's rebuild). `offset` is
/// always the offset asked for; the Display text is fit for a remark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogReadError {
    /// The offset is outside what the log holds, `[min, end)`.
    Outside { offset: u64, min: u64, end: u64 },
    /// Below the log's start: retention deleted it.
    BelowStart { offset: u64, min: u64 },
    /// Past the log's end.
    PastEnd { offset: u64, end: u64 },
    /// No record starts at the offset (a segment's blank tail, the end, or the middle of
    /// a record).
    NoRecord { offset: u64 },
    /// The head at the offset declares a size no record this broker reads has.
    Implausible { offset: u64, size: u32 },
    /// The record's segment went away during the read (retention).
    Gone { offset: u64 },
    /// The bytes at the offset are not a record.
    Unreadable { offset: u64, error: RecordError },
    /// The record's body does not match its CRC.
    Damaged { offset: u64, error: RecordError },
    /// Reading the log failed.
    Read {
        offset: u64,
        error: tern_engine::Error<ReadError>,
    },
    /// A read allowed to wait for the disk said it would block (the file layer does
    /// not: `ReadMode::Wait` never answers `WouldBlock`).
    WaitedWouldBlock { offset: u64 },
    /// The log was truncated during the read (see `truncate::CutFence`).
    CutRaced,
}

impl LogReadError {
    /// A failed read of the bytes at `offset`.
    pub(crate) fn read(offset: u64, error: ReadError) -> Self {
        LogReadError::Read {
            offset,
            error: tern_engine::Error::Media(error),
        }
    }
}

impl std::fmt::Display for LogReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogReadError::Outside { offset, min, end } => {
                write!(f, "offset {offset} is outside the log [{min}, {end})")
            }
            LogReadError::BelowStart { offset, min } => {
                write!(f, "offset {offset} is below the log's start {min}")
            }
            LogReadError::PastEnd { offset, end } => {
                write!(f, "offset {offset} is past the log's end {end}")
            }
            LogReadError::NoRecord { offset } => write!(f, "no record starts at offset {offset}"),
            LogReadError::Implausible { offset, size } => {
                write!(
                    f,
                    "no record at offset {offset}: size {size} is implausible"
                )
            }
            LogReadError::Gone { offset } => write!(f, "the record at {offset} is gone"),
            LogReadError::Unreadable { offset, error } => {
                write!(f, "no record at {offset}: {error}")
            }
            LogReadError::Damaged { offset, error } => {
                write!(f, "the record at {offset} is damaged: {error}")
            }
            LogReadError::Read { offset, error } => {
                write!(f, "reading the log at {offset}: {error}")
            }
            LogReadError::WaitedWouldBlock { offset } => write!(
                f,
                "reading the log at {offset}: a waiting read reported that it would block"
            ),
            LogReadError::CutRaced => f.write_str("the log was truncated during the read"),
        }
    }
}

impl std::error::Error for LogReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogReadError::Unreadable { error, .. } | LogReadError::Damaged { error, .. } => {
                Some(error)
            }
            LogReadError::Read { error, .. } => Some(error),
            LogReadError::Outside { .. }
            | LogReadError::BelowStart { .. }
            | LogReadError::PastEnd { .. }
            | LogReadError::NoRecord { .. }
            | LogReadError::Implausible { .. }
            | LogReadError::Gone { .. }
            | LogReadError::WaitedWouldBlock { .. }
            | LogReadError::CutRaced => None,
        }
    }
}

/// Reading entry `n` of a consume queue failed (worth a retry, unlike a filler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryReadError {
    /// The queue's topic.
    pub topic: String,
    /// The queue's id.
    pub queue_id: i32,
    /// The entry's index in the queue.
    pub n: u64,
    /// What the read of the queue file answered.
    pub error: ReadError,
}

impl std::fmt::Display for EntryReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let EntryReadError {
            topic,
            queue_id,
            n,
            error,
        } = self;
        write!(f, "reading entry {n} of {topic}/{queue_id}: {error}")
    }
}

impl std::error::Error for EntryReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Why making part of the store durable (a group-commit flush, a checkpoint) failed. The
/// store fails with it ([`super::StoreService::fail`]): a failed sync is never retried.
#[derive(Debug)]
pub(crate) enum SyncError {
    /// The engine refused or failed under the lock.
    Engine(FsStoreError),
    /// The fsync of a folder where spare files were renamed (their names).
    Folder { root: PathBuf, error: FsError },
    /// The fdatasync of a log segment, queue file or index file the checkpoint covers.
    Part {
        root: PathBuf,
        part: Part,
        error: Errno,
    },
    /// The fdatasync of the checkpoint file.
    CheckpointFile { root: PathBuf, error: Errno },
    /// The group commit's fdatasync of a commit-log segment.
    Segment { path: PathBuf, error: Errno },
}

impl From<FsStoreError> for SyncError {
    fn from(e: FsStoreError) -> Self {
        SyncError::Engine(e)
    }
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncError::Engine(e) => e.fmt(f),
            SyncError::Folder { root, error } => {
                write!(f, "fsync of a folder in {}: {error}", root.display())
            }
            SyncError::Part { root, part, error } => {
                let what = match part {
                    Part::Log => "a commit-log segment",
                    Part::Queue => "a consume-queue file",
                    Part::Index => "an index file",
                };
                write!(
                    f,
                    "fdatasync of {what} in {} during the checkpoint: {error}",
                    root.display()
                )
            }
            SyncError::CheckpointFile { root, error } => write!(
                f,
                "fdatasync of the checkpoint file in {}: {error}",
                root.display()
            ),
            SyncError::Segment { path, error } => {
                write!(
                    f,
                    "fdatasync of commit-log segment {}: {error}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SyncError::Engine(e) => Some(e),
            SyncError::Folder { error, .. } => Some(error),
            SyncError::Part { error, .. }
            | SyncError::CheckpointFile { error, .. }
            | SyncError::Segment { error, .. } => Some(error),
        }
    }
}

/// Why the store did not close cleanly; the next start recovers it as after a crash.
#[derive(Debug)]
pub enum CloseError {
    /// The store had failed (a flush, a checkpoint): it is not sealed.
    Failed(Arc<str>),
    /// Sealing it (the last flush and checkpoint) failed.
    Seal(FsStoreError),
}

impl std::fmt::Display for CloseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseError::Failed(why) => write!(f, "not closing cleanly: {why}"),
            CloseError::Seal(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CloseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CloseError::Failed(_) => None,
            CloseError::Seal(e) => Some(e),
        }
    }
}

/// Why removing consume queues (CLEAN_UNUSED_TOPIC, CLEAN_EXPIRED_CONSUMEQUEUE,
/// DELETE_TOPIC_IN_BROKER) failed. The Display text is the client's remark.
#[derive(Debug)]
pub enum RemoveError {
    /// The folder removed queues wait in could not be made: nothing was removed.
    Trash {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A removed queue's folder could not be moved out of `consumequeue/` (the last such
    /// failure): its queue left the tables, its files stay where they were.
    Move {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl std::fmt::Display for RemoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoveError::Trash { path, error } => {
                write!(f, "creating {}: {error}", path.display())
            }
            RemoveError::Move { path, error } => {
                write!(f, "moving {} away: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for RemoveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RemoveError::Trash { error, .. } | RemoveError::Move { error, .. } => Some(error),
        }
    }
}
