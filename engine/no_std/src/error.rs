//! The engine's errors: small, `Copy`, generic over the media's own error.

use core::fmt;

use crate::record::RecordError;

/// What went wrong in an engine operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error<E> {
    /// The media failed; its error is carried unchanged.
    Media(E),
    /// A message cannot be encoded (too long a topic, properties, or body).
    Record(RecordError),
    /// A record or a batch is larger than a segment can hold.
    TooLarge,
    /// The offset is outside what the structure holds.
    OutOfRange,
    /// The offset is inside the log but no record (nor a segment's blank tail) starts
    /// there: a truncation must cut between records.
    NotRecordBoundary,
    /// Stored bytes contradict an invariant; see [`Corruption`].
    Corrupt(Corruption),
    /// A fixed-capacity table of the caller or of the engine is full.
    TableFull,
    /// A flush failed before; what it covered may not be on the media (Linux reports a
    /// failed write-back once, and a retried flush then succeeds without writing it), so
    /// writes and flushes are refused until the store is reopened (recovery re-verifies
    /// the tail and writes it again).
    FlushFailed,
}

/// Which invariant stored bytes broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Corruption {
    /// Segments are not contiguous: the one at `missing` is absent.
    SegmentGap {
        /// Base offset of the first missing segment.
        missing: u64,
    },
    /// A segment's base is not a multiple of the segment size.
    SegmentMisaligned {
        /// The misaligned base.
        base: u64,
    },
    /// A segment's length is not the configured segment size.
    SegmentSize {
        /// Base offset of the segment.
        base: u64,
    },
    /// A record inside the verified part of the log does not parse.
    Record {
        /// Where the record should start.
        offset: u64,
        /// Why it does not parse.
        error: RecordError,
    },
    /// A consume-queue offset arrived out of order.
    QueueOffset {
        /// The offset the queue expected next.
        expected: i64,
        /// The offset it was given.
        got: i64,
    },
    /// An index file's header or geometry is impossible.
    IndexFile {
        /// Base (name) of the index file.
        base: u64,
    },
    /// The timer wheel's size is not its geometry's (slots × 32 bytes).
    TimerWheelSize {
        /// Its length.
        len: u64,
    },
}

/// For a log line or a client's remark; the media's error says what failed on the media.
impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Media(e) => e.fmt(f),
            Error::Record(e) => write!(f, "message cannot be stored: {e}"),
            Error::TooLarge => f.write_str("larger than a commit-log segment"),
            Error::OutOfRange => f.write_str("offset out of range"),
            Error::NotRecordBoundary => f.write_str("no record starts at that offset"),
            Error::TableFull => f.write_str("a fixed-size table is full"),
            Error::FlushFailed => f.write_str("a flush failed earlier; refusing until restart"),
            Error::Corrupt(c) => c.fmt(f),
        }
    }
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::SegmentGap { missing } => {
                write!(f, "corrupt: segment at offset {missing} is missing")
            }
            Corruption::SegmentMisaligned { base } => write!(
                f,
                "corrupt: segment at offset {base} is not a multiple of the segment size"
            ),
            Corruption::SegmentSize { base } => write!(
                f,
                "corrupt: segment at offset {base} is not the configured size"
            ),
            Corruption::Record { offset, error } => {
                write!(f, "corrupt: record at offset {offset}: {error}")
            }
            Corruption::QueueOffset { expected, got } => write!(
                f,
                "corrupt: queue offset {got} arrived where {expected} was expected"
            ),
            Corruption::IndexFile { base } => write!(f, "corrupt: index file {base}"),
            Corruption::TimerWheelSize { len } => write!(
                f,
                "corrupt: the timer wheel is {len} bytes, not its slots × 32 (another geometry?)"
            ),
        }
    }
}

/// The inner error, for code that acts on its kind; the Display text already says it.
impl<E: core::error::Error + 'static> core::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Media(e) => Some(e),
            Error::Record(e) => Some(e),
            Error::Corrupt(c) => Some(c),
            Error::TooLarge
            | Error::OutOfRange
            | Error::NotRecordBoundary
            | Error::TableFull
            | Error::FlushFailed => None,
        }
    }
}

impl core::error::Error for Corruption {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Corruption::Record { error, .. } => Some(error),
            Corruption::SegmentGap { .. }
            | Corruption::SegmentMisaligned { .. }
            | Corruption::SegmentSize { .. }
            | Corruption::QueueOffset { .. }
            | Corruption::IndexFile { .. }
            | Corruption::TimerWheelSize { .. } => None,
        }
    }
}

impl<E> From<RecordError> for Error<E> {
    fn from(e: RecordError) -> Self {
        Error::Record(e)
    }
}

impl<E> From<Corruption> for Error<E> {
    fn from(c: Corruption) -> Self {
        Error::Corrupt(c)
    }
}

/// Lifts a media result into an engine result.
pub(crate) trait MediaResult<T, E> {
    fn media(self) -> Result<T, Error<E>>;
}

impl<T, E> MediaResult<T, E> for Result<T, E> {
    fn media(self) -> Result<T, Error<E>> {
        self.map_err(Error::Media)
    }
}
