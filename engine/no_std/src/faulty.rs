//! Media that fails the way real storage does, on purpose and deterministically.
//!
//! A [`FaultyMedia`] keeps two images: what reads see now, and what has been made durable
//! by `flush`. Between flushes it remembers the writes in order. A crash then decides what
//! survives, within the promises stated in the crate docs: everything (process crash),
//! only flushed bytes (power loss), or flushed bytes plus the first `k` pending writes with
//! write `k+1` torn at some byte (power loss during write-back). Bits can be flipped in
//! both images, and a shared [`FaultPlan`] can make every operation after the N-th fail, or
//! make the next N flushes fail the way Linux fails them ("fsyncgate", below).
//!
//! # A failed flush, as Linux does it
//!
//! When write-back of dirty pages fails, Linux reports the error once (to the next `fsync`
//! or `msync`) and marks the pages clean: they stay readable in the page cache, but no
//! later flush writes them again, so a retried flush returns `Ok` for data that never
//! reached the disk. A failed flush here does the same: the pending writes it covers are
//! dropped from the path to the durable image. Reads still see them, a process crash keeps
//! them in what reads see (the page cache outlives the process), and a power cut loses
//! them, whatever later flushes returned.

use core::cell::Cell;
use core::ops::Range;

use crate::media::Media;
use crate::ram::{RamError, read_image, span};

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
/// write, flush, create and remove fails, and a count of flushes to fail on their own.
#[derive(Debug)]
pub struct FaultPlan {
    fuel: Cell<u64>,
    /// Flushes (of any media on this plan) still to fail, Linux style.
    failing_flushes: Cell<u64>,
}

impl FaultPlan {
    /// A plan that never fails.
    pub const fn none() -> Self {
        Self {
            fuel: Cell::new(u64::MAX),
            failing_flushes: Cell::new(0),
        }
    }

    /// A plan that lets `ops` operations succeed, then fails every one after.
    pub const fn fail_after(ops: u64) -> Self {
        Self {
            fuel: Cell::new(ops),
            failing_flushes: Cell::new(0),
        }
    }

    /// Makes the next `n` flushes fail (of any media on this plan, `flush` or `sync`), the
    /// way Linux fails a write-back: what each covered is dropped on the way to the durable
    /// image (see the module docs). Flushes after them succeed again. `0` cancels.
    pub fn fail_flushes(&self, n: u64) {
        self.failing_flushes.set(n);
    }

    /// Flushes still to fail.
    pub fn flushes_to_fail(&self) -> u64 {
        self.failing_flushes.get()
    }

    /// Whether this flush is one to fail; counts it.
    fn flush_fails(&self) -> bool {
        match self.failing_flushes.get() {
            0 => false,
            n => {
                self.failing_flushes.set(n - 1);
                true
            }
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
/// durable. Every byte where they differ lies under a pending write, or was dropped by a
/// failed flush.
#[derive(Debug)]
pub struct FaultyMedia<'a> {
    buf: &'a mut [u8],
    len: usize,
    pending: heapless::Vec<Pending, PENDING_WRITES>,
    plan: &'a FaultPlan,
}

/// A write not yet flushed.
#[derive(Clone, Debug)]
struct Pending {
    offset: u64,
    len: u32,
    /// What a sync through `&self` decided for it, applied before the media next
    /// changes (the earliest a difference could show).
    synced: Cell<Synced>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Synced {
    No,
    /// A sync covering it reached the media.
    Durable,
    /// A sync covering it failed: it never will.
    Lost,
}

impl Pending {
    fn end(&self) -> u64 {
        self.offset + u64::from(self.len)
    }
    fn inside(&self, range: &Range<u64>) -> bool {
        self.offset >= range.start && self.end() <= range.end
    }
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

    /// A flush of `range` that reached the media: the part of every pending write inside
    /// it becomes durable, and writes wholly inside it are no longer pending.
    fn write_back(&mut self, range: &Range<u64>) {
        for i in 0..self.pending.len() {
            let p = &self.pending[i];
            let (start, end) = (p.offset.max(range.start), p.end().min(range.end));
            if start < end {
                self.persist(start as usize..end as usize);
            }
        }
        self.pending.retain(|p| !p.inside(range));
    }

    /// Applies what syncs through `&self` decided since the last change.
    fn settle(&mut self) {
        if self.pending.iter().all(|p| p.synced.get() == Synced::No) {
            return;
        }
        for i in 0..self.pending.len() {
            let p = &self.pending[i];
            if p.synced.get() == Synced::Durable {
                let r = p.offset as usize..p.end() as usize;
                self.persist(r);
            }
        }
        self.pending.retain(|p| p.synced.get() == Synced::No);
    }

    /// Writes not yet flushed.
    pub fn pending_writes(&self) -> usize {
        self.pending
            .iter()
            .filter(|p| p.synced.get() == Synced::No)
            .count()
    }

    /// Makes `range` durable through a shared reference, as `fdatasync` on a duplicated
    /// file handle does while the media itself is borrowed elsewhere: like
    /// [`Media::flush`], faults included, except that only writes wholly inside `range`
    /// are covered (the engine never syncs part of a write). It takes effect before the
    /// media next changes; until then nothing could tell the difference.
    pub fn sync(&self, range: Range<u64>) -> Result<(), RamError> {
        span(
            range.start,
            range.end.saturating_sub(range.start) as usize,
            self.len,
        )?;
        self.plan.spend()?;
        let failed = self.plan.flush_fails();
        for p in self.pending.iter() {
            if p.inside(&range) && p.synced.get() == Synced::No {
                p.synced.set(if failed {
                    Synced::Lost
                } else {
                    Synced::Durable
                });
            }
        }
        if failed {
            Err(RamError::Injected)
        } else {
            Ok(())
        }
    }

    /// Applies a crash: afterwards both images hold what survived.
    ///
    /// A process crash keeps everything written in what reads see and writes back every
    /// pending write, but not the writes a failed flush dropped: those stay readable yet
    /// are not durable, as in a page cache that outlived the process. A power cut leaves
    /// only the durable image.
    pub fn crash(&mut self, kind: Crash) {
        self.settle();
        match kind {
            Crash::Process => {
                self.write_back(&(0..self.len as u64));
                self.pending.clear();
                return;
            }
            Crash::DropUnflushed => {}
            Crash::Torn { keep, tear_at } => {
                for i in 0..self.pending.len().min(keep + 1) {
                    let (off, len) = (self.pending[i].offset as usize, self.pending[i].len);
                    let len = if i < keep {
                        len as usize
                    } else {
                        tear_at.min(len as usize)
                    };
                    self.persist(off..off + len);
                }
            }
        }
        self.pending.clear();
        let h = self.half();
        self.buf.copy_within(h..h + self.len, 0);
    }

    /// Flips one bit in both images: rot that recovery must detect, not serve.
    pub fn flip_bit(&mut self, offset: u64, bit: u8) {
        self.settle();
        let i = offset as usize;
        if i < self.len {
            let h = self.half();
            self.buf[i] ^= 1 << (bit % 8);
            self.buf[h + i] ^= 1 << (bit % 8);
        }
    }
}

impl Media for FaultyMedia<'_> {
    type Error = RamError;

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), RamError> {
        read_image(self.current(), offset, buf)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), RamError> {
        let r = span(offset, data.len(), self.len)?;
        self.settle();
        self.plan.spend()?;
        self.buf[r].copy_from_slice(data);
        if self.pending.is_full() {
            // Write-back of the oldest, as a kernel would do under pressure.
            let p = self.pending.remove(0);
            self.persist(p.offset as usize..p.end() as usize);
        }
        // Not full now: the push cannot fail.
        let _ = self.pending.push(Pending {
            offset,
            len: data.len() as u32,
            synced: Cell::new(Synced::No),
        });
        Ok(())
    }

    fn flush(&mut self, range: Range<u64>) -> Result<(), RamError> {
        span(
            range.start,
            range.end.saturating_sub(range.start) as usize,
            self.len,
        )?;
        self.settle();
        self.plan.spend()?;
        if self.plan.flush_fails() {
            // Linux: the write-back failed, the pages are marked clean, the error is
            // reported once. What this flush covered never becomes durable.
            self.pending.retain(|p| !p.inside(&range));
            return Err(RamError::Injected);
        }
        self.write_back(&range);
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
        self.settle();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte media over `buf` holding `aaaa` at 0, not flushed yet.
    fn written<'a>(buf: &'a mut [u8], plan: &'a FaultPlan) -> FaultyMedia<'a> {
        let mut m = FaultyMedia::new(buf, 64, plan).unwrap();
        m.write_at(0, b"aaaa").unwrap();
        m
    }

    /// The four bytes at `at`.
    fn read(m: &FaultyMedia<'_>, at: u64) -> [u8; 4] {
        let mut b = [0u8; 4];
        m.read_at(at, &mut b).unwrap();
        b
    }

    #[test]
    fn a_flush_after_a_failed_one_succeeds_but_what_failed_is_lost_on_power_cut() {
        let plan = FaultPlan::none();
        let mut buf = [0u8; 128];
        let mut m = written(&mut buf, &plan);
        plan.fail_flushes(1);
        assert_eq!(m.flush(0..64), Err(RamError::Injected));
        assert_eq!(read(&m, 0), *b"aaaa", "still readable");
        // Linux's retried fsync: Ok, and nothing to write.
        assert_eq!(m.flush(0..64), Ok(()));
        m.write_at(8, b"bbbb").unwrap();
        m.flush(0..64).unwrap();
        m.crash(Crash::DropUnflushed);
        assert_eq!(read(&m, 0), [0; 4], "the failed write never became durable");
        assert_eq!(
            read(&m, 8),
            *b"bbbb",
            "a write after the failure is flushed normally"
        );
    }

    #[test]
    fn a_process_crash_keeps_a_failed_write_readable_but_not_durable() {
        let plan = FaultPlan::none();
        let mut buf = [0u8; 128];
        let mut m = written(&mut buf, &plan);
        plan.fail_flushes(1);
        assert!(m.flush(0..64).is_err());
        m.crash(Crash::Process);
        assert_eq!(read(&m, 0), *b"aaaa", "the page cache outlived the process");
        m.flush(0..64).unwrap();
        m.crash(Crash::DropUnflushed);
        assert_eq!(read(&m, 0), [0; 4]);
        // Written again, it is flushed like any write.
        m.write_at(0, b"aaaa").unwrap();
        m.flush(0..64).unwrap();
        m.crash(Crash::DropUnflushed);
        assert_eq!(read(&m, 0), *b"aaaa");
    }

    #[test]
    fn a_sync_through_a_shared_reference_is_a_flush() {
        let plan = FaultPlan::none();
        let mut buf = [0u8; 128];
        let mut m = written(&mut buf, &plan);
        m.sync(0..64).unwrap();
        m.write_at(8, b"bbbb").unwrap();
        m.crash(Crash::DropUnflushed);
        assert_eq!(read(&m, 0), *b"aaaa");
        assert_eq!(read(&m, 8), [0; 4], "written after the sync");
        m.write_at(0, b"cccc").unwrap();
        plan.fail_flushes(1);
        assert_eq!(m.sync(0..64), Err(RamError::Injected));
        m.sync(0..64).unwrap();
        m.crash(Crash::DropUnflushed);
        assert_eq!(read(&m, 0), *b"aaaa", "the failed sync dropped the write");
    }
}
