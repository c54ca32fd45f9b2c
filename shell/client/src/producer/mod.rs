//! The producer (Java's `DefaultMQProducer`): sync, async and oneway sends, batches,
//! sends to a chosen queue or through a selector, retries on another broker, UNIQ_KEY on
//! every message, zlib above 4 KiB, and TBW102's route for topics not created yet.
//! With `send_latency_fault_enable`, slow or failing brokers are avoided for a while
//! ([`fault`]).
//!
//! Sends go as SEND_MESSAGE_V2 (310) and batches as SEND_BATCH_MESSAGE (320), with the
//! one-letter header Java uses; every RocketMQ broker since 3.x accepts both.

pub mod fault;
mod prepared;
mod recall;
pub mod request;
mod selector;
pub mod transaction;

use prepared::Prepared;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use tern_shell::body::{MessageQueue, TopicRouteData};
use tern_shell::headers::SendMessageResponseHeader;
use tern_shell::message::{
    Compression, Message, SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_TYPE_MASK,
};
use tern_shell::runtime::{self, JoinHandle};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

pub use fault::LatencyFaults;
pub use selector::{HashSelector, PublishInfo, QueueSelector, hash_index, java_hash};

use crate::config::{ClientConfig, ProducerConfig};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::message::check_message;

/// How the broker stored a message (the success codes 0, 10, 12, 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SendStatus {
    /// Stored (and flushed/replicated as configured).
    SendOk,
    /// Stored, but the sync flush did not finish in time.
    FlushDiskTimeout,
    /// Stored, but the slave did not acknowledge in time.
    FlushSlaveTimeout,
    /// Stored, but no slave was available for a SYNC_MASTER.
    SlaveNotAvailable,
}

impl SendStatus {
    /// Java's enum name.
    pub fn name(self) -> &'static str {
        match self {
            Self::SendOk => "SEND_OK",
            Self::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            Self::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            Self::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
        }
    }
}

/// What a successful send tells the caller.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendResult {
    /// How it was stored.
    pub status: SendStatus,
    /// The UNIQ_KEY (comma-joined for a batch): Java's `getMsgId()`.
    pub msg_id: String,
    /// The broker's offset msgId(s) (§5.1): where it is stored.
    pub offset_msg_id: String,
    /// The queue it went to.
    pub queue: MessageQueue,
    /// Its queue offset (the first one for a batch).
    pub queue_offset: i64,
    /// Transaction id from the broker, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// For a timer message: the handle [`Producer::recall`] takes (RocketMQ 5.3.2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall_handle: Option<String>,
}

/// A send running in the background; await it for the result. Dropping it does not
/// cancel the send.
#[derive(Debug)]
pub struct SendFuture {
    handle: Pin<Box<JoinHandle<Result<SendResult>>>>,
}

impl Future for SendFuture {
    type Output = Result<SendResult>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.handle.as_mut().poll(cx)
    }
}

/// A producer; cloning shares it.
#[derive(Debug, Clone)]
pub struct Producer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: ClientInstance,
    config: ProducerConfig,
    /// topic → (route it was built from, queues with the round-robin position).
    publish: Mutex<HashMap<String, RouteQueues>>,
    /// Send latencies per broker; consulted only with `send_latency_fault_enable`.
    faults: LatencyFaults,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sync,
    Oneway,
}

/// A route and the queues a producer computed from it.
type RouteQueues = (Arc<TopicRouteData>, Arc<PublishInfo>);

impl Producer {
    /// A producer with its own client instance.
    pub fn new(config: ProducerConfig, client: ClientConfig) -> Result<Self> {
        Ok(Self::with_instance(config, ClientInstance::new(client)?))
    }

    /// A producer on a shared client instance.
    pub fn with_instance(config: ProducerConfig, client: ClientInstance) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                config,
                publish: Mutex::new(HashMap::new()),
                faults: LatencyFaults::default(),
            }),
        }
    }

    /// The client instance.
    pub fn client(&self) -> &ClientInstance {
        &self.inner.client
    }

    /// Send latencies per broker (recorded with `send_latency_fault_enable`).
    pub fn latency_faults(&self) -> &LatencyFaults {
        &self.inner.faults
    }

    /// Announces the group and starts heartbeats and route refresh.
    pub fn start(&self) {
        self.inner
            .client
            .register_producer(&self.inner.config.group);
        self.inner.client.start();
    }

    /// Unregisters from every broker and closes the client instance.
    pub async fn shutdown(&self) {
        self.inner.client.shutdown().await;
    }

    /// Sends and waits for the broker's answer, retrying on another broker/queue up to
    /// `retry_times_when_send_failed` times within `send_timeout`.
    pub async fn send(&self, msg: Message) -> Result<SendResult> {
        let mut p = self.prepare(msg)?;
        self.send_default(&mut p, Mode::Sync)
            .await
            .and_then(need_result)
    }

    /// Starts a send in the background (with the same retries as [`Producer::send`]).
    pub fn send_async(&self, msg: Message) -> SendFuture {
        let me = self.clone();
        SendFuture {
            handle: Box::pin(runtime::spawn(async move { me.send(msg).await })),
        }
    }

    /// Writes the message and returns without waiting for the broker (no retries; the
    /// broker's answer, if any, is never read).
    pub async fn send_oneway(&self, msg: Message) -> Result<()> {
        let mut p = self.prepare(msg)?;
        self.send_default(&mut p, Mode::Oneway).await.map(drop)
    }

    /// Sends to one queue (no retry elsewhere: the caller chose it).
    pub async fn send_to_queue(&self, msg: Message, queue: &MessageQueue) -> Result<SendResult> {
        if msg.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "message topic {} differs from queue topic {}",
                msg.topic, queue.topic
            )));
        }
        let mut p = self.prepare(msg)?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &mut p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    /// Sends to the queue `selector` picks among the topic's writable queues.
    pub async fn send_with_selector(
        &self,
        msg: Message,
        selector: &dyn QueueSelector,
    ) -> Result<SendResult> {
        // Java's order (sendSelectImpl): check, route, select, then prepare, so the
        // selector sees the message without a copy of it being made for it.
        check_message(&msg, self.inner.config.max_message_bytes)?;
        let info = self.publish_info(&msg.topic).await?;
        let idx = selector.select(&info.queues, &msg) % info.queues.len().max(1);
        let queue = info.queues.get(idx).cloned().ok_or(ClientError::NoRoute {
            topic: msg.topic.clone(),
        })?;
        let mut p = self.prepare(msg)?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(&queue, &mut p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    /// Sends so that every message with the same `sharding_key` lands in the same queue,
    /// in order (Java's `SelectMessageQueueByHash`).
    pub async fn send_ordered(&self, msg: Message, sharding_key: &str) -> Result<SendResult> {
        self.send_with_selector(msg, &HashSelector(sharding_key.to_owned()))
            .await
    }

    /// Sends messages of one topic as one SEND_BATCH_MESSAGE; they get consecutive
    /// offsets in one queue. No delay levels; not to a `%RETRY%` topic; not compressed.
    pub async fn send_batch(&self, msgs: Vec<Message>) -> Result<SendResult> {
        let mut p = self.prepare_batch(msgs)?;
        self.send_default(&mut p, Mode::Sync)
            .await
            .and_then(need_result)
    }

    /// Sends messages of one topic as one batch to one queue (no retry elsewhere: the
    /// caller chose it), as Java's `send(Collection<Message>, MessageQueue)`.
    pub async fn send_batch_to_queue(
        &self,
        msgs: Vec<Message>,
        queue: &MessageQueue,
    ) -> Result<SendResult> {
        let mut p = self.prepare_batch(msgs)?;
        if p.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "batch topic {} differs from queue topic {}",
                p.topic, queue.topic
            )));
        }
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &mut p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    /// Sends one message whose body is already compressed, as it is, to `queue` (no
    /// retry elsewhere): `compression` is the sysFlag's compressed bit and compression
    /// type bits (RocketMQ 5: bits 8-10, LZ4 1, ZSTD 2, ZLIB 3), sent along so consumers
    /// inflate the body. A gateway forwarding a stored record uses it for bodies it
    /// cannot (or need not) inflate.
    pub async fn send_compressed_to_queue(
        &self,
        msg: Message,
        compression: i32,
        queue: &MessageQueue,
    ) -> Result<SendResult> {
        let mask = SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_TYPE_MASK;
        if !matches!(Compression::of_sys_flag(compression), Ok(Some(_))) || compression & !mask != 0
        {
            return Err(ClientError::InvalidMessage(format!(
                "{compression:#x} is not a compressed body's sysFlag bits"
            )));
        }
        if msg.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "message topic {} differs from queue topic {}",
                msg.topic, queue.topic
            )));
        }
        let mut p = self.prepare_with(msg, Some(compression))?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &mut p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    /// The writable queues of `topic`; TBW102's queues when the topic has no route yet.
    pub async fn publish_info(&self, topic: &str) -> Result<Arc<PublishInfo>> {
        let client = &self.inner.client;
        let cached = self.cached_publish(topic);
        if let Some(info) = &cached {
            if !info.from_default_topic {
                // Follow the instance's periodic refresh: rebuild if the route changed.
                if let Some(route) = client.cached_route(topic) {
                    return Ok(self.publish_for(topic, route, None));
                }
                if let Ok(route) = client.fetch_route(topic).await {
                    return Ok(self.publish_for(topic, Arc::new(route), None));
                }
                return Ok(info.clone());
            }
        }
        match client.fetch_route(topic).await {
            Ok(route) => Ok(self.publish_for(topic, Arc::new(route), None)),
            Err(ClientError::NoRoute { .. }) => {
                if let Some(info) = cached {
                    return Ok(info);
                }
                let key = &self.inner.config.create_topic_key;
                let route = match client.topic_route(key).await {
                    Ok(r) => r,
                    Err(ClientError::NoRoute { .. }) => {
                        return Err(ClientError::NoRoute {
                            topic: topic.to_owned(),
                        });
                    }
                    Err(e) => return Err(e),
                };
                let n = self.inner.config.default_topic_queue_nums;
                Ok(self.publish_for(topic, Arc::new(route), Some(n)))
            }
            Err(e) => Err(e),
        }
    }

    fn cached_publish(&self, topic: &str) -> Option<Arc<PublishInfo>> {
        let map = self.inner.publish.guard();
        map.get(topic).map(|(_, i)| i.clone())
    }

    fn publish_for(
        &self,
        topic: &str,
        route: Arc<TopicRouteData>,
        max_queues: Option<i32>,
    ) -> Arc<PublishInfo> {
        let mut map = self.inner.publish.guard();
        if let Some((r, info)) = map.get_mut(topic)
            && info.from_default_topic == max_queues.is_some()
        {
            // The same route object (every send between refreshes) or an equal one (a
            // refresh that found nothing new: kept, so the next send is the first case).
            if Arc::ptr_eq(r, &route) {
                return info.clone();
            }
            if **r == *route {
                *r = route;
                return info.clone();
            }
        }
        let info = Arc::new(PublishInfo::from_route(topic, &route, max_queues));
        map.insert(topic.to_owned(), (route, info.clone()));
        info
    }

    async fn send_default(&self, p: &mut Prepared, mode: Mode) -> Result<Option<SendResult>> {
        let cfg = &self.inner.config;
        let deadline = Instant::now() + cfg.send_timeout;
        let mut info = self.publish_info(&p.topic).await?;
        if info.queues.is_empty() {
            // No broker of the topic has a master in the cached route: one died and its
            // successor may be registered by now. Ask (at most every 100 ms), not wait
            // for the periodic refresh.
            self.inner
                .client
                .refresh_route_after_failure(&p.topic)
                .await;
            info = self.publish_info(&p.topic).await?;
        }
        if info.queues.is_empty() {
            return Err(ClientError::NoRoute {
                topic: p.topic.clone(),
            });
        }
        let attempts = match mode {
            Mode::Sync => 1 + cfg.retry_times_when_send_failed,
            Mode::Oneway => 1,
        };
        let mut last_broker: Option<String> = None;
        let mut last_err = None;
        for _ in 0..attempts {
            // What the route lookup and earlier attempts left of the send timeout (Java's
            // costTime); the same reading starts the attempt's latency.
            let begin = Instant::now();
            let left = deadline.saturating_duration_since(begin);
            if left.is_zero() {
                break;
            }
            let queue = if cfg.send_latency_fault_enable {
                self.inner.faults.select(&info, last_broker.as_deref())
            } else {
                info.pick(last_broker.as_deref())
            };
            let Some(queue) = queue else {
                break;
            };
            let result = self.send_kernel(&queue, p, mode, left).await;
            if cfg.send_latency_fault_enable {
                let ms = begin.elapsed().as_millis() as u64;
                self.inner
                    .faults
                    .record(&queue.broker_name, ms, result.is_err());
            }
            match result {
                Ok(r) => return Ok(r),
                // NotFound: the broker has no master in the route (Java's loop moves on too).
                Err(e) if e.is_retryable() || matches!(e, ClientError::NotFound(_)) => {
                    log::warn!("send to {queue:?} failed, retrying elsewhere: {e}");
                    // Its master may be gone, and a new one elected: ask at once.
                    self.inner
                        .client
                        .refresh_route_after_failure(&p.topic)
                        .await;
                    last_broker = Some(queue.broker_name.clone());
                    last_err = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| ClientError::Timeout {
            what: format!("send to topic {}", p.topic),
            timeout_ms: cfg.send_timeout.as_millis() as u64,
        }))
    }

    async fn send_kernel(
        &self,
        queue: &MessageQueue,
        p: &mut Prepared,
        mode: Mode,
        timeout: Duration,
    ) -> Result<Option<SendResult>> {
        let client = &self.inner.client;
        let addr = match client.master_addr(&queue.broker_name) {
            Some(a) => a,
            None => {
                client.refresh_route_after_failure(&queue.topic).await;
                client.master_addr(&queue.broker_name).ok_or_else(|| {
                    ClientError::NotFound(format!(
                        "no master address for broker {}",
                        queue.broker_name
                    ))
                })?
            }
        };
        p.aim(queue.queue_id, now_ms());
        if mode == Mode::Oneway {
            // One attempt, with nothing after it: the request goes as it is.
            let cmd = std::mem::replace(
                &mut p.request,
                RemotingCommand::request_code(RequestCode::SendMessageV2),
            );
            client.invoke_oneway(&addr, cmd).await?;
            return Ok(None);
        }
        let resp = client
            .invoke_mut(&addr, &mut p.request, timeout)
            .await
            .map_err(|e| match e {
                ClientError::Timeout { .. } => ClientError::Timeout {
                    what: format!("send to {addr}"),
                    timeout_ms: timeout.as_millis() as u64,
                },
                other => other,
            })?;
        let status = match resp.response_code() {
            ResponseCode::Success => SendStatus::SendOk,
            ResponseCode::FlushDiskTimeout => SendStatus::FlushDiskTimeout,
            ResponseCode::FlushSlaveTimeout => SendStatus::FlushSlaveTimeout,
            ResponseCode::SlaveNotAvailable => SendStatus::SlaveNotAvailable,
            ResponseCode::TopicNotExist => {
                return Err(ClientError::TopicNotExist {
                    topic: p.topic.clone(),
                    remark: resp.remark.clone().unwrap_or_default(),
                });
            }
            _ => return Err(ClientError::from_response(&resp)),
        };
        let h: SendMessageResponseHeader = resp
            .decode_header()
            .map_err(|e| ClientError::Protocol(format!("send response: {e}")))?;
        Ok(Some(SendResult {
            status,
            // A success ends the send: the id is not needed again.
            msg_id: std::mem::take(&mut p.uniq_id),
            offset_msg_id: h.msg_id,
            queue: MessageQueue {
                topic: queue.topic.clone(),
                broker_name: queue.broker_name.clone(),
                queue_id: h.queue_id,
            },
            queue_offset: h.queue_offset,
            transaction_id: h.transaction_id,
            recall_handle: h.recall_handle,
        }))
    }
}

fn need_result(r: Option<SendResult>) -> Result<SendResult> {
    r.ok_or_else(|| ClientError::Protocol("sync send returned no result".into()))
}
