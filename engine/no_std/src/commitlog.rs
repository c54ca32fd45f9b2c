//! The commit log: every message of every topic, appended in one sequence of segments.
//!
//! A record never spans segments. When the next record (plus room for a blank marker) does
//! not fit in the active segment, a [`BlankRecord`] fills the rest and writing continues at
//! the next segment. Offsets are byte positions in the whole log, as in RocketMQ.

use zerocopy::IntoBytes;
use zerocopy::byteorder::big_endian::{I32, U32};

use crate::error::{Error, MediaResult};
use crate::layout::{BlankRecord, MAGIC_BLANK};
use crate::media::Directory;
use crate::record::{MessageIn, StoreStamp};
use crate::segments::Segments;

pub use read::slot_from_head;

/// Room always left at a segment's end for the blank marker (RocketMQ's
/// `END_FILE_MIN_BLANK_LENGTH`).
pub const BLANK_RESERVE: u64 = 8;

/// Bytes copied at a time when recovery writes the log's tail again (on the stack).
const REWRITE_CHUNK: usize = 512;

/// RocketMQ's server default segment size: 1 GiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 1 << 30;

/// Where an appended record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Commit-log offset of the record.
    pub offset: u64,
    /// Its size in bytes.
    pub size: u32,
}

/// What is at a position of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// A record of this size starts here.
    Record(u32),
    /// The segment's blank tail: the next record is at this offset.
    Skip(u64),
    /// Nothing written here yet.
    End,
}

/// How to find the end of the log when opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The store was closed cleanly at this end offset: trust it after a cheap check.
    Clean {
        /// The end written at shutdown.
        end: u64,
    },
    /// The store was not closed cleanly: scan forward from the segment holding `from`,
    /// verifying every record, and cut the log at the first one that fails.
    Scan {
        /// A position known to be durable (from the checkpoint); 0 scans everything.
        from: u64,
    },
}

/// What recovery found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records verified by the scan.
    pub records_verified: u64,
    /// Where the log now ends.
    pub end: u64,
    /// Bytes after `end` that were cut (torn or unflushed garbage), within the last segment.
    pub cut: bool,
}

/// The commit log over the segments of one directory.
#[derive(Debug)]
pub struct CommitLog<D: Directory> {
    segs: Segments<D>,
    /// Next append offset.
    write_pos: u64,
    /// Everything below this is durable.
    flushed: u64,
    /// A flush failed: what it covered may never reach the media, and no later flush can
    /// say otherwise (Linux reports a failed write-back once). Appends and flushes are
    /// refused and `flushed` stays put until the log is reopened.
    failed: bool,
    /// Counts moves of the end backwards (`truncate`, `reset_empty_to`): a flush range
    /// taken before one may now hold bytes written after it.
    rewinds: u64,
}

impl<D: Directory> CommitLog<D> {
    /// Opens the log in `dir` and finds its end as `recovery` says.
    pub fn open(
        dir: D,
        segment_size: u64,
        recovery: Recovery,
    ) -> Result<(Self, RecoveryReport), Error<D::Error>> {
        assert!(segment_size > BLANK_RESERVE * 2, "segment too small");
        let segs = Segments::open(dir, segment_size)?;
        let mut log = Self {
            segs,
            write_pos: 0,
            flushed: 0,
            failed: false,
            rewinds: 0,
        };
        let Some((first, last)) = log.segs.span() else {
            return Ok((log, RecoveryReport::default()));
        };
        let mut report = RecoveryReport::default();
        let clean_end = match recovery {
            Recovery::Clean { end } if end >= first && end <= last + segment_size => {
                log.write_pos = end;
                match log.slot_at(end) {
                    Ok(Slot::End) => Some(end),
                    _ if end == last + segment_size => Some(end),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(end) = clean_end {
            log.write_pos = end;
            log.flushed = end;
            report.end = end;
            // After a clean close nothing lies past the end within its segment (appends only
            // extend it, and recovery or truncation zeroed anything else), so the tail is
            // not read: on a preallocated segment that read would fault in every page (1 s
            // for 1 GiB, at every clean restart). A later segment is the next one made
            // ahead, or a leftover of a failed roll: it goes, unread, and the broker makes
            // the next one ahead again.
            if last > log.segs.base_of(end) {
                log.segs.remove_after(end)?;
            }
            return Ok((log, report));
        }
        let from = match recovery {
            Recovery::Scan { from } => from.clamp(first, last),
            Recovery::Clean { .. } => {
                crate::trace::log_warn!("clean end does not match the log; scanning");
                first
            }
        };
        let mut pos = log.segs.base_of(from);
        loop {
            match log.verified_slot_at(pos) {
                Ok(Slot::Record(size)) => {
                    pos += u64::from(size);
                    report.records_verified += 1;
                }
                Ok(Slot::Skip(next)) => {
                    pos = next;
                    if next > last {
                        break;
                    }
                }
                Ok(Slot::End) | Err(Error::Corrupt(_)) | Err(Error::Record(_)) => {
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        log.write_pos = pos;
        log.flushed = pos;
        report.end = pos;
        // Anything after the end is torn or unflushed: zero it so no later scan sees it.
        report.cut = log.segs.cut(pos)?;
        Ok((log, report))
    }

    /// Bytes per segment.
    pub fn segment_size(&self) -> u64 {
        self.segs.size()
    }
    /// Offset of the oldest byte still held.
    pub fn min_offset(&self) -> u64 {
        self.segs
            .span()
            .map_or(self.write_pos, |(first, _)| first.min(self.write_pos))
    }
    /// Offset the next record will be written at (the log's end).
    pub fn max_offset(&self) -> u64 {
        self.write_pos
    }
    /// Everything below this offset is durable.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed
    }

    /// Starts an empty log at `offset` (a replica starting from its master's position).
    pub fn reset_empty_to(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        if self.segs.span().is_some() {
            return Err(Error::OutOfRange);
        }
        self.write_pos = offset;
        self.flushed = offset;
        self.rewinds += 1;
        Ok(())
    }

    /// Makes room for `len` bytes at the end: writes the blank tail and rolls to the next
    /// segment when they do not fit in the active one. Returns the offset to write at.
    fn reserve(&mut self, len: u64) -> Result<u64, Error<D::Error>> {
        let size = self.segs.size();
        if len + BLANK_RESERVE > size {
            return Err(Error::TooLarge);
        }
        let base = self.segs.base_of(self.write_pos);
        let remaining = base + size - self.write_pos;
        self.segs.ensure(self.write_pos)?;
        if len + BLANK_RESERVE > remaining {
            let blank = BlankRecord {
                total_size: I32::new(remaining as i32),
                magic: U32::new(MAGIC_BLANK),
            };
            self.segs.write(self.write_pos, blank.as_bytes())?;
            self.write_pos = base + size;
            self.segs.ensure(self.write_pos)?;
        }
        Ok(self.write_pos)
    }

    /// Writes the record at `stamp.physical_offset` except its first 8 bytes (size and
    /// magic), which it returns for [`CommitLog::put_head`].
    ///
    /// Until the head lands, the slot reads as unwritten, so a process killed mid-copy,
    /// or a write torn anywhere in the record, leaves no half record that parses:
    /// recovery sees the end of the log there.
    fn put_body(
        &mut self,
        msg: &MessageIn<'_>,
        crc: i32,
        stamp: StoreStamp,
        len: usize,
    ) -> Result<[u8; 8], Error<D::Error>> {
        let at = stamp.physical_offset as u64;
        let base = self.segs.base_of(at);
        let start = (at - base) as usize;
        let mut head = [0u8; 8];
        if (start + len) as u64 > self.segs.size() {
            return Err(Error::OutOfRange);
        }
        let media = self.segs.media_mut(base)?;
        if let Some(bytes) = crate::media::Media::as_bytes_mut(media) {
            let out = bytes.get_mut(start..start + len).ok_or(Error::OutOfRange)?;
            let mut pos = 0usize;
            msg.encode_pieces(stamp, crc, &mut |piece: &[u8]| {
                let skip = 8usize.saturating_sub(pos).min(piece.len());
                head[pos.min(8)..pos.min(8) + skip].copy_from_slice(&piece[..skip]);
                out[pos + skip..pos + piece.len()].copy_from_slice(&piece[skip..]);
                pos += piece.len();
                Ok::<(), Error<D::Error>>(())
            })?;
            debug_assert_eq!(pos, len, "encoded size differs from encoded_len");
            return Ok(head);
        }
        // Media that is not memory: the pieces in one write, less the head's first 8
        // bytes (the fixed part, first, starts with the whole head).
        msg.with_pieces(stamp, crc, &mut |pieces| {
            let [fixed, body, topic_len, topic, props_len, props] = *pieces;
            let (first, after) = fixed.split_at(fixed.len().min(8));
            head[..first.len()].copy_from_slice(first);
            let rest = [after, body, topic_len, topic, props_len, props];
            debug_assert_eq!(
                8 + rest.iter().map(|p| p.len()).sum::<usize>(),
                len,
                "encoded size differs from encoded_len"
            );
            crate::media::Media::write_pieces(media, start as u64 + 8, &rest)
        })
        .media()?;
        Ok(head)
    }

    /// Publishes a record written by [`CommitLog::put_body`].
    fn put_head(&mut self, at: u64, head: &[u8; 8]) -> Result<(), Error<D::Error>> {
        // Keep the compiler from moving body stores after the head: a process killed
        // between them must not leave a head over a partial body.
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Release);
        self.segs.write(at, head)
    }

    /// Appends one record. `queue_offset` is the caller's counter for the record's queue.
    pub fn append(
        &mut self,
        msg: &MessageIn<'_>,
        queue_offset: i64,
        store_timestamp: i64,
    ) -> Result<Appended, Error<D::Error>> {
        let crc = crate::hash::body_crc(msg.body);
        self.append_with_crc(msg, crc, queue_offset, store_timestamp)
    }

    /// Like [`CommitLog::append`] with the body CRC (`hash::body_crc`) already computed.
    pub fn append_with_crc(
        &mut self,
        msg: &MessageIn<'_>,
        crc: i32,
        queue_offset: i64,
        store_timestamp: i64,
    ) -> Result<Appended, Error<D::Error>> {
        self.refuse_if_failed()?;
        let len = msg.encoded_len()?;
        let at = self.reserve(len as u64)?;
        debug_assert!(
            at - self.segs.base_of(at) + len as u64 + BLANK_RESERVE <= self.segs.size(),
            "record does not fit its segment"
        );
        let stamp = StoreStamp {
            queue_offset,
            physical_offset: at as i64,
            store_timestamp,
        };
        let head = self.put_body(msg, crc, stamp, len)?;
        self.put_head(at, &head)?;
        self.write_pos = at + len as u64;
        debug_assert!(
            self.segs.base_of(self.write_pos - 1) == self.segs.base_of(at),
            "record crossed its segment"
        );
        Ok(Appended {
            offset: at,
            size: len as u32,
        })
    }

    /// Appends a batch into one segment, with consecutive queue offsets from
    /// `first_queue_offset`. `landed` is told where each record went, in order.
    pub fn append_batch(
        &mut self,
        msgs: &[MessageIn<'_>],
        first_queue_offset: i64,
        store_timestamp: i64,
        landed: &mut dyn FnMut(Appended),
    ) -> Result<(), Error<D::Error>> {
        let crc = |_: usize, m: &MessageIn<'_>| crate::hash::body_crc(m.body);
        self.append_batch_with(msgs, &crc, first_queue_offset, store_timestamp, landed)
    }

    /// Like [`CommitLog::append_batch`] with each record's body CRC given by `crc(i, m)`
    /// (computed by the caller before its lock).
    pub fn append_batch_with(
        &mut self,
        msgs: &[MessageIn<'_>],
        crc: &dyn Fn(usize, &MessageIn<'_>) -> i32,
        first_queue_offset: i64,
        store_timestamp: i64,
        landed: &mut dyn FnMut(Appended),
    ) -> Result<(), Error<D::Error>> {
        self.refuse_if_failed()?;
        let mut total = 0u64;
        for m in msgs {
            total += m.encoded_len()? as u64;
        }
        let start = self.reserve(total)?;
        debug_assert!(
            start - self.segs.base_of(start) + total + BLANK_RESERVE <= self.segs.size(),
            "batch does not fit its segment"
        );
        // The first record's head goes last: until it lands, no record of the batch is
        // visible, so a batch is stored whole or not at all.
        let mut first_head = None;
        let mut at = start;
        for (i, m) in msgs.iter().enumerate() {
            let len = m.encoded_len()?;
            let stamp = StoreStamp {
                queue_offset: first_queue_offset + i as i64,
                physical_offset: at as i64,
                store_timestamp,
            };
            let head = self.put_body(m, crc(i, m), stamp, len)?;
            if i == 0 {
                first_head = Some(head);
            } else {
                self.put_head(at, &head)?;
            }
            at += len as u64;
        }
        if let Some(head) = first_head {
            self.put_head(start, &head)?;
        }
        debug_assert_eq!(at, start + total, "batch size differs from its records'");
        self.write_pos = at;
        let mut at = start;
        for m in msgs {
            let size = m.encoded_len()? as u32;
            landed(Appended { offset: at, size });
            at += u64::from(size);
        }
        Ok(())
    }

    /// Makes everything appended so far durable. Returns the new flushed offset.
    ///
    /// A media error here is fail-stop: the log remembers it, returns it, and from then on
    /// refuses appends and flushes with [`Error::FlushFailed`] (see
    /// [`CommitLog::is_failed`]).
    pub fn flush(&mut self) -> Result<u64, Error<D::Error>> {
        self.refuse_if_failed()?;
        let (from, to) = (self.flushed, self.write_pos);
        if to > from {
            if let Err(e) = self.segs.flush(from, to) {
                self.failed = true;
                crate::trace::log_warn!("commit-log flush failed; refusing writes until reopened");
                return Err(e);
            }
            self.flushed = to;
        }
        Ok(self.flushed)
    }

    /// The range a flush would make durable now: `(flushed, end)`, for callers that sync
    /// the segments themselves without holding the log (see [`CommitLog::mark_flushed`]).
    pub fn unflushed(&self) -> (u64, u64) {
        (self.flushed, self.write_pos)
    }

    /// The segments' directory, for its own settings (how an owner's writes reach the
    /// files, say); segments are made and removed by the log alone.
    pub fn dir_mut(&mut self) -> &mut D {
        self.segs.dir_mut()
    }

    /// Calls `f` with the media of every segment holding bytes in `[from, to)` and the
    /// range of them within that media, oldest first. Segments not created are skipped.
    pub fn regions(&self, from: u64, to: u64, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        self.segs.regions(from, to, f);
    }

    /// Calls `f` with the segment the log ends in and the range from its end to the
    /// segment's end: where the next records go (an owner with mapped files advises that
    /// part for writing). Nothing when that segment is not made yet.
    pub fn tail(&self, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        self.segs.rest_of_segment(self.write_pos, f);
    }

    /// Records that the caller made everything below `upto` durable by syncing the
    /// segments' media itself. Never moves the watermark back or past the end, and does
    /// nothing once a flush failed.
    pub fn mark_flushed(&mut self, upto: u64) {
        if !self.failed {
            self.flushed = self.flushed.max(upto.min(self.write_pos));
        }
    }

    /// How often the end moved backwards (a truncation). A caller that took
    /// [`CommitLog::unflushed`] before and syncs outside the log should mark nothing
    /// flushed if this changed meanwhile: bytes in its range may have been written since.
    pub fn rewinds(&self) -> u64 {
        self.rewinds
    }

    /// Records that a flush failed outside the log (an owner that syncs duplicated file
    /// handles itself saw an error): from now on the log acts as if its own flush had
    /// failed.
    pub fn mark_flush_failed(&mut self) {
        if !self.failed {
            crate::trace::log_warn!("commit-log sync failed; refusing writes until reopened");
        }
        self.failed = true;
    }

    /// Whether a flush failed since the log was opened: appends and flushes are refused
    /// and the flushed offset no longer moves.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Writes `[from, end)` again, then flushes it; afterwards everything below the end is
    /// durable. Recovery calls it for the part of the log its scan found past the last
    /// checkpoint's flushed offset: a flush that failed in the previous run may have left
    /// those bytes readable but not durable (Linux keeps such pages, clean, in its cache,
    /// and no later flush writes them), and writing them dirties them again. Costs one
    /// read and one write of that tail.
    pub(crate) fn rewrite_tail(&mut self, from: u64) -> Result<(), Error<D::Error>> {
        self.refuse_if_failed()?;
        let from = from.clamp(self.min_offset(), self.write_pos);
        let size = self.segs.size();
        let mut chunk = [0u8; REWRITE_CHUNK];
        let mut at = from;
        while at < self.write_pos {
            let base = self.segs.base_of(at);
            let n = (base + size - at)
                .min(self.write_pos - at)
                .min(REWRITE_CHUNK as u64) as usize;
            self.segs.read(at, &mut chunk[..n])?;
            self.segs.write(at, &chunk[..n])?;
            at += n as u64;
        }
        self.flushed = self.flushed.min(from);
        self.flush().map(drop)
    }

    fn refuse_if_failed(&self) -> Result<(), Error<D::Error>> {
        if self.failed {
            Err(Error::FlushFailed)
        } else {
            Ok(())
        }
    }

    /// Cuts the log at `offset`, which must be a record boundary
    /// ([`CommitLog::is_record_boundary`]): later bytes are zeroed and later segments
    /// removed. Used when a replica must follow a master that lost a tail.
    ///
    /// In this order, so a crash anywhere leaves either the whole log or exactly the
    /// records below `offset` (a recovery scan that starts at or below `offset`, which
    /// the caller's checkpoint must ensure, stops at the first head that is not a record):
    /// 1. everything appended is flushed: no record below the cut can be lost later;
    /// 2. the 8-byte head at `offset` is zeroed and flushed. This is the commit point:
    ///    from here the log ends at `offset` (`max_offset` says so even if a later step
    ///    fails), and a torn head reads as the end too;
    /// 3. the rest is zeroed and later segments removed ([`Segments::cut`]), which
    ///    recovery would otherwise do.
    ///
    /// A failure after step 1 is fail-stop (the log refuses appends until reopened).
    pub fn truncate(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        self.refuse_if_failed()?;
        if offset < self.min_offset() || offset > self.write_pos {
            return Err(Error::OutOfRange);
        }
        if !self.is_record_boundary(offset)? {
            return Err(Error::NotRecordBoundary);
        }
        if offset == self.write_pos {
            return Ok(());
        }
        self.flush()?;
        debug_assert!(self.flushed >= offset, "records below the cut not durable");
        let r = self.cut_at(offset);
        if r.is_err() {
            self.failed = true;
            crate::trace::log_warn!("commit-log truncation failed; refusing writes until reopened");
        }
        r
    }

    /// Steps 2 and 3 of [`CommitLog::truncate`].
    fn cut_at(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        let base = self.segs.base_of(offset);
        let at = offset - base;
        let media = self.segs.media_mut(base)?;
        crate::media::Media::write_at(media, at, &[0u8; 8]).media()?;
        crate::media::Media::flush(media, at..at + 8).media()?;
        // Committed: the end is here now, whatever happens to the rest.
        self.write_pos = offset;
        self.flushed = self.flushed.min(offset);
        self.rewinds += 1;
        self.segs.cut(offset)?;
        debug_assert!(
            self.segs.span().is_none_or(|(_, last)| last == base),
            "a segment past the cut survived"
        );
        Ok(())
    }

    /// Removes whole segments that end at or before `offset`, never the active one.
    /// Returns how many were removed.
    pub fn delete_segments_before(&mut self, offset: u64) -> Result<u32, Error<D::Error>> {
        let mut removed = 0;
        while let Some((first, last)) = self.segs.span() {
            if first == last
                || first + self.segs.size() > offset
                || first + self.segs.size() > self.write_pos
            {
                break;
            }
            self.segs.remove_first()?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Base offsets of the oldest and newest segment.
    pub fn segment_span(&self) -> Option<(u64, u64)> {
        self.segs.span()
    }

    /// Gives the directory back (the process "stops" without flushing, as a crash would).
    pub fn into_dir(self) -> D {
        self.segs.into_dir()
    }
}

mod read;
mod replica;

#[cfg(test)]
mod tests;
