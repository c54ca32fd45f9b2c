//! [`FileDirectory`]: the segments of one segmented structure as files in one folder.
//!
//! A segment is named by its base offset in decimal, zero-padded to a fixed width, as
//! RocketMQ names them (`UtilAll.offset2FileName`): 20 digits for the commit log and the
//! consume queues, 17 for index files, whose "base" is a `yyyyMMddHHmmssSSS` stamp.
//! Zero-padding makes the names sort as the bases do, which is what operators expect
//! when they list the folder.
//!
//! A new segment is created under a temp name, preallocated, synced and only then renamed
//! into place (and the folder synced), so a crash never leaves a segment of the wrong size
//! under a real name; a stale temp file found at [`Directory::scan`] is deleted.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_engine::media::Directory;

use crate::error::{FsError, FsOp, StoreError};
use crate::locks::MutexExt;
use crate::mapped::{Access, MappedFile, Writes, allocate, create_temp};
use crate::prealloc::{NextSegment, Taken};
use crate::reader::SegmentFiles;
use crate::spare::Spares;

/// Suffix of a segment being created (`<name>.<n>.tmp`); such a file is never a segment.
const TEMP_SUFFIX: &str = ".tmp";

/// Numbers temp files, so two makers of one segment never share one.
static TEMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Widest name a base can have: `u64::MAX` has 20 decimal digits.
pub const MAX_NAME_DIGITS: u8 = 20;

/// Name width of commit-log and consume-queue segments (RocketMQ's).
pub const OFFSET_NAME_DIGITS: u8 = 20;

/// Name width of index files (`yyyyMMddHHmmssSSS`).
pub const INDEX_NAME_DIGITS: u8 = 17;

/// The segments of one folder, open and mapped, keyed by base offset.
#[derive(Debug)]
pub struct FileDirectory {
    /// The folder holding the segment files.
    path: PathBuf,
    /// Width of a segment's name.
    digits: u8,
    /// The access hint for the segments present at open; new ones get its
    /// [`Access::past_the_end`].
    access: Access,
    /// How the owner's writes reach every segment ([`FileDirectory::set_writes`]).
    writes: Writes,
    /// The open segments. Filled by `scan` and `create`.
    segments: BTreeMap<u64, MappedFile>,
    /// The same segments' files, shared with readers that do not hold the owner's lock.
    files: SegmentFiles,
    /// Segments made ahead of need by a background task, when the owner set one up
    /// ([`FileDirectory::prepare_ahead`]).
    next: Option<Arc<NextSegment>>,
    /// Where removed segments wait to be deleted, when the owner deletes them later
    /// ([`FileDirectory::remove_later`]).
    later: Option<Reclaim>,
    /// Files made ahead, renamed into place by `create` when one of the right size is
    /// ready ([`FileDirectory::use_spares`]).
    spares: Option<Spares>,
}

/// Segments removed from their directories but not yet unmapped, unlinked and synced:
/// the owner runs [`Reclaim::run`] outside its lock, so retention's file work (a 1 GiB
/// unmap and unlink, a folder fsync) holds nobody up. A crash before it runs leaves
/// the files in place; they are whole older segments, opened again at the next start
/// and deleted by the next retention pass.
#[derive(Debug, Clone, Default)]
pub struct Reclaim {
    pending: Arc<std::sync::Mutex<Vec<Removed>>>,
}

/// A removed segment: its path and, while still mapped, its media.
type Removed = (PathBuf, Option<MappedFile>);

impl Reclaim {
    fn push(&self, path: PathBuf, media: Option<MappedFile>) {
        let mut pending = self.pending.guard();
        pending.push((path, media));
    }

    /// Unmaps and deletes every segment removed since the last run, then syncs their
    /// folders. Returns how many files went.
    pub fn run(&self) -> Result<usize, FsError> {
        let pending = std::mem::take(&mut *self.pending.guard());
        let count = pending.len();
        let mut folders: Vec<PathBuf> = Vec::new();
        for (path, media) in pending {
            drop(media);
            remove_if_present(&path)?;
            if let Some(parent) = path.parent() {
                if !folders.iter().any(|f| f == parent) {
                    folders.push(parent.to_path_buf());
                }
            }
        }
        for folder in folders {
            sync_dir(&folder)?;
        }
        Ok(count)
    }
}

impl FileDirectory {
    /// Opens the folder at `path`, creating it (and its parents) if missing. Segments are
    /// opened by the first [`Directory::scan`].
    ///
    /// `digits` is the width of segment names (1 to 20: [`OFFSET_NAME_DIGITS`] or
    /// [`INDEX_NAME_DIGITS`]).
    pub fn open(path: &Path, digits: u8, access: Access) -> Result<Self, StoreError> {
        if digits == 0 || digits > MAX_NAME_DIGITS {
            return Err(StoreError::Invalid {
                path: path.to_path_buf(),
                reason: "segment names must have 1 to 20 digits",
            });
        }
        fs::create_dir_all(path)
            .map_err(|e| StoreError::io(path, FsError::io(FsOp::Create, &e)))?;
        Ok(FileDirectory {
            path: path.to_path_buf(),
            digits,
            access,
            writes: Writes::Mapped,
            segments: BTreeMap::new(),
            files: SegmentFiles::default(),
            next: None,
            later: None,
            spares: None,
        })
    }

    /// New segments come from `spares` when one of the right size is ready (see
    /// [`Spares`]); the folder sync that makes the new name durable is then the owner's
    /// (`Spares::sync_dirty`, before a checkpoint claims anything in the file).
    pub fn use_spares(&mut self, spares: Spares) {
        self.spares = Some(spares);
    }

    /// Removed segments go to `reclaim` instead of being deleted at once (see
    /// [`Reclaim`]).
    pub fn remove_later(&mut self, reclaim: Reclaim) {
        self.later = Some(reclaim);
    }

    /// Sets how writes reach the segments open now and those opened or made later (see
    /// [`Writes`]).
    pub fn set_writes(&mut self, writes: Writes) {
        self.writes = writes;
        for media in self.segments.values_mut() {
            media.set_writes(writes);
        }
    }

    /// Takes `media` in as the segment at `base`, written the directory's way.
    fn insert(&mut self, base: u64, mut media: MappedFile) {
        media.set_writes(self.writes);
        self.files.insert(base, media.shared_file());
        self.segments.insert(base, media);
    }

    /// The segments' files, for reading without the owner's lock (see [`SegmentFiles`]).
    pub fn files(&self) -> SegmentFiles {
        self.files.clone()
    }

    /// Lets a background task make segments ahead of need: `create` adopts a segment the
    /// returned hand-off holds (see [`NextSegment`]), and [`FileDirectory::prepare`]
    /// fills it.
    pub fn prepare_ahead(&mut self) -> Arc<NextSegment> {
        self.next.get_or_insert_with(Default::default).clone()
    }

    /// Makes the segment at `base` of `len` bytes now (the disk work: temp file,
    /// fallocate, fdatasync, rename, folder fsync), asks the kernel to cache its first
    /// `warm_bytes` (the first appends then find their pages), and offers it through
    /// `next` for `create` to adopt. Runs on the preparing task, never under the owner's
    /// lock; the folder and width are this directory's, so it takes what it needs, not
    /// `self`.
    ///
    /// `generation` is [`NextSegment::generation`] as read before the log's end that
    /// `base` was picked from: after a truncation moved the end back, a base picked from
    /// the old end is not made (or is removed again).
    pub fn prepare(
        path: &Path,
        digits: u8,
        (next, generation): (&NextSegment, u64),
        (base, len): (u64, u64),
        warm_bytes: u64,
    ) -> Result<(), FsError> {
        let Some(name) = segment_name(base, digits) else {
            return Err(FsError::new(FsOp::Create, ErrorKind::InvalidInput));
        };
        let make = || {
            let file = make_segment_file(path, &name, len)?;
            sync_dir(path)?;
            if let Some(n) = std::num::NonZeroU64::new(warm_bytes.min(len)) {
                // A hint only: appends fault the pages in themselves.
                let _ = rustix::fs::fadvise(&file, 0, Some(n), rustix::fs::Advice::WillNeed);
            }
            Ok(file)
        };
        let unmake = || {
            if let Err(e) = remove_segment_file(&path.join(&name)) {
                log::warn!("{}: removing stale segment {name}: {e}", path.display());
            }
        };
        next.prepare(generation, (base, len), make, unmake)
    }

    /// Removes every file of `path` named as a segment (at `digits`) with a base past
    /// `last`, then syncs the folder: after a truncation, segments made ahead of the old
    /// end, which the next open would find past a gap. Returns how many went.
    pub fn remove_past(path: &Path, digits: u8, last: u64) -> Result<usize, FsError> {
        let mut removed = 0;
        let entries = fs::read_dir(path).map_err(|e| FsError::io(FsOp::Scan, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| FsError::io(FsOp::Scan, &e))?;
            let name = entry.file_name();
            let Some(base) = name.to_str().and_then(|n| parse_segment_name(n, digits)) else {
                continue;
            };
            if base > last {
                remove_if_present(&entry.path())?;
                removed += 1;
            }
        }
        if removed > 0 {
            sync_dir(path)?;
        }
        Ok(removed)
    }

    /// The folder holding the segments.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Width of a segment's name.
    pub fn digits(&self) -> u8 {
        self.digits
    }

    /// The bases of the open segments, ascending.
    pub fn bases(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.keys().copied()
    }

    /// The file name of the segment at `base`, or `None` if `base` does not fit the width.
    pub fn segment_name(&self, base: u64) -> Option<String> {
        segment_name(base, self.digits)
    }

    /// The path of the segment at `base`, or `None` if `base` does not fit the width.
    pub fn segment_path(&self, base: u64) -> Option<PathBuf> {
        self.segment_name(base).map(|name| self.path.join(name))
    }

    /// Reads the folder: deletes stale temp files, warns about names that are not
    /// segments, and returns the bases found, ascending.
    fn list(&self) -> Result<Vec<u64>, FsError> {
        let mut bases = Vec::new();
        let entries = fs::read_dir(&self.path).map_err(|e| FsError::io(FsOp::Scan, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| FsError::io(FsOp::Scan, &e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                log::warn!(
                    "{}: ignoring {:?}, not a segment name",
                    self.path.display(),
                    entry.file_name()
                );
                continue;
            };
            if let Some(stem) = name.strip_suffix(TEMP_SUFFIX) {
                // `<name>.<n>`, or `<name>` as earlier versions named them.
                let stem = stem.split_once('.').map_or(stem, |(name, _)| name);
                if parse_segment_name(stem, self.digits).is_some() {
                    log::warn!(
                        "{}: deleting {name}, a segment whose creation was interrupted",
                        self.path.display()
                    );
                    fs::remove_file(entry.path()).map_err(|e| FsError::io(FsOp::Remove, &e))?;
                    continue;
                }
            }
            match parse_segment_name(name, self.digits) {
                Some(base) if entry.file_type().is_ok_and(|t| t.is_file()) => bases.push(base),
                _ => log::warn!(
                    "{}: ignoring {name}, not a segment of {} digits",
                    self.path.display(),
                    self.digits
                ),
            }
        }
        bases.sort_unstable();
        Ok(bases)
    }

    /// Makes the folder's entries (created, renamed, removed names) durable.
    fn sync(&self) -> Result<(), FsError> {
        sync_dir(&self.path)
    }
}

impl Directory for FileDirectory {
    type Media = MappedFile;
    type Error = FsError;

    /// Opens every segment present on disk that is not open yet, forgets the ones whose
    /// file has gone, and reports them all in ascending order.
    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), FsError> {
        let bases = self.list()?;
        self.segments
            .retain(|base, _| bases.binary_search(base).is_ok());
        self.files.retain(|base| bases.binary_search(&base).is_ok());
        for &base in &bases {
            if self.segments.contains_key(&base) {
                continue;
            }
            // `list` only returns names that `parse_segment_name` accepted at this width.
            let Some(path) = self.segment_path(base) else {
                continue;
            };
            let media = MappedFile::open(&path, self.access)?;
            self.insert(base, media);
        }
        for &base in &bases {
            f(base);
        }
        Ok(())
    }

    /// Makes (or takes a prepared or spare file for) the segment at `base`. It lies
    /// wholly past the end, so its mapping gets the hint for that
    /// ([`Access::past_the_end`]).
    fn create(&mut self, base: u64, len: u64) -> Result<(), FsError> {
        let Some(name) = self.segment_name(base) else {
            return Err(FsError::new(FsOp::Create, ErrorKind::InvalidInput));
        };
        if self.segments.contains_key(&base) {
            return Err(FsError::new(FsOp::Create, ErrorKind::AlreadyExists));
        }
        let path = self.path.join(&name);
        let prepared = match self.next.as_deref().map(|n| n.take(base, len)) {
            Some(Taken::Ready(file)) => Some(file),
            // A file under the final name that this directory has not opened can only be
            // one a preparing task made (every other is opened by `scan`): fresh, full
            // size, durable. Adopt it when its size is right.
            _ if self.next.is_some() && path.exists() => Some(adopt(&path, len)?),
            _ => None,
        };
        let file = match prepared {
            Some(file) => file,
            None => {
                if path.exists() {
                    return Err(FsError::new(FsOp::Create, ErrorKind::AlreadyExists));
                }
                if let Some(file) = self.spares.as_ref().and_then(|s| s.take(len, &path)) {
                    let media = MappedFile::from_file(file, self.access.past_the_end())?;
                    self.insert(base, media);
                    return Ok(());
                }
                match make_segment_file(&self.path, &name, len) {
                    Ok(file) => {
                        self.sync()?;
                        file
                    }
                    // The preparing task renamed its file into place while this one was
                    // made (it looked before the log got here): take the task's.
                    Err(e) if e.kind == ErrorKind::AlreadyExists && self.next.is_some() => {
                        adopt(&path, len)?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let media = MappedFile::from_file(file, self.access.past_the_end())?;
        self.insert(base, media);
        Ok(())
    }

    fn media(&self, base: u64) -> Option<&MappedFile> {
        self.segments.get(&base)
    }

    fn media_mut(&mut self, base: u64) -> Option<&mut MappedFile> {
        self.segments.get_mut(&base)
    }

    fn remove(&mut self, base: u64) -> Result<(), FsError> {
        // Only the oldest segment's deletion waits (retention's). A segment cut from the
        // end (recovery, a replica's truncation) may be made again at the same base at
        // once, so its file must be gone now.
        let oldest = self.segments.keys().next() == Some(&base);
        // Readers holding the file keep reading what it held.
        let media = self.segments.remove(&base);
        self.files.remove(base);
        let Some(path) = self.segment_path(base) else {
            return Ok(());
        };
        if let (Some(later), true) = (&self.later, oldest) {
            // Unmapping, unlinking and syncing the folder wait for the owner's
            // `Reclaim::run`, outside its lock.
            later.push(path, media);
            return Ok(());
        }
        // Unmap first: the pages must not be reachable once the name is gone.
        drop(media);
        remove_segment_file(&path)
    }
}

/// Opens the segment file at `path` that a preparing task made (fresh, full size,
/// durable), refusing one of another size.
fn adopt(path: &Path, len: u64) -> Result<File, FsError> {
    let file = File::options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| FsError::io(FsOp::Open, &e))?;
    let size = file
        .metadata()
        .map_err(|e| FsError::io(FsOp::Open, &e))?
        .len();
    if size != len {
        return Err(FsError::new(FsOp::Create, ErrorKind::AlreadyExists));
    }
    Ok(file)
}

/// Deletes a segment file and syncs its folder.
fn remove_segment_file(path: &Path) -> Result<(), FsError> {
    remove_if_present(path)?;
    path.parent().map_or(Ok(()), sync_dir)
}

/// Deletes a file; one already gone is fine.
fn remove_if_present(path: &Path) -> Result<(), FsError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FsError::io(FsOp::Remove, &e)),
    }
}

/// Makes a segment file `name` of `len` bytes in `dir`: under a temp name, preallocated
/// and synced, then renamed into place (the caller syncs the folder). A failure leaves
/// no half-made file behind (ENOSPC in fallocate, typically).
pub(crate) fn make_segment_file(dir: &Path, name: &str, len: u64) -> Result<File, FsError> {
    let path = dir.join(name);
    // Unique per maker: the log (inline) and the preparing task may make the same
    // segment at once, and must not write, truncate or rename each other's temp file.
    let n = TEMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = dir.join(format!("{name}.{n}{TEMP_SUFFIX}"));
    let file = create_temp(&temp)?;
    let ready = allocate(&file, len)
        .and_then(|()| rustix::fs::fdatasync(&file).map_err(|e| FsError::errno(FsOp::Flush, e)))
        .and_then(|()| rename_no_replace(&temp, &path));
    if let Err(error) = ready {
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    Ok(file)
}

/// Renames `from` to `to` unless `to` exists (then `AlreadyExists`, and `from` stays).
///
/// A segment is made by a task of its own while appends go on ([`NextSegment`]): when the
/// log rolls into a segment before that task makes it, the append makes it inline, and
/// the task's rename must then fail rather than put an empty file in the place of the
/// segment being written (whose records a restart would then not find).
pub(crate) fn rename_no_replace(from: &Path, to: &Path) -> Result<(), FsError> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // A file system without RENAME_NOREPLACE: a hard link fails on an existing name
        // too.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            fs::hard_link(from, to).map_err(|e| FsError::io(FsOp::Rename, &e))?;
            fs::remove_file(from).map_err(|e| FsError::io(FsOp::Rename, &e))
        }
        Err(e) => Err(FsError::errno(FsOp::Rename, e)),
    }
}

/// The name of the segment at `base`: `base` in decimal, zero-padded to `digits`.
/// `None` when `base` needs more digits than that.
pub fn segment_name(base: u64, digits: u8) -> Option<String> {
    let name = format!("{base:0width$}", width = usize::from(digits));
    (name.len() == usize::from(digits)).then_some(name)
}

/// The base of a segment named `name`, if it is exactly `digits` decimal digits that fit
/// a `u64`.
pub fn parse_segment_name(name: &str, digits: u8) -> Option<u64> {
    if name.len() != usize::from(digits) || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// fsyncs a folder so the names created, renamed or removed in it survive power loss.
pub(crate) fn sync_dir(path: &Path) -> Result<(), FsError> {
    let dir = File::open(path).map_err(|e| FsError::io(FsOp::Open, &e))?;
    rustix::fs::fsync(&dir).map_err(|e| FsError::errno(FsOp::Flush, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_zero_padded_to_the_width() {
        assert_eq!(
            segment_name(1_073_741_824, 20).as_deref(),
            Some("00000000001073741824")
        );
        assert_eq!(
            segment_name(20_240_101_120_000_000, 17).as_deref(),
            Some("20240101120000000")
        );
        assert_eq!(
            segment_name(u64::MAX, 20).as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(segment_name(100_000_000_000_000_000, 17), None);
    }

    #[test]
    fn only_exact_width_decimal_names_parse() {
        assert_eq!(
            parse_segment_name("00000000000006000000", 20),
            Some(6_000_000)
        );
        assert_eq!(parse_segment_name("0000000000000600000", 20), None);
        assert_eq!(parse_segment_name("0000000000000600000x", 20), None);
        assert_eq!(parse_segment_name("+0000000000000600000", 20), None);
        assert_eq!(parse_segment_name("99999999999999999999", 20), None);
    }
}
