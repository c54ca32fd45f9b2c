//! [`NextSegment`]: the commit log's next segment, made ahead of need (RocketMQ's
//! `AllocateMappedFileService`).
//!
//! Making a segment is disk work: create a temp file, `fallocate` it, `fdatasync`, rename
//! it into place, `fsync` the folder. Done inline, it ran inside an append while the
//! appender held the broker's store lock, so every sender waited for it. A background
//! task now calls [`NextSegment::prepare`] for the segment after the active one; when the
//! log reaches it, [`FileDirectory`]'s `create` adopts the file (a mapping, no IO). If
//! the task is still making it, `create` waits for the task; if nobody prepared it (the
//! first segment, a replica's jump, a task that fell behind or failed), `create` makes it
//! inline as before.
//!
//! A prepared segment has its final name, full size and a durable folder entry before it
//! is offered, so a crash at any point leaves either no file or an all-zero segment past
//! the log's end, which recovery already removes (a roll that never got written). Its
//! rename never replaces a file: when an append rolled into the segment and made it
//! inline between the task's look and its rename, the task fails instead of putting an
//! empty file under the name of the segment being written.
//!
//! [`FileDirectory`]: crate::FileDirectory

use std::fs::File;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::FsError;
use crate::locks::{self, MutexExt};

/// How long `create` waits for a segment the task is making before making it itself
/// (a stuck task must not stop appends for good).
const WAIT_FOR_TASK: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
enum State {
    /// Nothing prepared.
    #[default]
    Idle,
    /// The task is making the segment at this base.
    Making(u64),
    /// Made and durable, not adopted yet.
    Made { base: u64, len: u64, file: File },
}

/// The hand-off between the preparing task and the directory; shared by both.
#[derive(Debug, Default)]
pub struct NextSegment {
    state: Mutex<Slot>,
    changed: Condvar,
}

/// The state and the generation it belongs to.
#[derive(Debug, Default)]
struct Slot {
    state: State,
    /// Moves on when the log's end moves back ([`NextSegment::invalidate`]): a task that
    /// chose its base from the end before that makes nothing, or unmakes what it made.
    generation: u64,
}

/// What [`NextSegment::take`] found.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The prepared file for the base asked for.
    Ready(File),
    /// Nothing prepared for that base: make it inline.
    NotPrepared,
}

impl NextSegment {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.state.guard()
    }

    /// The current generation: a preparing task reads it before it reads the log's end
    /// it picks the base from, and hands it to `prepare`.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Whether the segment at `base` is prepared or being prepared.
    pub fn is_prepared(&self, base: u64) -> bool {
        match &self.lock().state {
            State::Idle => false,
            State::Making(b) => *b == base,
            State::Made { base: b, .. } => *b == base,
        }
    }

    /// Makes the segment at `base` (`len` bytes) with `make` (the directory's creation
    /// steps, run here, off the store's lock) and offers it. Does nothing if it is
    /// prepared already, or if `generation` is not the current one (the log's end moved
    /// back since the caller picked `base`). A segment prepared for another base that was
    /// never adopted is dropped first (its file stays on disk; recovery removes it, or
    /// `make` fails on the name and the log makes it inline). When the generation moves
    /// on while `make` runs, `unmake` removes what it made, before anyone can adopt the
    /// file by its name.
    pub(crate) fn prepare(
        &self,
        generation: u64,
        (base, len): (u64, u64),
        make: impl FnOnce() -> Result<File, FsError>,
        unmake: impl FnOnce(),
    ) -> Result<(), FsError> {
        {
            let mut slot = self.lock();
            if slot.generation != generation {
                return Ok(());
            }
            match &slot.state {
                State::Making(b) | State::Made { base: b, .. } if *b == base => return Ok(()),
                State::Making(_) => return Ok(()),
                _ => slot.state = State::Making(base),
            }
        }
        let made = make();
        let mut slot = self.lock();
        let result = match made {
            Ok(file) if slot.generation == generation => {
                slot.state = State::Made { base, len, file };
                Ok(())
            }
            Ok(file) => {
                // Made for an end that is gone: under the lock, so `create` (which waits
                // while this is `Making`) cannot adopt it by its name first.
                drop(file);
                unmake();
                slot.state = State::Idle;
                Ok(())
            }
            Err(e) => {
                slot.state = State::Idle;
                Err(e)
            }
        };
        self.changed.notify_all();
        result
    }

    /// The log's end moved back (a truncation): forgets what was made ahead. Waits
    /// (bounded) for a preparation in flight, moves the generation on so that tasks
    /// that picked a base from the old end make nothing, and runs `sweep` under the
    /// hand-off's lock (no preparation starts meanwhile): the caller removes every
    /// segment file past the log's new last segment there. A preparation still in
    /// flight after the wait unmakes its file itself when it ends.
    pub fn invalidate(&self, sweep: impl FnOnce()) {
        let deadline = Instant::now() + WAIT_FOR_TASK;
        let mut slot = self.lock();
        while matches!(slot.state, State::Making(_)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                log::warn!("a commit-log segment still being made after {WAIT_FOR_TASK:?}");
                break;
            }
            slot = locks::wait_timeout(&self.changed, slot, left);
        }
        slot.generation += 1;
        if let State::Made { .. } = slot.state {
            // Its file goes with the sweep.
            slot.state = State::Idle;
        }
        sweep();
        self.changed.notify_all();
    }

    /// Takes the prepared segment at `base` of `len` bytes, waiting (bounded) if the task
    /// is making it.
    pub(crate) fn take(&self, base: u64, len: u64) -> Taken {
        let deadline = Instant::now() + WAIT_FOR_TASK;
        let mut slot = self.lock();
        loop {
            match &slot.state {
                State::Making(b) if *b == base => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        log::warn!(
                            "commit-log segment {base} still being made after {WAIT_FOR_TASK:?}: making it inline"
                        );
                        return Taken::NotPrepared;
                    }
                    slot = locks::wait_timeout(&self.changed, slot, left);
                }
                State::Made {
                    base: b, len: l, ..
                } if *b == base && *l == len => {
                    let State::Made { file, .. } = std::mem::take(&mut slot.state) else {
                        unreachable!("matched Made above")
                    };
                    return Taken::Ready(file);
                }
                _ => return Taken::NotPrepared,
            }
        }
    }
}
