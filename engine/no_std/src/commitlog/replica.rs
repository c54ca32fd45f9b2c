//! Appending bytes copied from a master's log (HA replication).
//!
//! A master streams its log as raw bytes in chunks that need not end on a record
//! boundary (RocketMQ's HA protocol does not align them). The replica writes only whole,
//! verified records: the unit it hands out to readers is the same as on the master, and a
//! crash of the replica leaves a log that recovery accepts exactly as it would its own.
//! The caller keeps an incomplete tail until the rest arrives.

use zerocopy::IntoBytes;
use zerocopy::byteorder::big_endian::{I32, U32};

use super::{BLANK_RESERVE, CommitLog};
use crate::error::{Corruption, Error};
use crate::layout::{BlankRecord, MAGIC_BLANK, MAGIC_V1, MAGIC_V2};
use crate::media::Directory;
use crate::record::{RecordError, RecordView};

impl<D: Directory> CommitLog<D> {
    /// Appends the master's log bytes `bytes`, which start at log offset `at`.
    ///
    /// Every whole record is verified (layout, body CRC, its physical offset is where it
    /// lands) and written head last, as an append is; a segment's blank tail rolls this
    /// log to its next segment, and must end where this log's segment ends (both sides
    /// must use one segment size). Bytes below the log's end are ones already taken (the
    /// rest of a blank tail, or a chunk sent again) and are skipped. Returns the offset
    /// up to which `bytes` were consumed: an incomplete record from there on waits for the
    /// caller's next chunk. A record that fails verification is [`Corruption::Record`]
    /// and nothing of it is written.
    pub fn append_replicated(&mut self, at: u64, bytes: &[u8]) -> Result<u64, Error<D::Error>> {
        self.refuse_if_failed()?;
        if at > self.write_pos {
            return Err(Error::OutOfRange);
        }
        let skip = (self.write_pos - at).min(bytes.len() as u64) as usize;
        let mut at = at + skip as u64;
        let mut rest = &bytes[skip..];
        let size = self.segs.size();
        while rest.len() >= 8 && at == self.write_pos {
            let base = self.segs.base_of(at);
            let remaining = base + size - at;
            let total = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let magic = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
            let bad = |error| Error::Corrupt(Corruption::Record { offset: at, error });
            match magic {
                MAGIC_BLANK => {
                    if total < 0 || total as u64 != remaining {
                        return Err(bad(RecordError::BadSize(total)));
                    }
                    self.segs.ensure(at)?;
                    let blank = BlankRecord {
                        total_size: I32::new(total),
                        magic: U32::new(MAGIC_BLANK),
                    };
                    self.segs.write(at, blank.as_bytes())?;
                    self.write_pos = base + size;
                    self.segs.ensure(self.write_pos)?;
                    let taken = remaining.min(rest.len() as u64);
                    at += taken;
                    rest = &rest[taken as usize..];
                }
                MAGIC_V1 | MAGIC_V2 => {
                    // The master keeps room for a blank marker after every record.
                    if total <= 0 || total as u64 + BLANK_RESERVE > remaining {
                        return Err(bad(RecordError::BadSize(total)));
                    }
                    let len = total as usize;
                    let Some(record) = rest.get(..len) else {
                        break;
                    };
                    let view = RecordView::parse(record).map_err(bad)?;
                    view.verify_crc().map_err(bad)?;
                    if view.physical_offset() != at as i64 {
                        return Err(bad(RecordError::BadSize(total)));
                    }
                    self.segs.ensure(at)?;
                    self.segs.write(at + 8, &record[8..])?;
                    let mut head = [0u8; 8];
                    head.copy_from_slice(&record[..8]);
                    self.put_head(at, &head)?;
                    at += len as u64;
                    self.write_pos = at;
                    rest = &rest[len..];
                }
                _ => return Err(bad(RecordError::BadMagic(magic))),
            }
        }
        Ok(at)
    }

    /// Makes this empty log start at `offset`, where a master's stream begins. It must
    /// be a segment boundary: recovery scans a segment from its start.
    pub fn start_replica_at(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        if offset % self.segs.size() != 0 {
            return Err(Error::OutOfRange);
        }
        self.reset_empty_to(offset)
    }
}
