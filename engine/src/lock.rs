//! [`StoreLock`]: an exclusive `flock` on `{root}/lock`, so two processes never open one
//! store (two writers on one mapped commit log would interleave records and corrupt it).
//!
//! `flock` belongs to the open file description, so the kernel drops it when the holder
//! exits, however it exits: there is no stale lock to clean up after a crash. The holder
//! writes its pid into the file so the second opener can say who holds the store. The file
//! is never deleted: unlinking it while another process waits to lock it would let both
//! "hold" the lock on two different files.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use rustix::fs::FlockOperation;

use crate::error::{FsError, FsOp, StoreError};

/// Longest pid text read back from a lock file (a pid is at most 10 digits).
const MAX_PID_TEXT: u64 = 32;

/// Extra attempts before a held lock is reported, and the wait between them.
///
/// Why retry at all: a process that spawns a child (`Command::spawn`) gives the child a
/// copy of every descriptor, the lock file's included, until the child's `exec` closes it
/// (`O_CLOEXEC`). A store closed and reopened in that window finds its own lock still
/// held by the not-yet-exec'd child. The window is microseconds; 20 × 5 ms covers it
/// with room while a real second holder is still reported within 0.1 s.
const LOCK_TRIES: u32 = 20;
const LOCK_RETRY_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

/// The held lock of one store; released on drop (or when the process dies).
#[derive(Debug)]
pub struct StoreLock {
    /// The locked file; closing it releases the lock.
    _file: File,
}

impl StoreLock {
    /// Takes the lock at `lock_path` for the store at `store_dir`, without waiting.
    ///
    /// Fails with [`StoreError::Locked`] naming `store_dir` and, if it could be read, the
    /// holder's pid, when another open (in this process or another) holds it.
    pub fn acquire(lock_path: &Path, store_dir: &Path) -> Result<Self, StoreError> {
        let io = |op, e: &std::io::Error| StoreError::io(lock_path, FsError::io(op, e));
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_path)
            .map_err(|e| io(FsOp::Open, &e))?;
        let mut tries = 0;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(e) if e == rustix::io::Errno::WOULDBLOCK && tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(LOCK_RETRY_WAIT);
                }
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    return Err(StoreError::Locked {
                        dir: store_dir.to_path_buf(),
                        holder_pid: read_pid(&mut file),
                    });
                }
                Err(e) => return Err(StoreError::io(lock_path, FsError::errno(FsOp::Lock, e))),
            }
        }
        let pid = rustix::process::getpid().as_raw_nonzero().get();
        file.set_len(0).map_err(|e| io(FsOp::Write, &e))?;
        file.seek(SeekFrom::Start(0))
            .and_then(|_| writeln!(file, "{pid}"))
            .map_err(|e| io(FsOp::Write, &e))?;
        Ok(StoreLock { _file: file })
    }
}

/// The pid the holder wrote into the lock file, if it is there and readable.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(MAX_PID_TEXT).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_fails_until_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let first = StoreLock::acquire(&path, dir.path()).unwrap();
        let Err(StoreError::Locked {
            dir: held,
            holder_pid,
        }) = StoreLock::acquire(&path, dir.path())
        else {
            panic!("second lock should fail");
        };
        assert_eq!(held, dir.path());
        assert_eq!(holder_pid, Some(std::process::id()));
        drop(first);
        StoreLock::acquire(&path, dir.path()).unwrap();
    }
}
