//! [`MappedFile`]: one segment file mapped into memory, the engine's [`Media`] on files.
//!
//! Why a mapping: readers hand stored records to sockets without copying
//! ([`Media::as_bytes`]), and writes are one copy into the page cache, with no system
//! call. A file synced after every few writes is better written with `pwrite`, its
//! mapping kept for reading ([`Writes::Through`]).
//!
//! Why preallocation: a segment is created at its full size with `fallocate`, so the
//! blocks exist before any record is written. No flush has to journal a size change, and
//! "disk full" is an error at segment creation rather than a SIGBUS on a page fault in
//! the middle of a write. On ext4 the blocks are *unwritten* extents, though: the first
//! writeback of each converts it, so a SYNC_FLUSH `fdatasync` that reaches new blocks
//! also writes the extent metadata. Under SYNC_FLUSH the broker writes zeros a window
//! ahead of the appender for that reason (`warmMapedFileEnable`; `populate_ahead` in its
//! `store/mapping`, and docs/perf/changes.md); filling whole segments up front would
//! cost a segment's size of disk writes before the first append.
//!
//! What a mapped file promises (the engine's [`Media`] contract, on Linux):
//! - a `write_at` is in the page cache when it returns, so every later read (in this
//!   process or another) sees it, and a process crash loses nothing written;
//! - `flush(range)` returns after `msync(MS_SYNC)` of the pages covering `range`, which on
//!   Linux writes them and waits like `fdatasync` of that range: they survive power loss;
//! - power loss may lose any page not flushed, and tears only at page granularity or
//!   finer (the device's sector size).

use std::fs::File;
use std::io::{ErrorKind, IoSlice};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Advice, MmapMut, MmapOptions, UncheckedAdvice};
use tern_engine::media::Media;

use crate::error::{FsError, FsOp};

/// How the engine will read a segment, passed to `madvise` so the kernel reads ahead
/// (or does not) accordingly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Access {
    /// No hint (the kernel's default read-ahead).
    #[default]
    Normal,
    /// Front to back: the commit log and consume queues (aggressive read-ahead, pages
    /// behind the reader are dropped early). Only where a file holds bytes when mapped:
    /// past its end such a file is written, not read (see [`Access::past_the_end`]), and
    /// a queue's last file not at all once the store is open ([`Advised::Whole`]).
    Sequential,
    /// Scattered: the hash index (no read-ahead, which would only pollute the cache).
    Random,
}

impl Access {
    /// The hint for the part of a file past its written end, which the owner fills
    /// front to back (through the mapping, or with `pwrite` and read back through it):
    /// no read-ahead there for a file read front to back ([`Access::Random`]), the same
    /// hint for the others.
    ///
    /// Why: a fault in a mapping advised `Sequential` (or not advised) reads ahead, and
    /// read-ahead fills the page cache with large folios (up to 2 MiB, Linux 6.16+ on
    /// ext4). A write through a mapping dirties the whole folio holding it, so every
    /// fdatasync of the log's tail wrote back megabytes for the few kilobytes appended
    /// since the last one: a SYNC_FLUSH run (64 senders, 1 KiB) wrote ~10 GB to the disk
    /// for ~0.15 GB of messages. Without read-ahead a fault brings in one page, and a
    /// sync writes the pages appended to.
    pub fn past_the_end(self) -> Access {
        match self {
            Access::Sequential => Access::Random,
            other => other,
        }
    }

    fn advice(self) -> Option<Advice> {
        match self {
            Access::Normal => None,
            Access::Sequential => Some(Advice::Sequential),
            Access::Random => Some(Advice::Random),
        }
    }
}

/// How much of a mapping [`MappedFile::appending_from`] advises as written, not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advised {
    /// From the page holding the end: the part below it keeps its read-ahead. Costs a
    /// second map area (the kernel splits a mapping where its advice changes): the log's,
    /// one tail a store, where that costs one area. (Recovery's scan, the reason for the
    /// read-ahead, runs before the tails are advised; pulls read with `pread`.)
    FromEnd,
    /// All of it, as for a file made while running. For queues: a store holds tens of
    /// thousands, and split in two at their end each would take two of the process's
    /// map areas (`vm.max_map_count`, 65,530 by default) instead of one.
    Whole,
}

/// How the owner's writes reach a [`MappedFile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Writes {
    /// Copied into the mapping ([`Media::as_bytes_mut`]): no system call per write.
    #[default]
    Mapped,
    /// With `pwrite` into the page cache; the mapping is for reading only.
    ///
    /// Why: writeback of a page mapped writable must write-protect it first
    /// (`folio_mkclean`), a TLB-shootdown IPI per page whenever another of the process's
    /// threads runs on another core, and the next write into the page faults again
    /// (`page_mkwrite`). Under SYNC_FLUSH every group-commit round writes back the
    /// pages appended since the last one, so the log's pages went through that cycle
    /// once a round: in a SYNC_FLUSH profile at 64 senders, TLB shootdowns were the
    /// largest cost the mode adds to the broker's. Written through the file, pages are
    /// mapped read-only (by the readers that fault them in) or not at all, and
    /// writeback needs no shootdown. In an A/B of SYNC_FLUSH sync sends (`tern-bench`,
    /// six alternated rounds): ~8× fewer TLB shootdowns a run, 16 senders +14% and 64
    /// senders +19% (medians), for a `pwritev` a record. Where writes are rarely
    /// synced (ASYNC_FLUSH) the mapping stays cheaper: no system call a write, and
    /// pages leave it before their writeback instead.
    Through,
}

/// A file mapped read-write, shared with the page cache.
#[derive(Debug)]
pub struct MappedFile {
    /// Kept open for fallocate, ftruncate and fdatasync, and so the mapping's file
    /// stays the one we opened even if the name is replaced. Shared with readers that
    /// `pread` published bytes without the owner's lock (`reader`).
    file: Arc<File>,
    /// The whole file, `len` bytes.
    map: MmapMut,
    /// The file's size when mapped; the mapping's length.
    len: u64,
    /// The hint re-applied after every remap.
    access: Access,
    /// How writes reach the file.
    writes: Writes,
}

impl MappedFile {
    /// Maps an existing file at its current size.
    pub fn open(path: &Path, access: Access) -> Result<Self, FsError> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| FsError::io(FsOp::Open, &e))?;
        Self::from_file(file, access)
    }

    /// Maps an open read-write file at its current size.
    pub fn from_file(file: File, access: Access) -> Result<Self, FsError> {
        let len = file
            .metadata()
            .map_err(|e| FsError::io(FsOp::Open, &e))?
            .len();
        let map = map_file(&file, len, access)?;
        Ok(MappedFile {
            file: Arc::new(file),
            map,
            len,
            access,
            writes: Writes::Mapped,
        })
    }

    /// Sets how writes reach the file from now on.
    pub fn set_writes(&mut self, writes: Writes) {
        self.writes = writes;
    }

    /// The open file, for callers that need its metadata.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, shared: for syncing or reading it without the owner's lock.
    pub fn shared_file(&self) -> Arc<File> {
        self.file.clone()
    }

    /// The mapped bytes, writable whatever the write mode (the engine reaches them
    /// through [`Media::as_bytes_mut`], which honours it; this is for tools and tests).
    /// Under [`Writes::Through`] the mapping stays mapped read-write: that the owner
    /// writes it only with `pwrite` is this type's rule, not the page tables'.
    pub fn as_mut_bytes(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Drops this process's page-table entries for the whole pages inside `range`
    /// (`madvise(MADV_DONTNEED)`), so they stop counting in its resident set. The bytes
    /// stay in the page cache and in the file: a later access through the mapping (or a
    /// `pread`) sees them unchanged. For ranges nothing will write again, such as the
    /// commit log below its dispatched offset; released before their writeback, pages
    /// need no write-protecting then (no TLB shootdown per page). A hint: a kernel that
    /// refuses it keeps the pages mapped, and nothing else changes.
    pub fn release(&self, range: Range<u64>) {
        let page = rustix::param::page_size() as u64;
        let start = range.start.div_ceil(page) * page;
        let end = range.end.min(self.len) / page * page;
        if start >= end {
            return;
        }
        // SAFETY: the mapping is shared with the file (`map_file`), so MADV_DONTNEED
        // discards no data: a dirty page's state passes to the page cache, and the next
        // access faults the file's same bytes back in. A reference into the range that
        // is alive meanwhile therefore reads what it read before. The range is inside
        // the mapping: `end` is at most its length.
        let advised = unsafe {
            self.map.unchecked_advise_range(
                UncheckedAdvice::DontNeed,
                start as usize,
                (end - start) as usize,
            )
        };
        if let Err(e) = advised {
            log::debug!("madvise(DONTNEED) refused: {e}");
        }
    }

    /// Advises the mapping as a file's part past its written end
    /// ([`Access::past_the_end`]) from the page holding `offset`, or the whole mapping
    /// (see [`Advised`]): for the file a log or queue ends in when the store opens, mapped
    /// with the hint for reading what it holds.
    ///
    /// The pages after the one holding `offset` then leave the mapping and the page
    /// cache: after a crash, recovery's cut read the rest of the file through the
    /// mapping, and its read-ahead left large folios there that every sync would write
    /// back whole until the appends passed them (up to a segment). They are clean then
    /// (the cut syncs what it zeroes); a dirty one stays, and nothing changes but its
    /// folio's size. Hints: a kernel that refuses one leaves things as they were.
    pub fn appending_from(&self, offset: u64, advised: Advised) {
        let page = rustix::param::page_size() as u64;
        let start = match advised {
            Advised::FromEnd => offset / page * page,
            Advised::Whole => 0,
        };
        let (Some(advice), true) = (self.access.past_the_end().advice(), start < self.len) else {
            return;
        };
        // Inside the mapping: `start` is below its length.
        let advised = self
            .map
            .advise_range(advice, start as usize, (self.len - start) as usize);
        if let Err(e) = advised {
            log::debug!("madvise({advice:?}) refused: {e}");
        }
        let next = offset.div_ceil(page) * page;
        self.release(next..self.len);
        if let Some(len) = std::num::NonZeroU64::new(self.len.saturating_sub(next)) {
            // Unmapped just above, so the kernel may drop the clean ones.
            let dropped =
                rustix::fs::fadvise(&*self.file, next, Some(len), rustix::fs::Advice::DontNeed);
            if let Err(e) = dropped {
                log::debug!("fadvise(DONTNEED) refused: {e}");
            }
        }
    }

    /// Readies the pages holding `range` for the writes that will fill them. Mapped
    /// ([`Writes::Mapped`]): maps them writable (`madvise(MADV_POPULATE_WRITE)`, Linux
    /// 5.14), so the faults, and the filesystem's `page_mkwrite` for each page, are
    /// taken here in one call instead of one exception per page inside the appends.
    /// Through the file ([`Writes::Through`]): writes their zeros with `pwrite` (the
    /// mapping stays read-only). No byte changes either way, but the pages become
    /// dirty: the next sync of the file writes them back, as zeros if nothing wrote
    /// them first. An error (`InvalidInput` from a kernel without the advice) leaves
    /// the pages to fault in when written, as before.
    ///
    /// Only for bytes past what the owner has written: they must still be zero (a
    /// segment is made zero-filled, and a cut zeroes what it removes). Through the file,
    /// the zeros start at the first whole page at or after `range.start`, so a start
    /// inside a written page never zeroes what the page holds.
    pub fn populate(&self, range: Range<u64>) -> std::io::Result<()> {
        let page = rustix::param::page_size() as u64;
        let start = match self.writes {
            Writes::Mapped => range.start / page * page,
            Writes::Through => range.start.div_ceil(page) * page,
        };
        let end = range.end.min(self.len);
        if start >= end {
            return Ok(());
        }
        if self.writes == Writes::Through {
            static ZEROS: [u8; 16 << 10] = [0; 16 << 10];
            let mut at = start;
            // Bounded: each turn writes a chunk or returns.
            while at < end {
                let n = (end - at).min(ZEROS.len() as u64) as usize;
                write_through(&self.file, at, &mut [IoSlice::new(&ZEROS[..n])])?;
                at += n as u64;
            }
            return Ok(());
        }
        // Inside the mapping: `end` is at most its length (the kernel rounds the length
        // up to the page, which the mapping covers).
        self.map.advise_range(
            Advice::PopulateWrite,
            start as usize,
            (end - start) as usize,
        )
    }

    /// Checks that `offset..offset + len` lies inside the file and returns it as a
    /// `usize` range.
    fn span(&self, op: FsOp, offset: u64, len: usize) -> Result<Range<usize>, FsError> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= self.len)
            .ok_or(FsError::new(op, ErrorKind::InvalidInput))?;
        // Both fit in usize: they are at most `self.len`, which is the mapping's length.
        Ok(offset as usize..end as usize)
    }
}

impl Media for MappedFile {
    type Error = FsError;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let span = self.span(FsOp::Read, offset, buf.len())?;
        buf.copy_from_slice(&self.map[span]);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let span = self.span(FsOp::Write, offset, data.len())?;
        match self.writes {
            Writes::Mapped => self.map[span].copy_from_slice(data),
            Writes::Through => write_through(&self.file, offset, &mut [IoSlice::new(data)])?,
        }
        Ok(())
    }

    fn write_pieces(&mut self, offset: u64, pieces: &[&[u8]]) -> Result<(), FsError> {
        let total = pieces.iter().map(|p| p.len()).sum();
        self.span(FsOp::Write, offset, total)?;
        if self.writes == Writes::Mapped {
            let mut at = offset as usize;
            for piece in pieces {
                self.map[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            return Ok(());
        }
        // A record is six pieces (`RECORD_PIECES`); more go in several calls.
        const MAX: usize = 8;
        let mut at = offset;
        for group in pieces.chunks(MAX) {
            let mut slices = [IoSlice::new(&[]); MAX];
            for (slot, piece) in slices.iter_mut().zip(group) {
                *slot = IoSlice::new(piece);
            }
            write_through(&self.file, at, &mut slices[..group.len()])?;
            at += group.iter().map(|p| p.len() as u64).sum::<u64>();
        }
        Ok(())
    }

    fn flush(&mut self, range: Range<u64>) -> Result<(), FsError> {
        if range.start > range.end || range.end > self.len {
            return Err(FsError::new(FsOp::Flush, ErrorKind::InvalidInput));
        }
        if range.is_empty() {
            return Ok(());
        }
        // memmap2 widens the range to whole pages and calls msync(MS_SYNC), which on
        // Linux syncs the file's range (`vfs_fsync_range`): bytes written with `pwrite`
        // (`Writes::Through`) as well as through the mapping.
        self.map
            .flush_range(range.start as usize, (range.end - range.start) as usize)
            .map_err(|e| FsError::io(FsOp::Flush, &e))
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn set_len(&mut self, len: u64) -> Result<(), FsError> {
        if len == self.len {
            return Ok(());
        }
        if len < self.len {
            // Map the shorter region first and drop the old mapping before truncating, so
            // no mapping ever covers pages past the file's end (touching them would fault).
            self.map = map_file(&self.file, len, self.access)?;
            self.len = len;
            rustix::fs::ftruncate(&self.file, len).map_err(|e| FsError::errno(FsOp::Resize, e))?;
        } else {
            allocate(&self.file, len)?;
        }
        // The new size is metadata: make it durable now, so a segment never comes back
        // from a crash at its old size while the engine believes the new one.
        rustix::fs::fdatasync(&self.file).map_err(|e| FsError::errno(FsOp::Flush, e))?;
        if len > self.len {
            self.map = map_file(&self.file, len, self.access)?;
            self.len = len;
        }
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        Some(&self.map)
    }

    /// The commit log encodes records straight into the mapping: one copy from the
    /// request body to the page cache. None when writes go through the file
    /// ([`Writes::Through`]): the engine then writes a record's pieces at once
    /// ([`Media::write_pieces`]).
    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self.writes {
            Writes::Mapped => Some(&mut self.map),
            Writes::Through => None,
        }
    }
}

/// Writes all of `bufs` at `offset` with `pwritev`, resuming after a short write.
fn write_through(file: &File, offset: u64, mut bufs: &mut [IoSlice<'_>]) -> Result<(), FsError> {
    let mut at = offset;
    let mut left: usize = bufs.iter().map(|b| b.len()).sum();
    // Bounded: each turn writes at least one byte or returns.
    while left > 0 {
        match rustix::io::pwritev(file, bufs, at) {
            Ok(0) => return Err(FsError::new(FsOp::Write, ErrorKind::WriteZero)),
            Ok(n) => {
                at += n as u64;
                left -= n;
                IoSlice::advance_slices(&mut bufs, n);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(FsError::errno(FsOp::Write, e)),
        }
    }
    Ok(())
}

/// Creates (or empties) `temp` for reading and writing: the temporary name a new file is
/// made under before it is synced and renamed into place.
pub(crate) fn create_temp(temp: &Path) -> Result<File, FsError> {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp)
        .map_err(|e| FsError::io(FsOp::Create, &e))
}

/// Reserves the blocks of `file` up to `len` bytes and sets its size to at least `len`.
///
/// Falls back to `ftruncate` (a sparse file) where the file system does not support
/// `fallocate` (tmpfs on old kernels, some network file systems): correctness is the same,
/// only the "disk full is found at creation" property is lost.
pub(crate) fn allocate(file: &File, len: u64) -> Result<(), FsError> {
    if len == 0 {
        return Ok(());
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::NOSYS => {
            rustix::fs::ftruncate(file, len).map_err(|e| FsError::errno(FsOp::Resize, e))
        }
        Err(e) => Err(FsError::errno(FsOp::Allocate, e)),
    }
}

/// Maps `len` bytes of `file` and applies the access hint.
fn map_file(file: &File, len: u64, access: Access) -> Result<MmapMut, FsError> {
    let len = usize::try_from(len).map_err(|_| FsError::new(FsOp::Map, ErrorKind::FileTooLarge))?;
    // SAFETY: the mapping is shared with the file, so it is undefined behaviour only if
    // another party truncates or rewrites the file behind it. Segment files live in a store
    // directory held under an exclusive `flock` (see `lock.rs`), so no other Tern process
    // opens them; this process changes a segment's size only through `set_len`, which drops
    // the old mapping before shrinking. Its own `pwrite`s (`Writes::Through`) change bytes
    // under the mapping as writes through it would: the owner's writes (`&mut self`), or
    // zeros over bytes past the end that are zero already (`populate`), which no reader
    // holds. Writes by other tools are outside what the store supports, as with
    // RocketMQ's mapped files.
    let map = unsafe { MmapOptions::new().len(len).map_mut(file) }
        .map_err(|e| FsError::io(FsOp::Map, &e))?;
    if let Some(advice) = access.advice() {
        // A hint only: a kernel that refuses it serves the mapping all the same.
        if let Err(e) = map.advise(advice) {
            log::debug!("madvise({advice:?}) refused: {e}");
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests;
