//! The producer (Java's `DefaultMQProducer`): sync, async and oneway sends, batches,
//! sends to a chosen queue or through a selector, retries on another broker, UNIQ_KEY on
//! every message, zlib above 4 KiB, and TBW102's route for topics not created yet.
//! With `send_latency_fault_enable`, slow or failing brokers are avoided for a while
//! ([`fault`]).
//!
//! Sends go as SEND_MESSAGE_V2 (310) and batches as SEND_BATCH_MESSAGE (320), with the
//! one-letter header Java uses; every RocketMQ broker since 3.x accepts both.

pub mod fault;
mod recall;
pub mod request;
mod selector;
pub mod transaction;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use tern_shell::body::{MessageQueue, TopicRouteData};
use tern_shell::headers::{SendMessageRequestHeaderV2, SendMessageResponseHeader};
use tern_shell::message::{
    Compression, Message, SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_TYPE_MASK,
    SYSFLAG_TRANSACTION_PREPARED, encode_batch, property,
};
use tern_shell::runtime::{self, JoinHandle};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

pub use fault::LatencyFaults;
pub use selector::{HashSelector, PublishInfo, QueueSelector, hash_index, java_hash};

use crate::config::{ClientConfig, ProducerConfig};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::message::{MAX_PROPERTIES_LEN, check_message, check_topic};

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

/// A message made ready for the wire once, reused by every attempt.
#[derive(Debug)]
struct Prepared {
    topic: String,
    body: Vec<u8>,
    properties: String,
    sys_flag: i32,
    flag: i32,
    uniq_id: String,
    batch: bool,
    /// Retry topics: the reconsume count and limit, sent in the header as Java does.
    reconsume_times: Option<i32>,
    max_reconsume_times: Option<i32>,
    /// A reply to a request ([`request::create_reply`]): sent with SEND_REPLY_MESSAGE_V2.
    reply: bool,
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
        let p = self.prepare(msg)?;
        self.send_default(&p, Mode::Sync)
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
        let p = self.prepare(msg)?;
        self.send_default(&p, Mode::Oneway).await.map(drop)
    }

    /// Sends to one queue (no retry elsewhere: the caller chose it).
    pub async fn send_to_queue(&self, msg: Message, queue: &MessageQueue) -> Result<SendResult> {
        if msg.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "message topic {} differs from queue topic {}",
                msg.topic, queue.topic
            )));
        }
        let p = self.prepare(msg)?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    /// Sends to the queue `selector` picks among the topic's writable queues.
    pub async fn send_with_selector(
        &self,
        msg: Message,
        selector: &dyn QueueSelector,
    ) -> Result<SendResult> {
        let p = self.prepare(msg.clone())?;
        let info = self.publish_info(&p.topic).await?;
        let idx = selector.select(&info.queues, &msg) % info.queues.len().max(1);
        let queue = info.queues.get(idx).cloned().ok_or(ClientError::NoRoute {
            topic: p.topic.clone(),
        })?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(&queue, &p, Mode::Sync, timeout)
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
        let p = self.prepare_batch(msgs)?;
        self.send_default(&p, Mode::Sync)
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
        let p = self.prepare_batch(msgs)?;
        if p.topic != queue.topic {
            return Err(ClientError::InvalidMessage(format!(
                "batch topic {} differs from queue topic {}",
                p.topic, queue.topic
            )));
        }
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &p, Mode::Sync, timeout)
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
        let p = self.prepare_with(msg, Some(compression))?;
        let timeout = self.inner.config.send_timeout;
        self.send_kernel(queue, &p, Mode::Sync, timeout)
            .await
            .and_then(need_result)
    }

    fn prepare(&self, msg: Message) -> Result<Prepared> {
        self.prepare_with(msg, None)
    }

    /// `compressed`: the body is already compressed with these sysFlag bits.
    fn prepare_with(&self, mut msg: Message, compressed: Option<i32>) -> Result<Prepared> {
        let cfg = &self.inner.config;
        check_message(&msg, cfg.max_message_bytes)?;
        let uniq_id = msg
            .properties
            .entry(property::UNIQ_KEY.to_owned())
            .or_insert_with(|| self.inner.client.next_uniq_id())
            .clone();
        // Java's producer moves these two properties of a retry message into the header.
        let (mut reconsume_times, mut max_reconsume_times) = (None, None);
        if msg.topic.starts_with("%RETRY%") {
            reconsume_times = msg
                .properties
                .remove("RECONSUME_TIME")
                .and_then(|v| v.parse().ok());
            max_reconsume_times = msg
                .properties
                .remove("MAX_RECONSUME_TIMES")
                .and_then(|v| v.parse().ok());
        }
        let properties = msg.properties_string();
        let (body, mut sys_flag) = match compressed {
            Some(bits) => (msg.body, bits),
            None => match (msg.body.len() >= cfg.compress_over_bytes)
                .then(|| cfg.compress_type.compress(&msg.body, cfg.compress_level))
                .flatten()
            {
                Some(c) => (c, cfg.compress_type.sys_flag()),
                None => (msg.body, 0),
            },
        };
        // Java flags a half message by its TRAN_MSG property (see `transaction`).
        if msg.properties.get(property::TRAN_MSG).map(String::as_str) == Some("true") {
            sys_flag |= SYSFLAG_TRANSACTION_PREPARED;
        }
        check_properties(&properties)?;
        let reply = msg.properties.get(request::MSG_TYPE).map(String::as_str)
            == Some(request::REPLY_MESSAGE_FLAG);
        Ok(Prepared {
            topic: msg.topic,
            body,
            properties,
            sys_flag,
            flag: msg.flag,
            uniq_id,
            batch: false,
            reconsume_times,
            max_reconsume_times,
            reply,
        })
    }

    fn prepare_batch(&self, mut msgs: Vec<Message>) -> Result<Prepared> {
        let Some(topic) = msgs.first().map(|m| m.topic.clone()) else {
            return Err(ClientError::InvalidMessage("the batch is empty".into()));
        };
        check_topic(&topic)?;
        if topic.starts_with("%RETRY%") {
            return Err(ClientError::InvalidMessage(
                "batches cannot go to a %RETRY% topic".into(),
            ));
        }
        let mut ids = Vec::with_capacity(msgs.len());
        for m in &mut msgs {
            if m.topic != topic {
                return Err(ClientError::InvalidMessage(
                    "every message of a batch must have the same topic".into(),
                ));
            }
            if m.properties.contains_key(property::DELAY) {
                return Err(ClientError::InvalidMessage(
                    "batched messages cannot have a delay level".into(),
                ));
            }
            check_message(m, self.inner.config.max_message_bytes)?;
            let id = m
                .properties
                .entry(property::UNIQ_KEY.to_owned())
                .or_insert_with(|| self.inner.client.next_uniq_id())
                .clone();
            check_properties_len(tern_shell::message::properties_len(&m.properties))?;
            ids.push(id);
        }
        let body = encode_batch(&msgs).map_err(|e| ClientError::InvalidMessage(e.to_string()))?;
        let max = self.inner.config.max_message_bytes;
        if body.len() > max {
            return Err(ClientError::MessageTooLarge {
                size: body.len(),
                max,
            });
        }
        Ok(Prepared {
            topic,
            body,
            properties: String::new(),
            sys_flag: 0,
            flag: 0,
            uniq_id: ids.join(","),
            batch: true,
            reconsume_times: None,
            max_reconsume_times: None,
            reply: false,
        })
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

    async fn send_default(&self, p: &Prepared, mode: Mode) -> Result<Option<SendResult>> {
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
            let left = deadline.saturating_duration_since(Instant::now());
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
            let begin = Instant::now();
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
        p: &Prepared,
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
        let cfg = &self.inner.config;
        let header = SendMessageRequestHeaderV2 {
            a: cfg.group.clone(),
            b: p.topic.clone(),
            c: cfg.create_topic_key.clone(),
            d: cfg.default_topic_queue_nums,
            e: queue.queue_id,
            f: p.sys_flag,
            g: now_ms(),
            h: p.flag,
            i: (!p.properties.is_empty()).then(|| p.properties.clone()),
            j: Some(p.reconsume_times.unwrap_or(0)),
            k: Some(false),
            l: p.max_reconsume_times,
            m: Some(p.batch),
            n: None,
        };
        let code = if p.batch {
            RequestCode::SendBatchMessage
        } else if p.reply {
            RequestCode::SendReplyMessageV2
        } else {
            RequestCode::SendMessageV2
        };
        let cmd = RemotingCommand::request(code, &header).with_body(p.body.clone());
        if mode == Mode::Oneway {
            client.invoke_oneway(&addr, cmd).await?;
            return Ok(None);
        }
        let resp = client
            .invoke(&addr, cmd, timeout)
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
            msg_id: p.uniq_id.clone(),
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

fn check_properties(props: &str) -> Result<()> {
    check_properties_len(props.len())
}

fn check_properties_len(len: usize) -> Result<()> {
    if len > MAX_PROPERTIES_LEN {
        return Err(ClientError::InvalidMessage(format!(
            "properties are {len} bytes, the maximum is {MAX_PROPERTIES_LEN}"
        )));
    }
    Ok(())
}
