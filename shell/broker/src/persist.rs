//! Metadata tables (topics, consumer offsets, subscription groups) written off the
//! executor.
//!
//! A save is a temp file, an fsync, a rename and a folder fsync (`tern_engine_fs::meta`):
//! milliseconds, and much more on a busy disk, during which an executor thread would
//! serve nobody. A [`Saver`] takes a snapshot of its table when asked (under the table's
//! lock, which is then released) and writes it on the blocking pool. One write runs at a
//! time; snapshots taken meanwhile replace each other, so the file always ends with the
//! newest and a burst of changes costs one or two writes, not one each.
//!
//! The cost is a window: a change is on disk shortly after the call that made it returns
//! (a crash in between loses it). Callers that must not answer before that await
//! [`Saver::saved`]; shutdown does.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use event_listener::Event;
use serde::Serialize;
use tern_shell::runtime;

/// Writes snapshots of one table to one metadata file, newest last.
#[derive(Debug)]
pub struct Saver<T> {
    shared: Arc<Shared<T>>,
}

#[derive(Debug)]
struct Shared<T> {
    /// What the file holds, for logs ("consumer offsets").
    what: &'static str,
    path: PathBuf,
    state: Mutex<State<T>>,
    /// Notified when the writer finds nothing left to write.
    idle: Event,
}

#[derive(Debug)]
struct State<T> {
    /// The newest snapshot not yet being written.
    next: Option<T>,
    /// A writer task is running (it takes `next` until there is none).
    writing: bool,
    /// The last write failed (cleared by [`Saver::take_failure`] and by a success).
    failed: bool,
}

impl<T: Serialize + Send + 'static> Saver<T> {
    /// A saver for `path`; `what` names the table in logs.
    pub fn new(what: &'static str, path: PathBuf) -> Self {
        Self {
            shared: Arc::new(Shared {
                what,
                path,
                state: Mutex::new(State {
                    next: None,
                    writing: false,
                    failed: false,
                }),
                idle: Event::new(),
            }),
        }
    }

    /// Queues the snapshot `take` returns for writing, and returns without waiting for
    /// the disk. `take` runs under the saver's lock, so snapshots are queued in the
    /// order they were taken: a slower caller can never put an older table on disk after
    /// a newer one. It should only copy the table (under the table's own lock); the
    /// caller must not hold that lock when calling this.
    pub fn save(&self, take: impl FnOnce() -> T) {
        let mut st = self.shared.lock();
        st.next = Some(take());
        if st.writing {
            // The running writer takes it when done with the current one.
            return;
        }
        st.writing = true;
        drop(st);
        let shared = self.shared.clone();
        // Detached: `saved` is how callers wait.
        drop(runtime::spawn_blocking(move || shared.write_all()));
    }

    /// Resolves once every snapshot queued before the call is written (or its write
    /// failed, see [`Self::take_failure`]).
    pub async fn saved(&self) {
        loop {
            let listener = self.shared.idle.listen();
            if !self.shared.lock().writing {
                return;
            }
            listener.await;
        }
    }

    /// True if the last write failed; clears the flag (the caller then saves again).
    pub fn take_failure(&self) -> bool {
        std::mem::take(&mut self.shared.lock().failed)
    }
}

impl<T: Serialize> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Every update leaves the state valid; a panicking holder cannot break it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer: writes the newest snapshot until none is left. Runs on the blocking
    /// pool, holding no lock while it writes.
    fn write_all(&self) {
        loop {
            let next = {
                let mut st = self.lock();
                match st.next.take() {
                    Some(n) => n,
                    None => {
                        st.writing = false;
                        drop(st);
                        self.idle.notify(usize::MAX);
                        return;
                    }
                }
            };
            let result = tern_engine_fs::meta::save(&self.path, &next);
            if let Err(e) = &result {
                log::error!("saving {}: {e}", self.what);
            }
            self.lock().failed = result.is_err();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_newest_snapshot_is_on_disk_once_saved_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tern");
        let s = Saver::new("test table", path.clone());
        for i in 0..200u32 {
            s.save(|| vec![i; 64]);
        }
        runtime::block_on(s.saved());
        let got: Vec<u32> = tern_engine_fs::meta::load(&path).unwrap().unwrap();
        assert_eq!(got, vec![199; 64]);
        assert!(!s.take_failure());
        // Nothing queued: resolves at once.
        runtime::block_on(runtime::timeout(Duration::from_secs(1), s.saved())).unwrap();
    }

    #[test]
    fn a_failed_write_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = Saver::new("test table", dir.path().join("missing").join("t.tern"));
        s.save(|| 1u8);
        runtime::block_on(s.saved());
        assert!(s.take_failure());
        assert!(!s.take_failure(), "cleared once taken");
    }
}
