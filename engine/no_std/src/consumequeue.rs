//! A consume queue: the 20-byte entries of one (topic, queue id), each pointing at a
//! record in the commit log. Logical offset `n` is the entry at byte `20·n`.

use zerocopy::byteorder::big_endian::{I32, I64};
use zerocopy::{FromBytes, IntoBytes};

use crate::commitlog::CommitLog;
use crate::error::{Corruption, Error};
use crate::layout::{CQ_FILLER_SIZE, CqEntry};
use crate::media::Directory;
use crate::segments::Segments;

/// Bytes per entry.
pub const ENTRY_SIZE: u64 = size_of::<CqEntry>() as u64;
/// RocketMQ's entries per consume-queue file: 300,000 (6,000,000-byte files).
pub const DEFAULT_ENTRIES_PER_FILE: u64 = 300_000;

/// One entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Commit-log offset of the record.
    pub physical_offset: u64,
    /// Record size.
    pub size: u32,
    /// Tag code (Java hash of TAGS, or a delivery time for delay queues).
    pub tag_code: i64,
}

impl Entry {
    fn encode(&self) -> CqEntry {
        CqEntry {
            physical_offset: I64::new(self.physical_offset as i64),
            size: I32::new(self.size as i32),
            tag_code: I64::new(self.tag_code),
        }
    }

    /// Decodes stored bytes; `None` for an unwritten (zero) or filler entry or garbage.
    fn decode(raw: &CqEntry) -> Option<Self> {
        let (off, size) = (raw.physical_offset.get(), raw.size.get());
        if off < 0 || size <= 0 || size == CQ_FILLER_SIZE {
            return None;
        }
        Some(Self {
            physical_offset: off as u64,
            size: size as u32,
            tag_code: raw.tag_code.get(),
        })
    }

    /// Decodes an entry's stored bytes read outside the queue (by a reader that does not
    /// hold the queue's owner); `None` for an unwritten or filler entry.
    pub fn from_bytes(raw: &[u8; ENTRY_SIZE as usize]) -> Option<Self> {
        Self::decode(&CqEntry::read_from_bytes(raw).ok()?)
    }

    fn end(&self) -> u64 {
        self.physical_offset + u64::from(self.size)
    }
}

/// Whether an append stored a new entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Written at this logical offset.
    Stored(u64),
    /// The record was dispatched before (re-dispatch after recovery is idempotent).
    AlreadyPresent,
}

/// The consume queue of one (topic, queue id).
#[derive(Debug)]
pub struct ConsumeQueue<D: Directory> {
    segs: Segments<D>,
    /// First logical offset still served.
    min: u64,
    /// Next logical offset to write.
    max: u64,
    /// End (offset + size) of the newest record in the queue: dispatch skips records
    /// below it, which makes re-dispatch after recovery idempotent.
    max_phys_end: u64,
    /// Logical offsets below this are durable.
    flushed: u64,
    /// Where a two-phase flush begun by [`ConsumeQueue::begin_flush`] will mark the queue
    /// flushed when it finishes: the queue's end at that moment. It lives here, not in the
    /// caller's plan, because a plan holds no table of queues (no heap).
    flush_target: u64,
}

impl<D: Directory> ConsumeQueue<D> {
    /// Opens the queue in `dir` and finds its end: the first entry that is unwritten,
    /// impossible, or points past `log`'s end or the durable point. Entries after it are
    /// cut.
    ///
    /// `durable_below` is `None` after a clean shutdown. After a crash it is the log
    /// offset below which entries are known durable (the checkpoint's dispatched offset):
    /// each queue file is written back on its own, so a later file may have survived
    /// where an earlier one lost its tail, and the scan must start early enough.
    pub fn open<L: Directory>(
        dir: D,
        entries_per_file: u64,
        log: &CommitLog<L>,
        durable_below: Option<u64>,
    ) -> Result<Self, Error<D::Error>> {
        let segs = Segments::open(dir, entries_per_file * ENTRY_SIZE)?;
        let mut q = Self {
            segs,
            min: 0,
            max: 0,
            max_phys_end: 0,
            flushed: 0,
            flush_target: 0,
        };
        let Some((first, last)) = q.segs.span() else {
            return Ok(q);
        };
        // Entries past the durable point may be lost or torn: keep none of them; dispatch
        // from that point writes them again.
        let keep_end = durable_below.unwrap_or(u64::MAX).min(log.max_offset());
        // Start at the newest file whose first entry is known good: every entry before it
        // is then durable too.
        let mut scan_base = last;
        while scan_base > first {
            let head = q.raw(scan_base / ENTRY_SIZE)?;
            let trusted = match (Entry::decode(&head), durable_below) {
                (Some(_), None) => true,
                (Some(e), Some(durable)) => e.end() <= durable,
                (None, _) => false,
            };
            if trusted {
                break;
            }
            scan_base -= q.segs.size();
        }
        let mut n = scan_base / ENTRY_SIZE;
        let seg_end = (last + q.segs.size()) / ENTRY_SIZE;
        let mut last_valid: Option<(u64, Entry)> = None;
        let mut stopped_on_garbage = false;
        while n < seg_end {
            let raw = q.raw(n)?;
            if raw.size.get() == CQ_FILLER_SIZE && raw.physical_offset.get() == 0 {
                n += 1;
                continue;
            }
            match Entry::decode(&raw) {
                Some(e)
                    if e.end() <= keep_end
                        && last_valid.is_none_or(|(_, p)| e.physical_offset >= p.end()) =>
                {
                    last_valid = Some((n, e));
                    n += 1;
                }
                _ => {
                    stopped_on_garbage = raw.as_bytes().iter().any(|&b| b != 0);
                    break;
                }
            }
        }
        q.max = n;
        q.max_phys_end = last_valid.map_or(0, |(_, e)| e.end());
        q.flushed = n;
        q.flush_target = n;
        q.min = q.first_real_entry(first / ENTRY_SIZE, n)?;
        // Entries past the end are garbage only after a crash, or where the scan stopped
        // on something other than an unwritten entry; otherwise the rest is zero already
        // and is not read (reading it faults in every page of the file).
        if durable_below.is_some() || stopped_on_garbage || last > q.segs.base_of(n * ENTRY_SIZE) {
            q.segs.cut(n * ENTRY_SIZE)?;
        }
        Ok(q)
    }

    /// First logical offset in `[from, to)` holding a real entry (fillers skipped).
    fn first_real_entry(&self, from: u64, to: u64) -> Result<u64, Error<D::Error>> {
        let mut n = from;
        while n < to {
            let raw = self.raw(n)?;
            if raw.size.get() != CQ_FILLER_SIZE {
                break;
            }
            n += 1;
        }
        Ok(n)
    }

    fn raw(&self, logical: u64) -> Result<CqEntry, Error<D::Error>> {
        let mut b = [0u8; ENTRY_SIZE as usize];
        self.segs.read(logical * ENTRY_SIZE, &mut b)?;
        Ok(CqEntry::read_from_bytes(&b).unwrap_or_else(|_| unreachable!("20 bytes")))
    }

    /// First logical offset served.
    pub fn min_offset(&self) -> u64 {
        self.min
    }
    /// Next logical offset to be written (RocketMQ's max offset).
    pub fn max_offset(&self) -> u64 {
        self.max
    }
    /// End of the newest record in the queue.
    pub fn max_physical_end(&self) -> u64 {
        self.max_phys_end
    }

    /// Appends the entry for the record at logical `queue_offset`.
    ///
    /// A record below [`ConsumeQueue::max_physical_end`] was dispatched already and is
    /// skipped. A new queue may start at any offset (its first file is padded with filler
    /// entries, as RocketMQ does); after that, offsets must arrive in order.
    pub fn put(&mut self, queue_offset: u64, entry: Entry) -> Result<Put, Error<D::Error>> {
        if entry.end() <= self.max_phys_end {
            return Ok(Put::AlreadyPresent);
        }
        if queue_offset != self.max {
            if self.max == self.min && self.max_phys_end == 0 && queue_offset > self.max {
                self.start_at(queue_offset)?;
            } else {
                return Err(Corruption::QueueOffset {
                    expected: self.max as i64,
                    got: queue_offset as i64,
                }
                .into());
            }
        }
        let at = entry_byte(queue_offset)?;
        self.segs.ensure(at)?;
        self.segs.write(at, entry.encode().as_bytes())?;
        self.max = queue_offset + 1;
        self.max_phys_end = entry.end();
        Ok(Put::Stored(queue_offset))
    }

    /// [`ConsumeQueue::put`] by the dispatcher, which knows the log's end: an entry never
    /// points past it.
    pub(crate) fn put_below(
        &mut self,
        queue_offset: u64,
        entry: Entry,
        log_end: u64,
    ) -> Result<Put, Error<D::Error>> {
        debug_assert!(entry.end() <= log_end, "queue entry past the log's end");
        self.put(queue_offset, entry)
    }

    /// Makes an empty queue start at `offset`, padding its first file with fillers.
    fn start_at(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        let at = entry_byte(offset)?;
        self.segs.ensure(at)?;
        let filler = CqEntry {
            physical_offset: I64::new(0),
            size: I32::new(CQ_FILLER_SIZE),
            tag_code: I64::new(0),
        };
        let mut n = self.segs.base_of(at) / ENTRY_SIZE;
        while n < offset {
            self.segs.write(n * ENTRY_SIZE, filler.as_bytes())?;
            n += 1;
        }
        self.min = offset;
        self.max = offset;
        self.flushed = self.segs.base_of(at) / ENTRY_SIZE;
        self.flush_target = self.flushed;
        Ok(())
    }

    /// The entry at `logical`, if it is in `[min, max)`.
    pub fn get(&self, logical: u64) -> Result<Option<Entry>, Error<D::Error>> {
        if logical < self.min || logical >= self.max {
            return Ok(None);
        }
        Ok(Entry::decode(&self.raw(logical)?))
    }

    /// Visits entries from `from` on, in order, passing each to `f` until `f` returns
    /// false, `max_entries` have been looked at, or the queue ends. Entries whose tag code
    /// fails `filter` are looked at but not passed. Returns the next logical offset to
    /// read from.
    pub fn scan(
        &self,
        from: u64,
        max_entries: u64,
        filter: Option<&dyn Fn(i64) -> bool>,
        f: &mut dyn FnMut(u64, Entry) -> bool,
    ) -> Result<u64, Error<D::Error>> {
        let mut n = from.max(self.min);
        let end = self.max.min(n.saturating_add(max_entries));
        while n < end {
            let raw = self.raw(n)?;
            n += 1;
            let Some(e) = Entry::decode(&raw) else {
                continue;
            };
            if filter.is_some_and(|keep| !keep(e.tag_code)) {
                continue;
            }
            if !f(n - 1, e) {
                break;
            }
        }
        Ok(n)
    }

    /// Makes every entry written so far durable.
    pub fn flush(&mut self) -> Result<(), Error<D::Error>> {
        if self.max > self.flushed {
            self.segs
                .flush(self.flushed * ENTRY_SIZE, self.max * ENTRY_SIZE)?;
            self.flushed = self.max;
        }
        Ok(())
    }

    /// Calls `f` with the file the queue ends in and the byte range from its end to the
    /// file's end: where the next entries go (an owner with mapped files advises that
    /// part for writing). Nothing when that file is not made yet.
    pub fn tail(&self, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        self.segs.rest_of_segment(self.max * ENTRY_SIZE, f);
    }

    /// Logical offsets `(flushed, end)`: the entries a flush would make durable now.
    pub fn unflushed(&self) -> (u64, u64) {
        (self.flushed, self.max)
    }

    /// First half of a flush made by the caller (an fdatasync outside its lock): fixes the
    /// queue's end as the target of [`ConsumeQueue::finish_flush`], and calls `f` with
    /// each file holding entries not yet flushed and the byte range of them in it.
    pub fn begin_flush(&mut self, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        self.flush_target = self.max;
        self.segs
            .regions(self.flushed * ENTRY_SIZE, self.max * ENTRY_SIZE, f);
    }

    /// Second half: the caller made the ranges of the last [`ConsumeQueue::begin_flush`]
    /// durable. Entries added since are not covered.
    pub fn finish_flush(&mut self) {
        self.mark_flushed(self.flush_target);
    }

    /// Records that the caller made every entry below logical `upto` durable itself. Never
    /// moves the watermark back or past the end.
    pub fn mark_flushed(&mut self, upto: u64) {
        self.flushed = self.flushed.max(upto.min(self.max));
    }

    /// First logical offset whose record was stored at or after `timestamp`, found by
    /// binary search over store times read from `log`. `max_offset` when every record is
    /// older; `min_offset` when every record is newer.
    pub fn offset_at_time<L: Directory>(
        &self,
        log: &CommitLog<L>,
        timestamp: i64,
    ) -> Result<u64, Error<L::Error>> {
        let (mut lo, mut hi) = (self.min, self.max);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = match self.get(mid) {
                Ok(Some(e)) => e,
                _ => return Err(Error::OutOfRange),
            };
            if e.physical_offset < log.min_offset() {
                lo = mid + 1;
                continue;
            }
            if log.store_timestamp_at(e.physical_offset)? < timestamp {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Drops entries that point past `log_end` (the log lost its tail).
    pub fn truncate_to_log(&mut self, log_end: u64) -> Result<(), Error<D::Error>> {
        let mut n = self.max;
        let mut new_end = 0;
        while n > self.min {
            match self.get(n - 1)? {
                Some(e) if e.end() > log_end => n -= 1,
                Some(e) => {
                    new_end = e.end();
                    break;
                }
                None => break,
            }
        }
        if n < self.max {
            self.segs.cut(n * ENTRY_SIZE)?;
            self.max = n;
            self.max_phys_end = new_end;
            self.flushed = self.flushed.min(n);
            // A flush begun before covered entries that are gone now; new ones written
            // at their place are not covered.
            self.flush_target = self.flush_target.min(n);
        }
        Ok(())
    }

    /// Forgets entries whose records are below `log_min` (deleted from the log), removing
    /// whole files that hold only such entries.
    pub fn delete_before_log(&mut self, log_min: u64) -> Result<(), Error<D::Error>> {
        while let Some((first, last)) = self.segs.span() {
            if first == last {
                break;
            }
            let last_of_first = (first + self.segs.size()) / ENTRY_SIZE - 1;
            match Entry::decode(&self.raw(last_of_first)?) {
                Some(e) if e.end() <= log_min => self.segs.remove_first()?,
                _ => break,
            }
        }
        let start = self
            .segs
            .span()
            .map_or(self.max, |(first, _)| first / ENTRY_SIZE)
            .max(self.min);
        let mut n = start;
        while n < self.max {
            match Entry::decode(&self.raw(n)?) {
                Some(e) if e.physical_offset >= log_min => break,
                _ => n += 1,
            }
        }
        self.min = n;
        Ok(())
    }

    /// Gives the directory back.
    pub fn into_dir(self) -> D {
        self.segs.into_dir()
    }
}

/// Where entry `queue_offset` starts. Queue offsets come from records, which rot: one too
/// large for the byte offset is out of range, not an overflow.
fn entry_byte<E>(queue_offset: u64) -> Result<u64, Error<E>> {
    queue_offset
        .checked_mul(ENTRY_SIZE)
        .ok_or(Error::OutOfRange)
}
