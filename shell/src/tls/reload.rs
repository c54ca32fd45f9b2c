//! Certificates read again when their files change, as the ACL file is: by modification
//! time and length, looked at no more than once a second.
//!
//! The look happens when a handshake asks for the configuration, so there is no task to
//! start or stop and an idle server reads nothing. A change is built whole (chain, key,
//! CAs) before it replaces the old configuration: a bad file, or a certificate replaced
//! before its key, keeps the previous one and is logged once; the next change of any of
//! the files tries again.

use crate::sync::MutexExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How often the files are looked at, at most.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A file's modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

type Build<T> = Box<dyn Fn() -> Result<Arc<T>, String> + Send + Sync>;

/// A value built from files, rebuilt when they change.
pub(super) struct Reloading<T> {
    /// What the log calls it ("server certificate").
    what: &'static str,
    files: Vec<PathBuf>,
    build: Build<T>,
    state: Mutex<State<T>>,
}

struct State<T> {
    current: Arc<T>,
    stamps: Vec<Stamp>,
    checked: Instant,
}

/// The files a side's TLS is built from: its certificate and key when given, and the
/// trust file when it verifies its peer (`trusted`).
pub(super) fn watched(
    cert: &Option<PathBuf>,
    key: &Option<PathBuf>,
    trust: &Option<PathBuf>,
    trusted: bool,
) -> Vec<PathBuf> {
    let trust = trust.as_ref().filter(|_| trusted);
    [cert.as_ref(), key.as_ref(), trust]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
}

impl<T> std::fmt::Debug for Reloading<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl<T> Reloading<T> {
    /// Builds the first value; an error here is the caller's to report (at start).
    pub(super) fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<Arc<T>, String> + Send + Sync + 'static,
    ) -> Result<Self, String> {
        let stamps = files.iter().map(stamp).collect();
        let current = build()?;
        Ok(Self {
            what,
            files,
            build: Box::new(build),
            state: Mutex::new(State {
                current,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The value in force, rebuilt first if a file changed since the last look.
    pub(super) fn current(&self) -> Arc<T> {
        // Every update replaces whole fields: a panicking holder leaves a valid state.
        let mut state = self.state.guard();
        if state.checked.elapsed() >= RELOAD_CHECK {
            state.checked = Instant::now();
            let stamps: Vec<Stamp> = self.files.iter().map(stamp).collect();
            if stamps != state.stamps {
                state.stamps = stamps;
                match (self.build)() {
                    Ok(v) => {
                        state.current = v;
                        log::info!("TLS {} reloaded from {:?}", self.what, self.files);
                    }
                    Err(e) => log::error!(
                        "TLS {} not reloaded, the previous one stays in use: {e}",
                        self.what
                    ),
                }
            }
        }
        state.current.clone()
    }
}
