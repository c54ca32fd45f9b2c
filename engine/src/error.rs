//! Errors of the file layer.
//!
//! [`FsError`] is the media and directory error the engine carries inside its own errors,
//! so it must be `Copy` (the engine's error types are `Copy` and allocation-free): it keeps
//! the operation, the [`ErrorKind`] and the OS error number, but no path. The store-level
//! operations, which the broker calls directly, return [`StoreError`], which adds the path
//! so an operator can act on the message.

use std::fmt;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

/// The operation that failed, so a log line says what the store was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsOp {
    /// Opening an existing file.
    Open,
    /// Creating a file (a new segment, a temp file).
    Create,
    /// Reading bytes (from a mapping or a file).
    Read,
    /// Writing bytes (into a mapping or a file).
    Write,
    /// Making written bytes durable (msync, fdatasync, fsync of a directory).
    Flush,
    /// Mapping a file into memory.
    Map,
    /// Reserving a file's blocks (fallocate).
    Allocate,
    /// Changing a file's size.
    Resize,
    /// Renaming a temp file into place.
    Rename,
    /// Deleting a file.
    Remove,
    /// Listing a directory.
    Scan,
    /// Taking the store's lock.
    Lock,
    /// Asking the file system for its size and free space.
    Stat,
    /// Encoding or decoding a file's contents.
    Encode,
}

impl FsOp {
    /// The operation as a lower-case verb for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            FsOp::Open => "open",
            FsOp::Create => "create",
            FsOp::Read => "read",
            FsOp::Write => "write",
            FsOp::Flush => "flush",
            FsOp::Map => "map",
            FsOp::Allocate => "allocate",
            FsOp::Resize => "resize",
            FsOp::Rename => "rename",
            FsOp::Remove => "remove",
            FsOp::Scan => "scan",
            FsOp::Lock => "lock",
            FsOp::Stat => "stat",
            FsOp::Encode => "encode",
        }
    }
}

/// A failed file operation: small and `Copy` so the no_std engine can carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsError {
    /// What the store was doing.
    pub op: FsOp,
    /// The portable kind of the failure.
    pub kind: ErrorKind,
    /// The OS error number, when the OS reported one (ENOSPC is 28 on Linux).
    pub raw_os_error: Option<i32>,
}

impl FsError {
    /// An error of `op` from an I/O error.
    pub fn io(op: FsOp, error: &io::Error) -> Self {
        FsError {
            op,
            kind: error.kind(),
            raw_os_error: error.raw_os_error(),
        }
    }

    /// An error of `op` from an errno returned by rustix.
    pub fn errno(op: FsOp, errno: rustix::io::Errno) -> Self {
        FsError {
            op,
            kind: io::Error::from(errno).kind(),
            raw_os_error: Some(errno.raw_os_error()),
        }
    }

    /// An error of `op` that the OS did not report (bad arguments, a short file).
    pub fn new(op: FsOp, kind: ErrorKind) -> Self {
        FsError {
            op,
            kind,
            raw_os_error: None,
        }
    }

    /// True when the file system is full, so the broker can say "disk full" rather than
    /// a generic I/O error and stop accepting writes instead of retrying.
    pub fn is_no_space(&self) -> bool {
        self.raw_os_error == Some(rustix::io::Errno::NOSPC.raw_os_error())
            || self.kind == ErrorKind::StorageFull
    }

    /// The error as a `std::io::Error`, for callers that speak `io::Result`.
    pub fn to_io(self) -> io::Error {
        match self.raw_os_error {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::from(self.kind),
        }
    }
}

impl fmt::Display for FsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_no_space() {
            return write!(f, "{}: no space left on device", self.op.as_str());
        }
        match self.raw_os_error {
            Some(code) => write!(
                f,
                "{}: {}",
                self.op.as_str(),
                io::Error::from_raw_os_error(code)
            ),
            None => write!(f, "{}: {}", self.op.as_str(), self.kind),
        }
    }
}

impl std::error::Error for FsError {}

impl From<FsError> for io::Error {
    fn from(error: FsError) -> Self {
        error.to_io()
    }
}

/// A failed operation on the store directory, naming the file it concerned.
#[derive(Debug)]
pub enum StoreError {
    /// Another process (or another open in this one) holds the store's lock.
    Locked {
        /// The store's root directory.
        dir: PathBuf,
        /// The holder's pid as it wrote it into the lock file, if readable.
        holder_pid: Option<u32>,
    },
    /// A file operation failed.
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What failed.
        error: FsError,
    },
    /// A name or argument the store cannot use (a topic name that is not a plain file
    /// name, a negative queue id).
    Invalid {
        /// The file or directory concerned.
        path: PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },
}

impl StoreError {
    /// A file error about `path`.
    pub fn io(path: &Path, error: FsError) -> Self {
        StoreError::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    /// The file error inside, if this is one (to test [`FsError::is_no_space`]).
    pub fn fs_error(&self) -> Option<FsError> {
        match self {
            StoreError::Io { error, .. } => Some(*error),
            _ => None,
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Locked {
                dir,
                holder_pid: Some(pid),
            } => write!(
                f,
                "store {} is in use by another process (pid {pid})",
                dir.display()
            ),
            StoreError::Locked {
                dir,
                holder_pid: None,
            } => write!(f, "store {} is in use by another process", dir.display()),
            StoreError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            StoreError::Invalid { path, reason } => write!(f, "{}: {reason}", path.display()),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enospc_is_reported_as_no_space() {
        let error = FsError::io(
            FsOp::Write,
            &io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
        );
        assert!(error.is_no_space());
        assert_eq!(error.to_string(), "write: no space left on device");
    }

    #[test]
    fn other_errors_are_not_no_space_and_name_the_op() {
        let error = FsError::io(FsOp::Open, &io::Error::from_raw_os_error(2));
        assert!(!error.is_no_space());
        assert!(error.to_string().starts_with("open: "), "{error}");
        let bounds = FsError::new(FsOp::Read, ErrorKind::InvalidInput);
        assert_eq!(bounds.to_io().kind(), ErrorKind::InvalidInput);
    }

    #[test]
    fn locked_error_names_directory_and_pid() {
        let error = StoreError::Locked {
            dir: PathBuf::from("/data/store"),
            holder_pid: Some(42),
        };
        assert_eq!(
            error.to_string(),
            "store /data/store is in use by another process (pid 42)"
        );
    }
}
