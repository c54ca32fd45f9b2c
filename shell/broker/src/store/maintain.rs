//! Removing whole consume queues (CLEAN_UNUSED_TOPIC, CLEAN_EXPIRED_CONSUMEQUEUE).
//!
//! Under the lock a queue leaves the engine's table and the readers' views, and its
//! folder is renamed out of `consumequeue/` (one rename: no unlink or unmap in the
//! lock, and a queue made again for the topic at once gets a fresh folder that the
//! deletion cannot touch). The renamed folder is deleted after the lock is released.
//! Readers that already hold one of its files keep reading what it held.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::{RemoveError, StoreService};

/// Folder (under the store root) where removed queue folders wait for deletion. A crash
/// before the deletion leaves them there; the next removal deletes them.
const REMOVED_DIR: &str = "consumequeue.removed";

/// What the picker of [`StoreService::remove_queues`] knows of a queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueFacts {
    /// First offset served.
    pub min_offset: u64,
    /// Next offset to be written.
    pub max_offset: u64,
    /// Log offset where the queue's newest record ends; 0 for a queue with no entry.
    pub last_record_end: u64,
    /// The commit log's first offset still held.
    pub log_min: u64,
}

/// Tells removed folders apart within one process run.
static REMOVALS: AtomicU64 = AtomicU64::new(0);

impl StoreService {
    /// Removes every consume queue `pick` chooses; returns the removed `(topic, queue id)`s.
    pub fn remove_queues(
        &self,
        pick: &dyn Fn(&str, i32, QueueFacts) -> bool,
    ) -> Result<Vec<(String, i32)>, RemoveError> {
        let trash = self.root.join(REMOVED_DIR);
        if let Err(error) = std::fs::create_dir_all(&trash) {
            return Err(RemoveError::Trash { path: trash, error });
        }
        let mut removed = Vec::new();
        let mut folders: Vec<PathBuf> = Vec::new();
        let mut slots = Vec::new();
        let mut failed = None;
        {
            let mut s = self.lock();
            let held = Instant::now();
            let log_min = s.engine().log().min_offset();
            let chosen: Vec<(String, i32)> = s
                .engine()
                .queues()
                .keys()
                .into_iter()
                .filter(|(t, q)| {
                    s.engine().queue(t, *q).is_some_and(|cq| {
                        pick(
                            t,
                            *q,
                            QueueFacts {
                                min_offset: cq.min_offset(),
                                max_offset: cq.max_offset(),
                                last_record_end: cq.max_physical_end(),
                                log_min,
                            },
                        )
                    })
                })
                .collect();
            for (topic, queue_id) in chosen {
                let Some(slot) = s.engine_mut().queues_mut().remove(&topic, queue_id) else {
                    continue;
                };
                self.views.remove(&topic, queue_id);
                let dir = slot.queue.into_dir();
                let to = trash.join(format!(
                    "{topic}-{queue_id}-{}",
                    REMOVALS.fetch_add(1, Ordering::Relaxed)
                ));
                if let Err(error) = std::fs::rename(dir.path(), &to) {
                    failed = Some(RemoveError::Move {
                        path: dir.path().to_path_buf(),
                        error,
                    });
                }
                if let Some(parent) = dir.path().parent() {
                    folders.push(parent.to_path_buf());
                }
                // Unmapped outside the lock.
                slots.push(dir);
                removed.push((topic, queue_id));
            }
            super::note_slow_hold("queue removal", held);
        }
        drop(slots);
        delete_all_in(&trash);
        // A topic folder left empty goes too (fails harmlessly if a queue came back).
        for f in folders {
            let _ = std::fs::remove_dir(&f);
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }
}

/// Deletes what is in `trash`; what cannot be deleted now is logged and left for the
/// next removal.
fn delete_all_in(trash: &Path) {
    let Ok(entries) = std::fs::read_dir(trash) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        if let Err(err) = std::fs::remove_dir_all(e.path()) {
            log::warn!("deleting removed queue {}: {err}", e.path().display());
        }
    }
}
