//! Deleting a topic's consume queues (DELETE_TOPIC_IN_BROKER), so that a topic made
//! again under the same name starts empty instead of serving the old messages. The
//! records stay in the commit log and age out with their segments, as in RocketMQ. The
//! removal itself is the maintenance one ([`StoreService::remove_queues`]).

use std::sync::Arc;
use std::time::Duration;

use tern_shell::runtime;

use super::{RemoveError, StoreService};

/// Longest the deletion waits for reput to pass what was appended before it.
const CATCH_UP: Duration = Duration::from_secs(2);

impl StoreService {
    /// Removes every consume queue of `topic`; returns how many there were. Waits first
    /// for reput to dispatch what was appended before the call: an undispatched record
    /// of the topic would make its queue again, old entries first.
    pub async fn delete_topic_queues(self: &Arc<Self>, topic: &str) -> Result<usize, RemoveError> {
        // Strictly: a record of the topic the confirm offset holds back counts too.
        self.await_dispatched(self.log_end(), CATCH_UP).await;
        let (me, topic) = (self.clone(), topic.to_owned());
        runtime::spawn_blocking(move || me.remove_queues(&|t, _, _| t == topic))
            .await
            .map(|removed| removed.len())
    }
}
