//! Media in memory: a buffer the caller provides (a static array on firmware, leaked
//! vectors in tests), a directory of such segments, and a fixed table of queues over
//! such directories ([`RamQueues`]).

use core::ops::Range;

mod queues;
pub use queues::RamQueues;

use crate::faulty::{FaultPlan, FaultyMedia};
use crate::media::{Directory, Media};

/// Errors of memory media.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RamError {
    /// Access past the media's length, or growth past the buffer.
    OutOfBounds,
    /// A fault plan made this operation fail.
    Injected,
    /// The directory has no free buffer for a new segment.
    NoSpace,
    /// The segment exists already.
    Exists,
}

/// Media over a caller's buffer; its capacity is the buffer's length.
#[derive(Debug)]
pub struct RamMedia<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> RamMedia<'a> {
    /// Media of `len` zero bytes over `buf` (which is zeroed).
    pub fn new(buf: &'a mut [u8], len: usize) -> Result<Self, RamError> {
        if len > buf.len() {
            return Err(RamError::OutOfBounds);
        }
        buf.fill(0);
        Ok(Self { buf, len })
    }

    /// Gives the buffer back.
    pub fn into_buffer(self) -> &'a mut [u8] {
        self.buf
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

/// The bytes `len` bytes at `offset` take in a memory media of `media_len` bytes, or
/// [`RamError::OutOfBounds`] when they do not fit.
pub(crate) fn span(offset: u64, len: usize, media_len: usize) -> Result<Range<usize>, RamError> {
    let start = usize::try_from(offset).map_err(|_| RamError::OutOfBounds)?;
    let end = start.checked_add(len).ok_or(RamError::OutOfBounds)?;
    if end > media_len {
        return Err(RamError::OutOfBounds);
    }
    Ok(start..end)
}

/// Copies the `buf.len()` bytes at `offset` of `image` (what reads of a memory media see)
/// into `buf`: the read of both memory media, [`RamMedia`] and [`FaultyMedia`].
pub(crate) fn read_image(image: &[u8], offset: u64, buf: &mut [u8]) -> Result<(), RamError> {
    let r = span(offset, buf.len(), image.len())?;
    buf.copy_from_slice(&image[r]);
    Ok(())
}

impl Media for RamMedia<'_> {
    type Error = RamError;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), RamError> {
        read_image(self.bytes(), offset, buf)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), RamError> {
        let r = span(offset, data.len(), self.len)?;
        self.buf[r].copy_from_slice(data);
        Ok(())
    }

    fn flush(&mut self, range: Range<u64>) -> Result<(), RamError> {
        if range.end > self.len as u64 {
            return Err(RamError::OutOfBounds);
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len as u64
    }

    fn set_len(&mut self, len: u64) -> Result<(), RamError> {
        let len = usize::try_from(len).map_err(|_| RamError::OutOfBounds)?;
        if len > self.buf.len() {
            return Err(RamError::OutOfBounds);
        }
        if len > self.len {
            self.buf[self.len..len].fill(0);
        }
        self.len = len;
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        Some(self.bytes())
    }

    fn as_bytes_mut(&mut self) -> Option<&mut [u8]> {
        Some(self.bytes_mut())
    }
}

/// A directory of up to `N` segments in memory, each a [`FaultyMedia`] so that tests can
/// cut power across the whole directory. Buffers come from a pool the caller fills; a
/// removed segment's buffer returns to the pool.
#[derive(Debug)]
pub struct RamDir<'a, const N: usize> {
    pool: heapless::Vec<&'a mut [u8], N>,
    segments: heapless::Vec<(u64, FaultyMedia<'a>), N>,
    plan: &'a FaultPlan,
}

impl<'a, const N: usize> RamDir<'a, N> {
    /// An empty directory drawing on `plan` for faults (use [`FaultPlan::none`] for none).
    pub fn new(plan: &'a FaultPlan) -> Self {
        Self {
            pool: heapless::Vec::new(),
            segments: heapless::Vec::new(),
            plan,
        }
    }

    /// An empty directory drawing on `plan`, with every buffer of `bufs` in its pool (as
    /// [`RamDir::give`] adds them); [`RamError::NoSpace`] for more than `N`.
    pub fn with_buffers<B: AsMut<[u8]> + ?Sized + 'a>(
        plan: &'a FaultPlan,
        bufs: impl IntoIterator<Item = &'a mut B>,
    ) -> Result<Self, RamError> {
        let mut d = Self::new(plan);
        for b in bufs {
            d.give(b.as_mut())?;
        }
        Ok(d)
    }

    /// Adds a buffer to the pool. Each segment takes one buffer of at least twice its
    /// length (current and durable images).
    pub fn give(&mut self, buf: &'a mut [u8]) -> Result<(), RamError> {
        self.pool.push(buf).map_err(|_| RamError::NoSpace)
    }

    /// Every segment, for fault injection.
    pub fn segments_mut(&mut self) -> impl Iterator<Item = (u64, &mut FaultyMedia<'a>)> {
        self.segments.iter_mut().map(|(b, m)| (*b, m))
    }

    /// Cuts power: every segment loses what a crash of `kind` may lose.
    pub fn crash(&mut self, kind: crate::faulty::Crash) {
        for (_, m) in self.segments.iter_mut() {
            m.crash(kind);
        }
    }
}

impl<'a, const N: usize> Directory for RamDir<'a, N> {
    type Media = FaultyMedia<'a>;
    type Error = RamError;

    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), RamError> {
        self.segments.sort_unstable_by_key(|(b, _)| *b);
        for (b, _) in &self.segments {
            f(*b);
        }
        Ok(())
    }

    fn create(&mut self, base: u64, len: u64) -> Result<(), RamError> {
        self.plan.spend()?;
        if self.segments.iter().any(|(b, _)| *b == base) {
            return Err(RamError::Exists);
        }
        let want = usize::try_from(len)
            .map_err(|_| RamError::OutOfBounds)?
            .saturating_mul(2);
        let i = self
            .pool
            .iter()
            .position(|b| b.len() >= want)
            .ok_or(RamError::NoSpace)?;
        let buf = self.pool.swap_remove(i);
        let media = FaultyMedia::new(buf, len as usize, self.plan)?;
        self.segments
            .push((base, media))
            .map_err(|_| RamError::NoSpace)?;
        Ok(())
    }

    fn media(&self, base: u64) -> Option<&FaultyMedia<'a>> {
        self.segments
            .iter()
            .find(|(b, _)| *b == base)
            .map(|(_, m)| m)
    }

    fn media_mut(&mut self, base: u64) -> Option<&mut FaultyMedia<'a>> {
        self.segments
            .iter_mut()
            .find(|(b, _)| *b == base)
            .map(|(_, m)| m)
    }

    fn remove(&mut self, base: u64) -> Result<(), RamError> {
        self.plan.spend()?;
        if let Some(i) = self.segments.iter().position(|(b, _)| *b == base) {
            let (_, m) = self.segments.swap_remove(i);
            // The pool has room: every buffer in use came from it.
            let _ = self.pool.push(m.into_buffer());
        }
        Ok(())
    }
}
