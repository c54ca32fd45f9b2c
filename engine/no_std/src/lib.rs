//! Tern's storage engine: RocketMQ's commit log, consume queues and hash index, in their
//! on-disk formats, over a [`media::Media`] trait. No `std`, no heap: the same engine runs in
//! a cluster broker over mapped files and on a gateway or microcontroller over flash or RAM.
//!
//! # What the media promises
//!
//! Recovery is the code that turns every state these promises allow back into a consistent
//! store, so they come first:
//!
//! 1. A write is visible to reads at once, on every media.
//! 2. Bytes are durable only once a `flush` covering them has returned `Ok`.
//! 3. **Process crash** (`kill -9`): everything written is kept (the page cache survives).
//! 4. **Power loss**: any write not yet flushed may be lost, and the last write in flight
//!    may be torn at any byte; flushed bytes are intact. Bits may rot: records carry CRCs.
//! 5. Creating or removing a whole segment is atomic (the file layer renames into place).
//! 6. **A failed flush is final.** What it covered may never become durable, and a later
//!    flush of the same bytes may return `Ok` without writing them (Linux reports a failed
//!    write-back once and marks the pages clean: "fsyncgate"); reads still return them
//!    until power is lost. So the engine is fail-stop: after any failed flush it refuses
//!    writes, flushes and checkpoints with [`Error::FlushFailed`] and claims nothing more
//!    durable; reopening recovers, and recovery writes the tail it cannot vouch for again
//!    before calling it flushed.
//!
//! # What recovery guarantees
//!
//! After [`store::Engine::open`], for every state above:
//! - every record whose bytes were flushed is present, intact, and in its original order;
//! - nothing that was never written appears: the log ends at the first record that fails
//!   its magic, size, position or CRC check, and everything after it is zeroed;
//! - consume queues and the hash index point only into the log, and every log record of a
//!   dispatchable type is in its consume queue exactly once.
//!
//! # Modules
//!
//! Layouts live in [`layout`], the record codec in [`record`], and each structure in the
//! module named for it. [`store`] composes them and holds recovery.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod calendar;
pub mod checkpoint;
pub mod commitlog;
pub mod consumequeue;
pub mod delay;
pub mod dispatch;
pub mod error;
pub mod faulty;
pub mod hash;
pub mod index;
pub mod layout;
pub mod media;
pub mod properties;
pub mod ram;
pub mod record;
pub mod segments;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod timer;
mod trace;

pub use error::Error;
