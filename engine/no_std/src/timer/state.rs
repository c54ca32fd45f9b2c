//! The timer's state: the wheel, the log and the checkpoint together, and the rules that
//! keep them true across a crash.
//!
//! - **Log before wheel.** Units are appended to the log and *staged*; the wheel learns of
//!   them only in [`Timer::apply_staged`], after the owner made the log durable. A mapped
//!   wheel page may reach the disk at any moment, so this is what keeps a durable slot
//!   from pointing at a unit a power cut took.
//! - **Replay repairs the wheel.** The checkpoint records `wheel_pos`, below which every
//!   unit is in the flushed wheel; recovery links the units from there to the log's end
//!   again ([`super::wheel::Wheel::link`] is idempotent).
//! - **Delivery progress is the owner's.** The read time and the resume point inside a
//!   slot are checkpointed as the owner says, once the copies it delivered are durable:
//!   a crash repeats deliveries since then, never skips one.

use heapless::Vec;
use zerocopy::byteorder::big_endian::{I32, I64};

use super::checkpoint::TimerCheckpoint;
use super::log::{Recovered, TimerLog, UNIT_SIZE};
use super::wheel::{SlotRead, Wheel};
use crate::error::Error;
use crate::layout::{TIMER_UNIT_DEFAULT, TIMER_UNIT_DELETE, TIMER_UNIT_ROLL, TimerUnit};
use crate::media::{Directory, Media};

/// Most units staged between two log syncs.
pub const MAX_STAGED: usize = 256;
/// Slots recovery keeps behind a wheel's span (RocketMQ's `TIMER_BLANK_SLOTS`).
const BLANK_SLOTS: i64 = 60;

/// The timer's geometry and windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerConfig {
    /// Slots in the wheel's ring.
    pub slots: u32,
    /// Slot width, ms.
    pub precision_ms: i64,
    /// Delays at least this long are filed in steps of it (RocketMQ's
    /// `timerRollWindowSlot` × precision), so every pending record stays young.
    pub roll_window_ms: i64,
    /// Bytes per timer-log segment.
    pub log_segment_size: u64,
}

impl TimerConfig {
    /// RocketMQ's defaults: 7 days of 1 s slots twice, a 2-day roll window, 100 MiB logs.
    pub const SERVER: TimerConfig = TimerConfig {
        slots: super::wheel::DEFAULT_SLOTS,
        precision_ms: 1_000,
        roll_window_ms: 2 * 86_400 * 1_000,
        log_segment_size: super::log::DEFAULT_SEGMENT_SIZE,
    };
}

/// A timer message to file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filing {
    /// Its slot time (`TIMER_OUT_MS`).
    pub slot_ms: i64,
    /// Its record in the commit log.
    pub phy_offset: u64,
    /// The record's size.
    pub phy_size: u32,
    /// Its entry in the timer queue.
    pub queue_offset: u64,
    /// Java hash of its real topic.
    pub topic_hash: i32,
    /// A recall marker rather than a message.
    pub recall: bool,
}

/// A unit of a slot, as a walk hands it out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotUnit {
    /// Its position in the timer log.
    pub pos: u64,
    /// Its record in the commit log.
    pub phy_offset: u64,
    /// The record's size.
    pub phy_size: u32,
    /// When it was filed (the floor of the clock then, ms): `TIMER_ENQUEUE_MS`.
    pub enqueued_ms: i64,
    /// Filed short of its due time: put it back into the timer rather than deliver it.
    pub roll: bool,
    /// A recall marker.
    pub recall: bool,
}

/// What timer recovery found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerRecovery {
    /// The log's recovery.
    pub log: Recovered,
    /// Units linked into the wheel again.
    pub replayed: u64,
    /// Slots skipped because the timer was down longer than the wheel's span.
    pub skipped_slots: i64,
    /// No checkpoint was found: a new timer.
    pub fresh: bool,
}

/// The timer over a wheel media `W`, a log directory `D` and a checkpoint media `C`.
#[derive(Debug)]
pub struct Timer<W: Media, D: Directory, C: Media<Error = W::Error>>
where
    D: Directory<Error = W::Error>,
{
    cfg: TimerConfig,
    wheel: Wheel<W>,
    log: TimerLog<D>,
    checkpoint_media: C,
    last_checkpoint: Option<TimerCheckpoint>,
    staged: Vec<(i64, u64, i32), MAX_STAGED>,
    /// Next timer-queue entry to file.
    queue_offset: u64,
    /// Units below are linked into the wheel.
    wheel_pos: u64,
    /// Where recovery says delivery resumes: a slot time and the next unit in it.
    resume: (i64, Option<u64>),
}

type Res<T, E> = Result<T, Error<E>>;

impl<W: Media, D: Directory<Error = W::Error>, C: Media<Error = W::Error>> Timer<W, D, C> {
    /// Opens and recovers the timer. `log_end` is the commit log's recovered end (units
    /// pointing past it are cut); `now_ms` bounds how far back delivery resumes.
    pub fn open(
        wheel: W,
        log_dir: D,
        checkpoint_media: C,
        cfg: TimerConfig,
        log_end: u64,
        now_ms: i64,
    ) -> Res<(Self, TimerRecovery), W::Error> {
        assert!(
            cfg.roll_window_ms >= 2 * cfg.precision_ms
                && cfg.roll_window_ms <= (i64::from(cfg.slots) - BLANK_SLOTS) * cfg.precision_ms,
            "the roll window must fit the wheel"
        );
        let found = TimerCheckpoint::read(&checkpoint_media)?;
        let c = found.unwrap_or(TimerCheckpoint {
            read_time_ms: floor(now_ms, cfg.precision_ms),
            ..TimerCheckpoint::default()
        });
        let (log, recovered) =
            TimerLog::open(log_dir, cfg.log_segment_size, c.log_flushed, log_end)?;
        let wheel = Wheel::open(wheel, cfg.slots, cfg.precision_ms)?;
        let mut t = Timer {
            cfg,
            wheel,
            log,
            checkpoint_media,
            last_checkpoint: found,
            staged: Vec::new(),
            queue_offset: c.queue_offset,
            wheel_pos: c.wheel_pos,
            resume: (c.read_time_ms, c.resume_pos),
        };
        let replayed = t.replay(c.wheel_pos.max(t.log.start()))?;
        if let Some((_, u)) = recovered.last {
            t.queue_offset = t.queue_offset.max(u.queue_offset.get() as u64 + 1);
        }
        // A timer down longer than the ring's span finds its oldest slots reused: they are
        // skipped, counted (RocketMQ loses them the same way).
        let oldest = floor(
            now_ms.saturating_sub(t.wheel.span_ms() - BLANK_SLOTS * cfg.precision_ms),
            cfg.precision_ms,
        );
        let mut skipped = (oldest.saturating_sub(c.read_time_ms)).max(0) / cfg.precision_ms;
        if found.is_none() && recovered.units > 0 {
            // Units but no checkpoint (both copies lost): read every slot the ring still
            // holds. Deliveries repeat; none is lost.
            skipped = 0;
            t.resume = (oldest, None);
        } else if skipped > 0 {
            t.resume = (oldest, None);
        }
        Ok((
            t,
            TimerRecovery {
                log: recovered,
                replayed,
                skipped_slots: skipped,
                fresh: found.is_none(),
            },
        ))
    }

    /// Links every unit from `from` to the log's end into the wheel (again).
    fn replay(&mut self, from: u64) -> Res<u64, W::Error> {
        let mut n = 0;
        let mut pos = from;
        let end = self.log.end();
        let seg = self.cfg.log_segment_size;
        // Each step moves forward a unit or to the next segment: bounded by the log.
        while pos < end {
            match self.log.read(pos)? {
                Some(u) => {
                    let delta = if u.magic.get() & TIMER_UNIT_DELETE != 0 {
                        -1
                    } else {
                        1
                    };
                    self.wheel.relink(slot_of_unit(&u), pos, delta)?;
                    n += 1;
                    pos += UNIT_SIZE;
                }
                None => pos = (pos / seg + 1) * seg,
            }
        }
        self.wheel_pos = end;
        Ok(n)
    }

    /// The geometry and windows it was opened with.
    pub fn config(&self) -> TimerConfig {
        self.cfg
    }

    /// The next timer-queue entry to file.
    pub fn queue_offset(&self) -> u64 {
        self.queue_offset
    }

    /// Where delivery resumes after recovery: the slot time to read, and the next unit
    /// of it (`None`: from its newest).
    pub fn resume_point(&self) -> (i64, Option<u64>) {
        self.resume
    }

    /// Files `f` at `now_ms`: appends its unit and stages it for the wheel. A delay past
    /// the roll window is filed at most a window ahead, marked to be put back then.
    /// Refused with [`Error::TableFull`] while [`MAX_STAGED`] units wait for
    /// [`Timer::apply_staged`].
    pub fn file(&mut self, f: Filing, now_ms: i64) -> Res<u64, W::Error> {
        if self.staged.is_full() {
            return Err(Error::TableFull);
        }
        let write_time = floor(now_ms, self.cfg.precision_ms);
        let window = self.cfg.roll_window_ms;
        let left = f.slot_ms.saturating_sub(write_time);
        let (slot, roll) = if left >= window {
            // Less than a third of a window would be left after a whole one: half a window,
            // so the last leg is not a short one (RocketMQ's rule).
            let step = if left - window < window / 3 {
                window / 2
            } else {
                window
            };
            (floor(write_time + step, self.cfg.precision_ms), true)
        } else {
            (f.slot_ms, false)
        };
        // The slot's newest unit: a staged one, else the wheel's.
        let staged = self.staged.iter().rev().find(|(s, _, _)| *s == slot);
        let prev = match staged {
            Some(&(_, pos, _)) => pos as i64,
            None => match self.wheel.get(slot)? {
                SlotRead::Filled { last_pos, .. } => last_pos as i64,
                SlotRead::Empty | SlotRead::Rotted => -1,
            },
        };
        let mut magic = TIMER_UNIT_DEFAULT;
        if roll {
            magic |= TIMER_UNIT_ROLL;
        }
        if f.recall {
            magic |= TIMER_UNIT_DELETE;
        }
        let unit = TimerUnit {
            size: I32::new(UNIT_SIZE as i32),
            prev_pos: I64::new(prev),
            magic: I32::new(magic),
            write_time: I64::new(write_time),
            // Negative for a slot the clock passed but delivery has not reached yet (it
            // lags after a restart): the unit must still name its slot, or the walk of
            // that slot ends at it and loses it and every older unit.
            delay: I32::new(
                (slot - write_time).clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
            ),
            phy_offset: I64::new(f.phy_offset as i64),
            phy_size: I32::new(f.phy_size as i32),
            topic_hash: I32::new(f.topic_hash),
            queue_offset: I64::new(f.queue_offset as i64),
        };
        let pos = self.log.append(&unit)?;
        let delta = if f.recall { -1 } else { 1 };
        // Room was checked above.
        let _ = self.staged.push((slot, pos, delta));
        self.queue_offset = self.queue_offset.max(f.queue_offset + 1);
        Ok(pos)
    }

    /// Timer-queue entry `queue_offset` was handled without filing it (due already, so
    /// delivered at once, or unusable): filing goes on after it. The owner calls this
    /// only once what it did with the entry is durable, because recovery resumes after
    /// the newest unit in the log, past any entry before it.
    pub fn passed(&mut self, queue_offset: u64) {
        self.queue_offset = self.queue_offset.max(queue_offset + 1);
    }

    /// The log's bytes not yet durable, for an owner that syncs them itself.
    pub fn log_regions(&self, region: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        let (from, to) = self.log.unflushed();
        self.log.regions(from, to, region);
    }

    /// The owner made the log durable up to `to` (what [`Timer::log_regions`] named):
    /// the staged units below it go into the wheel.
    pub fn apply_staged(&mut self, to: u64) -> Res<(), W::Error> {
        self.log.mark_flushed(to);
        let mut kept: Vec<(i64, u64, i32), MAX_STAGED> = Vec::new();
        for &(slot, pos, delta) in &self.staged {
            if pos + UNIT_SIZE <= to {
                self.wheel.link(slot, pos, delta)?;
            } else {
                let _ = kept.push((slot, pos, delta));
            }
        }
        self.staged = kept;
        self.wheel_pos = self.staged.first().map_or(self.log.end(), |s| s.1);
        Ok(())
    }

    /// Flushes the log and applies what was staged: for owners that let the engine sync.
    pub fn flush_log(&mut self) -> Res<(), W::Error> {
        self.log.flush()?;
        self.apply_staged(self.log.end())
    }

    /// Up to `out.len()` units of the slot at `slot_ms`, newest first, starting at `from`
    /// (`None`: the slot's newest). Returns how many, and where the walk goes on (`None`
    /// when the slot is done). A slot from another turn, a rotted one and a link leaving
    /// the log end the walk.
    pub fn slot_units(
        &self,
        slot_ms: i64,
        from: Option<u64>,
        out: &mut [SlotUnit],
    ) -> Res<(usize, Option<u64>), W::Error> {
        let mut next = match from {
            Some(p) => Some(p),
            None => match self.wheel.get(slot_ms)? {
                SlotRead::Filled { last_pos, .. } => Some(last_pos),
                SlotRead::Empty | SlotRead::Rotted => None,
            },
        };
        let mut n = 0;
        while let Some(pos) = next {
            if n == out.len() {
                break;
            }
            let Some(u) = self.log.read(pos)? else {
                next = None;
                break;
            };
            if slot_of_unit(&u) != floor(slot_ms, self.cfg.precision_ms) {
                next = None;
                break;
            }
            let magic = u.magic.get();
            out[n] = SlotUnit {
                pos,
                phy_offset: u.phy_offset.get() as u64,
                phy_size: u.phy_size.get() as u32,
                enqueued_ms: u.write_time.get(),
                roll: magic & TIMER_UNIT_ROLL != 0,
                recall: magic & TIMER_UNIT_DELETE != 0,
            };
            n += 1;
            // Links only go to older units: the walk ends.
            let prev = u.prev_pos.get();
            next = (prev >= 0 && (prev as u64) < pos).then_some(prev as u64);
        }
        Ok((n, next))
    }

    /// Writes the checkpoint: the wheel's changes flushed first, then the record with
    /// delivery done up to (`read_time_ms`, `resume_pos`) and filing up to `queue_offset`,
    /// as the owner says: both count only work whose results are durable (delivered
    /// copies, entries passed over), so the owner may name a point behind the live one.
    pub fn checkpoint(
        &mut self,
        read_time_ms: i64,
        resume_pos: Option<u64>,
        queue_offset: u64,
    ) -> Res<(), W::Error> {
        assert!(
            queue_offset <= self.queue_offset,
            "a checkpoint cannot count entries not yet filed"
        );
        if let Some(r) = self.wheel.take_dirty() {
            self.wheel.flush(r)?;
        }
        let c = TimerCheckpoint {
            read_time_ms,
            log_flushed: self.log.unflushed().0,
            queue_offset,
            wheel_pos: self.wheel_pos,
            resume_pos,
            seq: 0,
        };
        let written = c.write(self.last_checkpoint.as_ref(), &mut self.checkpoint_media)?;
        self.last_checkpoint = Some(written);
        Ok(())
    }

    /// Drops log segments whose records the commit log's retention took (below
    /// `log_min`); returns how many went.
    pub fn delete_before(&mut self, log_min: u64) -> Res<u32, W::Error> {
        self.log.delete_before(log_min)
    }

    /// The wheel's span, ms.
    pub fn span_ms(&self) -> i64 {
        self.wheel.span_ms()
    }

    /// Gives the parts back, unflushed, as a crash would leave them.
    pub fn into_parts(self) -> (W, D, C) {
        (
            self.wheel.into_media(),
            self.log.into_dir(),
            self.checkpoint_media,
        )
    }
}

/// The slot a unit is filed under.
fn slot_of_unit(u: &TimerUnit) -> i64 {
    u.write_time.get().saturating_add(i64::from(u.delay.get()))
}

fn floor(ms: i64, precision: i64) -> i64 {
    ms.div_euclid(precision.max(1)) * precision.max(1)
}
