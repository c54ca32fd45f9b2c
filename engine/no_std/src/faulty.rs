//! Media that fails the way real storage does, on purpose and deterministically.
//!
//! A [`FaultyMedia`] keeps two images: what reads see now, and what has been made durable
//! by `flush`. Between flushes it remembers the writes in order. A crash then decides what
//! survives, within the promises stated in the crate docs: everything (process crash),
//! only flushed bytes (power loss), or flushed bytes plus the first `k` pending writes with
//! write `k+1` torn at some byte (power loss during write-back). Bits can be flipped in
//! both images, and a shared [`FaultPlan`] can make every operation after the N-th fail.

use core::cell::Cell;
use core::ops::Range;

use crate::media::Media;
use crate::ram::RamError;

/// Writes remembered between flushes. When more accumulate, the oldest is written back to
/// the durable image, as a kernel's write-back would do.
pub const PENDING_WRITES: usize = 64;

/// What a crash does to the writes not yet flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// The process died; the machine did not: everything written survives.
    Process,
    /// Power loss: every write not flushed is lost.
    DropUnflushed,
    /// Power loss during write-back: the first `keep` pending writes survive, and the
    /// next one survives up to `tear_at` bytes.
    Torn {
        /// Pending writes that reached the media whole.
        keep: usize,
        /// Bytes of the next pending write that reached it.
        tear_at: usize,
    },
}

/// Faults shared by every media of a test: a budget of operations after which every
/// write, flush, create and remove fails.
#[derive(Debug)]
pub struct FaultPlan {
    fuel: Cell<u64>,
}

impl FaultPlan {
    /// A plan that never fails.
    pub const fn none() -> Self {
        Self {
            fuel: Cell::new(u64::MAX),
        }
    }

    /// A plan that lets `ops` operations succeed, then fails every one after.
    pub const fn fail_after(ops: u64) -> Self {
        Self {
            fuel: Cell::new(ops),
        }
    }

    /// Refills the budget (after the "crash", the store is reopened on healthy media).
    pub fn refuel(&self, ops: u64) {
        self.fuel.set(ops);
    }

    /// Operations left before faults start.
    pub fn fuel(&self) -> u64 {
        self.fuel.get()
    }

    pub(crate) fn spend(&self) -> Result<(), RamError> {
        match self.fuel.get() {
            0 => Err(RamError::Injected),
            u64::MAX => Ok(()),
            n => {
                self.fuel.set(n - 1);
                Ok(())
            }
        }
    }
}

/// Memory media with a durable image, pending writes, and injectable faults.
///
/// One buffer holds both images: the first half is what reads see, the second what is
/// durable.
#[derive(Debug)]
pub struct FaultyMedia<'a> {
    buf: &'a mut [u8],
    len: usize,
    pending: heapless::Vec<(u64, u32), PENDING_WRITES>,
    plan: &'a FaultPlan,
}

impl<'a> FaultyMedia<'a> {
    /// Media of `len` bytes over `buf`, which holds both images (at least `2 * len`).
    pub fn new(buf: &'a mut [u8], len: usize, plan: &'a FaultPlan) -> Result<Self, RamError> {
        if len > buf.len() / 2 {
            return Err(RamError::OutOfBounds);
        }
        buf.fill(0);
        Ok(Self {
            buf,
            len,
            pending: heapless::Vec::new(),
            plan,
        })
    }

    /// Gives the buffer back.
    pub fn into_buffer(self) -> &'a mut [u8] {
        self.buf
    }

    fn half(&self) -> usize {
        self.buf.len() / 2
    }

    fn current(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Copies `r` of the current image into the durable one.
    fn persist(&mut self, r: Range<usize>) {
        let h = self.half();
        self.buf.copy_within(r.clone(), h + r.start);
    }

    /// Writes not yet flushed, oldest first.
    pub fn pending_writes(&self) -> usize {
        self.pending.len()
    }

    /// Applies a crash: afterwards both images hold what survived.
    pub fn crash(&mut self, kind: Crash) {
        match kind {
            Crash::Process => self.persist(0..self.len),
            Crash::DropUnflushed => {}
            Crash::Torn { keep, tear_at } => {
                let pending = self.pending.clone();
                for (i, &(off, len)) in pending.iter().enumerate() {
                    let len = if i < keep {
                        len as usize
                    } else if i == keep {
                        tear_at.min(len as usize)
                    } else {
                        break;
                    };
                    self.persist(off as usize..off as usize + len);
                }
            }
        }
        self.pending.clear();
        let h = self.half();
        self.buf.copy_within(h..h + self.len, 0);
    }

    /// Flips one bit in both images: rot that recovery must detect, not serve.
    pub fn flip_bit(&mut self, offset: u64, bit: u8) {
        let i = offset as usize;
        if i < self.len {
            let h = self.half();
            self.buf[i] ^= 1 << (bit % 8);
            self.buf[h + i] ^= 1 << (bit % 8);
        }
    }

    fn check(&self, offset: u64, len: usize) -> Result<Range<usize>, RamError> {
        let start = usize::try_from(offset).map_err(|_| RamError::OutOfBounds)?;
        let end = start.checked_add(len).ok_or(RamError::OutOfBounds)?;
        if end > self.len {
            return Err(RamError::OutOfBounds);
        }
        Ok(start..end)
    }
}

impl Media for FaultyMedia<'_> {
    type Error = RamError;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), RamError> {
        let r = self.check(offset, buf.len())?;
        buf.copy_from_slice(&self.buf[r]);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), RamError> {
        let r = self.check(offset, data.len())?;
        self.plan.spend()?;
        self.buf[r].copy_from_slice(data);
        if self.pending.is_full() {
            // Write-back of the oldest, as a kernel would do under pressure.
            let (off, len) = self.pending.remove(0);
            self.persist(off as usize..off as usize + len as usize);
        }
        // Not full now: the push cannot fail.
        let _ = self.pending.push((offset, data.len() as u32));
        Ok(())
    }

    fn flush(&mut self, range: Range<u64>) -> Result<(), RamError> {
        let r = self.check(range.start, range.end.saturating_sub(range.start) as usize)?;
        self.plan.spend()?;
        self.persist(r);
        self.pending
            .retain(|&(off, len)| !(off >= range.start && off + u64::from(len) <= range.end));
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len as u64
    }

    fn set_len(&mut self, len: u64) -> Result<(), RamError> {
        let len = usize::try_from(len).map_err(|_| RamError::OutOfBounds)?;
        if len > self.half() {
            return Err(RamError::OutOfBounds);
        }
        self.plan.spend()?;
        if len > self.len {
            let h = self.half();
            self.buf[self.len..len].fill(0);
            self.buf[h + self.len..h + len].fill(0);
        }
        self.len = len;
        Ok(())
    }

    fn as_bytes(&self) -> Option<&[u8]> {
        Some(self.current())
    }
}
