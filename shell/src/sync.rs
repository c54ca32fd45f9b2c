//! Locks that stay usable after a panic.
//!
//! A thread that panics while holding a `std::sync` lock poisons it, and every later
//! `lock()` returns an error. Tern's locks guard tables that each named operation leaves
//! whole before it returns (no operation holds a lock across a step that can panic half
//! way), so a poisoned lock's data is as good as any: one request's panic must not turn
//! every later request on that table into a panic too. These are the one way to take a
//! lock in the services.

use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], ignoring poison.
pub trait MutexExt<T: ?Sized> {
    /// The guard, whether or not an earlier holder panicked.
    fn guard(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn guard(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
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

/// [`Condvar::wait`], ignoring poison: the guard back, as [`MutexExt::guard`] gives it.
pub trait CondvarExt {
    /// Waits for a notification on `guard`'s lock, and takes it again whether or not a
    /// holder panicked meanwhile.
    fn wait_guard<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
}

impl CondvarExt for Condvar {
    fn wait_guard<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let rw = std::sync::Arc::new(RwLock::new(2));
        let (m2, rw2) = (m.clone(), rw.clone());
        let r = std::thread::spawn(move || {
            let _a = m2.lock().unwrap();
            let _b = rw2.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(r.is_err());
        assert!(m.is_poisoned() && rw.is_poisoned());
        *m.guard() += 1;
        *rw.write_guard() += 1;
        assert_eq!((*m.guard(), *rw.read_guard()), (2, 3));
        // A wait on the poisoned lock hands its guard back too.
        // (Held before the notifier starts, so the wait surely happens.)
        let ready = std::sync::Arc::new(Condvar::new());
        let (m3, ready2) = (m.clone(), ready.clone());
        let mut g = m.guard();
        let notifier = std::thread::spawn(move || {
            *m3.guard() += 1;
            ready2.notify_all();
        });
        while *g < 3 {
            g = ready.wait_guard(g);
        }
        drop(g);
        notifier.join().unwrap();
        assert_eq!(*m.guard(), 3);
    }
}
