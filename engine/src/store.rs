//! [`StoreDir`]: a store directory opened for one process: its folders made, its lock
//! held, its abort marker set, and its checkpoint file mapped for the engine.
//!
//! The abort marker is how the next open learns the last one did not close cleanly
//! (crash, `kill -9`, power loss), which decides between the quick and the full recovery.
//! It is made durable before the store is used, so power loss cannot lose it, and removed
//! only by [`StoreDir::close`].

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::Path;

use crate::directory::{FileDirectory, INDEX_NAME_DIGITS, OFFSET_NAME_DIGITS, sync_dir};
use crate::disk::{DiskUsage, disk_usage};
use crate::error::{FsError, FsOp, StoreError};
use crate::layout::StoreLayout;
use crate::lock::StoreLock;
use crate::mapped::{Access, MappedFile, allocate, create_temp};

/// Size of the checkpoint file (RocketMQ's `StoreCheckpoint` maps one OS page).
pub const CHECKPOINT_LEN: usize = 4096;

/// An open store directory. Dropping it without [`StoreDir::close`] releases the lock but
/// leaves the abort marker, as a crash would.
#[derive(Debug)]
pub struct StoreDir {
    /// Where everything is.
    layout: StoreLayout,
    /// Held for as long as the store is open.
    _lock: StoreLock,
    /// Whether the abort marker was already there at open.
    abort_existed: bool,
}

impl StoreDir {
    /// Opens (creating if needed) the store at `root`: makes its folders, takes its lock,
    /// and creates the abort marker holding our pid.
    ///
    /// Fails with [`StoreError::Locked`] if another open holds the store.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        let layout = StoreLayout::new(root);
        layout.create_dirs()?;
        let lock = StoreLock::acquire(&layout.lock_path(), root)?;
        let abort = layout.abort_path();
        let abort_existed = abort.exists();
        if abort_existed {
            log::warn!(
                "{}: found, the store was not closed cleanly",
                abort.display()
            );
        }
        write_abort(&abort)?;
        sync_dir(root).map_err(|e| StoreError::io(root, e))?;
        Ok(StoreDir {
            layout,
            _lock: lock,
            abort_existed,
        })
    }

    /// Where each part of the store lives.
    pub fn layout(&self) -> &StoreLayout {
        &self.layout
    }

    /// True when the abort marker was present at open: the last open did not close
    /// cleanly, and the engine must run its full recovery.
    pub fn abort_existed(&self) -> bool {
        self.abort_existed
    }

    /// The commit log's segments (20-digit names, sequential access).
    pub fn commitlog(&self) -> Result<FileDirectory, StoreError> {
        FileDirectory::open(
            &self.layout.commitlog_dir(),
            OFFSET_NAME_DIGITS,
            Access::Sequential,
        )
    }

    /// One consume queue's segments (20-digit names, sequential access); its folder is
    /// created if missing.
    pub fn consume_queue(&self, topic: &str, queue_id: u32) -> Result<FileDirectory, StoreError> {
        open_queue_dir(&self.layout, topic, queue_id)
    }

    /// The hash index's files (17-digit time-stamp names, random access).
    pub fn index(&self) -> Result<FileDirectory, StoreError> {
        FileDirectory::open(&self.layout.index_dir(), INDEX_NAME_DIGITS, Access::Random)
    }

    /// Every consume queue on disk as `(topic, queue_id)`, sorted.
    pub fn list_queues(&self) -> Result<Vec<(String, u32)>, StoreError> {
        self.layout.list_queues()
    }

    /// Usage of the file system holding the store.
    pub fn disk_usage(&self) -> Result<DiskUsage, StoreError> {
        disk_usage(self.layout.root())
    }

    /// The checkpoint file, mapped: the engine reads and writes its checkpoint through it
    /// (`tern_engine::checkpoint::Checkpoint::read/write`), as RocketMQ maps its
    /// `StoreCheckpoint`.
    ///
    /// A missing file is created at [`CHECKPOINT_LEN`] bytes, zero-filled (no checkpoint
    /// yet). A file of any other size was not written by us whole: it is replaced by a
    /// fresh page, with a warning, and the engine then recovers from the log's start,
    /// which is slow but safe. Each write is one page rewritten in place and flushed; the
    /// engine's layout carries a CRC, so a write torn by power loss reads as no checkpoint.
    pub fn checkpoint_media(&self) -> Result<MappedFile, StoreError> {
        let path = self.layout.checkpoint_path();
        let err = |op, e: &std::io::Error| StoreError::io(&path, FsError::io(op, e));
        let file = match File::options().read(true).write(true).open(&path) {
            Ok(file) => {
                let len = file.metadata().map_err(|e| err(FsOp::Read, &e))?.len();
                if len == CHECKPOINT_LEN as u64 {
                    file
                } else {
                    log::warn!(
                        "{}: {len} bytes instead of {CHECKPOINT_LEN}, replaced",
                        path.display()
                    );
                    create_checkpoint(&path, self.layout.root())?
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                create_checkpoint(&path, self.layout.root())?
            }
            Err(e) => return Err(err(FsOp::Open, &e)),
        };
        MappedFile::from_file(file, Access::Random).map_err(|e| StoreError::io(&path, e))
    }

    /// Closes the store cleanly: removes the abort marker (durably), then releases the
    /// lock. Call only after everything is flushed and the checkpoint written.
    pub fn close(self) -> Result<(), StoreError> {
        self.remove_abort()
    }

    /// Removes the abort marker (durably) but keeps the lock: for a store sealed in place.
    pub fn remove_abort(&self) -> Result<(), StoreError> {
        let abort = self.layout.abort_path();
        match fs::remove_file(&abort) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&abort, FsError::io(FsOp::Remove, &e))),
        }
        let root = self.layout.root();
        sync_dir(root).map_err(|e| StoreError::io(root, e))
    }
}

/// One consume queue's segments under `layout` (20-digit names, sequential access); its
/// folder is created if missing. Shared by [`StoreDir::consume_queue`] and the queue table
/// of `FsStore`, which creates queues while the store is open.
pub(crate) fn open_queue_dir(
    layout: &StoreLayout,
    topic: &str,
    queue_id: u32,
) -> Result<FileDirectory, StoreError> {
    let dir = layout.queue_dir(topic, queue_id)?;
    FileDirectory::open(&dir, OFFSET_NAME_DIGITS, Access::Sequential)
}

/// Writes the abort marker with our pid and makes its content durable.
fn write_abort(path: &Path) -> Result<(), StoreError> {
    let err = |op, e: &std::io::Error| StoreError::io(path, FsError::io(op, e));
    let mut file = File::create(path).map_err(|e| err(FsOp::Create, &e))?;
    writeln!(file, "{}", std::process::id()).map_err(|e| err(FsOp::Write, &e))?;
    file.sync_all().map_err(|e| err(FsOp::Flush, &e))
}

/// Creates the checkpoint file at its full size, zero-filled, under a temp name first so
/// a crash never leaves a short checkpoint.
fn create_checkpoint(path: &Path, root: &Path) -> Result<File, StoreError> {
    create_zeroed(path, root, CHECKPOINT_LEN as u64)
}

/// Maps the file at `path` for random access, first creating it as `len` zero bytes
/// ([`create_zeroed`], in `dir`) when it does not exist.
pub(crate) fn open_or_create_mapped(
    path: &Path,
    dir: &Path,
    len: u64,
) -> Result<MappedFile, StoreError> {
    let file = match File::options().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => create_zeroed(path, dir, len)?,
        Err(e) => return Err(StoreError::io(path, FsError::io(FsOp::Open, &e))),
    };
    MappedFile::from_file(file, Access::Random).map_err(|e| StoreError::io(path, e))
}

/// Creates `path` as `len` zero bytes, durably: written under a temporary name, synced,
/// renamed into place, its folder `dir` synced.
pub(crate) fn create_zeroed(path: &Path, dir: &Path, len: u64) -> Result<File, StoreError> {
    let temp = path.with_extension("tmp");
    let err = |op, e: &std::io::Error| StoreError::io(&temp, FsError::io(op, e));
    let file = create_temp(&temp).map_err(|e| StoreError::io(&temp, e))?;
    allocate(&file, len).map_err(|e| StoreError::io(&temp, e))?;
    file.sync_all().map_err(|e| err(FsOp::Flush, &e))?;
    fs::rename(&temp, path).map_err(|e| err(FsOp::Rename, &e))?;
    sync_dir(dir).map_err(|e| StoreError::io(dir, e))?;
    Ok(file)
}
