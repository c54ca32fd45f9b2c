//! The commit log's mapping around its end: pages behind reput leave it in chunks, so
//! their writeback needs no write-protect and TLB shootdown per page; pages ahead of the
//! appender are mapped writable before it gets there, so an append copies into mapped
//! pages instead of taking a fault on each. Under SYNC_FLUSH the log is written with
//! `pwrite` instead (`Writes::Through`: a round a burst of sends would write-protect
//! the pages appended to, one shootdown a page), and what goes ahead of the appender is
//! zeros written the same way (with `warmMapedFileEnable`), so appends land in blocks
//! already written, whose sync writes no metadata.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tern_engine_fs::fs_store::FsStore;

use super::StoreService;
use crate::config::FlushDiskType;

/// Bytes of log behind reput gathered before their pages leave the mapping
/// ([`StoreService::release_behind`]): 64 pages per `madvise` (one TLB shootdown), a
/// short hold of the lock.
pub(super) const RELEASE_CHUNK: u64 = 256 << 10;

/// The most of the log past its end kept mapped writable
/// ([`StoreService::populate_ahead`]): about 3 ms of appends at 300 MB/s.
const POPULATE_AHEAD: u64 = 1 << 20;

/// The window past the end is this fraction of what the last flush round synced, so the
/// populated pages a flush finds not yet appended to (and writes out as zeros) stay a
/// small part of what it writes.
const POPULATE_SHARE: u64 = 8;

/// The least [`StoreService::populate_ahead`] populates at once: 64 KiB, tens of
/// microseconds of the store lock (256 KiB at a time did no better in an A/B).
const POPULATE_CHUNK: u64 = 64 << 10;

/// The most one call populates, so a pass after a roll or a start holds the lock no
/// longer than a few chunks.
const POPULATE_PER_PASS: u64 = 4 * POPULATE_CHUNK;

impl StoreService {
    /// Drops the commit-log mapping's page-table entries for the whole pages below
    /// `upto` (at most the dispatched offset) not dropped yet, once at least `chunk`
    /// bytes of them gathered. Called under the store lock (`s`), which keeps the
    /// mapping in place.
    ///
    /// Why: writeback of a page mapped writable must write-protect it first
    /// (`folio_mkclean`), and with the broker's threads on every core that is a
    /// TLB-shootdown IPI per page, costly under a hypervisor: in batch sends it was the
    /// broker's largest cost (16% of its CPU). Unmapped before its flush, a page is
    /// written back without one, and one `madvise` covers many pages. Only the writer
    /// (through the mapping under ASYNC_FLUSH; with `pwrite` under SYNC_FLUSH, whose
    /// pages are mapped only by reput's reads) and reput touch the mapping (readers
    /// `pread` through the page cache), and both are past these pages, so nothing
    /// faults them back in; the bytes stay in the page cache and the file. It also
    /// keeps the resident set to the pages near the log's end (a device's memory, the
    /// edge gateway).
    pub(super) fn release_behind(&self, s: &FsStore, upto: u64, chunk: u64) {
        if let Some(pages) = self.unreleased(upto, chunk) {
            s.engine()
                .log()
                .regions(pages.start, pages.end, &mut |m, r| m.release(r));
            self.released.store(pages.end, Ordering::Release);
        }
    }

    /// Maps the commit log's pages just past its end writable, so appends copy into
    /// mapped pages instead of faulting on each; under SYNC_FLUSH, where the log is
    /// written with `pwrite` (`Writes::Through`), writes their zeros that way instead
    /// (`MappedFile::populate`). Called after each reput pass; takes the store lock
    /// (which keeps the mapping in place) when pages are due.
    ///
    /// Why: a write into a page not mapped yet is a page fault, and on ext4 a
    /// `page_mkwrite` that maps the preallocated block, taken by the appender inside the
    /// request while it holds the store lock: in batch sends a fifth of the broker's CPU.
    /// `MADV_POPULATE_WRITE` does the same work for many pages in one call, here, between
    /// appends (in a profile of batch sends 15% of the broker's samples, where the faults
    /// were 21%): the lock is still held for it, the requests no longer wait on it.
    ///
    /// The cost: a populated page is dirty, so a sync of the segment before the
    /// appender reaches it writes it out as zeros (and, through the mapping, the
    /// appender faults on it again).
    /// Under ASYNC_FLUSH the window is an eighth of what the last flush round synced, at
    /// most [`POPULATE_AHEAD`]: below 1 MB/s of appends (with the default 500 ms
    /// `flushIntervalCommitLog`) nothing is populated, above it the zeros written stay
    /// a small share of the log's writes.
    ///
    /// Under SYNC_FLUSH that cost is the point (unless `warmMapedFileEnable=false`), and
    /// the window is always [`POPULATE_AHEAD`]: the next round writes the populated
    /// zeros, which turns the blocks ahead from preallocated ("unwritten" on ext4 and
    /// XFS) into written, a chunk at a time. A round that syncs appends into unwritten
    /// blocks must also write the extent metadata and the inode (1.7 more writes a
    /// round, measured, beside the data and the cache flush); into written blocks it
    /// writes the data alone. In an A/B of SYNC_FLUSH sync sends (through the mapping
    /// then), 5 rounds: 1 sender +16%, 4 senders +26% (broker CPU per message -10% and
    /// -13%), 16 senders +5%, 64 senders unchanged. The log being written through the
    /// file under SYNC_FLUSH, the zeros go the same way (`MappedFile::populate`): no
    /// page is mapped writable. The price: each log byte is written twice (zeros
    /// first), which the edge gateway's flash does not pay (its default is `false`).
    pub(super) fn populate_ahead(&self) {
        // A look without the lock first: most passes find nothing due.
        if self
            .window(self.written.load(Ordering::Acquire))
            .next()
            .is_none()
        {
            return;
        }
        let s = self.lock();
        let held = Instant::now();
        let log = s.engine().log();
        let Some(span) = self.window(log.max_offset()).next() else {
            return;
        };
        let mut mapped = false;
        log.regions(span.start, span.end, &mut |m, r| {
            // A hint: a page it could not ready is written (or faults in) when appended
            // to, as before.
            if let Err(e) = m.populate(r) {
                log::debug!("readying the log's pages ahead failed: {e}");
            }
            mapped = true;
        });
        // The segment holding the end may not be made yet (the log ends on its
        // boundary): nothing was populated, so nothing is noted.
        if mapped {
            self.populated.store(span.end, Ordering::Release);
        }
        drop(s);
        super::note_slow_hold("populating the log ahead", held);
    }

    /// The populated window as it stands with the log ending at `end`.
    fn window(&self, end: u64) -> Window {
        Window {
            populated: self.populated.load(Ordering::Acquire),
            end,
            ahead: ahead(
                self.flush_type,
                self.warm_ahead,
                self.last_flush_bytes.load(Ordering::Acquire),
            ),
            segment: self.geometry.log_segment_size,
            page: rustix::param::page_size() as u64,
        }
    }

    /// The whole pages below `upto` and the dispatched offset still mapped, when they
    /// are at least `chunk` bytes ([`Self::release_behind`]).
    pub(super) fn unreleased(&self, upto: u64, chunk: u64) -> Option<Range<u64>> {
        let page = rustix::param::page_size() as u64;
        let upto = upto.min(self.dispatched.load(Ordering::Acquire)) / page * page;
        let from = self
            .released
            .load(Ordering::Acquire)
            .max(self.log_min.load(Ordering::Acquire));
        (upto > from && upto - from >= chunk).then_some(from..upto)
    }
}

/// How far past the end [`StoreService::populate_ahead`] keeps pages populated, the last
/// flush round having synced `last_flush_bytes`: a share of that under ASYNC_FLUSH; under
/// SYNC_FLUSH the whole window when `warm` (`warmMapedFileEnable`: its rounds are spared
/// the blocks' conversion), else none (every populated page would be written as zeros
/// first).
fn ahead(flush: FlushDiskType, warm: bool, last_flush_bytes: u64) -> u64 {
    match flush {
        FlushDiskType::Sync if warm => POPULATE_AHEAD,
        FlushDiskType::Sync => 0,
        FlushDiskType::Async => (last_flush_bytes / POPULATE_SHARE).min(POPULATE_AHEAD),
    }
}

/// Where the pages [`StoreService::populate_ahead`] keeps mapped stand.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// Log offset below which pages were populated (moved back to the end by a cut).
    populated: u64,
    /// The log's end.
    end: u64,
    /// How far past the end to keep populated.
    ahead: u64,
    /// The segment size.
    segment: u64,
    /// The page size.
    page: u64,
}

impl Window {
    /// The log bytes to populate next, once at least [`POPULATE_CHUNK`] of them are due:
    /// the whole pages after the one holding the end (the appender has that one mapped)
    /// from `populated` on, up to `ahead` past the end, not past the segment holding it
    /// (the next one is not mapped yet) and at most [`POPULATE_PER_PASS`].
    fn next(self) -> Option<Range<u64>> {
        let from = self.populated.max(self.end.div_ceil(self.page) * self.page);
        let segment_end = self.end - self.end % self.segment + self.segment;
        let to = self
            .end
            .saturating_add(self.ahead)
            .min(segment_end)
            .min(from.saturating_add(POPULATE_PER_PASS))
            / self.page
            * self.page;
        (to > from && to - from >= POPULATE_CHUNK).then_some(from..to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;
    const SEGMENT: u64 = 64 << 20;

    fn window(populated: u64, end: u64) -> Window {
        Window {
            populated,
            end,
            ahead: POPULATE_AHEAD,
            segment: SEGMENT,
            page: PAGE,
        }
    }

    #[test]
    fn the_window_past_the_end_is_populated_a_few_chunks_at_a_time() {
        // A fresh log: from the page after the end's, a pass's worth.
        assert_eq!(window(0, 100).next(), Some(PAGE..PAGE + POPULATE_PER_PASS));
        // Passes go on until the window is full.
        let full = (100 + POPULATE_AHEAD) / PAGE * PAGE;
        assert_eq!(
            window(full - POPULATE_CHUNK, 100).next(),
            Some(full - POPULATE_CHUNK..full)
        );
        // Full, and less than a chunk used since: nothing; a chunk: just the new pages.
        assert_eq!(window(full, 100).next(), None);
        assert_eq!(window(full, 100 + POPULATE_CHUNK / 2).next(), None);
        let end = 100 + POPULATE_CHUNK;
        assert_eq!(
            window(full, end).next(),
            Some(full..(end + POPULATE_AHEAD) / PAGE * PAGE)
        );
    }

    #[test]
    fn the_window_follows_the_share_of_the_last_flush() {
        // Slow appends: a window under a chunk populates nothing.
        let slow = Window {
            ahead: POPULATE_CHUNK - 1,
            ..window(0, 0)
        };
        assert_eq!(slow.next(), None);
        // A window that shrank below what is populated: nothing more, nothing again.
        let shrunk = Window {
            ahead: POPULATE_CHUNK,
            ..window(POPULATE_AHEAD, 0)
        };
        assert_eq!(shrunk.next(), None);
    }

    #[test]
    fn sync_flush_keeps_the_whole_window_however_little_was_flushed() {
        // ASYNC_FLUSH: none after a quiet round, a share after a busy one, capped;
        // `warmMapedFileEnable` does not change it.
        for warm in [true, false] {
            assert_eq!(ahead(FlushDiskType::Async, warm, 0), 0);
            assert_eq!(ahead(FlushDiskType::Async, warm, 8 << 20), POPULATE_AHEAD);
            assert_eq!(ahead(FlushDiskType::Async, warm, 64 << 20), POPULATE_AHEAD);
            assert_eq!(
                ahead(FlushDiskType::Async, warm, 1 << 20),
                (1 << 20) / POPULATE_SHARE
            );
        }
        // SYNC_FLUSH: its rounds sync a few kilobytes; the window does not follow them.
        assert_eq!(ahead(FlushDiskType::Sync, true, 0), POPULATE_AHEAD);
        assert_eq!(ahead(FlushDiskType::Sync, true, 20 << 10), POPULATE_AHEAD);
        // Unless told not to write ahead: then nothing, as before.
        assert_eq!(ahead(FlushDiskType::Sync, false, 20 << 10), 0);
    }

    #[test]
    fn the_window_stops_at_the_segment() {
        // Near the segment's end: up to it, not into the next (not mapped yet).
        let end = SEGMENT - POPULATE_CHUNK * 2;
        assert_eq!(window(0, end).next(), Some(end..SEGMENT));
        // Ending on the boundary: the next segment's window (it may not exist; the
        // caller then notes nothing).
        assert_eq!(
            window(SEGMENT, SEGMENT).next(),
            Some(SEGMENT..SEGMENT + POPULATE_PER_PASS)
        );
    }
}
