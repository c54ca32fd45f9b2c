//! Metadata tables (topics, consumer offsets, subscription groups) written off the
//! executor.
//!
//! A save is a temp file, an fsync, a rename and a folder fsync (`tern_engine_fs::meta`):
//! milliseconds, and much more on a busy disk, during which an executor thread would
//! serve nobody. A [`Saver`] is told that its table changed and writes it on the
//! blocking pool: the writer takes the snapshot itself (a copy under the table's lock,
//! released before any file work), then writes it. One write runs at a time; changes
//! made meanwhile are all in the next snapshot, so a burst of changes costs one or two
//! copies and writes, not one each, and the file always ends with the newest table.
//!
//! The cost is a window: a change is on disk shortly after the call that made it returns
//! (a crash in between loses it). Callers that must not answer before that await
//! [`Saver::saved`]; shutdown does.
//!
//! [`load_json`] reads back the tables saved as RocketMQ's JSON (subscription groups, POP
//! request modes, schedule offsets): each starts empty when the file is missing, and
//! logs and starts empty when it cannot be read.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tern_shell::sync::MutexExt;

use event_listener::Event;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tern_engine_fs::MetaError;
use tern_shell::body::BodyError;
use tern_shell::runtime;

/// Why a JSON table could not be read; shown as the underlying error, which is also its
/// [`source`](std::error::Error::source).
#[derive(Debug)]
pub enum LoadError {
    /// Neither the metadata file nor its backup could be read.
    File(MetaError),
    /// The file was read but its JSON is not the table's.
    Json(BodyError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(e) => e.fmt(f),
            Self::Json(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::File(e) => Some(e),
            Self::Json(e) => Some(e),
        }
    }
}

/// The table saved as JSON at `path` (fastjson-compatible, [`tern_shell::body::from_json`]);
/// `Ok(None)` when there is no file yet. The caller logs an error and starts empty.
pub fn load_json<W: DeserializeOwned>(path: &Path) -> Result<Option<W>, LoadError> {
    match tern_engine_fs::meta::load::<Vec<u8>>(path).map_err(LoadError::File)? {
        Some(json) => tern_shell::body::from_json(&json)
            .map(Some)
            .map_err(LoadError::Json),
        None => Ok(None),
    }
}

/// Takes a snapshot of a table: copies it under the table's lock and returns.
type Snapshot<T> = Box<dyn Fn() -> T + Send + Sync>;

/// Writes snapshots of one table to one metadata file, newest last.
pub struct Saver<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    /// What the file holds, for logs ("consumer offsets").
    what: &'static str,
    path: PathBuf,
    snapshot: Snapshot<T>,
    state: Mutex<State>,
    /// Notified when the writer finds nothing left to write.
    idle: Event,
}

#[derive(Debug, Default)]
struct State {
    /// The table changed since the writer last took a snapshot.
    pending: bool,
    /// A writer task is running (it writes until nothing is pending).
    writing: bool,
    /// The last write failed (cleared by [`Saver::take_failure`] and by a success).
    failed: bool,
}

impl<T> std::fmt::Debug for Saver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Saver")
            .field("what", &self.shared.what)
            .field("path", &self.shared.path)
            .field("state", &*self.shared.lock())
            .finish()
    }
}

impl<T: Serialize + 'static> Saver<T> {
    /// A saver of the table `snapshot` copies, to `path`; `what` names it in logs.
    /// `snapshot` runs on the blocking pool and must only take the table's lock.
    pub fn new(
        what: &'static str,
        path: PathBuf,
        snapshot: impl Fn() -> T + Send + Sync + 'static,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                what,
                path,
                snapshot: Box::new(snapshot),
                state: Mutex::default(),
                idle: Event::new(),
            }),
        }
    }

    /// The table changed: it will be written soon, with every change made before this
    /// call. Returns without waiting for the disk ([`Self::saved`] waits). The caller may
    /// hold the table's lock or not; nothing here takes it.
    pub fn save(&self) {
        let mut st = self.shared.lock();
        st.pending = true;
        if st.writing {
            // The running writer takes another snapshot when done with this one.
            return;
        }
        st.writing = true;
        drop(st);
        let shared = self.shared.clone();
        // Detached: `saved` is how callers wait.
        drop(runtime::spawn_blocking(move || shared.write_all()));
    }

    /// Resolves once every change saved before the call is written (or its write
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

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state valid; a panicking holder cannot break it.
        self.state.guard()
    }
}

impl<T: Serialize> Shared<T> {
    /// The writer: snapshot, write, until nothing changed meanwhile. Runs on the
    /// blocking pool, holding no lock while it writes.
    fn write_all(&self) {
        loop {
            {
                let mut st = self.lock();
                if !st.pending {
                    st.writing = false;
                    drop(st);
                    self.idle.notify(usize::MAX);
                    return;
                }
                st.pending = false;
            }
            let snapshot = (self.snapshot)();
            let result = tern_engine_fs::meta::save(&self.path, &snapshot);
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn the_newest_table_is_on_disk_once_saved_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tern");
        let table = Arc::new(Mutex::new(0u32));
        let snapshots = Arc::new(AtomicUsize::new(0));
        let (t, n) = (table.clone(), snapshots.clone());
        let s = Saver::new("test table", path.clone(), move || {
            n.fetch_add(1, Ordering::Relaxed);
            vec![*t.lock().unwrap(); 64]
        });
        for i in 1..=200u32 {
            *table.lock().unwrap() = i;
            s.save();
        }
        runtime::block_on(s.saved());
        let got: Vec<u32> = tern_engine_fs::meta::load(&path).unwrap().unwrap();
        assert_eq!(got, vec![200; 64]);
        assert!(!s.take_failure());
        let taken = snapshots.load(Ordering::Relaxed);
        assert!((1..=200).contains(&taken), "{taken} snapshots");
        // Nothing pending: resolves at once, and nothing is written again.
        runtime::block_on(runtime::timeout(Duration::from_secs(1), s.saved())).unwrap();
        assert_eq!(snapshots.load(Ordering::Relaxed), taken);
    }

    #[test]
    fn a_failed_write_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = Saver::new(
            "test table",
            dir.path().join("missing").join("t.tern"),
            || 1u8,
        );
        s.save();
        runtime::block_on(s.saved());
        assert!(s.take_failure());
        assert!(!s.take_failure(), "cleared once taken");
    }

    #[test]
    fn a_load_error_shows_and_keeps_its_cause() {
        use std::error::Error;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        tern_engine_fs::meta::save(&path, &b"[1, 2".to_vec()).unwrap();
        let e = load_json::<Vec<u32>>(&path).unwrap_err();
        assert!(matches!(e, LoadError::Json(_)), "{e:?}");
        let source = e.source().expect("the JSON error");
        assert_eq!(e.to_string(), source.to_string());
    }
}
