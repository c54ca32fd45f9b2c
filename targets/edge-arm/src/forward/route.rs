//! Which central queue a local queue's messages go to, kept stable across route
//! changes so per-key order holds.
//!
//! The first time a topic is forwarded its central writable queues (as the producer
//! lists them: sorted by broker, then queue id) are kept in the progress
//! ([`super::progress::Progress::routes`]). Local queue `q` then always goes to kept
//! queue `q mod kept count`; a producer's sharding key chose `q`, so each key stays in
//! one central queue. When the route changes:
//! - a kept queue is in the route: it is used, whatever else changed (queues added on
//!   any broker are not used by the forwarder until a rebuild);
//! - a kept queue's broker is missing from the route (down, restarting): the topic is
//!   held ([`Failure::Blocked`] `BROKER_ABSENT`, tried again every `edgeRetryMaxMs`)
//!   rather than moving its keys; after `edgeRouteHoldMs` without the broker the
//!   mapping is rebuilt from the route as it is;
//! - a kept queue's broker is in the route but no longer has that queue (its queue count
//!   was lowered, or the queue made read-only): the mapping is rebuilt at once.
//!
//! A rebuild is logged at WARN: keys may move to another central queue, so a consumer
//! may see a key's later messages before its earlier ones still queued in the old
//! queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tern_shell::body::MessageQueue;

use super::Failure;

/// A central queue as kept: broker name and queue id.
pub type QueueRef = (String, i32);

/// Runtime side of the mapping: how long a kept broker has been missing.
#[derive(Debug)]
pub struct Routes {
    hold: Duration,
    absent_since: BTreeMap<String, Instant>,
}

impl Routes {
    /// Holds a topic at most `hold` for a missing broker.
    pub fn new(hold: Duration) -> Routes {
        Routes {
            hold,
            absent_since: BTreeMap::new(),
        }
    }

    /// The central queue for `local_queue` of `topic`, given its current writable
    /// queues `writable` (the producer's publish info) and the `kept` mappings (updated
    /// when built or rebuilt).
    pub fn queue_for(
        &mut self,
        kept: &mut BTreeMap<String, Vec<QueueRef>>,
        topic: &str,
        local_queue: i32,
        writable: &[MessageQueue],
    ) -> Result<MessageQueue, Failure> {
        if writable.is_empty() {
            return Err(Failure::Blocked {
                state: "NO_PERMISSION",
                detail: format!("no writable queue of {topic} in the central route"),
            });
        }
        let current: Vec<QueueRef> = writable
            .iter()
            .map(|q| (q.broker_name.clone(), q.queue_id))
            .collect();
        let mapping = kept
            .entry(topic.to_owned())
            .or_insert_with(|| current.clone());
        let chosen = &mapping[local_queue.unsigned_abs() as usize % mapping.len()];
        if current.contains(chosen) {
            self.absent_since.remove(topic);
            return Ok(queue(topic, chosen));
        }
        let brokers: BTreeSet<&str> = current.iter().map(|(b, _)| b.as_str()).collect();
        if !brokers.contains(chosen.0.as_str()) {
            let since = *self
                .absent_since
                .entry(topic.to_owned())
                .or_insert_with(Instant::now);
            if since.elapsed() < self.hold {
                return Err(Failure::Blocked {
                    state: "BROKER_ABSENT",
                    detail: format!(
                        "central broker {} (queue {} of {topic}) is not in the route: its keys wait for it",
                        chosen.0, chosen.1
                    ),
                });
            }
        }
        log::warn!(
            "central queues of {topic} changed ({} kept, {} now; {} {} gone): mapping rebuilt, \
             keys may move to another central queue",
            mapping.len(),
            current.len(),
            chosen.0,
            chosen.1
        );
        self.absent_since.remove(topic);
        *mapping = current;
        let chosen = &mapping[local_queue.unsigned_abs() as usize % mapping.len()];
        Ok(queue(topic, chosen))
    }
}

fn queue(topic: &str, (broker, id): &QueueRef) -> MessageQueue {
    MessageQueue {
        topic: topic.to_owned(),
        broker_name: broker.clone(),
        queue_id: *id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(spec: &[(&str, i32)]) -> Vec<MessageQueue> {
        spec.iter()
            .map(|(b, q)| queue("T", &((*b).to_owned(), *q)))
            .collect()
    }

    fn pick(
        r: &mut Routes,
        kept: &mut BTreeMap<String, Vec<QueueRef>>,
        q: i32,
        w: &[MessageQueue],
    ) -> Result<(String, i32), String> {
        r.queue_for(kept, "T", q, w)
            .map(|m| (m.broker_name, m.queue_id))
            .map_err(|f| f.to_string())
    }

    #[test]
    fn a_kept_queue_is_used_while_it_is_in_the_route_whatever_was_added() {
        let mut r = Routes::new(Duration::from_secs(60));
        let mut kept = BTreeMap::new();
        let two = queues(&[("a", 0), ("a", 1), ("b", 0), ("b", 1)]);
        assert_eq!(pick(&mut r, &mut kept, 6, &two), Ok(("b".into(), 0)));
        let grown = queues(&[("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]);
        assert_eq!(pick(&mut r, &mut kept, 6, &grown), Ok(("b".into(), 0)));
        assert_eq!(kept["T"].len(), 4, "not rebuilt for added queues");
    }

    #[test]
    fn a_missing_broker_holds_its_keys_and_others_keep_their_queues() {
        let mut r = Routes::new(Duration::from_secs(60));
        let mut kept = BTreeMap::new();
        let two = queues(&[("a", 0), ("a", 1), ("b", 0), ("b", 1)]);
        pick(&mut r, &mut kept, 0, &two).unwrap();
        let only_a = queues(&[("a", 0), ("a", 1)]);
        let held = pick(&mut r, &mut kept, 3, &only_a).unwrap_err();
        assert!(held.starts_with("BROKER_ABSENT"), "{held}");
        assert_eq!(pick(&mut r, &mut kept, 1, &only_a), Ok(("a".into(), 1)));
        assert_eq!(
            pick(&mut r, &mut kept, 3, &two),
            Ok(("b".into(), 1)),
            "back where it was"
        );
    }

    #[test]
    fn a_broker_missing_past_the_hold_or_a_lost_queue_rebuilds_the_mapping() {
        let mut r = Routes::new(Duration::ZERO);
        let mut kept = BTreeMap::new();
        let two = queues(&[("a", 0), ("a", 1), ("b", 0), ("b", 1)]);
        pick(&mut r, &mut kept, 0, &two).unwrap();
        let only_a = queues(&[("a", 0), ("a", 1)]);
        assert_eq!(pick(&mut r, &mut kept, 3, &only_a), Ok(("a".into(), 1)));
        assert_eq!(kept["T"].len(), 2);

        let mut r = Routes::new(Duration::from_secs(60));
        let mut kept = BTreeMap::new();
        pick(&mut r, &mut kept, 0, &two).unwrap();
        let b_shrunk = queues(&[("a", 0), ("a", 1), ("b", 0)]);
        assert_eq!(pick(&mut r, &mut kept, 3, &b_shrunk), Ok(("a".into(), 0)));
        assert_eq!(kept["T"].len(), 3);
    }

    #[test]
    fn no_writable_queue_is_a_permission_the_operator_must_grant() {
        let mut r = Routes::new(Duration::from_secs(60));
        let e = pick(&mut r, &mut BTreeMap::new(), 0, &[]).unwrap_err();
        assert!(e.starts_with("NO_PERMISSION"), "{e}");
    }
}
