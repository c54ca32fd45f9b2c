//! [`Spares`]: files made ahead of need for structures whose next segment's name is not
//! known in advance (a new consume queue, a queue's next file, the next index file, whose
//! name is the time it is made).
//!
//! Making a segment costs a `fallocate`, an `fdatasync` and a folder `fsync`. Those ran
//! inside dispatch, under the broker's store lock, every time a queue rolled or a new
//! topic's queue got its first entry. A background task now keeps a few zero-filled,
//! fully allocated, synced files of each size in `<store>/spare/`; a directory that needs
//! a segment of that size renames one into place (one metadata operation, no sync) and
//! notes its folder as dirty. The folder `fsync` that makes the new name durable is the
//! checkpoint's ([`Spares::sync_dirty`], outside the lock, before the checkpoint claims
//! anything in that file), since every queue and index entry is claimed durable only by
//! a checkpoint. A crash before it leaves the file under either name: under the spare
//! name it is deleted at the next open and the entries it held are re-dispatched from
//! the log, as for any entry past the checkpoint.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::directory::{make_segment_file, rename_no_replace, sync_dir};
use crate::error::{FsError, FsOp, StoreError};
use crate::locks::MutexExt;

/// Most spare files of one size kept (a burst of new queues takes them all; the task
/// refills).
pub const MAX_SPARES: usize = 16;

#[derive(Debug, Default)]
struct Inner {
    /// Ready files by length.
    ready: HashMap<u64, Vec<PathBuf>>,
    /// Folders a spare was renamed into since the last [`Spares::sync_dirty`].
    dirty: Vec<PathBuf>,
    /// Names handed out, so two makers never collide.
    next_id: u64,
}

/// The pool of spare segment files of a store; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Spares {
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

impl Spares {
    /// Opens the pool in `dir` (created if missing), deleting files left by an earlier run
    /// (they may be half made; making new ones is cheap).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, FsError::io(FsOp::Create, &e)))?;
        let entries =
            fs::read_dir(dir).map_err(|e| StoreError::io(dir, FsError::io(FsOp::Scan, &e)))?;
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
        Ok(Spares {
            dir: dir.to_path_buf(),
            inner: Arc::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.guard()
    }

    /// How many spares of `len` bytes are ready.
    pub fn ready(&self, len: u64) -> usize {
        self.lock().ready.get(&len).map_or(0, Vec::len)
    }

    /// Makes one spare of `len` bytes (blocking disk work: run it off the owner's lock).
    pub fn make(&self, len: u64) -> Result<(), FsError> {
        let id = {
            let mut inner = self.lock();
            inner.next_id += 1;
            inner.next_id
        };
        let name = format!("{len}-{id}");
        // Made the way every segment is (temp name, allocated, synced, renamed), so a
        // half-made spare never carries a spare's name.
        make_segment_file(&self.dir, &name, len)?;
        sync_dir(&self.dir)?;
        self.lock()
            .ready
            .entry(len)
            .or_default()
            .push(self.dir.join(name));
        Ok(())
    }

    /// Renames a spare of `len` bytes to `to` and opens it; `None` when none is ready or
    /// the rename fails (the caller makes the file itself). The folder of `to` is noted
    /// for [`Spares::sync_dirty`].
    pub(crate) fn take(&self, len: u64, to: &Path) -> Option<File> {
        let from = self.lock().ready.get_mut(&len)?.pop()?;
        // Never over an existing name: another maker may have just made the file.
        if let Err(e) = rename_no_replace(&from, to) {
            log::warn!("renaming spare {} to {}: {e}", from.display(), to.display());
            let _ = fs::remove_file(&from);
            return None;
        }
        let file = match File::options().read(true).write(true).open(to) {
            Ok(f) => f,
            Err(e) => {
                log::warn!("opening {}: {e}", to.display());
                return None;
            }
        };
        // The folder, and the two above it: a new queue's folders were made by
        // `create_dir_all`, which syncs nothing.
        let mut inner = self.lock();
        for folder in to.ancestors().skip(1).take(3) {
            if !inner.dirty.iter().any(|d| d == folder) {
                inner.dirty.push(folder.to_path_buf());
            }
        }
        Some(file)
    }

    /// fsyncs every folder a spare was renamed into since the last call, making those
    /// names durable. The checkpoint calls it, outside the lock, before it claims
    /// anything in those files. A folder that is gone (its queue deleted) is skipped.
    pub fn sync_dirty(&self) -> Result<(), FsError> {
        let dirty = std::mem::take(&mut self.lock().dirty);
        for (i, folder) in dirty.iter().enumerate() {
            match sync_dir(folder) {
                Ok(()) => {}
                Err(e) if e.kind == ErrorKind::NotFound => {}
                Err(e) => {
                    // Keep what is not synced yet for the next call.
                    self.lock().dirty.extend(dirty[i..].iter().cloned());
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::FileDirectory;
    use crate::mapped::Access;
    use tern_engine::media::Directory;

    #[test]
    fn a_directory_renames_a_ready_spare_into_place_and_its_folder_is_synced_later() {
        let tmp = tempfile::tempdir().unwrap();
        // Left by an earlier run: deleted at open.
        fs::create_dir_all(tmp.path().join("spare")).unwrap();
        fs::write(tmp.path().join("spare/4096-1"), b"half made").unwrap();
        let spares = Spares::open(&tmp.path().join("spare")).unwrap();
        assert_eq!(fs::read_dir(tmp.path().join("spare")).unwrap().count(), 0);
        spares.make(4096).unwrap();
        spares.make(4096).unwrap();
        assert_eq!(spares.ready(4096), 2);
        assert_eq!(spares.ready(8192), 0);

        let queue = tmp.path().join("consumequeue/T/0");
        let mut dir = FileDirectory::open(&queue, 20, Access::Sequential).unwrap();
        dir.use_spares(spares.clone());
        dir.create(0, 4096).unwrap();
        assert_eq!(spares.ready(4096), 1, "one spare taken");
        assert_eq!(fs::read_dir(tmp.path().join("spare")).unwrap().count(), 1);
        let made = queue.join("00000000000000000000");
        assert_eq!(fs::metadata(&made).unwrap().len(), 4096);
        // A size with no spare is made inline, as before.
        let mut other =
            FileDirectory::open(&tmp.path().join("q2"), 20, Access::Sequential).unwrap();
        other.use_spares(spares.clone());
        other.create(0, 8192).unwrap();
        assert_eq!(spares.ready(4096), 1);
        // The queue folder and the two above it wait for the checkpoint's sync.
        let dirty = spares.lock().dirty.clone();
        assert_eq!(dirty[0], queue);
        assert!(dirty.contains(&tmp.path().join("consumequeue")));
        spares.sync_dirty().unwrap();
        assert!(spares.lock().dirty.is_empty());
    }
}
