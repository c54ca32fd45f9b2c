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
    /// The read itself failed.
    Io(FsError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Gone => f.write_str("no segment holds it (deleted by retention?)"),
            ReadError::OutOfRange => f.write_str("range crosses a segment's end"),
            ReadError::Io(e) => e.fmt(f),
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
        self.files.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The file of the segment at `base`, if it is open.
    pub fn file(&self, base: u64) -> Option<Arc<File>> {
        let files = self.files.read().unwrap_or_else(|p| p.into_inner());
        files.get(&base).cloned()
    }

    /// Whether no segment is open.
    pub fn is_empty(&self) -> bool {
        self.files
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Every open segment as `(base, file)`, ascending, from `from_base` on.
    pub fn files_from(&self, from_base: u64) -> Vec<(u64, Arc<File>)> {
        let files = self.files.read().unwrap_or_else(|p| p.into_inner());
        files
            .range(from_base..)
            .map(|(&b, f)| (b, f.clone()))
            .collect()
    }

    /// Reads `buf.len()` bytes at `offset` of a structure whose segments are
    /// `segment_size` bytes; the range must lie in one segment.
    pub fn read_exact_at(
        &self,
        segment_size: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ReadError> {
        let base = offset - offset % segment_size;
        let within = offset - base;
        if within + buf.len() as u64 > segment_size {
            return Err(ReadError::OutOfRange);
        }
        self.read_in(base, within, buf)
    }

    /// Reads `buf.len()` bytes at `at` within the segment at `base` (for structures whose
    /// segments are named by something other than their offset, like index files).
    pub fn read_in(&self, base: u64, at: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let file = self.file(base).ok_or(ReadError::Gone)?;
        file.read_exact_at(buf, at).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                ReadError::OutOfRange
            } else {
                ReadError::Io(FsError::io(FsOp::Read, &e))
            }
        })
    }
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
}
