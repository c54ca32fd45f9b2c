//! Deleting a topic's consume queues (DELETE_TOPIC_IN_BROKER), so that a topic made
//! again under the same name starts empty instead of serving the old messages. The
//! records stay in the commit log and age out with their segments, as in RocketMQ.

use std::time::Duration;

use tern_shell::runtime::{self, now_ms};

use super::StoreService;

/// Folder under the store root where a deleted topic's queue folder is moved (under the
/// lock, a rename) before it is deleted (without the lock).
const TRASH: &str = "consumequeue.deleted";

/// Longest the deletion waits for reput to pass what was appended before it.
const CATCH_UP: Duration = Duration::from_secs(2);

impl StoreService {
    /// Removes every consume queue of `topic`; returns how many were open. Waits first
    /// for reput to dispatch what was appended before the call: an undispatched record
    /// of the topic would make its queue again, old entries first.
    pub async fn delete_topic_queues(&self, topic: &str) -> Result<usize, String> {
        self.await_caught_up(CATCH_UP).await;
        let trash = self.root.join(TRASH);
        std::fs::create_dir_all(&trash)
            .map_err(|e| format!("creating {}: {e}", trash.display()))?;
        let to = trash.join(format!("{topic}.{}", now_ms()));
        let removed = {
            let mut s = self.lock();
            let n = s
                .store_mut()
                .queues_mut()
                .remove_topic(topic, &to)
                .map_err(|e| e.to_string())?;
            self.views.remove_topic(topic);
            n
        };
        // File work outside the lock; a failure leaves only files nothing reads.
        let shown = to.display().to_string();
        runtime::spawn_blocking(move || {
            if to.exists() {
                if let Err(e) = std::fs::remove_dir_all(&to) {
                    log::warn!("removing the deleted topic's queues at {shown}: {e}");
                }
            }
        })
        .await;
        Ok(removed)
    }
}
