//! A run of equal-sized, contiguous segments in a [`Directory`]: the shape shared by the
//! commit log and every consume queue. Segment `k` holds bytes `[k·size, (k+1)·size)` of
//! the structure and is named by that base offset.

use crate::error::{Corruption, Error, MediaResult};
use crate::media::{Directory, Media};

/// Zeroes are written in chunks of this size; chunks already zero are skipped, so zeroing
/// the fallocated tail of a segment costs reads, not writes.
const ZERO_CHUNK: usize = 4096;

/// The segments of one structure: only the first and last base are kept, because a gap
/// between them is corruption, not a state.
#[derive(Debug)]
pub struct Segments<D: Directory> {
    dir: D,
    size: u64,
    /// `(first, last)` base, or `None` when there are no segments.
    span: Option<(u64, u64)>,
}

impl<D: Directory> Segments<D> {
    /// Opens the segments present in `dir`, checking they are aligned and contiguous.
    pub fn open(mut dir: D, size: u64) -> Result<Self, Error<D::Error>> {
        assert!(size > 0, "segment size must be positive");
        let mut span: Option<(u64, u64)> = None;
        let mut fault: Option<Corruption> = None;
        dir.scan(&mut |base| {
            if fault.is_some() {
                return;
            }
            if base % size != 0 {
                fault = Some(Corruption::SegmentMisaligned { base });
                return;
            }
            span = match span {
                None => Some((base, base)),
                Some((first, last)) if base == last + size => Some((first, base)),
                Some((_, last)) => {
                    fault = Some(Corruption::SegmentGap {
                        missing: last + size,
                    });
                    span
                }
            };
        })
        .media()?;
        if let Some(c) = fault {
            return Err(c.into());
        }
        let segs = Self { dir, size, span };
        if let Some((first, last)) = span {
            let mut base = first;
            while base <= last {
                if segs.media(base)?.len() != size {
                    return Err(Corruption::SegmentSize { base }.into());
                }
                base += size;
            }
        }
        Ok(segs)
    }

    /// Bytes per segment.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Base of the segment holding `offset`.
    pub fn base_of(&self, offset: u64) -> u64 {
        offset - offset % self.size
    }

    /// First and last base, if any segment exists.
    pub fn span(&self) -> Option<(u64, u64)> {
        self.span
    }

    /// The directory, for callers that need its own operations.
    pub fn dir(&self) -> &D {
        &self.dir
    }

    /// The directory, for its own settings (never to add or remove segments behind the
    /// structure's back).
    pub fn dir_mut(&mut self) -> &mut D {
        &mut self.dir
    }

    /// Gives the directory back (closing the structure).
    pub fn into_dir(self) -> D {
        self.dir
    }

    /// The segment at `base`.
    pub fn media(&self, base: u64) -> Result<&D::Media, Error<D::Error>> {
        self.dir.media(base).ok_or(Error::OutOfRange)
    }

    /// The segment at `base`, for writing.
    pub fn media_mut(&mut self, base: u64) -> Result<&mut D::Media, Error<D::Error>> {
        self.dir.media_mut(base).ok_or(Error::OutOfRange)
    }

    /// Makes sure the segment holding `offset` exists, creating it (and only it) when it
    /// is the next one. Structures only ever grow by one segment at their end.
    pub fn ensure(&mut self, offset: u64) -> Result<(), Error<D::Error>> {
        let base = self.base_of(offset);
        match self.span {
            Some((first, last)) if base >= first && base <= last => Ok(()),
            Some((first, last)) if base == last + self.size => {
                self.dir.create(base, self.size).media()?;
                self.span = Some((first, base));
                Ok(())
            }
            Some(_) => Err(Error::OutOfRange),
            None => {
                self.dir.create(base, self.size).media()?;
                self.span = Some((base, base));
                Ok(())
            }
        }
    }

    /// Reads `buf.len()` bytes at `offset`; the range must lie in one segment.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error<D::Error>> {
        let base = self.base_of(offset);
        if offset - base + buf.len() as u64 > self.size {
            return Err(Error::OutOfRange);
        }
        self.media(base)?.read_at(offset - base, buf).media()
    }

    /// Bytes at `offset..offset+len` in place, when the media is memory.
    pub fn slice(&self, offset: u64, len: usize) -> Result<Option<&[u8]>, Error<D::Error>> {
        let base = self.base_of(offset);
        let start = offset - base;
        if start + len as u64 > self.size {
            return Err(Error::OutOfRange);
        }
        let media = self.media(base)?;
        Ok(media
            .as_bytes()
            .and_then(|b| b.get(start as usize..start as usize + len)))
    }

    /// Writes `data` at `offset`; the range must lie in one existing segment.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error<D::Error>> {
        let base = self.base_of(offset);
        if offset - base + data.len() as u64 > self.size {
            return Err(Error::OutOfRange);
        }
        self.media_mut(base)?.write_at(offset - base, data).media()
    }

    /// Flushes `[from, to)`, segment by segment, in order.
    pub fn flush(&mut self, from: u64, to: u64) -> Result<(), Error<D::Error>> {
        let mut at = from;
        while at < to {
            let base = self.base_of(at);
            let end = (base + self.size).min(to);
            if self.dir.media(base).is_some() {
                self.media_mut(base)?.flush(at - base..end - base).media()?;
            }
            at = end;
        }
        Ok(())
    }

    /// Calls `f` with the segment holding `from` (if it exists) and the range from `from`
    /// to its end: the part of the last segment appends write next, when `from` is the end.
    pub fn rest_of_segment(&self, from: u64, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        self.regions(from, self.base_of(from) + self.size, f);
    }

    /// Calls `f` with each existing segment's media holding bytes of `[from, to)`, and the
    /// range of them within it, in order: what [`Segments::flush`] would flush.
    pub fn regions(&self, from: u64, to: u64, f: &mut dyn FnMut(&D::Media, core::ops::Range<u64>)) {
        let mut at = from;
        while at < to {
            let base = self.base_of(at);
            let end = (base + self.size).min(to);
            if let Some(m) = self.dir.media(base) {
                f(m, at - base..end - base);
            }
            at = end;
        }
    }

    /// Removes every segment after the one holding `from` (newest first: a crash in
    /// between leaves a shorter contiguous run), without reading the rest of that one.
    /// Returns whether any went.
    pub fn remove_after(&mut self, from: u64) -> Result<bool, Error<D::Error>> {
        let Some((first, last)) = self.span else {
            return Ok(false);
        };
        let mut removed = false;
        let base = self.base_of(from);
        let mut b = last;
        // Bounded by the segments in the span.
        while b > base && b >= first {
            self.dir.remove(b).media()?;
            removed = true;
            self.span = if b == first {
                None
            } else {
                Some((first, b - self.size))
            };
            b -= self.size;
        }
        Ok(removed)
    }

    /// Zeroes `[from, end of its segment)`, flushes it, and removes every later segment,
    /// so that nothing past `from` can be read back as data after a crash. Returns
    /// whether there was anything to cut.
    pub fn cut(&mut self, from: u64) -> Result<bool, Error<D::Error>> {
        let Some((first, last)) = self.span else {
            return Ok(false);
        };
        let cut_any = self.remove_after(from)?;
        let base = self.base_of(from);
        if base < first || base > last {
            return Ok(cut_any);
        }
        let media = self.media_mut(base)?;
        let zero = [0u8; ZERO_CHUNK];
        let mut chunk = [0u8; ZERO_CHUNK];
        let mut at = from - base;
        let mut dirty: Option<(u64, u64)> = None;
        while at < media.len() {
            let n = (ZERO_CHUNK as u64 - at % ZERO_CHUNK as u64).min(media.len() - at) as usize;
            media.read_at(at, &mut chunk[..n]).media()?;
            if chunk[..n].iter().any(|&b| b != 0) {
                media.write_at(at, &zero[..n]).media()?;
                let end = at + n as u64;
                dirty = Some(dirty.map_or((at, end), |(s, _)| (s, end)));
            }
            at += n as u64;
        }
        if let Some((s, e)) = dirty {
            media.flush(s..e).media()?;
        }
        Ok(cut_any || dirty.is_some())
    }

    /// Removes the oldest segment; the caller decides it is no longer needed.
    pub fn remove_first(&mut self) -> Result<(), Error<D::Error>> {
        let Some((first, last)) = self.span else {
            return Ok(());
        };
        self.dir.remove(first).media()?;
        self.span = if first == last {
            None
        } else {
            Some((first + self.size, last))
        };
        Ok(())
    }
}
