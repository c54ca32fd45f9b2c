//! Releasing the commit log's mapping behind the writer: the page-table entries of pages
//! that reput and the writer are past are dropped in chunks, so their writeback needs no
//! write-protect and TLB shootdown per page.

use std::ops::Range;
use std::sync::atomic::Ordering;

use tern_engine_fs::fs_store::FsStore;

use super::StoreService;

/// Bytes of log behind reput gathered before their pages leave the mapping
/// ([`StoreService::release_behind`]): 64 pages per `madvise` (one TLB shootdown), a
/// short hold of the lock.
pub(super) const RELEASE_CHUNK: u64 = 256 << 10;

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
