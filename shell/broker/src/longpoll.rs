//! Held pulls: a pull that finds nothing waits (up to the client's suspend timeout) for
//! the reput task to dispatch a message to its queue; held POPs (`crate::pop`) wait the
//! same way, on one queue or (queue id -1) on all of a topic's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;

use event_listener::{Event, EventListener};

/// One wake-up signal per queue that has ever had a waiter.
#[derive(Debug, Default)]
pub struct PullHolds {
    queues: Mutex<HashMap<(String, i32), Arc<Event>>>,
}

impl PullHolds {
    /// Starts listening for new messages on a queue. Check the queue again after calling
    /// this and before awaiting, so a message dispatched in between is not missed.
    pub fn listen(&self, topic: &str, queue_id: i32) -> EventListener {
        let mut q = self.queues.guard();
        let event = q.entry((topic.to_owned(), queue_id)).or_default().clone();
        event.listen()
    }

    /// Wakes every pull held on a queue, and every request held on the whole topic
    /// (queue id -1: a POP of every queue).
    pub fn wake(&self, topic: &str, queue_id: i32) {
        let q = self.queues.guard();
        for id in [queue_id, -1] {
            if let Some(e) = q.get(&(topic.to_owned(), id)) {
                e.notify(usize::MAX);
            }
        }
    }

    /// Wakes every held pull (shutdown).
    pub fn wake_all(&self) {
        let q = self.queues.guard();
        for e in q.values() {
            e.notify(usize::MAX);
        }
    }
}
