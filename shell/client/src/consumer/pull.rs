//! The pull consumer (lite-pull style): assign queues, pull from an offset, commit offsets.
//!
//! Pulls are PULL_MESSAGE (11) with the SUBSCRIPTION flag and no SUSPEND: the broker
//! answers at once and filters by tag hash (the client then re-filters by tag string, tag
//! hashes collide, as Java does) or by SQL92 on properties.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use tern_shell::body::{
    ConsumeFromWhere, ConsumeType, ConsumerData, MessageModel, MessageQueue, SubscriptionData,
};
use tern_shell::headers::{
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, OffsetResponseHeader,
    PullMessageRequestHeader, PullMessageResponseHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader, pull_sys_flag,
};
use tern_shell::message::{MessageExt, Undecodable, decode_pulled_each};
use tern_shell::{FromExtFields, RemotingCommand, RequestCode, ResponseCode};

use crate::config::ClientConfig;
use crate::consumer::selector::MessageSelector;
use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, ok};
use crate::message::keys;
use crate::producer::java_hash;

/// Outcome of one pull (Java's `PullStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PullStatus {
    /// Messages found (after the tag re-filter there may be none).
    Found,
    /// Nothing at or after the offset yet.
    NoNewMsg,
    /// Messages exist but none matched the expression.
    NoMatchedMsg,
    /// The offset is outside the queue; continue at `next_begin_offset`.
    OffsetIllegal,
}

/// What one pull returns.
#[derive(Debug, Clone)]
pub struct PullResult {
    /// Outcome.
    pub status: PullStatus,
    /// Where the next pull should start.
    pub next_begin_offset: i64,
    /// The queue's min offset at the broker.
    pub min_offset: i64,
    /// The queue's max offset (next to be written).
    pub max_offset: i64,
    /// The messages, decoded and inflated, tag re-filtered.
    pub messages: Vec<MessageExt>,
    /// Messages of the range whose body could not be decompressed (a corrupt body, an
    /// unknown compression type), in queue order: the errors for those messages. The
    /// queue goes on past them; they are not in `messages`.
    pub undecodable: Vec<Undecodable>,
}

/// A lite-pull consumer; cloning shares it.
#[derive(Debug, Clone)]
pub struct PullConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: ClientInstance,
    group: String,
    assigned: Mutex<BTreeSet<MessageQueue>>,
    /// Budget of one pull RPC.
    pull_timeout: Duration,
}

impl PullConsumer {
    /// A pull consumer of `group` with its own client instance.
    pub fn new(group: impl Into<String>, client: ClientConfig) -> Result<Self> {
        Ok(Self::with_instance(group, ClientInstance::new(client)?))
    }

    /// A pull consumer on a shared client instance.
    pub fn with_instance(group: impl Into<String>, client: ClientInstance) -> Self {
        let pull_timeout = client.config().rpc_timeout.max(Duration::from_secs(10));
        Self {
            inner: Arc::new(Inner {
                client,
                group: group.into(),
                assigned: Mutex::new(BTreeSet::new()),
                pull_timeout,
            }),
        }
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The client instance.
    pub fn client(&self) -> &ClientInstance {
        &self.inner.client
    }

    /// Starts heartbeats (so admin tools see the group) and route refresh.
    pub async fn start(&self) {
        self.announce();
        self.inner.client.start();
        self.inner.client.send_heartbeat_to_all_brokers().await;
    }

    /// Unregisters from every broker and closes the client instance.
    pub async fn shutdown(&self) {
        self.inner.client.shutdown().await;
    }

    /// The readable queues of `topic`, fresh from the name server, sorted.
    pub async fn fetch_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let route = self.inner.client.fetch_route(topic).await?;
        let mut out = crate::consumer::readable_queues(topic, &route);
        out.sort();
        Ok(out)
    }

    /// Replaces the assigned queues; the group's heartbeat then lists their topics.
    pub async fn assign(&self, queues: Vec<MessageQueue>) {
        *self.lock_assigned() = queues.into_iter().collect();
        // Heartbeats go to the brokers of known routes: learn the assigned topics' ones.
        let topics: BTreeSet<String> = self
            .lock_assigned()
            .iter()
            .map(|q| q.topic.clone())
            .collect();
        for t in topics {
            if let Err(e) = self.inner.client.topic_route(&t).await {
                log::warn!("route of assigned topic {t}: {e}");
            }
        }
        self.announce();
        self.inner.client.send_heartbeat_to_all_brokers().await;
    }

    /// The assigned queues.
    pub fn assignment(&self) -> Vec<MessageQueue> {
        self.lock_assigned().iter().cloned().collect()
    }

    fn lock_assigned(&self) -> std::sync::MutexGuard<'_, BTreeSet<MessageQueue>> {
        self.inner.assigned.guard()
    }

    fn announce(&self) {
        let topics: BTreeSet<String> = self
            .lock_assigned()
            .iter()
            .map(|q| q.topic.clone())
            .collect();
        let subs = topics
            .into_iter()
            .map(|t| SubscriptionData {
                topic: t,
                sub_string: "*".into(),
                sub_version: now_ms(),
                expression_type: "TAG".into(),
                ..SubscriptionData::default()
            })
            .collect();
        self.inner.client.register_consumer(ConsumerData {
            group_name: self.inner.group.clone(),
            consume_type: ConsumeType::ConsumeActively,
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::ConsumeFromFirstOffset,
            subscription_data_set: subs,
            unit_mode: false,
        });
    }

    /// Pulls up to `max` messages of every tag from `offset`.
    pub async fn pull(&self, queue: &MessageQueue, offset: i64, max: i32) -> Result<PullResult> {
        self.pull_with_expression(queue, "*", offset, max).await
    }

    /// Pulls up to `max` messages matching a tag expression (`*`, `TagA || TagB`).
    pub async fn pull_with_expression(
        &self,
        queue: &MessageQueue,
        expression: &str,
        offset: i64,
        max: i32,
    ) -> Result<PullResult> {
        self.pull_with_selector(queue, &MessageSelector::tag(expression), offset, max)
            .await
    }

    /// Pulls up to `max` messages matching a selector: a tag expression (re-filtered
    /// here by tag string) or SQL92 (filtered by the broker; a bad expression is the
    /// broker's code 23 with the column).
    pub async fn pull_with_selector(
        &self,
        queue: &MessageQueue,
        selector: &MessageSelector,
        offset: i64,
        max: i32,
    ) -> Result<PullResult> {
        selector.check()?;
        let sub = selector.subscription(&queue.topic, now_ms());
        // Java's pull consumer sends its brokerSuspendMaxTimeMillis (20 s) unsuspended too.
        let header = PullMessageRequestHeader::new(
            self.inner.group.clone(),
            queue.topic.clone(),
            queue.queue_id,
            offset,
            max.max(1),
        )
        .suspend(false, 20_000)
        .filter(Some(sub.sub_string), &sub.expression_type, sub.sub_version);
        pull_message(
            &self.inner.client,
            queue,
            header,
            self.inner.pull_timeout,
            &sub.tags_set,
        )
        .await
    }

    /// The group's committed offset of `queue`; `None` when the broker has none (22).
    pub async fn query_offset(&self, queue: &MessageQueue) -> Result<Option<i64>> {
        let addr = self.broker_addr(queue).await?;
        let h = QueryConsumerOffsetRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            // 5.x brokers then answer 22 rather than 0 for a group that never committed;
            // 4.x brokers ignore the field and may answer 0.
            set_zero_if_not_found: Some(false),
        };
        let cmd = RemotingCommand::request(RequestCode::QueryConsumerOffset, &h);
        let resp = self
            .inner
            .client
            .invoke(&addr, cmd, self.inner.client.config().rpc_timeout)
            .await?;
        if resp.response_code() == ResponseCode::QueryNotFound {
            return Ok(None);
        }
        offset_of(ok(resp)?).map(Some)
    }

    /// Stores the group's offset of `queue` (UPDATE_CONSUMER_OFFSET, answered).
    pub async fn commit_offset(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        let addr = self.broker_addr(queue).await?;
        let h = UpdateConsumerOffsetRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: queue.topic.clone(),
            queue_id: queue.queue_id,
            commit_offset: offset,
        };
        let cmd = RemotingCommand::request(RequestCode::UpdateConsumerOffset, &h);
        self.inner.client.invoke_ok(&addr, cmd).await.map(drop)
    }

    /// The queue's smallest offset still stored.
    pub async fn min_offset(&self, queue: &MessageQueue) -> Result<i64> {
        queue_offset(&self.inner.client, queue, OffsetKind::Min).await
    }

    /// The queue's next offset to be written.
    pub async fn max_offset(&self, queue: &MessageQueue) -> Result<i64> {
        queue_offset(&self.inner.client, queue, OffsetKind::Max).await
    }

    /// The first offset stored at or after `timestamp_ms`.
    pub async fn search_offset(&self, queue: &MessageQueue, timestamp_ms: i64) -> Result<i64> {
        queue_offset(&self.inner.client, queue, OffsetKind::AtTime(timestamp_ms)).await
    }

    async fn broker_addr(&self, queue: &MessageQueue) -> Result<String> {
        broker_addr(&self.inner.client, queue).await
    }
}

/// One PULL_MESSAGE for the header's group to the replica the broker last suggested for
/// `queue` (the master until then), recording the answer's suggestion for the next
/// (Java's `PullAPIWrapper.pullKernelImpl` and `processPullResult`). A pull sent to a
/// slave carries no offset commit: a slave's offsets are its master's copy.
pub(crate) async fn pull_message(
    client: &ClientInstance,
    queue: &MessageQueue,
    mut header: PullMessageRequestHeader,
    timeout: Duration,
    tags: &[String],
) -> Result<PullResult> {
    let group = header.consumer_group.clone();
    let (addr, slave) = read_addr(client, queue, client.pull_from(&group, queue)).await?;
    if slave {
        header.sys_flag &= !pull_sys_flag::COMMIT_OFFSET;
    }
    let cmd = RemotingCommand::request(RequestCode::PullMessage, &header);
    let resp = client.invoke(&addr, cmd, timeout).await?;
    if let Ok(h) = PullMessageResponseHeader::from_ext_fields(&resp.ext_fields) {
        client.suggest_pull_from(&group, queue, h.suggest_which_broker_id);
    }
    decode_pull_response(&resp, tags)
}

/// Turns a PULL_MESSAGE response into a result: status by code, messages decoded and
/// re-filtered by tag string (`tags` empty = every tag; tag hashes collide).
pub fn decode_pull_response(resp: &RemotingCommand, tags: &[String]) -> Result<PullResult> {
    let status = match resp.response_code() {
        ResponseCode::Success => PullStatus::Found,
        ResponseCode::PullNotFound => PullStatus::NoNewMsg,
        ResponseCode::PullRetryImmediately => PullStatus::NoMatchedMsg,
        ResponseCode::PullOffsetMoved => PullStatus::OffsetIllegal,
        _ => return Err(ClientError::from_response(resp)),
    };
    let h = PullMessageResponseHeader::from_ext_fields(&resp.ext_fields)
        .map_err(|e| ClientError::Protocol(format!("pull response: {e}")))?;
    let mut messages = Vec::new();
    let mut undecodable = Vec::new();
    if status == PullStatus::Found {
        let each = decode_pulled_each(&resp.body, false)
            .map_err(|e| ClientError::Protocol(format!("pulled messages: {e}")))?;
        for r in each {
            match r {
                Ok(m) => messages.push(m),
                Err(u) => undecodable.push(u),
            }
        }
        if !tags.is_empty() {
            messages.retain(|m| m.tags().is_some_and(|t| tags.iter().any(|x| x == t)));
            undecodable.retain(|u| {
                u.message
                    .tags()
                    .is_some_and(|t| tags.iter().any(|x| x == t))
            });
        }
        for m in &mut messages {
            m.properties
                .insert(keys::MIN_OFFSET.into(), h.min_offset.to_string());
            m.properties
                .insert(keys::MAX_OFFSET.into(), h.max_offset.to_string());
        }
    }
    Ok(PullResult {
        status,
        next_begin_offset: h.next_begin_offset,
        min_offset: h.min_offset,
        max_offset: h.max_offset,
        messages,
        undecodable,
    })
}

/// Which offset of a queue to ask for.
#[derive(Debug, Clone, Copy)]
pub enum OffsetKind {
    /// GET_MIN_OFFSET.
    Min,
    /// GET_MAX_OFFSET.
    Max,
    /// SEARCH_OFFSET_BY_TIMESTAMP (lower boundary).
    AtTime(i64),
}

/// Asks the queue's broker for one of its offsets.
pub async fn queue_offset(
    client: &ClientInstance,
    queue: &MessageQueue,
    kind: OffsetKind,
) -> Result<i64> {
    let addr = broker_addr(client, queue).await?;
    let (topic, queue_id) = (queue.topic.clone(), queue.queue_id);
    let cmd = match kind {
        OffsetKind::Min => RemotingCommand::request(
            RequestCode::GetMinOffset,
            &GetMinOffsetRequestHeader { topic, queue_id },
        ),
        OffsetKind::Max => RemotingCommand::request(
            RequestCode::GetMaxOffset,
            &GetMaxOffsetRequestHeader {
                topic,
                queue_id,
                committed: None,
            },
        ),
        OffsetKind::AtTime(timestamp) => RemotingCommand::request(
            RequestCode::SearchOffsetByTimestamp,
            &SearchOffsetRequestHeader {
                topic,
                queue_id,
                timestamp,
                boundary_type: None,
            },
        ),
    };
    offset_of(client.invoke_ok(&addr, cmd).await?)
}

/// The address serving `queue` (master first), looking the route up if needed.
pub async fn broker_addr(client: &ClientInstance, queue: &MessageQueue) -> Result<String> {
    read_addr(client, queue, 0).await.map(|(addr, _)| addr)
}

/// The address of replica `id` of `queue`'s broker as
/// [`ClientInstance::subscribe_addr`] picks it, looking the route up once if the broker
/// is not known; with whether it is a slave's.
async fn read_addr(
    client: &ClientInstance,
    queue: &MessageQueue,
    id: i64,
) -> Result<(String, bool)> {
    if let Some(t) = client.subscribe_addr(&queue.broker_name, id) {
        return Ok(t);
    }
    client.fetch_route(&queue.topic).await?;
    client
        .subscribe_addr(&queue.broker_name, id)
        .ok_or_else(|| {
            ClientError::NotFound(format!(
                "broker {} is not in the route of {}",
                queue.broker_name, queue.topic
            ))
        })
}

fn offset_of(resp: RemotingCommand) -> Result<i64> {
    resp.decode_header::<OffsetResponseHeader>()
        .map(|h| h.offset)
        .map_err(|e| ClientError::Protocol(e.to_string()))
}

/// Tag code of a tag, as brokers compute it (kept for filters built client-side).
pub fn tag_code(tag: &str) -> i64 {
    i64::from(java_hash(tag.trim()))
}
