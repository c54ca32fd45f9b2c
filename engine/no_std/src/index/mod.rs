//! The hash index: message keys to commit-log offsets, in RocketMQ's index-file format.
//!
//! Each file is a header, a table of slots (the newest entry number per hash bucket) and
//! the entries, chained newest to oldest through `prev_index`. Files are named by a
//! `yyyyMMddHHmmssSSS` stamp; a full file rolls to a new one. Keys are `topic#UNIQ_KEY` and
//! `topic#k` for each space-separated `KEYS` entry.

use zerocopy::byteorder::big_endian::{I32, I64};
use zerocopy::{FromBytes, IntoBytes};

use crate::commitlog::CommitLog;
use crate::error::{Corruption, Error, MediaResult};
use crate::hash::index_key_hash;
use crate::layout::{IndexEntry, IndexHeader};
use crate::media::{Directory, Media};

mod query;
pub use query::{IndexQuery, IndexSource, MAX_QUERY_HOPS};

/// Header bytes.
pub const HEADER_SIZE: u64 = size_of::<IndexHeader>() as u64;
/// Slot bytes.
pub const SLOT_SIZE: u64 = 4;
/// Entry bytes.
pub const ENTRY_SIZE: u64 = size_of::<IndexEntry>() as u64;
/// RocketMQ's slots per file.
pub const DEFAULT_SLOTS: u32 = 5_000_000;
/// RocketMQ's entries per file.
pub const DEFAULT_ENTRIES: u32 = 20_000_000;
/// Most offsets one query returns (RocketMQ's `maxMsgsNumBatch`).
pub const MAX_QUERY_RESULTS: usize = 64;

/// Geometry of the index files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexConfig {
    /// Hash slots per file.
    pub slots: u32,
    /// Entries per file.
    pub entries: u32,
}

impl IndexConfig {
    /// RocketMQ's server geometry (420 MB files).
    pub const SERVER: IndexConfig = IndexConfig {
        slots: DEFAULT_SLOTS,
        entries: DEFAULT_ENTRIES,
    };

    /// Bytes of one index file.
    pub fn file_size(&self) -> u64 {
        HEADER_SIZE + u64::from(self.slots) * SLOT_SIZE + u64::from(self.entries) * ENTRY_SIZE
    }
    /// Where the slot of `hash` is in a file.
    pub fn slot_at(&self, hash: i32) -> u64 {
        HEADER_SIZE + (hash as u32 % self.slots) as u64 * SLOT_SIZE
    }
    /// Where entry `n` is in a file.
    pub fn entry_at(&self, n: u32) -> u64 {
        HEADER_SIZE + u64::from(self.slots) * SLOT_SIZE + u64::from(n) * ENTRY_SIZE
    }
}

/// A record's keys, as the dispatcher hands them to the index.
#[derive(Clone, Copy, Debug)]
pub struct RecordKeys<'a> {
    /// Topic of the record.
    pub topic: &'a str,
    /// Its UNIQ_KEY property.
    pub uniq_key: Option<&'a str>,
    /// Its KEYS property (space-separated).
    pub keys: Option<&'a str>,
}

/// The index: up to `FILES` index files, oldest first.
#[derive(Debug)]
pub struct Index<D: Directory, const FILES: usize = 256> {
    dir: D,
    config: IndexConfig,
    files: heapless::Deque<u64, FILES>,
    /// Header of the newest file, kept in memory and written after each record.
    head: IndexHeader,
    /// A flush failed (when a file rolled, or at a checkpoint): what it covered may not be
    /// durable, so the store must not claim anything indexed since (see
    /// [`Index::is_failed`]).
    failed: bool,
    /// Changes made to the newest file (entries, header, a roll), counted.
    written: u64,
    /// `written` as of the newest file's last flush: it is dirty while they differ.
    synced: u64,
}

/// The keys a record is indexed under: its UNIQ_KEY and each of its KEYS.
fn keys_of<'a>(keys: RecordKeys<'a>) -> impl Iterator<Item = &'a str> + Clone {
    let uniq = keys.uniq_key.filter(|u| !u.is_empty());
    let rest = keys
        .keys
        .into_iter()
        .flat_map(crate::properties::split_keys);
    uniq.into_iter().chain(rest)
}

/// Entries a record's keys take.
fn entries_for(keys: RecordKeys<'_>) -> u32 {
    keys_of(keys).count() as u32
}

fn empty_header() -> IndexHeader {
    IndexHeader {
        begin_timestamp: I64::new(0),
        end_timestamp: I64::new(0),
        begin_phy_offset: I64::new(0),
        end_phy_offset: I64::new(-1),
        hash_slot_count: I32::new(0),
        index_count: I32::new(1),
    }
}

/// Last ms of year 9999: later times would not fit the 17-digit name.
const MAX_STAMP_MS: i64 = 253_402_300_799_999;

/// `yyyyMMddHHmmssSSS` of a UTC time in ms: the index file's name. Times outside
/// 1970..=9999 are clamped: a store time comes from a record (its CRC covers only the
/// body) or a clock, and neither may overflow the name.
pub fn file_stamp(ms: i64) -> u64 {
    let ms = ms.clamp(0, MAX_STAMP_MS) as u64;
    let (days, rem) = (ms / 86_400_000, ms % 86_400_000);
    let (y, m, d) = crate::calendar::civil_from_days(days as i64);
    let (h, mi, s, milli) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    (((((y as u64 * 100 + m as u64) * 100 + d as u64) * 100 + h) * 100 + mi) * 100 + s) * 1000
        + milli
}

impl<D: Directory, const FILES: usize> Index<D, FILES> {
    /// Opens the index files in `dir`.
    ///
    /// `durable_below` is `None` after a clean shutdown. After a crash it is the log
    /// offset below which index entries are known durable (the checkpoint's dispatched
    /// offset; files that rolled were flushed then). The newest file then keeps only its
    /// entries below it, with slots and header rebuilt from them: an entry past it may be
    /// lost or torn (a torn `prev_index` would silently cut a chain). Dispatch from that
    /// offset indexes the rest again.
    pub fn open<L: Directory<Error = D::Error>>(
        dir: D,
        config: IndexConfig,
        log: &CommitLog<L>,
        durable_below: Option<u64>,
    ) -> Result<Self, Error<D::Error>> {
        assert!(config.slots > 0 && config.entries > 1, "index geometry");
        let log_end = log.max_offset();
        let mut idx = Self {
            dir,
            config,
            files: heapless::Deque::new(),
            head: empty_header(),
            failed: false,
            written: 0,
            synced: 0,
        };
        let mut overflow = false;
        let mut files = heapless::Deque::<u64, FILES>::new();
        idx.dir
            .scan(&mut |b| overflow |= files.push_back(b).is_err())
            .media()?;
        if overflow {
            return Err(Error::TableFull);
        }
        idx.files = files;
        for &b in idx.files.iter() {
            if idx.dir.media(b).map(|m| m.len()) != Some(config.file_size()) {
                return Err(Corruption::IndexFile { base: b }.into());
            }
        }
        // A file rolled and flushed while the log's tail was not: after a crash, newer files
        // may index records the log lost. Drop files that start at or past the point
        // entries are trusted to, and cut the newest remaining one back to it.
        let keep_below = durable_below.unwrap_or(log_end).min(log_end);
        while let Some(&last) = idx.files.back() {
            let first = idx.entry(last, 1)?;
            let starts_past = first.as_bytes().iter().all(|&b| b == 0)
                || first.phy_offset.get() < 0
                || first.phy_offset.get() as u64 >= keep_below;
            if starts_past && idx.files.len() > 1 {
                idx.dir.remove(last).media()?;
                idx.files.pop_back();
            } else {
                break;
            }
        }
        if let Some(&last) = idx.files.back() {
            let h = idx.header(last)?;
            idx.head = h;
            if durable_below.is_some() || h.end_phy_offset.get() >= keep_below as i64 {
                idx.rebuild_last(log, keep_below)?;
            }
        }
        Ok(idx)
    }

    fn header(&self, base: u64) -> Result<IndexHeader, Error<D::Error>> {
        let m = self.dir.media(base).ok_or(Error::OutOfRange)?;
        let mut b = [0u8; HEADER_SIZE as usize];
        m.read_at(0, &mut b).media()?;
        Ok(IndexHeader::read_from_bytes(&b).unwrap_or_else(|_| unreachable!("40 bytes")))
    }

    fn entry(&self, base: u64, n: u32) -> Result<IndexEntry, Error<D::Error>> {
        let m = self.dir.media(base).ok_or(Error::OutOfRange)?;
        let mut b = [0u8; ENTRY_SIZE as usize];
        m.read_at(self.config.entry_at(n), &mut b).media()?;
        Ok(IndexEntry::read_from_bytes(&b).unwrap_or_else(|_| unreachable!("20 bytes")))
    }

    fn slot(&self, base: u64, hash: i32) -> Result<u32, Error<D::Error>> {
        let m = self.dir.media(base).ok_or(Error::OutOfRange)?;
        let mut b = [0u8; 4];
        m.read_at(self.config.slot_at(hash), &mut b).media()?;
        Ok(u32::from_be_bytes(b))
    }

    /// Rebuilds the newest file from its entries: counts entries while they are valid and
    /// below `keep_below`, rewrites every slot, then the header.
    fn rebuild_last<L: Directory<Error = D::Error>>(
        &mut self,
        log: &CommitLog<L>,
        keep_below: u64,
    ) -> Result<(), Error<D::Error>> {
        let Some(&base) = self.files.back() else {
            return Ok(());
        };
        let mut count = 1u32;
        let mut last_phys = -1i64;
        while count < self.config.entries {
            let e = self.entry(base, count)?;
            let phys = e.phy_offset.get();
            let unwritten = e.as_bytes().iter().all(|&b| b == 0);
            let valid = !unwritten
                && e.key_hash.get() >= 0
                && phys >= 0
                && (phys as u64) < keep_below
                && phys >= last_phys
                && e.time_diff.get() >= 0
                && (e.prev_index.get() as u32) < count;
            if !valid {
                break;
            }
            last_phys = phys;
            count += 1;
        }
        // The header may be torn: take the time base from the first entry's record, whose
        // store time the log holds.
        let mut begin_ts = self.head.begin_timestamp.get();
        if count > 1 {
            let first = self.entry(base, 1)?;
            if let Ok(ts) = log.store_timestamp_at(first.phy_offset.get() as u64) {
                begin_ts = ts.saturating_sub(i64::from(first.time_diff.get()) * 1000);
            }
            self.head.begin_timestamp = I64::new(begin_ts);
            self.head.begin_phy_offset = first.phy_offset;
        }
        let media = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
        let zero = [0u8; 4096];
        let slots_end = HEADER_SIZE + u64::from(self.config.slots) * SLOT_SIZE;
        let mut at = HEADER_SIZE;
        while at < slots_end {
            let n = (slots_end - at).min(zero.len() as u64) as usize;
            media.write_at(at, &zero[..n]).media()?;
            at += n as u64;
        }
        let mut used = 0i32;
        let mut end = (begin_ts, -1i64);
        for n in 1..count {
            let e = self.entry(base, n)?;
            let slot = self.config.slot_at(e.key_hash.get());
            let media = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
            let mut prev = [0u8; 4];
            media.read_at(slot, &mut prev).media()?;
            if prev == [0; 4] {
                used += 1;
            }
            media.write_at(slot, &n.to_be_bytes()).media()?;
            end = (
                begin_ts.saturating_add(i64::from(e.time_diff.get()) * 1000),
                e.phy_offset.get(),
            );
        }
        // Entries past the kept ones are stale: zero them, or a later crash could make
        // them look like a continuation of new entries.
        let zero_entry = [0u8; ENTRY_SIZE as usize];
        let mut n = count;
        while n < self.config.entries && self.entry(base, n)?.as_bytes() != zero_entry {
            let at = self.config.entry_at(n);
            let media = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
            media.write_at(at, &zero_entry).media()?;
            n += 1;
        }
        self.head.index_count = I32::new(count as i32);
        self.head.hash_slot_count = I32::new(used);
        self.head.end_timestamp = I64::new(end.0);
        self.head.end_phy_offset = I64::new(end.1);
        if count == 1 {
            self.head = empty_header();
        }
        let media = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
        media.write_at(0, self.head.as_bytes()).media()?;
        media.flush(0..self.config.file_size()).media()?;
        Ok(())
    }

    /// Offset of the newest indexed record, or -1.
    pub fn end_phy_offset(&self) -> i64 {
        self.head.end_phy_offset.get()
    }

    /// Store time of the newest indexed record.
    pub fn end_timestamp(&self) -> i64 {
        self.head.end_timestamp.get()
    }

    /// Index files held.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// The geometry of the files.
    pub fn config(&self) -> IndexConfig {
        self.config
    }

    /// Calls `f` with each file's base and header, oldest first: what a reader outside the
    /// owner's lock needs published (entries below a header's `index_count` never change
    /// again).
    pub fn for_each_file(
        &self,
        f: &mut dyn FnMut(u64, IndexHeader),
    ) -> Result<(), Error<D::Error>> {
        for &base in self.files.iter() {
            let Some(h) = self.file_header(base)? else {
                continue;
            };
            f(base, h);
        }
        Ok(())
    }

    /// Indexes one record under each of its keys. Records at or below the newest indexed
    /// offset were indexed before and are skipped (re-dispatch is idempotent). Returns
    /// the number of entries written.
    pub fn put_record(
        &mut self,
        keys: RecordKeys<'_>,
        phys: u64,
        store_timestamp: i64,
    ) -> Result<u32, Error<D::Error>> {
        if phys as i64 <= self.head.end_phy_offset.get() {
            return Ok(0);
        }
        let mut written = 0;
        // A record's keys never straddle two files: a file's newest record is then
        // complete, which recovery relies on when it trusts a rolled file's end.
        let needed = entries_for(keys);
        if needed == 0 {
            return Ok(0);
        }
        if self.must_roll(needed) {
            if needed >= self.config.entries {
                return Err(Error::TooLarge);
            }
            self.roll(store_timestamp)?;
        }
        for k in keys_of(keys) {
            self.put_key(keys.topic, k, phys, store_timestamp)?;
            written += 1;
        }
        if written > 0 {
            self.written += 1;
            self.write_header()?;
        }
        Ok(written)
    }

    /// Whether `needed` more entries take a new file.
    fn must_roll(&self, needed: u32) -> bool {
        self.files.is_empty()
            // The count comes from the file's header: a rotted one must roll, not overflow.
            || (self.head.index_count.get() as u32).saturating_add(needed) > self.config.entries
    }

    /// Whether indexing the record at `phys` would roll to a new file while the newest
    /// one has changes not yet flushed. A roll flushes that file first, under its
    /// caller's lock (recovery trusts every file but the newest to be durable); an owner
    /// that defers rolls flushes it outside its lock instead (the checkpoint's two
    /// phases) and indexes the record after, when the roll's own flush has nothing left
    /// to write.
    pub fn roll_waits_for_flush(&self, keys: RecordKeys<'_>, phys: u64) -> bool {
        let needed = entries_for(keys);
        phys as i64 > self.head.end_phy_offset.get()
            && needed > 0
            && needed < self.config.entries
            && !self.files.is_empty()
            && self.written != self.synced
            && self.must_roll(needed)
    }

    fn write_header(&mut self) -> Result<(), Error<D::Error>> {
        let Some(&base) = self.files.back() else {
            return Ok(());
        };
        let head = self.head;
        let m = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
        m.write_at(0, head.as_bytes()).media()
    }

    /// The base for a new file: its creation stamp, kept increasing.
    fn roll(&mut self, store_timestamp: i64) -> Result<(), Error<D::Error>> {
        if self.files.is_full() {
            return Err(Error::TableFull);
        }
        let prev = self.head;
        if self.files.back().is_some() {
            self.write_header()?;
            self.flush_last()?;
        }
        let mut base = file_stamp(store_timestamp);
        if let Some(&last) = self.files.back() {
            base = base.max(last + 1);
        }
        self.dir.create(base, self.config.file_size()).media()?;
        self.written += 1;
        // Not full: checked above.
        let _ = self.files.push_back(base);
        let mut head = empty_header();
        if prev.index_count.get() > 1 {
            // RocketMQ seeds a new file with the previous file's end.
            head.begin_timestamp = prev.end_timestamp;
            head.begin_phy_offset = prev.end_phy_offset;
            head.end_timestamp = prev.end_timestamp;
            head.end_phy_offset = prev.end_phy_offset;
        }
        self.head = head;
        self.write_header()
    }

    fn put_key(
        &mut self,
        topic: &str,
        key: &str,
        phys: u64,
        ts: i64,
    ) -> Result<(), Error<D::Error>> {
        let Some(&base) = self.files.back() else {
            return Err(Error::OutOfRange);
        };
        let hash = index_key_hash(&[topic, "#", key]);
        let n = self.head.index_count.get() as u32;
        if n == 1 && self.head.end_phy_offset.get() < 0 {
            self.head.begin_timestamp = I64::new(ts);
            self.head.begin_phy_offset = I64::new(phys as i64);
        }
        let head_slot = self.slot(base, hash)?;
        // Store times come from records (not under their CRC) and headers: saturate, never
        // overflow.
        let diff = (ts.saturating_sub(self.head.begin_timestamp.get()) / 1000)
            .clamp(0, i64::from(i32::MAX));
        let entry = IndexEntry {
            key_hash: I32::new(hash),
            phy_offset: I64::new(phys as i64),
            time_diff: I32::new(diff as i32),
            prev_index: I32::new(if head_slot < n { head_slot as i32 } else { 0 }),
        };
        let (slot_at, entry_at) = (self.config.slot_at(hash), self.config.entry_at(n));
        let m = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
        // Entry before slot: a crash between them leaves an unreachable entry, never a
        // slot pointing at garbage.
        m.write_at(entry_at, entry.as_bytes()).media()?;
        m.write_at(slot_at, &n.to_be_bytes()).media()?;
        if head_slot == 0 {
            self.head.hash_slot_count = I32::new(self.head.hash_slot_count.get() + 1);
        }
        self.head.index_count = I32::new(n as i32 + 1);
        self.head.end_timestamp = I64::new(ts);
        self.head.end_phy_offset = I64::new(phys as i64);
        Ok(())
    }

    fn flush_last(&mut self) -> Result<(), Error<D::Error>> {
        let Some(&base) = self.files.back() else {
            return Ok(());
        };
        let size = self.config.file_size();
        let m = self.dir.media_mut(base).ok_or(Error::OutOfRange)?;
        let written = self.written;
        let r = m.flush(0..size).media();
        match r {
            Ok(()) => self.synced = written,
            Err(_) => self.failed = true,
        }
        r
    }

    /// First half of a flush made by the caller (an fdatasync outside its lock): writes
    /// the newest file's header and, if the file changed since its last flush, calls `f`
    /// with it and the range holding its header, slots and entries. Returns the target to
    /// hand [`Index::mark_flushed`] once that range is durable; `None` if nothing changed.
    /// Older files were flushed when they rolled.
    pub fn begin_flush(
        &mut self,
        f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>),
    ) -> Result<Option<u64>, Error<D::Error>> {
        let Some(&base) = self.files.back() else {
            return Ok(None);
        };
        self.write_header()?;
        if self.written == self.synced {
            return Ok(None);
        }
        let used = (self.head.index_count.get() as u32).min(self.config.entries);
        let m = self.dir.media(base).ok_or(Error::OutOfRange)?;
        f(m, 0..self.config.entry_at(used));
        Ok(Some(self.written))
    }

    /// Second half: the caller made the range of the [`Index::begin_flush`] that returned
    /// `target` durable. Changes made since stay unflushed; a target older than the last
    /// flush does nothing.
    pub fn mark_flushed(&mut self, target: u64) {
        if !self.failed {
            self.synced = self.synced.max(target.min(self.written));
        }
    }

    /// Whether a flush of an index file failed since the index was opened. The index goes
    /// on serving and indexing, but what it holds may not be durable: its owner must
    /// write no checkpoint that claims it.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Makes the newest file durable (older files were flushed when they rolled).
    pub fn flush(&mut self) -> Result<(), Error<D::Error>> {
        self.write_header()?;
        self.flush_last()
    }

    /// Offsets of records stored under `topic#key` between `begin` and `end` (ms,
    /// inclusive), newest first, at most `max` (capped at [`MAX_QUERY_RESULTS`]), in one
    /// go. Hash collisions are possible: callers check the record's keys.
    pub fn query(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
        out: &mut dyn FnMut(u64),
    ) -> Result<usize, Error<D::Error>> {
        let mut q = IndexQuery::new(topic, key, max, begin, end);
        while !q.step(self, MAX_QUERY_HOPS, out)? {}
        Ok(q.found())
    }

    /// Forgets every entry of a record at or past `log_end` (the log was cut there): newer
    /// files that start at or past it are removed, newest first, and the newest remaining
    /// file is rebuilt from its entries below it, as recovery rebuilds one after a crash
    /// (slots, header and the stale entries zeroed, then the file flushed). Older files
    /// hold only entries below the newest's first, so they stay as they are. A crash part
    /// way leaves files that recovery's own cut (at the checkpoint's dispatched offset,
    /// which the caller has moved to at most `log_end`) finishes.
    pub fn truncate_to_log<L: Directory<Error = D::Error>>(
        &mut self,
        log: &CommitLog<L>,
        log_end: u64,
    ) -> Result<(), Error<D::Error>> {
        if self.head.end_phy_offset.get() < log_end as i64 {
            // Nothing indexed at or past the cut (offsets only grow).
            return Ok(());
        }
        let mut dropped = false;
        while self.files.len() > 1 {
            let Some(&last) = self.files.back() else {
                break;
            };
            let first = self.entry(last, 1)?;
            let starts_past = first.as_bytes().iter().all(|&b| b == 0)
                || first.phy_offset.get() < 0
                || first.phy_offset.get() as u64 >= log_end;
            if !starts_past {
                break;
            }
            self.dir.remove(last).media()?;
            self.files.pop_back();
            dropped = true;
        }
        if dropped {
            if let Some(&last) = self.files.back() {
                // A rolled file: its header was written and flushed when it rolled.
                self.head = self.header(last)?;
            }
        }
        self.written += 1;
        if let Err(e) = self.rebuild_last(log, log_end) {
            self.failed = true;
            return Err(e);
        }
        // rebuild_last flushed the whole file.
        self.synced = self.written;
        debug_assert!(
            self.head.end_phy_offset.get() < log_end as i64,
            "an index entry past the cut survived"
        );
        Ok(())
    }

    /// Removes index files whose every record is below `log_min`, never the newest.
    pub fn delete_before_log(&mut self, log_min: u64) -> Result<(), Error<D::Error>> {
        while self.files.len() > 1 {
            let Some(&first) = self.files.front() else {
                break;
            };
            if self.header(first)?.end_phy_offset.get() >= log_min as i64 {
                break;
            }
            self.dir.remove(first).media()?;
            self.files.pop_front();
        }
        Ok(())
    }

    /// Gives the directory back.
    pub fn into_dir(self) -> D {
        self.dir
    }
}

impl<D: Directory, const FILES: usize> IndexSource for Index<D, FILES> {
    type Error = Error<D::Error>;

    fn newest_file(&self) -> Option<u64> {
        self.files.back().copied()
    }

    fn older_file(&self, base: u64) -> Option<u64> {
        let i = self.files.iter().position(|&b| b == base)?;
        self.files.iter().nth(i.checked_sub(1)?).copied()
    }

    fn file_header(&self, base: u64) -> Result<Option<IndexHeader>, Self::Error> {
        if self.files.back() == Some(&base) {
            // The newest file's header is kept in memory, ahead of the one on disk.
            Ok(Some(self.head))
        } else if self.files.iter().any(|&b| b == base) {
            self.header(base).map(Some)
        } else {
            Ok(None)
        }
    }

    fn slot(&self, base: u64, hash: i32) -> Result<u32, Self::Error> {
        Index::slot(self, base, hash)
    }

    fn entry(&self, base: u64, n: u32) -> Result<IndexEntry, Self::Error> {
        Index::entry(self, base, n)
    }
}

#[cfg(test)]
mod tests;
