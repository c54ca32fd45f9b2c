//! Reading the commit log in place: what is at an offset (a record, a segment's blank
//! tail, the end), a record's bytes, and whether an offset is a record boundary.

use zerocopy::FromBytes;

use crate::error::{Corruption, Error};
use crate::layout::{MAGIC_BLANK, MAGIC_V1, MAGIC_V2, RecordHead};
use crate::media::Directory;
use crate::record::{RecordError, RecordView, SYSFLAG_BORNHOST_V6};

use super::{BLANK_RESERVE, CommitLog, Slot};

impl<D: Directory> CommitLog<D> {
    /// The media of the segment holding `offset`, if it exists.
    pub fn segment_media(&self, offset: u64) -> Option<&D::Media> {
        self.segs.dir().media(self.segs.base_of(offset))
    }

    /// What is at `offset`: a record, the blank tail of a segment, or nothing yet.
    pub fn slot_at(&self, offset: u64) -> Result<Slot, Error<D::Error>> {
        if offset >= self.write_pos && self.write_pos != 0 && offset != self.write_pos {
            return Err(Error::OutOfRange);
        }
        slot_from_head(offset, self.segs.size(), |head| {
            self.segs.read(offset, head)
        })
    }

    /// Like [`CommitLog::slot_at`], and a record found is fully verified: layout, position
    /// and body CRC. Used by recovery only.
    pub(super) fn verified_slot_at(&self, offset: u64) -> Result<Slot, Error<D::Error>> {
        let base = self.segs.base_of(offset);
        if self.segs.dir().media(base).is_none() {
            return Ok(Slot::End);
        }
        // The recovery scan runs before `write_pos` is known.
        let slot = {
            let remaining = base + self.segs.size() - offset;
            if remaining < BLANK_RESERVE {
                return Ok(Slot::Skip(base + self.segs.size()));
            }
            let mut head = [0u8; 8];
            self.segs.read(offset, &mut head)?;
            let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let magic = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            match magic {
                MAGIC_BLANK if size as u64 == remaining => {
                    return Ok(Slot::Skip(base + self.segs.size()));
                }
                MAGIC_V1 | MAGIC_V2 if size > 0 && size as u64 + BLANK_RESERVE <= remaining => {
                    size as u32
                }
                _ if size == 0 && magic == 0 => return Ok(Slot::End),
                _ => {
                    return Err(Corruption::Record {
                        offset,
                        error: RecordError::BadMagic(magic),
                    }
                    .into());
                }
            }
        };
        self.with_record(offset, slot, &mut [], |view| {
            let view = view.map_err(|error| Corruption::Record { offset, error })?;
            view.verify_crc()
                .map_err(|error| Corruption::Record { offset, error })?;
            if view.physical_offset() != offset as i64 {
                return Err(Corruption::Record {
                    offset,
                    error: RecordError::BadSize(slot as i32),
                }
                .into());
            }
            Ok(Slot::Record(slot))
        })
    }

    /// Runs `f` over the record of `size` bytes at `offset`: in place when the media is
    /// memory, else copied into `scratch` (which must then be large enough).
    pub fn with_record<T>(
        &self,
        offset: u64,
        size: u32,
        scratch: &mut [u8],
        f: impl FnOnce(Result<RecordView<'_>, RecordError>) -> Result<T, Error<D::Error>>,
    ) -> Result<T, Error<D::Error>> {
        if let Some(bytes) = self.segs.slice(offset, size as usize)? {
            return f(RecordView::parse(bytes));
        }
        let buf = scratch.get_mut(..size as usize).ok_or(Error::TooLarge)?;
        self.segs.read(offset, buf)?;
        f(RecordView::parse(buf))
    }

    /// The stored bytes of `len` bytes at `offset`, in place, when the media is memory.
    pub fn slice(&self, offset: u64, len: usize) -> Result<Option<&[u8]>, Error<D::Error>> {
        if offset + len as u64 > self.write_pos {
            return Err(Error::OutOfRange);
        }
        self.segs.slice(offset, len)
    }

    /// Copies stored bytes at `offset` into `buf` (within one segment).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error<D::Error>> {
        if offset < self.min_offset() || offset + buf.len() as u64 > self.write_pos {
            return Err(Error::OutOfRange);
        }
        self.segs.read(offset, buf)
    }

    /// Store time of the record at `offset`, read from its fixed part only.
    pub fn store_timestamp_at(&self, offset: u64) -> Result<i64, Error<D::Error>> {
        // Offsets come from queue and index entries, which rot: one past the end is an
        // error, not an underflow below.
        if offset >= self.write_pos {
            return Err(Error::OutOfRange);
        }
        let mut head = [0u8; 48 + 20 + 8];
        let base = self.segs.base_of(offset);
        let n = (base + self.segs.size() - offset).min(head.len() as u64) as usize;
        self.read(
            offset,
            &mut head[..n.min((self.write_pos - offset) as usize)],
        )
        .or_else(|_| self.segs.read(offset, &mut head[..n]))?;
        let (h, _) = RecordHead::ref_from_prefix(&head[..]).map_err(|_| Error::OutOfRange)?;
        let at = 48
            + if h.sys_flag.get() & SYSFLAG_BORNHOST_V6 != 0 {
                20
            } else {
                8
            };
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&head[at..at + 8]);
        Ok(i64::from_be_bytes(ts))
    }

    /// Whether `offset` is a place the log may be cut: its end, or the start of a record
    /// (its head names it: magic, a size that fits, and its own offset) or of a segment's
    /// blank tail. Offsets outside `[min_offset, max_offset]` are not.
    pub fn is_record_boundary(&self, offset: u64) -> Result<bool, Error<D::Error>> {
        if offset < self.min_offset() || offset > self.write_pos {
            return Ok(false);
        }
        if offset == self.write_pos {
            return Ok(true);
        }
        let size = self.segs.size();
        let base = self.segs.base_of(offset);
        // Every record leaves room for a blank marker after it: nothing starts closer
        // to a segment's end than that.
        if base + size - offset < BLANK_RESERVE {
            return Ok(false);
        }
        let record = match self.slot_at(offset) {
            Ok(Slot::Skip(_)) => return Ok(true),
            Ok(Slot::Record(len)) => len,
            Ok(Slot::End) | Err(Error::Corrupt(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        const HEAD: usize = core::mem::size_of::<RecordHead>();
        if (record as usize) < HEAD || offset + u64::from(record) > self.write_pos {
            return Ok(false);
        }
        let mut head = [0u8; HEAD];
        self.segs.read(offset, &mut head)?;
        let (h, _) = RecordHead::ref_from_prefix(&head[..]).map_err(|_| Error::OutOfRange)?;
        Ok(h.physical_offset.get() == offset as i64)
    }
}

/// What is at `offset` of a log of `segment_size`-byte segments, given a way to read the
/// 8-byte head there: a record, the blank tail of a segment, or nothing yet. The one
/// reading of a head, shared by [`CommitLog::slot_at`] and readers that copy published
/// bytes without holding the log.
pub fn slot_from_head<E>(
    offset: u64,
    segment_size: u64,
    read_head: impl FnOnce(&mut [u8; 8]) -> Result<(), Error<E>>,
) -> Result<Slot, Error<E>> {
    let base = offset - offset % segment_size;
    let remaining = base + segment_size - offset;
    if remaining < BLANK_RESERVE {
        return Ok(Slot::Skip(base + segment_size));
    }
    let mut head = [0u8; 8];
    read_head(&mut head)?;
    let (size, magic) = (
        i32::from_be_bytes([head[0], head[1], head[2], head[3]]),
        u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
    );
    match magic {
        MAGIC_BLANK if size as u64 == remaining => Ok(Slot::Skip(base + segment_size)),
        MAGIC_V1 | MAGIC_V2 if size > 0 && size as u64 <= remaining => {
            Ok(Slot::Record(size as u32))
        }
        0 if size == 0 => Ok(Slot::End),
        _ => Err(Corruption::Record {
            offset,
            error: RecordError::BadMagic(magic),
        }
        .into()),
    }
}
