//! Held pulls: a pull that finds nothing waits (up to the client's suspend timeout) for
//! the reput task to dispatch a message to its queue; held POPs (`crate::pop`) wait the
//! same way, on one queue or (queue id -1) on all of a topic's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use event_listener::{Event, EventListener};

/// One wake-up signal per queue that has ever had a waiter, and one release signal per
/// consumer group.
#[derive(Debug, Default)]
pub struct PullHolds {
    queues: Mutex<HashMap<(String, i32), Arc<Event>>>,
    groups: Arc<Mutex<HashMap<String, Arc<Event>>>>,
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

    /// Listens for [`release`](Self::release) of `group`'s held pulls.
    pub fn listen_release(&self, group: &str) -> EventListener {
        let mut g = self.groups.guard();
        g.entry(group.to_owned()).or_default().clone().listen()
    }

    /// Answers `group`'s held pulls now, with what they found (nothing): after a reset
    /// of the group's offsets, its clients drop their queues and wait for the pull in
    /// flight on each before pulling from the new offset (the C++ client spins until it
    /// returns), so a pull held for the rest of its 15 s only delays the reset.
    pub fn release(&self, group: &str) {
        release(&self.groups, group);
    }

    /// [`release`](Self::release) after each pause in turn, in a task of its own: once
    /// the group's clients have had time to see a reset (a loaded machine takes a
    /// while), and again for a pull re-sent before its client saw it.
    pub fn release_later(&self, group: &str, pauses: &'static [Duration]) {
        let (groups, group) = (self.groups.clone(), group.to_owned());
        drop(tern_shell::runtime::spawn(async move {
            for pause in pauses {
                tern_shell::runtime::sleep(*pause).await;
                release(&groups, &group);
            }
        }));
    }

    /// Wakes every held pull (shutdown).
    pub fn wake_all(&self) {
        let q = self.queues.guard();
        for e in q.values() {
            e.notify(usize::MAX);
        }
    }
}

fn release(groups: &Mutex<HashMap<String, Arc<Event>>>, group: &str) {
    if let Some(e) = groups.guard().get(group) {
        e.notify(usize::MAX);
    }
}
