//! The timer checkpoint: how far the timer got, in two CRC-sealed copies written in turn,
//! so a write torn by a crash leaves the previous copy to recover from. Losing both would
//! make recovery start over (every retained timer message filed and delivered again), so
//! one torn write must never cost both.

use zerocopy::byteorder::big_endian::{I64, U32};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, MediaResult};
use crate::hash::{page_crc, sealed};
use crate::layout::{CHECKPOINT_MAGIC, TIMER_CHECKPOINT_COPY_AT, TimerCheckpointLayout};
use crate::media::Media;

const LEN: usize = core::mem::size_of::<TimerCheckpointLayout>();
const VERSION: u32 = 1;
/// Bytes the file occupies: one page, both copies in it.
pub const FILE_SIZE: u64 = 4096;

/// The positions timer recovery starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TimerCheckpoint {
    /// Slots before this time are delivered.
    pub read_time_ms: i64,
    /// Timer-log position below which the log is durable.
    pub log_flushed: u64,
    /// Timer-queue offset below which every entry is filed (or was due and delivered).
    pub queue_offset: u64,
    /// Timer-log position below which every unit is in the flushed wheel.
    pub wheel_pos: u64,
    /// The next unit of the slot at `read_time_ms` to deliver; `None` for its newest.
    pub resume_pos: Option<u64>,
    /// Write count of the copy it was read from.
    pub seq: u64,
}

impl TimerCheckpoint {
    /// The current checkpoint in `media`: the valid copy with the higher `seq`; `None`
    /// when neither is valid (a new timer).
    pub fn read<M: Media>(media: &M) -> Result<Option<Self>, Error<M::Error>> {
        let mut best: Option<Self> = None;
        for at in [0, TIMER_CHECKPOINT_COPY_AT] {
            if media.len() < at + LEN as u64 {
                continue;
            }
            let mut b = [0u8; LEN];
            media.read_at(at, &mut b).media()?;
            if let Some(c) = decode(&b) {
                if best.is_none_or(|x| c.seq > x.seq) {
                    best = Some(c);
                }
            }
        }
        Ok(best)
    }

    /// Writes `self` as the copy after `previous` (the other slot of the two) and
    /// flushes it. `seq` is set to follow `previous`.
    pub fn write<M: Media>(
        mut self,
        previous: Option<&TimerCheckpoint>,
        media: &mut M,
    ) -> Result<TimerCheckpoint, Error<M::Error>> {
        if media.len() < FILE_SIZE {
            media.set_len(FILE_SIZE).media()?;
        }
        self.seq = previous.map_or(1, |p| p.seq + 1);
        let at = if self.seq % 2 == 0 {
            TIMER_CHECKPOINT_COPY_AT
        } else {
            0
        };
        media.write_at(at, &encode(&self)).media()?;
        media.flush(at..at + LEN as u64).media()?;
        Ok(self)
    }
}

fn decode(b: &[u8; LEN]) -> Option<TimerCheckpoint> {
    let l = TimerCheckpointLayout::read_from_bytes(b).ok()?;
    if l.tern_magic.get() != CHECKPOINT_MAGIC || l.crc.get() != page_crc(b) {
        return None;
    }
    let non_negative = |v: i64| u64::try_from(v).ok();
    Some(TimerCheckpoint {
        read_time_ms: l.last_read_time_ms.get(),
        log_flushed: non_negative(l.last_timer_log_flush_pos.get())?,
        queue_offset: non_negative(l.last_timer_queue_offset.get())?,
        wheel_pos: non_negative(l.wheel_pos.get())?,
        resume_pos: non_negative(l.resume_pos.get()),
        seq: non_negative(l.seq.get())?,
    })
}

fn encode(c: &TimerCheckpoint) -> [u8; LEN] {
    let signed = |v: u64| I64::new(v.min(i64::MAX as u64) as i64);
    let l = TimerCheckpointLayout {
        last_read_time_ms: I64::new(c.read_time_ms),
        last_timer_log_flush_pos: signed(c.log_flushed),
        last_timer_queue_offset: signed(c.queue_offset),
        master_timer_queue_offset: signed(c.queue_offset),
        data_version: [I64::new(0), I64::new(c.read_time_ms), signed(c.seq)],
        tern_magic: U32::new(CHECKPOINT_MAGIC),
        tern_version: U32::new(VERSION),
        wheel_pos: signed(c.wheel_pos),
        resume_pos: c.resume_pos.map_or(I64::new(-1), signed),
        seq: signed(c.seq),
        crc: U32::new(0),
    };
    sealed(l.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ram::RamMedia;
    use std::vec;

    fn cp(read: i64) -> TimerCheckpoint {
        TimerCheckpoint {
            read_time_ms: read,
            log_flushed: 520,
            queue_offset: 10,
            wheel_pos: 468,
            resume_pos: Some(52),
            seq: 0,
        }
    }

    #[test]
    fn copies_alternate_and_the_newest_valid_one_is_read() {
        let mut buf = vec![0u8; FILE_SIZE as usize];
        let mut m = RamMedia::new(&mut buf, 0).unwrap();
        assert_eq!(TimerCheckpoint::read(&m).unwrap(), None);
        let first = cp(1_000).write(None, &mut m).unwrap();
        assert_eq!(first.seq, 1);
        assert_eq!(TimerCheckpoint::read(&m).unwrap(), Some(first));
        let second = TimerCheckpoint {
            resume_pos: None,
            ..cp(2_000)
        }
        .write(Some(&first), &mut m)
        .unwrap();
        assert_eq!(TimerCheckpoint::read(&m).unwrap(), Some(second));

        // The third write is torn: the second stays current.
        let third = cp(3_000).write(Some(&second), &mut m).unwrap();
        assert_eq!(third.seq, 3);
        let mut b = [0u8; 8];
        m.read_at(20, &mut b).unwrap();
        b[3] ^= 1;
        m.write_at(20, &b).unwrap();
        assert_eq!(TimerCheckpoint::read(&m).unwrap(), Some(second));
    }
}
