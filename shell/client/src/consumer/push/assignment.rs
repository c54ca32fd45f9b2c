//! Queues divided by the broker (Java's `RebalanceImpl.tryQueryAssignment`,
//! `getRebalanceResultFromBroker` and `updateMessageQueueAssignment`), for a consumer
//! with `client_rebalance = false`: QUERY_ASSIGNMENT answers which queues this member
//! owns and, per queue, whether to pull it or POP it (the group's mode, PULL unless set
//! with SET_MESSAGE_REQUEST_MODE). A broker that does not serve QUERY_ASSIGNMENT (a 4.x
//! one) makes the topic fall back to dividing here, for good, as in Java.
//!
//! When a topic is pulled, the group's POP retry topic (`%RETRY%group_topic`) is
//! subscribed too, so what was left there by POP consumption is still consumed; when it
//! is POPed, the broker mixes that retry topic into the POPs itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use tern_shell::body::{
    MessageQueue, MessageQueueAssignment, QueryAssignmentRequestBody, QueryAssignmentResponseBody,
    from_json, to_json,
};
use tern_shell::pop::{is_retry_topic, pop_retry_topic};
use tern_shell::{RemotingCommand, RequestCode};

use super::pop::{PopQueue, pop_loop};
use tern_shell::sync::MutexExt;

use super::Inner;
use crate::consumer::selector::MessageSelector;
use crate::error::{ClientError, Result};
use crate::instance::PERM_READ;

/// Who divides a topic's queues, once known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Divider {
    /// This client, with its allocate strategy.
    Client,
    /// The broker (QUERY_ASSIGNMENT).
    Broker,
}

impl Inner {
    /// Who divides `topic` (Java's `clientRebalance` and `tryQueryAssignment`).
    pub(super) async fn divider(&self, topic: &str) -> Divider {
        if self.config.client_rebalance || self.is_orderly() || !self.clustering() {
            return Divider::Client;
        }
        if let Some(d) = self.dividers.guard().get(topic) {
            return *d;
        }
        let d = match self.query_assignment(topic).await {
            Ok(_) => Divider::Broker,
            Err(e @ ClientError::Broker { .. }) => {
                log::info!(
                    "the broker does not divide {topic} for {} ({e}): dividing here",
                    self.config.group
                );
                Divider::Client
            }
            // No route or broker yet: ask again next round, dividing here meanwhile.
            Err(e) => {
                log::debug!("QUERY_ASSIGNMENT of {topic}: {e}");
                return Divider::Client;
            }
        };
        self.dividers.guard().insert(topic.to_owned(), d);
        d
    }

    /// QUERY_ASSIGNMENT to a broker serving `topic`; `None` when the broker cannot tell
    /// yet (keep what is owned).
    async fn query_assignment(&self, topic: &str) -> Result<Option<Vec<MessageQueueAssignment>>> {
        let route = self.client.topic_route(topic).await?;
        let addr = route
            .queue_datas
            .iter()
            .filter(|q| q.perm & PERM_READ != 0)
            .find_map(|q| self.client.master_addr(&q.broker_name))
            .ok_or_else(|| ClientError::NotFound(format!("no master serves {topic}")))?;
        let body = QueryAssignmentRequestBody {
            topic: topic.to_owned(),
            consumer_group: self.config.group.clone(),
            client_id: self.client.client_id().to_owned(),
            strategy_name: self.config.allocate_strategy.name().to_owned(),
            message_model: self.config.message_model.name().to_owned(),
        };
        let cmd =
            RemotingCommand::request_code(RequestCode::QueryAssignment).with_body(to_json(&body));
        let resp = self.client.invoke_ok(&addr, cmd).await?;
        let r: QueryAssignmentResponseBody =
            from_json(&resp.body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(r.message_queue_assignments)
    }

    /// One broker-divided rebalance of `topic`; false when some part must be retried soon.
    pub(super) async fn rebalance_by_broker(self: &Arc<Self>, topic: &str) -> Result<bool> {
        let Some(assigned) = self.query_assignment(topic).await? else {
            return Ok(false);
        };
        let (pop, pull): (Vec<_>, Vec<_>) = assigned.into_iter().partition(|a| a.mode == "POP");
        let pop: Vec<MessageQueue> = pop.into_iter().map(|a| a.message_queue).collect();
        let pull: Vec<MessageQueue> = pull.into_iter().map(|a| a.message_queue).collect();
        if !is_retry_topic(topic) {
            let retry = pop_retry_topic(topic, &self.config.group, false);
            if pop.is_empty() && !pull.is_empty() {
                self.subscribe_inner(&retry, true).await;
            } else if !pop.is_empty() && pull.is_empty() {
                self.subscribe_inner(&retry, false).await;
            }
        }
        let complete = self.update_table(topic, pull).await;
        self.update_pop_table(topic, pop);
        Ok(complete)
    }

    /// Adds (or removes) a subscription the consumer makes for itself, and tells the
    /// brokers at once so its pulls are not refused for want of it.
    async fn subscribe_inner(&self, topic: &str, on: bool) {
        let changed = {
            let mut subs = self.subs.guard();
            if on {
                let fresh = !subs.contains_key(topic);
                if fresh {
                    let sub = MessageSelector::all().subscription(topic, self.start_ms);
                    subs.insert(topic.to_owned(), sub);
                }
                fresh
            } else {
                subs.remove(topic).is_some()
            }
        };
        if changed {
            log::info!(
                "{} {} {topic}",
                self.config.group,
                if on { "subscribes" } else { "unsubscribes" }
            );
            self.client.register_consumer(self.consumer_data());
            for e in self.client.send_heartbeat_to_all_brokers().await {
                log::debug!("heartbeat after subscription change: {e}");
            }
        }
    }

    /// Drops POP queues of `topic` no longer assigned, starts the new ones.
    fn update_pop_table(self: &Arc<Self>, topic: &str, mine: Vec<MessageQueue>) {
        let mut table = self.pop_table.guard();
        let mine: BTreeMap<MessageQueue, ()> = mine.into_iter().map(|q| (q, ())).collect();
        table.retain(|mq, pq| {
            let keep = mq.topic != topic || mine.contains_key(mq);
            if !keep {
                log::info!("{} stops POPing {mq:?}", self.client.client_id());
                pq.drop_queue();
            }
            keep
        });
        for mq in mine.into_keys() {
            if table.contains_key(&mq) || self.shutdown.is_triggered() {
                continue;
            }
            let pq = Arc::new(PopQueue::new());
            table.insert(mq.clone(), pq.clone());
            log::info!("{} now POPs {mq:?}", self.client.client_id());
            tern_shell::runtime::spawn(pop_loop(self.clone(), mq, pq));
        }
    }
}
