//! Reading a segmented structure without its owner's lock.
//!
//! A broker appends under one lock, but pulls, queries, replication and the edge
//! forwarder only read bytes that are already published (below a watermark the owner
//! moves after each write). [`SegmentFiles`] is the part of a [`FileDirectory`] they need
//! for that: the open file of each segment, shared. The directory adds a file when it
//! creates or scans a segment and drops it when it removes one; a reader looks the file
//! up (a map lookup under a short lock, never held across IO) and reads with `pread`.
//!
//! Why `pread` and not the mapping: the writer holds the mapping mutably, so a second
//! reference into it from another thread would alias it; a second mapping would add an
//! `unsafe` block and, on CPUs whose caches alias virtual addresses, coherence questions.
//! `pread` copies from the page cache the mapping writes into (Linux keeps one page
//! cache per file), which is the same one copy a pull makes today, and it fails with an
//! error, never a fault, if the file changed under it.
//!
//! A file removed by retention stays readable through an `Arc` a reader already took: the
//! bytes it returns are the record that was there, and the next lookup finds nothing.
//!
//! [`FileDirectory`]: crate::FileDirectory

use std::collections::BTreeMap;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, RwLock};

use crate::error::{FsError, FsOp};
use crate::locks::RwLockExt;

/// The open files of one structure's segments, keyed by base offset; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SegmentFiles {
    files: Arc<RwLock<BTreeMap<u64, Arc<File>>>>,
}

/// Why a read outside the owner's lock found no bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// No segment holds the offset: deleted by retention, or not created.
    Gone,
    /// The range crosses a segment's end (the caller's offsets are wrong or rotted).
    OutOfRange,
    /// A [`ReadMode::Cached`] read would have waited for the disk: some of the bytes
    /// are not in the page cache. Read again with [`ReadMode::Wait`], off the caller's
    /// executor thread.
    WouldBlock,
    /// The read itself failed.
    Io(FsError),
}

/// Whether a read may wait for the disk.
///
/// A reader on an async executor thread that meets cold pages blocks that thread for
/// the disk's time, and every task queued on it waits too: with two executor threads,
/// two cold pulls stop every sender. Such a reader tries [`ReadMode::Cached`] first
/// (`preadv2` with `RWF_NOWAIT`: page-cache hits only) and moves the read to a blocking
/// thread only when it gets [`ReadError::WouldBlock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Answer from the page cache or fail with [`ReadError::WouldBlock`].
    Cached,
    /// Wait for the disk if need be (on a thread that may block).
    Wait,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Gone => f.write_str("no segment holds it (deleted by retention?)"),
            ReadError::OutOfRange => f.write_str("range crosses a segment's end"),
            ReadError::WouldBlock => f.write_str("not in the page cache"),
            ReadError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReadError::Io(e) => Some(e),
            ReadError::Gone | ReadError::OutOfRange | ReadError::WouldBlock => None,
        }
    }
}

impl SegmentFiles {
    pub(crate) fn insert(&self, base: u64, file: Arc<File>) {
        self.write().insert(base, file);
    }

    pub(crate) fn remove(&self, base: u64) {
        self.write().remove(&base);
    }

    pub(crate) fn retain(&self, keep: impl Fn(u64) -> bool) {
        self.write().retain(|&base, _| keep(base));
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<u64, Arc<File>>> {
        // The map is consistent between operations (each is one insert or remove).
        self.files.write_guard()
    }

    /// The file of the segment at `base`, if it is open.
    pub fn file(&self, base: u64) -> Option<Arc<File>> {
        let files = self.files.read_guard();
        files.get(&base).cloned()
    }

    /// Whether no segment is open.
    pub fn is_empty(&self) -> bool {
        self.files.read_guard().is_empty()
    }

    /// Every open segment as `(base, file)`, ascending, from `from_base` on.
    pub fn files_from(&self, from_base: u64) -> Vec<(u64, Arc<File>)> {
        let files = self.files.read_guard();
        files
            .range(from_base..)
            .map(|(&b, f)| (b, f.clone()))
            .collect()
    }

    /// Reads `buf.len()` bytes at `offset` of a structure whose segments are
    /// `segment_size` bytes; the range must lie in one segment. May wait for the disk.
    pub fn read_exact_at(
        &self,
        segment_size: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ReadError> {
        self.read_exact_at_mode(segment_size, offset, buf, ReadMode::Wait)
    }

    /// [`SegmentFiles::read_exact_at`], waiting for the disk only if `mode` allows.
    pub fn read_exact_at_mode(
        &self,
        segment_size: u64,
        offset: u64,
        buf: &mut [u8],
        mode: ReadMode,
    ) -> Result<(), ReadError> {
        let base = offset - offset % segment_size;
        let within = offset - base;
        if within + buf.len() as u64 > segment_size {
            return Err(ReadError::OutOfRange);
        }
        self.read_in_mode(base, within, buf, mode)
    }

    /// Reads `buf.len()` bytes at `at` within the segment at `base` (for structures whose
    /// segments are named by something other than their offset, like index files).
    pub fn read_in(&self, base: u64, at: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.read_in_mode(base, at, buf, ReadMode::Wait)
    }

    /// [`SegmentFiles::read_in`], waiting for the disk only if `mode` allows.
    pub fn read_in_mode(
        &self,
        base: u64,
        at: u64,
        buf: &mut [u8],
        mode: ReadMode,
    ) -> Result<(), ReadError> {
        let file = self.file(base).ok_or(ReadError::Gone)?;
        let filled = match mode {
            ReadMode::Wait => 0,
            ReadMode::Cached => read_cached(&file, at, buf)?,
        };
        if filled == buf.len() {
            return Ok(());
        }
        file.read_exact_at(&mut buf[filled..], at + filled as u64)
            .map_err(|e| {
                if e.kind() == ErrorKind::UnexpectedEof {
                    ReadError::OutOfRange
                } else {
                    ReadError::Io(FsError::io(FsOp::Read, &e))
                }
            })
    }
}

/// Copies what the page cache holds of `buf.len()` bytes at `at`, without waiting for
/// the disk: the bytes filled (all of them, or [`ReadError::WouldBlock`]). A file system
/// without `RWF_NOWAIT` for buffered reads answers "not supported": 0, so the caller
/// reads the usual way (and may wait, as before this existed).
fn read_cached(file: &File, at: u64, buf: &mut [u8]) -> Result<usize, ReadError> {
    use rustix::io::{Errno, ReadWriteFlags};
    let mut filled = 0;
    // Each pass copies at least one byte or ends the loop: at most `buf.len()` passes.
    while filled < buf.len() {
        let mut bufs = [std::io::IoSliceMut::new(&mut buf[filled..])];
        match rustix::io::preadv2(file, &mut bufs, at + filled as u64, ReadWriteFlags::NOWAIT) {
            // End of file: the blocking read reports it.
            Ok(0) => return Ok(filled),
            Ok(n) => filled += n,
            Err(Errno::AGAIN) => return Err(ReadError::WouldBlock),
            Err(Errno::INTR) => {}
            Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => return Ok(filled),
            Err(e) => {
                return Err(ReadError::Io(FsError::io(
                    FsOp::Read,
                    &std::io::Error::from(e),
                )));
            }
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_go_to_the_segment_holding_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let files = SegmentFiles::default();
        for base in [0u64, 16] {
            let path = dir.path().join(base.to_string());
            std::fs::write(&path, [base as u8; 16]).unwrap();
            files.insert(base, Arc::new(File::open(&path).unwrap()));
        }
        let mut buf = [0u8; 4];
        files.read_exact_at(16, 20, &mut buf).unwrap();
        assert_eq!(buf, [16; 4]);
        assert_eq!(
            files.read_exact_at(16, 14, &mut buf),
            Err(ReadError::OutOfRange)
        );
        files.remove(0);
        assert_eq!(files.read_exact_at(16, 0, &mut buf), Err(ReadError::Gone));
        assert_eq!(files.files_from(0).len(), 1);
    }

    #[test]
    fn a_cached_read_of_cold_pages_would_block_and_a_waiting_one_reads_them() {
        // Where /tmp is tmpfs its pages are never cold: then only the bytes are checked.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0");
        let bytes: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let files = SegmentFiles::default();
        files.insert(0, Arc::new(file.try_clone().unwrap()));
        let mut buf = vec![0u8; 64 << 10];
        let at = 512 << 10;
        // Resident (just written): answered from the cache.
        files
            .read_in_mode(0, at, &mut buf, ReadMode::Cached)
            .unwrap();
        assert_eq!(buf, bytes[at as usize..][..buf.len()]);
        file.sync_all().unwrap();
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        buf.fill(0);
        let on_tmpfs = rustix::fs::fstatfs(&file).unwrap().f_type == 0x0102_1994;
        match files.read_in_mode(0, at, &mut buf, ReadMode::Cached) {
            Err(ReadError::WouldBlock) => {}
            other => assert!(on_tmpfs, "a cold read answered {other:?} without waiting"),
        }
        files.read_in_mode(0, at, &mut buf, ReadMode::Wait).unwrap();
        assert_eq!(buf, bytes[at as usize..][..buf.len()]);
    }
}
