//! What the broker did on disk while the senders ran, seen from outside: when its
//! checkpoint file changed (the 1 s checkpoint flushes queues and index, then writes it)
//! and how many commit-log segments it created (rolls).
//!
//! A thread polls the checkpoint file's modification time every [`POLL`]: a stat call,
//! nothing the broker notices.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

/// How often the checkpoint file is looked at.
pub const POLL: Duration = Duration::from_millis(5);

/// A running watcher.
#[derive(Debug)]
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Instant>>,
}

/// The checkpoint file of the broker whose data folder is `data`.
pub fn checkpoint_file(data: &Path) -> Option<PathBuf> {
    let log = super::cache::commit_log_files(data).ok()?;
    let store = log.first()?.parent()?.parent()?;
    Some(store.join("checkpoint"))
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Watcher {
    /// Starts watching `checkpoint`.
    pub fn start(checkpoint: PathBuf) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut last = mtime(&checkpoint);
            while !s.load(Ordering::Relaxed) {
                thread::sleep(POLL);
                let now = mtime(&checkpoint);
                if now != last {
                    seen.push(Instant::now());
                    last = now;
                }
            }
            seen
        });
        Watcher { stop, thread }
    }

    /// Stops; returns when the checkpoint file changed (within [`POLL`] after).
    pub fn stop(self) -> Vec<Instant> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Checkpoint writes seen in `[t0, end)`, as offsets from `t0`.
pub fn since(seen: &[Instant], t0: Instant, end: Instant) -> Vec<Duration> {
    seen.iter()
        .filter(|&&t| t >= t0 && t < end)
        .map(|&t| t - t0)
        .collect()
}

/// Was a send that started at `at` and took `latency` in flight when one of `writes`
/// happened (allowing for the watcher's [`POLL`])?
pub fn overlaps(writes: &[Duration], at: Duration, latency: Duration) -> bool {
    let from = at.saturating_sub(POLL);
    let to = at + latency + POLL;
    writes.iter().any(|w| (from..=to).contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_overlaps_a_write_inside_its_span_only() {
        let ms = Duration::from_millis;
        let w = [ms(1000), ms(2000)];
        assert!(overlaps(&w, ms(990), ms(20)));
        assert!(overlaps(&w, ms(1990), ms(8)));
        assert!(!overlaps(&w, ms(1100), ms(50)));
        assert!(!overlaps(&[], ms(0), ms(100)));
    }

    #[test]
    fn the_watcher_sees_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("checkpoint");
        fs::write(&f, b"a").unwrap();
        let t0 = Instant::now();
        let w = Watcher::start(f.clone());
        thread::sleep(Duration::from_millis(30));
        fs::write(&f, b"b").unwrap();
        thread::sleep(Duration::from_millis(30));
        let seen = w.stop();
        assert_eq!(since(&seen, t0, Instant::now()).len(), 1);
    }
}
