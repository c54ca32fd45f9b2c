//! The timer wheel: a ring of [`TimerSlot`]s, one per precision-wide span of time, on one
//! media (RocketMQ's `timerwheel` file). Slot `i` holds the units of the times `t` with
//! `(t / precision) mod slots == i`; a slot remembers which turn of the ring it holds, so
//! one left from an earlier turn reads as empty.
//!
//! The wheel only points into the timer log. After a crash the log is the truth: recovery
//! replays its newest units into the wheel ([`Wheel::link`] is idempotent), which is why
//! a slot carries a CRC and a rotted one reads as [`SlotRead::Rotted`] rather than as
//! positions to follow.

use zerocopy::byteorder::big_endian::{I32, I64, U32};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Corruption, Error, MediaResult};
use crate::layout::TimerSlot;
use crate::media::Media;

/// Bytes of a slot.
pub const SLOT_SIZE: u64 = size_of::<TimerSlot>() as u64;

/// RocketMQ's ring: 7 days of 1 s slots, twice (`TIMER_WHEEL_TTL_DAY` × 86,400 × 2).
pub const DEFAULT_SLOTS: u32 = 7 * 86_400 * 2;

/// What a slot holds for a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRead {
    /// No unit is filed under this time.
    Empty,
    /// Units are filed under this time: the ends of their list.
    Filled {
        /// Timer-log offset of the oldest unit.
        first_pos: u64,
        /// Timer-log offset of the newest unit, where a walk starts.
        last_pos: u64,
        /// Units added (advisory).
        num: i32,
    },
    /// The slot's bytes fail their CRC: recovery rebuilds it from the log.
    Rotted,
}

/// The wheel over `M`.
#[derive(Debug)]
pub struct Wheel<M: Media> {
    media: M,
    slots: u32,
    precision_ms: i64,
    /// Byte range written since the last [`Wheel::take_dirty`].
    dirty: Option<(u64, u64)>,
}

impl<M: Media> Wheel<M> {
    /// The wheel of `slots` slots of `precision_ms` on `media`. An empty media is sized
    /// for them; one of another size is refused (a wheel made with another geometry would
    /// file every time under the wrong slot).
    pub fn open(mut media: M, slots: u32, precision_ms: i64) -> Result<Self, Error<M::Error>> {
        assert!(slots >= 2 && precision_ms >= 1, "wheel geometry");
        let size = u64::from(slots) * SLOT_SIZE;
        if media.is_empty() {
            media.set_len(size).media()?;
        }
        if media.len() != size {
            return Err(Corruption::TimerWheelSize { len: media.len() }.into());
        }
        Ok(Wheel {
            media,
            slots,
            precision_ms,
            dirty: None,
        })
    }

    /// Slots in the ring.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The span of time the ring covers, ms: a time further ahead than this would land on
    /// a slot still holding an earlier one.
    pub fn span_ms(&self) -> i64 {
        i64::from(self.slots) * self.precision_ms
    }

    fn at(&self, time_ms: i64) -> (u64, i64) {
        let turn = time_ms.div_euclid(self.precision_ms);
        let i = turn.rem_euclid(i64::from(self.slots)) as u64;
        (i * SLOT_SIZE, turn)
    }

    /// The slot of `time_ms`.
    pub fn get(&self, time_ms: i64) -> Result<SlotRead, Error<M::Error>> {
        let (at, turn) = self.at(time_ms);
        let mut b = [0u8; SLOT_SIZE as usize];
        self.media.read_at(at, &mut b).media()?;
        let s = TimerSlot::read_from_bytes(&b).map_err(|_| Error::OutOfRange)?;
        if b.iter().all(|&x| x == 0) {
            return Ok(SlotRead::Empty);
        }
        if s.magic.get() != crc(&b) {
            return Ok(SlotRead::Rotted);
        }
        if s.time.get() != turn || s.last_pos.get() < 0 || s.first_pos.get() < 0 {
            return Ok(SlotRead::Empty);
        }
        Ok(SlotRead::Filled {
            first_pos: s.first_pos.get() as u64,
            last_pos: s.last_pos.get() as u64,
            num: s.num.get(),
        })
    }

    /// Files the unit at `pos` as the newest of `time_ms`'s slot (it links to the slot's
    /// previous newest itself). Linking a unit the slot already ends at, or an older one,
    /// changes nothing: recovery replays units that may be in the wheel already.
    pub fn link(&mut self, time_ms: i64, pos: u64, delta: i32) -> Result<(), Error<M::Error>> {
        self.link_or_rewrite(time_ms, pos, delta, false)
    }

    /// [`Wheel::link`] for recovery's replay: a slot that holds the unit already is
    /// written again too. What reads see of it may be a write that a flush failing in
    /// the last run left readable but not durable; writing it dirties it again, so the
    /// next checkpoint's flush makes it durable before it claims the unit.
    pub fn relink(&mut self, time_ms: i64, pos: u64, delta: i32) -> Result<(), Error<M::Error>> {
        self.link_or_rewrite(time_ms, pos, delta, true)
    }

    fn link_or_rewrite(
        &mut self,
        time_ms: i64,
        pos: u64,
        delta: i32,
        rewrite: bool,
    ) -> Result<(), Error<M::Error>> {
        let (first, last, num) = match self.get(time_ms)? {
            SlotRead::Filled {
                first_pos,
                last_pos,
                num,
            } if last_pos >= pos => {
                if !rewrite {
                    return Ok(());
                }
                (first_pos, last_pos, num)
            }
            SlotRead::Filled { first_pos, num, .. } => (first_pos, pos, num.saturating_add(delta)),
            SlotRead::Empty | SlotRead::Rotted => (pos, pos, delta),
        };
        self.put(time_ms, first, last, num)
    }

    fn put(
        &mut self,
        time_ms: i64,
        first: u64,
        last: u64,
        num: i32,
    ) -> Result<(), Error<M::Error>> {
        let (at, turn) = self.at(time_ms);
        let mut s = TimerSlot {
            time: I64::new(turn),
            first_pos: I64::new(first as i64),
            last_pos: I64::new(last as i64),
            num: I32::new(num),
            magic: U32::new(0),
        };
        s.magic = U32::new(crc(s.as_bytes()));
        self.media.write_at(at, s.as_bytes()).media()?;
        let (lo, hi) = self.dirty.unwrap_or((at, at + SLOT_SIZE));
        self.dirty = Some((lo.min(at), hi.max(at + SLOT_SIZE)));
        Ok(())
    }

    /// The byte range written since the last call, for the owner to make durable (the
    /// checkpoint says which log units the flushed wheel covers).
    pub fn take_dirty(&mut self) -> Option<core::ops::Range<u64>> {
        self.dirty.take().map(|(lo, hi)| lo..hi)
    }

    /// Makes `range` durable.
    pub fn flush(&mut self, range: core::ops::Range<u64>) -> Result<(), Error<M::Error>> {
        self.media.flush(range).media()
    }

    /// The media, for an owner that syncs it itself.
    pub fn media(&self) -> &M {
        &self.media
    }

    /// Gives the media back.
    pub fn into_media(self) -> M {
        self.media
    }
}

/// CRC32 of a slot's first 28 bytes.
fn crc(slot: &[u8]) -> u32 {
    crc32fast::hash(&slot[..28])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ram::RamMedia;
    use std::vec;

    fn wheel(buf: &mut [u8]) -> Wheel<RamMedia<'_>> {
        Wheel::open(RamMedia::new(buf, 0).unwrap(), 8, 1000).unwrap()
    }

    /// A slot holding the single unit at `pos`.
    fn one_unit(pos: u64) -> SlotRead {
        SlotRead::Filled {
            first_pos: pos,
            last_pos: pos,
            num: 1,
        }
    }

    #[test]
    fn units_link_newest_last_and_a_replay_changes_nothing() {
        let mut buf = vec![0u8; 8 * 32];
        let mut w = wheel(&mut buf);
        assert_eq!(w.get(5_000).unwrap(), SlotRead::Empty);
        w.link(5_000, 0, 1).unwrap();
        w.link(5_999, 52, 1).unwrap();
        let filled = SlotRead::Filled {
            first_pos: 0,
            last_pos: 52,
            num: 2,
        };
        assert_eq!(w.get(5_500).unwrap(), filled);
        // Recovery replaying both units again.
        w.link(5_000, 0, 1).unwrap();
        w.link(5_000, 52, 1).unwrap();
        assert_eq!(w.get(5_000).unwrap(), filled);
        assert_eq!(w.take_dirty(), Some(5 * 32..6 * 32));
        assert_eq!(w.take_dirty(), None);
    }

    #[test]
    fn a_slot_of_an_earlier_turn_reads_as_empty_and_is_reused() {
        let mut buf = vec![0u8; 8 * 32];
        let mut w = wheel(&mut buf);
        w.link(3_000, 104, 1).unwrap();
        // 8 slots of 1 s later: the same slot, the next turn.
        assert_eq!(w.get(11_000).unwrap(), SlotRead::Empty);
        w.link(11_000, 208, 1).unwrap();
        assert_eq!(w.get(11_000).unwrap(), one_unit(208));
        assert_eq!(w.get(3_000).unwrap(), SlotRead::Empty);
    }

    #[test]
    fn a_rotted_slot_is_reported_and_rebuilt_by_the_next_link() {
        let mut buf = vec![0u8; 8 * 32];
        let mut w = wheel(&mut buf);
        w.link(2_000, 52, 1).unwrap();
        let mut slot = [0u8; 32];
        w.media.read_at(2 * 32, &mut slot).unwrap();
        slot[17] ^= 0x40;
        w.media.write_at(2 * 32, &slot).unwrap();
        assert_eq!(w.get(2_000).unwrap(), SlotRead::Rotted);
        w.link(2_000, 104, 1).unwrap();
        assert_eq!(w.get(2_000).unwrap(), one_unit(104));
    }

    #[test]
    fn a_wheel_of_another_geometry_is_refused() {
        let mut buf = vec![0u8; 16 * 32];
        let m = RamMedia::new(&mut buf, 16 * 32).unwrap();
        assert_eq!(
            Wheel::open(m, 8, 1000).err(),
            Some(Error::Corrupt(Corruption::TimerWheelSize { len: 16 * 32 }))
        );
    }

    #[test]
    fn times_before_1970_and_far_ahead_find_a_slot() {
        let mut buf = vec![0u8; 8 * 32];
        let mut w = wheel(&mut buf);
        for t in [i64::MIN, -1, 0, i64::MAX] {
            w.link(t, 7, 1).unwrap();
            assert!(matches!(w.get(t).unwrap(), SlotRead::Filled { .. }), "{t}");
        }
    }
}
