//! Which central queue a local queue's messages go to.

use tern_client::producer::PublishInfo;
use tern_shell::body::MessageQueue;

use super::Failure;

/// The central queue choice per topic.
#[derive(Debug, Default)]
pub struct Routes {}

impl Routes {
    /// The central queue for `local_queue` of `topic`, given its current writable
    /// queues `info`.
    pub fn queue_for(
        &mut self,
        topic: &str,
        local_queue: i32,
        info: &PublishInfo,
    ) -> Result<MessageQueue, Failure> {
        if info.queues.is_empty() {
            return Err(no_writable_queue(topic));
        }
        Ok(info.queues[local_queue.unsigned_abs() as usize % info.queues.len()].clone())
    }
}

/// The route lists the topic but no queue takes writes (its perm was changed).
fn no_writable_queue(topic: &str) -> Failure {
    Failure::Blocked {
        state: "NO_PERMISSION",
        detail: format!("no writable queue of {topic} in the central route"),
    }
}
