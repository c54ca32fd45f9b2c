//! Parked topics: a topic the cluster refuses until an operator acts (or whose
//! central broker is missing) waits in the local log while the others flow, and is
//! caught up in log order once the cluster takes it again.

use std::time::{Duration, Instant};

use tern_shell::runtime::{Shutdown, now_ms};

use super::{Flow, Forwarder, records};

/// A parked topic's state (not saved: after a restart it is tried at once).
#[derive(Clone, Debug)]
pub(super) struct Blocked {
    pub(super) state: &'static str,
    pub(super) detail: String,
    /// Wall-clock ms it was parked.
    pub(super) since_ms: i64,
    pub(super) retry_at: Instant,
    /// The pause after the next refusal.
    pub(super) wait: Duration,
}

impl Forwarder {
    /// Parks `topic` from log offset `from` (or, already parked, moves its offset and
    /// schedules the next try). Logged when its state changes.
    pub(super) fn park(&mut self, topic: &str, from: u64, state: &'static str, detail: String) {
        let now = Instant::now();
        self.progress.parked.insert(topic.to_owned(), from);
        // A missing broker comes back by itself: tried as often as a failing uplink.
        // What an operator must fix is tried every minute or more: each try costs a
        // route lookup and a refused request on the cluster, and a fix takes minutes.
        let (first, max) = if state == "BROKER_ABSENT" {
            (self.cfg.retry_max, self.cfg.retry_max)
        } else {
            (self.cfg.blocked_retry, self.cfg.blocked_retry_max)
        };
        match self.blocked.get_mut(topic) {
            Some(b) => {
                if b.state == "PARKED" {
                    b.wait = first;
                }
                if b.state != state {
                    log::warn!(
                        "topic {topic} still held, now {state} ({detail}); next try in {:?}",
                        b.wait
                    );
                } else {
                    log::debug!("topic {topic} still {state}; next try in {:?}", b.wait);
                }
                b.state = state;
                b.detail = detail;
                b.retry_at = now + b.wait;
                b.wait = (b.wait * 2).min(max);
            }
            None => {
                log::warn!(
                    "topic {topic} held ({state}: {detail}): parked at local offset {from}, \
                     other topics keep flowing; next try in {first:?}"
                );
                self.blocked.insert(
                    topic.to_owned(),
                    Blocked {
                        state,
                        detail,
                        since_ms: now_ms(),
                        retry_at: now + first,
                        wait: (first * 2).min(max),
                    },
                );
            }
        }
        self.publish_report();
    }

    /// Tries every parked topic that is due: its parked records are read again from the
    /// log and sent in order up to the main pass; caught up, it is unparked. False at
    /// shutdown.
    pub(super) async fn retry_blocked(&mut self, shutdown: &Shutdown) -> bool {
        let now = Instant::now();
        let due: Vec<String> = self
            .blocked
            .iter()
            .filter(|(_, b)| b.retry_at <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for topic in due {
            if !self.catch_up(&topic, shutdown).await {
                return false;
            }
        }
        true
    }

    async fn catch_up(&mut self, topic: &str, shutdown: &Shutdown) -> bool {
        let started = self.stats.forwarded;
        loop {
            if shutdown.is_triggered() {
                return false;
            }
            let Some(&at) = self.progress.parked.get(topic) else {
                return true;
            };
            let at = self.past_deleted(at, topic);
            self.progress.parked.insert(topic.to_owned(), at);
            let upto = self.progress.forwarded;
            if at >= upto {
                self.progress.parked.remove(topic);
                if let Some(b) = self.blocked.remove(topic) {
                    log::info!(
                        "topic {topic} flowing again after {} s ({}): {} parked message(s) forwarded",
                        (now_ms() - b.since_ms).max(0) / 1000,
                        b.state,
                        self.stats.forwarded - started
                    );
                }
                self.maintain();
                return true;
            }
            let (records, next) = match self.ctx.store().read_records(
                at,
                upto,
                self.cfg.batch_bytes,
                self.cfg.batch_messages,
            ) {
                Ok(r) => r,
                Err(e) => {
                    log::error!("reading the parked records of {topic} at {at}: {e}");
                    if let Some(b) = self.blocked.get_mut(topic) {
                        b.retry_at = Instant::now() + self.cfg.blocked_retry;
                    }
                    return true;
                }
            };
            let items = records::items(&records, |t| t != topic);
            match self.send_items(items, Some(topic), shutdown).await {
                Flow::Go => {}
                // Refused again: `park` kept the offset and scheduled the next try.
                Flow::Parked => return true,
                Flow::Shutdown => return false,
            }
            self.progress.parked.insert(topic.to_owned(), next);
            self.maintain();
        }
    }
}
