//! Locks that stay usable after a panic, for the engine's file layer.
//!
//! A thread that panics while holding a `std::sync` lock poisons it. The tables these
//! guard (spare segments, the next segment's slot, open segment files, segments to
//! reclaim) are whole between operations, each one insert, remove or swap, so a poisoned
//! lock's data is as good as any and one panic must not fail every later caller. This is
//! the rule `tern_shell::sync` keeps in the services, here because this crate sits below
//! the shell and cannot use it.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

/// [`Mutex::lock`] and [`Condvar::wait_timeout`], ignoring poison.
pub trait MutexExt<T: ?Sized> {
    /// The guard, whether or not an earlier holder panicked.
    fn guard(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn guard(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Waits on `cv` with `guard` for at most `timeout`, ignoring poison; the guard again.
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    cv.wait_timeout(guard, timeout)
        .unwrap_or_else(|p| p.into_inner())
        .0
}

/// [`RwLock::read`] and [`RwLock::write`], ignoring poison.
pub trait RwLockExt<T: ?Sized> {
    /// A shared guard, whether or not an earlier writer panicked.
    fn read_guard(&self) -> RwLockReadGuard<'_, T>;
    /// The exclusive guard, whether or not an earlier holder panicked.
    fn write_guard(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_guard(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write_guard(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}
