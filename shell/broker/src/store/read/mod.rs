//! Reads that never take the store's lock.
//!
//! Appends and dispatch write under the lock; everything a reader needs is published
//! after the write, with release ordering: the log's end (`StoreService::written`) and,
//! per consume queue, its min and max offsets ([`QueueView`]). A reader loads the
//! watermark (acquire), then copies bytes below it from the segment files with `pread`
//! (`tern_engine_fs::SegmentFiles`). Bytes below a watermark never change again, so the
//! copy needs no lock, and a reader that meets cold pages waits alone: no sender queues
//! behind it, and it queues behind no sender. Alone on its thread too: a request on an
//! executor thread reads with `ReadMode::Cached` (page-cache hits only) and repeats a read
//! that would wait for the disk on a blocking thread: pulls and POPs
//! (`PullFilter::read_off_executor`), records by offset
//! ([`StoreService::record_at_off_executor`]) and the HA stream
//! ([`StoreService::log_bytes_off_executor`]). Operators' requests that read anywhere
//! (stats, offsets by time, VIEW_MESSAGE_BY_ID) and metrics scrapes run on a blocking
//! thread whole.
//!
//! Records deleted by retention between the look at the watermark and the read are
//! skipped (their segment is gone) or read as they were (a reader already held the file).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tern_shell::sync::RwLockExt;

use tern_engine::commitlog::{Slot, slot_from_head};
use tern_engine::consumequeue::{ENTRY_SIZE, Entry};
use tern_engine::record::RecordView;
use tern_engine_fs::{ReadError, ReadMode, SegmentFiles};

use super::{EntryReadError, LogReadError};
use super::{MAX_FILTER_SCAN, MAX_PULL_BYTES, MAX_PULL_MSGS, Pulled, RecordFilter, StoreService};
use run::Run;

mod run;

/// A cached-only read ([`ReadMode::Cached`]) met bytes not in the page cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WouldBlock;

/// Entries read from a queue file per `pread` (2.5 KiB).
const ENTRIES_PER_READ: u64 = 128;

/// Largest record a reader believes: a size past it is rot, not an allocation to make.
/// A segment bounds a record too; this keeps a rotted size from allocating up to one.
pub const MAX_RECORD_READ: u32 = 64 << 20;

/// One consume queue as readers see it: its files and published bounds.
#[derive(Debug)]
pub(crate) struct QueueView {
    files: SegmentFiles,
    /// First offset served.
    min: AtomicU64,
    /// Next offset to be written: entries below it are readable.
    max: AtomicU64,
}

impl QueueView {
    pub(crate) fn new(files: SegmentFiles, min: u64, max: u64) -> Self {
        Self {
            files,
            min: AtomicU64::new(min),
            max: AtomicU64::new(max),
        }
    }

    /// Publishes bounds the owner reached (under the store's lock, after the writes).
    pub(crate) fn publish(&self, min: u64, max: u64) {
        self.min.store(min, Ordering::Release);
        self.max.store(max, Ordering::Release);
    }

    pub(crate) fn bounds(&self) -> (u64, u64) {
        (
            self.min.load(Ordering::Acquire),
            self.max.load(Ordering::Acquire),
        )
    }
}

/// Every queue's view, by topic then queue id (looked up by `&str` without allocating).
#[derive(Debug, Default)]
pub(crate) struct QueueViews {
    views: RwLock<HashMap<String, HashMap<i32, Arc<QueueView>>>>,
}

impl QueueViews {
    pub(crate) fn get(&self, topic: &str, queue_id: i32) -> Option<Arc<QueueView>> {
        let views = self.views.read_guard();
        views.get(topic)?.get(&queue_id).cloned()
    }

    pub(crate) fn remove(&self, topic: &str, queue_id: i32) {
        let mut views = self.views.write_guard();
        if let Some(queues) = views.get_mut(topic) {
            queues.remove(&queue_id);
            if queues.is_empty() {
                views.remove(topic);
            }
        }
    }

    pub(crate) fn insert(&self, topic: &str, queue_id: i32, view: QueueView) {
        let mut views = self.views.write_guard();
        views
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, Arc::new(view));
    }
}

impl StoreService {
    /// The segment size of the log.
    fn segment_size(&self) -> u64 {
        self.geometry.log_segment_size
    }

    /// Copies `buf.len()` published log bytes at `offset`.
    pub(super) fn read_log(&self, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.read_log_mode(offset, buf, ReadMode::Wait)
    }

    pub(super) fn read_log_mode(
        &self,
        offset: u64,
        buf: &mut [u8],
        mode: ReadMode,
    ) -> Result<(), ReadError> {
        if offset + buf.len() as u64 > self.written.load(Ordering::Acquire) {
            return Err(ReadError::OutOfRange);
        }
        self.log_files
            .read_exact_at_mode(self.segment_size(), offset, buf, mode)
    }

    /// What is at published log offset `offset`.
    pub(crate) fn slot_at(&self, offset: u64) -> Result<Slot, LogReadError> {
        self.slot_at_mode(offset, ReadMode::Wait)
            .unwrap_or(Err(LogReadError::WaitedWouldBlock { offset }))
    }

    /// [`StoreService::slot_at`], failing with `WouldBlock` when `mode` is `Cached` and
    /// the record's head is not in the page cache.
    fn slot_at_mode(
        &self,
        offset: u64,
        mode: ReadMode,
    ) -> Result<Result<Slot, LogReadError>, WouldBlock> {
        let end = self.written.load(Ordering::Acquire);
        if offset > end {
            return Ok(Err(LogReadError::PastEnd { offset, end }));
        }
        if offset == end {
            return Ok(Ok(Slot::End));
        }
        let slot = slot_from_head::<ReadError>(offset, self.segment_size(), |head| {
            self.read_log_mode(offset, head, mode)
                .map_err(tern_engine::Error::Media)
        });
        match slot {
            Err(tern_engine::Error::Media(ReadError::WouldBlock)) => Err(WouldBlock),
            r => Ok(r.map_err(|error| LogReadError::Read { offset, error })),
        }
    }

    /// Appends the `size`-byte record at `offset` to `out`; false if it is gone or not
    /// published.
    fn copy_record(&self, offset: u64, size: u32, out: &mut Vec<u8>) -> bool {
        self.copy_record_mode(offset, size, out, ReadMode::Wait) == Ok(true)
    }

    /// [`StoreService::copy_record`], failing with `WouldBlock` (and appending nothing)
    /// when `mode` is `Cached` and the bytes are not in the page cache.
    fn copy_record_mode(
        &self,
        offset: u64,
        size: u32,
        out: &mut Vec<u8>,
        mode: ReadMode,
    ) -> Result<bool, WouldBlock> {
        if size > MAX_RECORD_READ {
            return Ok(false);
        }
        let at = out.len();
        out.resize(at + size as usize, 0);
        match self.read_log_mode(offset, &mut out[at..], mode) {
            Ok(()) => Ok(true),
            Err(e) => {
                out.truncate(at);
                if e == ReadError::WouldBlock {
                    return Err(WouldBlock);
                }
                Ok(false)
            }
        }
    }

    /// The stored bytes of the record starting at log offset `offset`, if one starts
    /// there and parses (VIEW_MESSAGE_BY_ID, send-back, transactions). May wait for the
    /// disk: a request on an executor thread reads with
    /// [`StoreService::record_at_off_executor`].
    pub fn record_at(&self, offset: u64) -> Result<Vec<u8>, LogReadError> {
        self.record_at_mode(offset, MAX_RECORD_READ, ReadMode::Wait)
            .unwrap_or(Err(LogReadError::WaitedWouldBlock { offset }))
    }

    /// [`StoreService::record_at`] for a request on an executor thread: from the page
    /// cache there, and again on a blocking thread only when that would wait for the
    /// disk, so the requests this thread serves do not wait for it (a send-back or a
    /// transaction's end naming a record long since written). A record whose head says
    /// it is larger than `max_size` is not read: an offset from a peer may point into a
    /// body that looks like a head.
    pub async fn record_at_off_executor(
        self: &Arc<Self>,
        offset: u64,
        max_size: u32,
    ) -> Result<Vec<u8>, LogReadError> {
        self.off_executor(offset, move |s, mode| {
            s.record_at_mode(offset, max_size, mode)
        })
        .await
    }

    /// Runs `read` (of the log at `offset`) on this executor thread from the page cache,
    /// and again on a blocking thread only when that would wait for the disk: how a
    /// request on an executor thread reads records by offset and the HA stream. (Pulls
    /// and POPs do the same in `PullFilter::read_off_executor`, which clones its filter
    /// only for the blocking read.)
    pub(super) async fn off_executor<T: Send + 'static>(
        self: &Arc<Self>,
        offset: u64,
        read: impl Fn(&StoreService, ReadMode) -> Result<Result<T, LogReadError>, WouldBlock>
        + Send
        + 'static,
    ) -> Result<T, LogReadError> {
        match read(self, ReadMode::Cached) {
            Ok(done) => done,
            Err(WouldBlock) => {
                let store = self.clone();
                tern_shell::runtime::spawn_blocking(move || {
                    read(&store, ReadMode::Wait)
                        .unwrap_or(Err(LogReadError::WaitedWouldBlock { offset }))
                })
                .await
            }
        }
    }

    fn record_at_mode(
        &self,
        offset: u64,
        max_size: u32,
        mode: ReadMode,
    ) -> Result<Result<Vec<u8>, LogReadError>, WouldBlock> {
        let Some(ticket) = self.cut_fence.enter() else {
            return Ok(Err(LogReadError::CutRaced));
        };
        let read = self.record_at_unfenced(offset, max_size, mode)?;
        if !self.cut_fence.unchanged(ticket) {
            return Ok(Err(LogReadError::CutRaced));
        }
        Ok(read)
    }

    fn record_at_unfenced(
        &self,
        offset: u64,
        max_size: u32,
        mode: ReadMode,
    ) -> Result<Result<Vec<u8>, LogReadError>, WouldBlock> {
        let min = self.log_min.load(Ordering::Acquire);
        if offset < min {
            return Ok(Err(LogReadError::BelowStart { offset, min }));
        }
        let size = match self.slot_at_mode(offset, mode)? {
            Ok(Slot::Record(size)) if size <= max_size => size,
            Ok(Slot::Record(size)) => {
                return Ok(Err(LogReadError::Implausible { offset, size }));
            }
            Ok(_) => return Ok(Err(LogReadError::NoRecord { offset })),
            Err(e) => return Ok(Err(e)),
        };
        let mut bytes = Vec::new();
        if !self.copy_record_mode(offset, size, &mut bytes, mode)? {
            return Ok(Err(LogReadError::Gone { offset }));
        }
        Ok(match RecordView::parse(&bytes) {
            Ok(_) => Ok(bytes),
            Err(error) => Err(LogReadError::Unreadable { offset, error }),
        })
    }

    /// The record an entry points at, if it is still held and parses.
    pub fn record_of(&self, entry: Entry) -> Option<Vec<u8>> {
        let ticket = self.cut_fence.enter()?;
        let mut bytes = Vec::new();
        if !self.copy_record(entry.physical_offset, entry.size, &mut bytes) {
            return None;
        }
        RecordView::parse(&bytes).ok()?;
        self.cut_fence.unchanged(ticket).then_some(bytes)
    }

    /// Min and max offsets of a queue; `(0, 0)` for a queue never written.
    pub fn queue_bounds(&self, topic: &str, queue_id: i32) -> (u64, u64) {
        self.views
            .get(topic, queue_id)
            .map_or((0, 0), |v| v.bounds())
    }

    /// Visits entries of `view` from `from` (at most `limit`), in order, until `f`
    /// returns false. Returns the next offset to read from.
    fn scan_entries(
        view: &QueueView,
        (entries_per_file, mode): (u64, ReadMode),
        from: u64,
        limit: u64,
        f: &mut dyn FnMut(u64, Option<Entry>) -> bool,
    ) -> Result<u64, ReadError> {
        let (min, max) = view.bounds();
        let mut n = from.max(min);
        let end = max.min(n.saturating_add(limit));
        let file_bytes = entries_per_file * ENTRY_SIZE;
        let mut buf = [0u8; (ENTRIES_PER_READ * ENTRY_SIZE) as usize];
        while n < end {
            // One read never crosses a queue file.
            let in_file = entries_per_file - n % entries_per_file;
            let count = (end - n).min(ENTRIES_PER_READ).min(in_file);
            let bytes = &mut buf[..(count * ENTRY_SIZE) as usize];
            view.files
                .read_exact_at_mode(file_bytes, n * ENTRY_SIZE, bytes, mode)?;
            for raw in bytes.chunks_exact(ENTRY_SIZE as usize) {
                let raw: &[u8; ENTRY_SIZE as usize] = raw.try_into().unwrap_or(&[0; 20]);
                let entry = Entry::from_bytes(raw);
                n += 1;
                if !f(n - 1, entry) {
                    return Ok(n);
                }
            }
        }
        Ok(n)
    }

    /// The entry at `n` of a queue: `Ok(None)` outside its published bounds or for a
    /// filler; `Err` when the read failed (worth a retry, unlike a filler).
    pub fn queue_entry(
        &self,
        topic: &str,
        queue_id: i32,
        n: u64,
    ) -> Result<Option<Entry>, EntryReadError> {
        let Some(view) = self.views.get(topic, queue_id) else {
            return Ok(None);
        };
        let (min, max) = view.bounds();
        if n < min || n >= max {
            return Ok(None);
        }
        let mut found = None;
        let per_file = self.geometry.queue_entries_per_file;
        Self::scan_entries(&view, (per_file, ReadMode::Wait), n, 1, &mut |_, e| {
            found = e;
            false
        })
        .map_err(|error| EntryReadError {
            topic: topic.to_owned(),
            queue_id,
            n,
            error,
        })?;
        Ok(found)
    }

    /// Store time of the record entry `n` of a queue points at.
    pub fn store_time_of(&self, topic: &str, queue_id: i32, n: u64) -> Option<i64> {
        let entry = self.queue_entry(topic, queue_id, n).ok()??;
        let bytes = self.record_of(entry)?;
        RecordView::parse(&bytes).ok().map(|v| v.store_timestamp())
    }

    /// First offset of a queue whose record was stored at or after `timestamp`, by binary
    /// search (RocketMQ's `getOffsetInQueueByTime`): `max` when every record is older.
    pub fn offset_at_time(&self, topic: &str, queue_id: i32, timestamp: i64) -> u64 {
        let (mut lo, mut hi) = self.queue_bounds(topic, queue_id);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.store_time_of(topic, queue_id, mid) {
                Some(t) if t >= timestamp => hi = mid,
                // Older, or deleted by retention (older still).
                _ => lo = mid + 1,
            }
        }
        lo
    }

    /// Reads up to `max_msgs` records of a queue from `offset` whose tag code passes
    /// `filter` and whose stored bytes pass `record_filter` (SQL92 on properties),
    /// bounded by [`MAX_PULL_BYTES`]. Takes no lock: the SQL92 filter runs on copies.
    /// `None` for a queue never written; `WouldBlock` when `mode` is `Cached` and a
    /// byte it needed was not in the page cache (nothing is returned then: read again
    /// with `Wait` where blocking is allowed).
    pub fn read_queue(
        &self,
        (topic, queue_id): (&str, i32),
        (offset, max_msgs): (u64, u32),
        filter: Option<&dyn Fn(i64) -> bool>,
        record_filter: Option<RecordFilter<'_>>,
        mode: ReadMode,
    ) -> Result<Option<Pulled>, WouldBlock> {
        let Some(view) = self.views.get(topic, queue_id) else {
            return Ok(None);
        };
        // Entries and records read across a truncation may mix two versions of the log:
        // such a read answers nothing, with the bounds as they are after it.
        let raced = || {
            let (min, max) = view.bounds();
            Ok(Some(Pulled {
                min,
                max,
                next: offset,
                ..Pulled::default()
            }))
        };
        let Some(ticket) = self.cut_fence.enter() else {
            return raced();
        };
        let (min, max) = view.bounds();
        let mut out = Pulled {
            min,
            max,
            next: offset,
            ..Pulled::default()
        };
        if offset < min || offset >= max {
            return Ok(Some(out));
        }
        let want = max_msgs.clamp(1, MAX_PULL_MSGS);
        let mut blocked = false;
        let mut matched = 0u32;
        // The entry that did not fit: the next pull starts there.
        let mut byte_stop = None;
        // Without a filter on the bytes, records that follow each other in the log (a
        // batch's, a queue's sent alone) are read with one `pread` per run: per-record
        // reads were a quarter of the broker's CPU in catch-up (syscall entry, file
        // lookup, page-cache walk per record).
        let mut run = Run::default();
        let per_file = self.geometry.queue_entries_per_file;
        let scanned_to = Self::scan_entries(
            &view,
            (per_file, mode),
            offset,
            MAX_FILTER_SCAN.max(u64::from(want)),
            &mut |n, e| {
                let Some(e) = e else { return true };
                out.last_physical = Some(e.physical_offset);
                if filter.is_some_and(|keep| !keep(e.tag_code)) {
                    return true;
                }
                if out.body.len() + run.bytes() + e.size as usize > MAX_PULL_BYTES && matched > 0 {
                    byte_stop = Some(n);
                    return false;
                }
                if record_filter.is_none() {
                    if e.size > MAX_RECORD_READ {
                        // Never read (as `copy_record_mode` refuses it): skipped.
                        return true;
                    }
                    if !run.continues(e.physical_offset) {
                        match self.copy_run(&mut run, &mut out.body, mode) {
                            Ok(gone) => matched -= gone,
                            Err(WouldBlock) => {
                                blocked = true;
                                return false;
                            }
                        }
                    }
                    // Counted now, corrected when read if part of it was gone.
                    run.push(e.physical_offset, e.size);
                    matched += 1;
                    return matched < want;
                }
                let at = out.body.len();
                // Records below the log's start were deleted by retention: skip.
                match self.copy_record_mode(e.physical_offset, e.size, &mut out.body, mode) {
                    Ok(true) => {}
                    Ok(false) => return true,
                    Err(WouldBlock) => {
                        blocked = true;
                        return false;
                    }
                }
                if record_filter.is_some_and(|keep| !keep(&out.body[at..])) {
                    out.body.truncate(at);
                    return true;
                }
                matched += 1;
                matched < want
            },
        );
        match self.copy_run(&mut run, &mut out.body, mode) {
            Ok(gone) => matched -= gone,
            Err(WouldBlock) => blocked = true,
        }
        let scanned_to = match scanned_to {
            Err(ReadError::WouldBlock) => return Err(WouldBlock),
            _ if blocked => return Err(WouldBlock),
            Ok(n) => n,
            Err(e) => {
                log::error!("reading {topic}/{queue_id} at {offset}: {e}");
                return Ok(Some(out));
            }
        };
        if !self.cut_fence.unchanged(ticket) {
            return raced();
        }
        out.count = matched;
        // Stopping for size leaves the entry that did not fit for the next pull (those
        // before it were taken, filtered out or gone).
        out.next = byte_stop.unwrap_or(scanned_to);
        out.all_filtered = matched == 0 && scanned_to > offset;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests;
