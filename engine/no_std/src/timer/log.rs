//! The timer log: append-only [`TimerUnit`]s in equal segments (RocketMQ's `timerlog`),
//! each unit linked to the previous newest unit of its slot, so a slot's units are found
//! by walking back from the wheel's `last_pos`.
//!
//! Units never straddle two segments: a unit goes in only while 52 + 16 bytes are left,
//! else a 16-byte blank (RocketMQ's filler head) closes the segment and the unit starts
//! the next one. So a segment of `size` bytes holds exactly `(size − 16) / 52` units, at
//! `base + k·52`, and every position is known without reading.
//!
//! A unit is written head last (its `size` field after the rest), so a torn append reads
//! back as a unit whose size is 0. Recovery re-verifies the units from the segment holding
//! the last flushed position and cuts the log at the first one that is not whole and
//! true (size, magic, a link to an older unit, a record inside the commit log).

use zerocopy::{FromBytes, IntoBytes};

use crate::error::Error;
use crate::layout::{TIMER_UNIT_DEFAULT, TIMER_UNIT_DELETE, TIMER_UNIT_ROLL, TimerUnit};
use crate::media::Directory;
use crate::segments::Segments;

/// Bytes of a unit.
pub const UNIT_SIZE: u64 = size_of::<TimerUnit>() as u64;
/// Bytes of the blank head that closes a segment.
pub const BLANK_SIZE: u64 = 16;
/// Magic of the blank head (RocketMQ's `BLANK_MAGIC_CODE`).
pub const BLANK_MAGIC: u32 = 0xCBD4_3194;
/// RocketMQ's `mappedFileSizeTimerLog`: 100 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 100 * 1024 * 1024;

const ALL_MAGIC: i32 = TIMER_UNIT_DEFAULT | TIMER_UNIT_ROLL | TIMER_UNIT_DELETE;

/// What recovery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// Units verified.
    pub units: u64,
    /// Where the log was cut because a unit there was torn or false, if it was.
    pub cut_at: Option<u64>,
    /// The newest unit kept, if any.
    pub last: Option<(u64, TimerUnit)>,
}

/// The timer log over `D`.
#[derive(Debug)]
pub struct TimerLog<D: Directory> {
    segs: Segments<D>,
    /// Position the next unit goes to (a blank may come first).
    end: u64,
    /// Everything below is durable.
    flushed: u64,
}

impl<D: Directory> TimerLog<D> {
    /// Opens the log in `dir`, re-verifying it from the segment holding `trusted` (the
    /// last flushed position a checkpoint recorded; 0 re-verifies everything) and
    /// cutting it at the first unit that is torn, false, or points past `log_end` (the
    /// commit log's recovered end).
    pub fn open(
        dir: D,
        segment_size: u64,
        trusted: u64,
        log_end: u64,
    ) -> Result<(Self, Recovered), Error<D::Error>> {
        assert!(
            segment_size >= UNIT_SIZE + BLANK_SIZE,
            "timer log segment size"
        );
        let segs = Segments::open(dir, segment_size)?;
        let mut log = TimerLog {
            segs,
            end: 0,
            flushed: 0,
        };
        let mut found = Recovered {
            units: 0,
            cut_at: None,
            last: None,
        };
        let Some((first, last)) = log.segs.span() else {
            return Ok((log, found));
        };
        let per = log.units_per_segment();
        let mut base = log.segs.base_of(trusted).clamp(first, last);
        log.end = base;
        // Every segment from there, every unit slot in it: bounded by the segments held.
        'segments: while base <= last {
            for k in 0..per {
                let pos = base + k * UNIT_SIZE;
                let mut b = [0u8; UNIT_SIZE as usize];
                log.segs.read(pos, &mut b)?;
                match unit_at(&b, pos, log_end) {
                    Some(u) => {
                        found.units += 1;
                        found.last = Some((pos, u));
                        log.end = pos + UNIT_SIZE;
                    }
                    None if b.iter().all(|&x| x == 0) && base == last => break 'segments,
                    None => {
                        found.cut_at = Some(pos);
                        break 'segments;
                    }
                }
            }
            // A full segment: the next unit starts the next one.
            log.end = base + segment_size;
            base += segment_size;
        }
        if let Some(at) = found.cut_at {
            log.segs.cut(at)?;
            log.end = at;
        }
        log.rewrite_from(trusted.clamp(first, log.end))?;
        Ok((log, found))
    }

    /// Writes the units from `from` to the end again, then flushes them; afterwards the
    /// whole log counts as flushed. The scan read them from what reads see, which after
    /// a flush that failed in the last run may not be durable (Linux keeps such pages,
    /// clean, in its cache, and no later flush writes them): writing dirties them again,
    /// as the commit log's `rewrite_tail` does. Below `from` (the checkpoint's flushed
    /// point) they were durable. Costs one read and one write of about a flush interval
    /// of units.
    fn rewrite_from(&mut self, from: u64) -> Result<(), Error<D::Error>> {
        let size = self.segs.size();
        let per = self.units_per_segment();
        let mut pos = from;
        // Each step moves forward a unit or to the next segment: bounded by the log.
        while pos < self.end {
            let base = self.segs.base_of(pos);
            let k = (pos - base) / UNIT_SIZE;
            if k >= per {
                pos = base + size;
                continue;
            }
            pos = base + k * UNIT_SIZE;
            let mut b = [0u8; UNIT_SIZE as usize];
            self.segs.read(pos, &mut b)?;
            self.segs.write(pos, &b)?;
            pos += UNIT_SIZE;
        }
        self.flushed = from.min(self.end);
        self.flush()
    }

    fn units_per_segment(&self) -> u64 {
        (self.segs.size() - BLANK_SIZE) / UNIT_SIZE
    }

    /// Position the next unit goes to.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Oldest position held.
    pub fn start(&self) -> u64 {
        self.segs.span().map_or(self.end, |(first, _)| first)
    }

    /// Appends `unit` (its `size` set here), closing the segment with a blank first when
    /// it has no room. Returns the unit's position.
    pub fn append(&mut self, unit: &TimerUnit) -> Result<u64, Error<D::Error>> {
        let size = self.segs.size();
        let mut pos = self.end;
        let base = self.segs.base_of(pos);
        if base + size - pos < UNIT_SIZE + BLANK_SIZE {
            if self.segs.span().is_some_and(|(_, last)| last >= base) {
                let left = (base + size - pos) as u32;
                let mut blank = [0u8; BLANK_SIZE as usize];
                blank[0..4].copy_from_slice(&left.to_be_bytes());
                blank[12..16].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
                self.segs.write(pos, &blank)?;
            }
            pos = base + size;
        }
        self.segs.ensure(pos)?;
        let mut u = *unit;
        u.size.set(UNIT_SIZE as i32);
        let bytes = u.as_bytes();
        self.segs.write(pos + 4, &bytes[4..])?;
        self.segs.write(pos, &bytes[..4])?;
        self.end = pos + UNIT_SIZE;
        Ok(pos)
    }

    /// The unit at `pos`, if a whole one is there.
    pub fn read(&self, pos: u64) -> Result<Option<TimerUnit>, Error<D::Error>> {
        let base = self.segs.base_of(pos);
        if pos < self.start()
            || pos + UNIT_SIZE > self.end
            || (pos - base) % UNIT_SIZE != 0
            || (pos - base) / UNIT_SIZE >= self.units_per_segment()
        {
            return Ok(None);
        }
        let mut b = [0u8; UNIT_SIZE as usize];
        self.segs.read(pos, &mut b)?;
        Ok(unit_at(&b, pos, u64::MAX))
    }

    /// The unflushed range, `[flushed, end)`.
    pub fn unflushed(&self) -> (u64, u64) {
        (self.flushed, self.end)
    }

    /// Calls `region` with each media holding bytes of `[from, to)` and the range within
    /// it, for an owner that syncs them itself.
    pub fn regions(
        &self,
        from: u64,
        to: u64,
        region: &mut dyn FnMut(&D::Media, core::ops::Range<u64>),
    ) {
        self.segs.regions(from, to, region);
    }

    /// Everything below `to` is durable (the owner synced [`TimerLog::regions`]).
    pub fn mark_flushed(&mut self, to: u64) {
        self.flushed = self.flushed.max(to.min(self.end));
    }

    /// Makes everything appended durable.
    pub fn flush(&mut self) -> Result<(), Error<D::Error>> {
        let (from, to) = self.unflushed();
        self.segs.flush(from, to)?;
        self.mark_flushed(to);
        Ok(())
    }

    /// Removes the oldest segments whose every record lies below `log_min` (the commit
    /// log's retention took them), never the newest; returns how many went. Bounded by
    /// the segments held.
    pub fn delete_before(&mut self, log_min: u64) -> Result<u32, Error<D::Error>> {
        let mut removed = 0;
        while let Some((first, last)) = self.segs.span() {
            if first == last {
                break;
            }
            let newest = first + (self.units_per_segment() - 1) * UNIT_SIZE;
            let mut b = [0u8; UNIT_SIZE as usize];
            self.segs.read(newest, &mut b)?;
            let Some(u) = unit_at(&b, newest, u64::MAX) else {
                break;
            };
            let end = (u.phy_offset.get() as u64).saturating_add(u.phy_size.get() as u64);
            if end > log_min {
                break;
            }
            self.segs.remove_first()?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Gives the directory back.
    pub fn into_dir(self) -> D {
        self.segs.into_dir()
    }
}

/// The unit in `b`, read at `pos`, if it is whole and true: its size, a known magic, a
/// link to an older unit or none, and a record that ends at or below `log_end`.
fn unit_at(b: &[u8; UNIT_SIZE as usize], pos: u64, log_end: u64) -> Option<TimerUnit> {
    let u = TimerUnit::read_from_bytes(b).ok()?;
    let magic = u.magic.get();
    let prev = u.prev_pos.get();
    let (phy, size) = (u.phy_offset.get(), u.phy_size.get());
    let whole = u.size.get() == UNIT_SIZE as i32
        && magic != 0
        && magic & !ALL_MAGIC == 0
        && (prev == -1 || (prev >= 0 && (prev as u64) < pos))
        && phy >= 0
        && size > 0
        && (phy as u64).checked_add(size as u64)? <= log_end;
    whole.then_some(u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faulty::FaultPlan;
    use crate::ram::RamDir;
    use std::vec;
    use std::vec::Vec;
    use zerocopy::byteorder::big_endian::{I32, I64};

    /// Segments of 3 units and a 16-byte blank (and 4 spare bytes).
    const SEG: u64 = 3 * UNIT_SIZE + BLANK_SIZE + 4;

    fn unit(phy: u64, prev: i64) -> TimerUnit {
        TimerUnit {
            size: I32::new(0),
            prev_pos: I64::new(prev),
            magic: I32::new(TIMER_UNIT_DEFAULT),
            write_time: I64::new(1_000),
            delay: I32::new(5_000),
            phy_offset: I64::new(phy as i64),
            phy_size: I32::new(100),
            topic_hash: I32::new(7),
            queue_offset: I64::new(phy as i64 / 100),
        }
    }

    /// A log over six empty segment buffers of [`bufs`].
    fn empty_log<'a>(
        plan: &'a FaultPlan,
        b: &'a mut [Vec<u8>],
    ) -> (TimerLog<RamDir<'a, 6>>, Recovered) {
        let dir: RamDir<'_, 6> = RamDir::with_buffers(plan, b).unwrap();
        TimerLog::open(dir, SEG, 0, u64::MAX).unwrap()
    }

    /// A log over `b` holding `n` unlinked units, for the records 0..100, 100..200, ….
    fn log_of_units<'a>(
        plan: &'a FaultPlan,
        b: &'a mut [Vec<u8>],
        n: u64,
    ) -> TimerLog<RamDir<'a, 6>> {
        let (mut log, _) = empty_log(plan, b);
        for i in 0..n {
            log.append(&unit(i * 100, -1)).unwrap();
        }
        log
    }

    fn bufs() -> Vec<Vec<u8>> {
        // Faulty media keep a second copy of their bytes (what is durable): twice the size.
        (0..6).map(|_| vec![0u8; 2 * SEG as usize]).collect()
    }

    #[test]
    fn units_fill_segments_and_a_blank_closes_each() {
        let plan = FaultPlan::none();
        let mut b = bufs();
        let (mut log, r) = empty_log(&plan, &mut b);
        assert_eq!(r.units, 0);
        let mut at = Vec::new();
        for i in 0..7u64 {
            at.push(
                log.append(&unit(i * 100, at.last().map_or(-1, |&p: &u64| p as i64)))
                    .unwrap(),
            );
        }
        assert_eq!(at, [0, 52, 104, SEG, SEG + 52, SEG + 104, 2 * SEG]);
        for (i, &p) in at.iter().enumerate() {
            let u = log.read(p).unwrap().unwrap();
            assert_eq!(u.phy_offset.get(), i as i64 * 100);
            assert_eq!(u.size.get(), 52);
        }
        assert_eq!(log.read(156).unwrap(), None, "the blank is no unit");
        assert_eq!(log.read(10).unwrap(), None, "not a unit position");

        // Reopened from scratch: every unit verified, nothing cut.
        let dir = log.into_dir();
        let (log, r) = TimerLog::open(dir, SEG, 0, u64::MAX).unwrap();
        assert_eq!(r.units, 7);
        assert_eq!(r.cut_at, None);
        assert_eq!(r.last.map(|(p, _)| p), Some(2 * SEG));
        assert_eq!(log.end(), 2 * SEG + 52);
        // From the last flushed position: only its segment and later are read.
        let dir = log.into_dir();
        let (log, r) = TimerLog::open(dir, SEG, SEG + 60, u64::MAX).unwrap();
        assert_eq!(r.units, 4);
        assert_eq!(log.end(), 2 * SEG + 52);
    }

    #[test]
    fn a_torn_or_false_unit_cuts_the_log_there() {
        let plan = FaultPlan::none();
        let mut b = bufs();
        let log = log_of_units(&plan, &mut b, 5);
        // A torn append: everything but the size written.
        let mut dir = log.into_dir();
        let mut torn = [0u8; 52];
        torn[4..].copy_from_slice(&unit(900, -1).as_bytes()[4..]);
        crate::media::Media::write_at(dir.media_mut(SEG).unwrap(), 104, &torn).unwrap();
        let (log, r) = TimerLog::open(dir, SEG, 0, u64::MAX).unwrap();
        assert_eq!(r.cut_at, Some(SEG + 104));
        assert_eq!(r.units, 5);
        assert_eq!(log.end(), SEG + 104);

        // A unit pointing past the commit log's end (a tail a power cut took): cut too.
        let dir = log.into_dir();
        let (log, r) = TimerLog::open(dir, SEG, 0, 250).unwrap();
        assert_eq!(r.cut_at, Some(52 * 2), "the unit of record 200..300");
        assert_eq!(r.units, 2);
        assert_eq!(log.end(), 104);
        let dir = log.into_dir();
        assert_eq!(dir.media(SEG).map(|_| ()), None, "later segments removed");
    }

    #[test]
    fn a_link_must_go_to_an_older_unit() {
        let mut b = [0u8; 52];
        b.copy_from_slice(unit(0, 52).as_bytes());
        b[0..4].copy_from_slice(&52i32.to_be_bytes());
        assert!(
            unit_at(&b, 52, u64::MAX).is_none(),
            "a unit linking to itself"
        );
        assert!(unit_at(&b, 104, u64::MAX).is_some());
    }

    #[test]
    fn segments_go_once_the_commit_log_dropped_their_records() {
        let plan = FaultPlan::none();
        let mut b = bufs();
        let mut log = log_of_units(&plan, &mut b, 8);
        // The first segment's newest record is 200..300.
        assert_eq!(log.delete_before(299).unwrap(), 0);
        assert_eq!(log.delete_before(300).unwrap(), 1);
        assert_eq!(log.start(), SEG);
        assert_eq!(log.delete_before(u64::MAX).unwrap(), 1, "never the newest");
        assert_eq!(log.start(), 2 * SEG);
        assert!(log.read(2 * SEG).unwrap().is_some());
    }
}
