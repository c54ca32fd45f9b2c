//! The commit log's mapping around its end: pages behind reput leave it in chunks, so
//! their writeback needs no write-protect and TLB shootdown per page; pages ahead of the
//! appender are mapped writable before it gets there, so an append takes no page fault.

use std::ops::Range;
use std::sync::atomic::Ordering;

use tern_engine_fs::fs_store::FsStore;

use super::StoreService;
use crate::config::FlushDiskType;

/// Bytes of log behind reput gathered before their pages leave the mapping
/// ([`StoreService::release_behind`]): 64 pages per `madvise` (one TLB shootdown), a
/// short hold of the lock.
pub(super) const RELEASE_CHUNK: u64 = 256 << 10;

/// How far past the log end its pages are kept mapped writable
/// ([`StoreService::populate_ahead`]): about 3 ms of appends at 300 MB/s.
const POPULATE_AHEAD: u64 = 1 << 20;

/// The least [`StoreService::populate_ahead`] populates at once: 16 pages, tens of
/// microseconds of the store lock (256 KiB at a time did no better in an A/B).
const POPULATE_CHUNK: u64 = 64 << 10;

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
    /// and reput touch the mapping (readers `pread` through the page cache), and both
    /// are past these pages, so nothing faults them back in; the bytes stay in the page
    /// cache and the file. It also keeps the resident set to the pages near the log's
    /// end (a device's memory, the edge gateway).
    pub(super) fn release_behind(&self, s: &FsStore, upto: u64, chunk: u64) {
        if let Some(pages) = self.unreleased(upto, chunk) {
            s.engine()
                .log()
                .regions(pages.start, pages.end, &mut |m, r| m.release(r));
            self.released.store(pages.end, Ordering::Release);
        }
    }

    /// Maps the commit log's pages up to [`POPULATE_AHEAD`] past its end writable, so
    /// appends copy into mapped pages instead of faulting on each. Called from reput
    /// under the store lock (`s`), which keeps the mapping in place.
    ///
    /// Why: a write into a page not mapped yet is a page fault, and on ext4 a
    /// `page_mkwrite` that maps the preallocated block, taken by the appender while it
    /// holds the store lock: in batch sends a fifth of the broker's CPU, all of it on the
    /// request's path. `MADV_POPULATE_WRITE` does the same work for many pages in one
    /// call, here, between appends (in a profile of batch sends 15% of the broker's
    /// samples, where the faults were 21%).
    ///
    /// Not under SYNC_FLUSH: its fdatasync of the segment, several a millisecond, would
    /// write every populated page out as zeros before the appender reached it. Under
    /// ASYNC_FLUSH the flush every `flushIntervalCommitLog` writes out at most the
    /// window's pages not yet appended to, and those fault again when reached.
    pub(super) fn populate_ahead(&self, s: &FsStore) {
        if self.flush_type == FlushDiskType::Sync {
            return;
        }
        let page = rustix::param::page_size() as u64;
        let log = s.engine().log();
        let populated = self.populated.load(Ordering::Acquire);
        let Some(span) = populate_span(populated, log.max_offset(), log.segment_size(), page)
        else {
            return;
        };
        let mut mapped = false;
        log.regions(span.start, span.end, &mut |m, r| {
            m.populate(r);
            mapped = true;
        });
        // The segment holding the end may not be made yet (the log ends on its
        // boundary): nothing was populated, so nothing is noted.
        if mapped {
            self.populated.store(span.end, Ordering::Release);
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

/// The log bytes [`StoreService::populate_ahead`] populates next, when at least
/// [`POPULATE_CHUNK`] of them are due: the whole pages after the one holding `end` (the
/// appender has that one mapped), up to [`POPULATE_AHEAD`] past `end` and not past the
/// segment holding it (the next one is not mapped yet), from `populated` on, or from
/// the end again after a truncation moved it back.
fn populate_span(populated: u64, end: u64, segment: u64, page: u64) -> Option<Range<u64>> {
    let after_end = end.div_ceil(page) * page;
    let from = if populated > end + POPULATE_AHEAD {
        after_end
    } else {
        populated.max(after_end)
    };
    let to = (end + POPULATE_AHEAD).min(end - end % segment + segment) / page * page;
    (to > from && to - from >= POPULATE_CHUNK).then_some(from..to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;
    const SEGMENT: u64 = 64 << 20;

    #[test]
    fn the_window_past_the_end_is_populated_a_chunk_at_a_time() {
        // A fresh log: everything after the end's page, a window's worth.
        assert_eq!(
            populate_span(0, 100, SEGMENT, PAGE),
            Some(PAGE..(100 + POPULATE_AHEAD) / PAGE * PAGE)
        );
        // Less than a chunk used since: nothing yet; a chunk: just the new pages.
        let done = (100 + POPULATE_AHEAD) / PAGE * PAGE;
        assert_eq!(
            populate_span(done, 100 + POPULATE_CHUNK / 2, SEGMENT, PAGE),
            None
        );
        let end = 100 + POPULATE_CHUNK;
        assert_eq!(
            populate_span(done, end, SEGMENT, PAGE),
            Some(done..(end + POPULATE_AHEAD) / PAGE * PAGE)
        );
    }

    #[test]
    fn the_window_stops_at_the_segment_and_restarts_after_a_cut() {
        // Near the segment's end: up to it, not into the next (not mapped yet).
        let end = SEGMENT - POPULATE_AHEAD / 2;
        assert_eq!(
            populate_span(0, end, SEGMENT, PAGE),
            Some(end.div_ceil(PAGE) * PAGE..SEGMENT)
        );
        // Ending on the boundary: the next segment's window (it may not exist; the
        // caller then notes nothing).
        assert_eq!(
            populate_span(SEGMENT, SEGMENT, SEGMENT, PAGE),
            Some(SEGMENT..SEGMENT + POPULATE_AHEAD)
        );
        // The log cut far back: from its new end again.
        assert_eq!(
            populate_span(10 * POPULATE_AHEAD, 5, SEGMENT, PAGE),
            Some(PAGE..(5 + POPULATE_AHEAD) / PAGE * PAGE)
        );
    }
}
