//! The checkpoint: where recovery may start, sealed by a CRC.
//!
//! RocketMQ's fields come first so its tools read the file; Tern's own follow. A checkpoint
//! that fails its CRC (torn by a crash while being written) is treated as absent, and
//! recovery falls back to scanning and re-dispatching from the log's start.

use zerocopy::byteorder::big_endian::{I64, U32};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, MediaResult};
use crate::hash::{page_crc, sealed};
use crate::layout::{CHECKPOINT_FILE_SIZE, CHECKPOINT_MAGIC, CheckpointLayout};
use crate::media::Media;

const LAYOUT_LEN: usize = core::mem::size_of::<CheckpointLayout>();
const VERSION: u32 = 1;

/// The positions recovery needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// Store time of the newest flushed record.
    pub physic_timestamp: i64,
    /// Store time of the newest flushed consume-queue entry.
    pub logics_timestamp: i64,
    /// Store time of the newest flushed index entry.
    pub index_timestamp: i64,
    /// Commit-log offset below which everything is durable.
    pub flushed_offset: u64,
    /// Commit-log offset up to which queues and index are durable.
    pub dispatched_offset: u64,
    /// The log's end at a clean shutdown; `None` while the store is open.
    pub clean_end: Option<u64>,
}

impl Checkpoint {
    /// Reads the checkpoint from `media`; `None` if absent, foreign or torn.
    pub fn read<M: Media>(media: &M) -> Result<Option<Self>, Error<M::Error>> {
        if media.len() < LAYOUT_LEN as u64 {
            return Ok(None);
        }
        let mut b = [0u8; LAYOUT_LEN];
        media.read_at(0, &mut b).media()?;
        Ok(Self::decode(&b))
    }

    /// Decodes the layout; `None` if the magic or CRC is wrong.
    pub fn decode(bytes: &[u8; LAYOUT_LEN]) -> Option<Self> {
        let l = CheckpointLayout::read_from_bytes(bytes).ok()?;
        if l.tern_magic.get() != CHECKPOINT_MAGIC || l.crc.get() != page_crc(bytes) {
            return None;
        }
        let clean = l.clean_end_offset.get();
        Some(Self {
            physic_timestamp: l.physic_msg_timestamp.get(),
            logics_timestamp: l.logics_msg_timestamp.get(),
            index_timestamp: l.index_msg_timestamp.get(),
            flushed_offset: l.master_flushed_offset.get() as u64,
            dispatched_offset: l.dispatched_offset.get() as u64,
            clean_end: if clean >= 0 { Some(clean as u64) } else { None },
        })
    }

    /// The layout's bytes, CRC included.
    pub fn encode(&self) -> [u8; LAYOUT_LEN] {
        let l = CheckpointLayout {
            physic_msg_timestamp: I64::new(self.physic_timestamp),
            logics_msg_timestamp: I64::new(self.logics_timestamp),
            index_msg_timestamp: I64::new(self.index_timestamp),
            master_flushed_offset: I64::new(self.flushed_offset as i64),
            confirm_phy_offset: I64::new(self.flushed_offset as i64),
            tern_magic: U32::new(CHECKPOINT_MAGIC),
            tern_version: U32::new(VERSION),
            dispatched_offset: I64::new(self.dispatched_offset as i64),
            clean_end_offset: I64::new(self.clean_end.map_or(-1, |e| e as i64)),
            crc: U32::new(0),
        };
        sealed(l.as_bytes())
    }

    /// Writes and flushes the checkpoint to `media`, growing it to a page if needed.
    pub fn write<M: Media>(&self, media: &mut M) -> Result<(), Error<M::Error>> {
        self.write_unsynced(media)?;
        media.flush(0..LAYOUT_LEN as u64).media()
    }

    /// Writes the record without flushing it: for owners that sync the file themselves.
    pub fn write_unsynced<M: Media>(&self, media: &mut M) -> Result<(), Error<M::Error>> {
        if media.len() < CHECKPOINT_FILE_SIZE {
            media.set_len(CHECKPOINT_FILE_SIZE).media()?;
        }
        media.write_at(0, &self.encode()).media()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_a_torn_copy() {
        let c = Checkpoint {
            physic_timestamp: 5,
            logics_timestamp: 6,
            index_timestamp: 7,
            flushed_offset: 100,
            dispatched_offset: 90,
            clean_end: Some(100),
        };
        let mut b = c.encode();
        assert_eq!(Checkpoint::decode(&b), Some(c));
        b[40] ^= 1;
        assert_eq!(Checkpoint::decode(&b), None);
        let open = Checkpoint {
            clean_end: None,
            ..c
        };
        assert_eq!(Checkpoint::decode(&open.encode()), Some(open));
    }
}
