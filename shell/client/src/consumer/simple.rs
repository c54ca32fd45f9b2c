//! The simple consumer (RocketMQ 5's `SimpleConsumer`), over the broker's POP: `receive`
//! pops up to 32 messages of a subscribed topic (every queue of one broker, `queueId`
//! -1, long polling up to the await duration) and hides them for the invisible duration;
//! each must be acked (`ack`) or it is delivered again, from the group's retry topic,
//! with its reconsume times one higher. `change_invisible_duration` postpones that and
//! returns the message with its new receipt handle.
//!
//! Requests are the Java remoting client's (`PopMessageRequestHeader`,
//! `AckMessageRequestHeader`, `ChangeInvisibleTimeRequestHeader`), and receipt handles
//! are built from the answer's header as `MQClientAPIImpl.processPopResponse` builds
//! them. Brokers are taken in turn; topics too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_shell::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader, PopMessageResponseHeader,
};
use tern_shell::message::{MessageExt, decode_pulled_each};
use tern_shell::pop::{
    ExtraInfo, MAX_CK_MESSAGES, parse_msg_offset_info, parse_start_offset_info, retry_flag,
};
use tern_shell::runtime::now_ms;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use crate::config::ClientConfig;
use crate::consumer::selector::MessageSelector;
use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, PERM_READ, ok};

/// How long a `receive` waits for messages by default (Java: 30 s `awaitDuration`; the
/// broker holds a POP at most 30 s).
pub const DEFAULT_AWAIT: Duration = Duration::from_secs(20);
/// Slack added to a POP's RPC timeout beyond its poll time (Java: 10 s).
const POP_RPC_SLACK: Duration = Duration::from_secs(10);

/// A received message and what acking it needs.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    /// The message; its `topic` is the subscribed topic, even when it came from the
    /// group's retry topic (as the Java client shows it).
    pub message: MessageExt,
    /// Why its body could not be read (LZ4/ZSTD/zlib that does not decode): `message`
    /// then holds the body as stored. It must still be acked.
    pub decode_error: Option<String>,
    /// The receipt handle (`POP_CK`).
    pub receipt_handle: String,
    /// The topic it was read from (the retry topic for a redelivery).
    real_topic: String,
    broker_addr: String,
}

/// A simple consumer; cloning shares it.
#[derive(Debug, Clone)]
pub struct SimpleConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: ClientInstance,
    group: String,
    subscriptions: Mutex<BTreeMap<String, MessageSelector>>,
    await_duration: Duration,
    turn: AtomicUsize,
}

impl SimpleConsumer {
    /// A simple consumer of `group` with its own client instance, waiting up to
    /// [`DEFAULT_AWAIT`] in `receive`.
    pub fn new(group: impl Into<String>, config: ClientConfig) -> Result<Self> {
        Self::with_await(group, config, DEFAULT_AWAIT)
    }

    /// As [`Self::new`], with `receive` waiting up to `await_duration` (at most 30 s).
    pub fn with_await(
        group: impl Into<String>,
        config: ClientConfig,
        await_duration: Duration,
    ) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(Inner {
                client: ClientInstance::new(config)?,
                group: group.into(),
                subscriptions: Mutex::new(BTreeMap::new()),
                await_duration: await_duration.min(Duration::from_secs(30)),
                turn: AtomicUsize::new(0),
            }),
        })
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// Starts route refresh.
    pub fn start(&self) {
        self.inner.client.start();
    }

    /// Subscribes to `topic` (its route must exist).
    pub async fn subscribe(&self, topic: &str, selector: MessageSelector) -> Result<()> {
        self.inner.client.fetch_route(topic).await?;
        self.lock().insert(topic.to_owned(), selector);
        Ok(())
    }

    /// Stops receiving from `topic`.
    pub fn unsubscribe(&self, topic: &str) {
        self.lock().remove(topic);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, MessageSelector>> {
        self.inner
            .subscriptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Pops up to `max` (1..=32) messages of the next subscribed topic from the next
    /// broker serving it, hidden from other receives for `invisible`. Empty when none
    /// came within the await duration.
    pub async fn receive(&self, max: u32, invisible: Duration) -> Result<Vec<ReceivedMessage>> {
        if max == 0 || max as usize > MAX_CK_MESSAGES {
            return Err(ClientError::InvalidMessage(format!(
                "receive asks 1..=32 messages, not {max}"
            )));
        }
        let subs: Vec<(String, MessageSelector)> = self
            .lock()
            .iter()
            .map(|(t, s)| (t.clone(), s.clone()))
            .collect();
        if subs.is_empty() {
            return Err(ClientError::NotFound("no topic subscribed".into()));
        }
        let turn = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let (topic, selector) = &subs[turn % subs.len()];
        let route = self.inner.client.topic_route(topic).await?;
        let brokers: Vec<&str> = route
            .queue_datas
            .iter()
            .filter(|q| q.perm & PERM_READ != 0 && q.read_queue_nums > 0)
            .map(|q| q.broker_name.as_str())
            .collect();
        if brokers.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.clone(),
            });
        }
        let broker = brokers[(turn / subs.len()) % brokers.len()];
        let addr = self.inner.client.master_addr(broker).ok_or_else(|| {
            ClientError::NotFound(format!("broker {broker} of {topic} has no master"))
        })?;
        let poll = self.inner.await_duration;
        let header = PopMessageRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: topic.clone(),
            queue_id: -1,
            max_msg_nums: max as i32,
            invisible_time: invisible.as_millis() as i64,
            poll_time: poll.as_millis() as i64,
            born_time: Some(now_ms()),
            // A new group starts at the queues' first messages (ConsumeInitMode.MIN).
            init_mode: 0,
            exp_type: Some(selector.expression_type().name().to_owned()),
            exp: Some(selector.expression().to_owned()),
            order: Some(false),
            attempt_id: None,
        };
        let cmd = RemotingCommand::request(RequestCode::PopMessage, &header);
        let resp = self
            .inner
            .client
            .invoke(&addr, cmd, poll + POP_RPC_SLACK)
            .await?;
        match resp.response_code() {
            ResponseCode::Success => decode(&resp, topic, broker, &addr),
            ResponseCode::PollingTimeout
            | ResponseCode::PollingFull
            | ResponseCode::PullNotFound => Ok(Vec::new()),
            _ => Err(ClientError::from_response(&resp)),
        }
    }

    /// Acks a received message: it is not delivered again.
    pub async fn ack(&self, m: &ReceivedMessage) -> Result<()> {
        let header = AckMessageRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: m.real_topic.clone(),
            queue_id: m.message.queue_id,
            extra_info: m.receipt_handle.clone(),
            offset: m.message.queue_offset,
        };
        let cmd = RemotingCommand::request(RequestCode::AckMessage, &header);
        self.inner
            .client
            .invoke_ok(&m.broker_addr, cmd)
            .await
            .map(drop)
    }

    /// Hides a received message for `invisible` from now instead; returns it with its new
    /// receipt handle (the old one no longer acks it).
    pub async fn change_invisible_duration(
        &self,
        m: &ReceivedMessage,
        invisible: Duration,
    ) -> Result<ReceivedMessage> {
        let header = ChangeInvisibleTimeRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: m.real_topic.clone(),
            queue_id: m.message.queue_id,
            extra_info: m.receipt_handle.clone(),
            offset: m.message.queue_offset,
            invisible_time: invisible.as_millis() as i64,
        };
        let cmd = RemotingCommand::request(RequestCode::ChangeMessageInvisibletime, &header);
        let resp = ok(self
            .inner
            .client
            .invoke(&m.broker_addr, cmd, self.inner.client.config().rpc_timeout)
            .await?)?;
        let h: ChangeInvisibleTimeResponseHeader = resp
            .decode_header()
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let old = ExtraInfo::parse(&m.receipt_handle).map_err(ClientError::Protocol)?;
        // The client builds the new handle itself, with the message's offset as the
        // checkpoint's (the broker wrote a one-message checkpoint there).
        let handle = ExtraInfo {
            ck_queue_offset: m.message.queue_offset,
            pop_time: h.pop_time,
            invisible_time: h.invisible_time,
            revive_qid: h.revive_qid,
            offset: Some(m.message.queue_offset),
            ..old
        };
        let mut out = m.clone();
        out.receipt_handle = handle.build();
        Ok(out)
    }

    /// Closes the client instance.
    pub async fn shutdown(&self) {
        self.inner.client.shutdown().await;
    }
}

/// The messages of a POP answer with their receipt handles.
fn decode(
    resp: &RemotingCommand,
    topic: &str,
    broker: &str,
    addr: &str,
) -> Result<Vec<ReceivedMessage>> {
    let h: PopMessageResponseHeader = resp
        .decode_header()
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    let starts = parse_start_offset_info(h.start_offset_info.as_deref().unwrap_or_default())
        .map_err(ClientError::Protocol)?;
    let offsets = parse_msg_offset_info(h.msg_offset_info.as_deref().unwrap_or_default())
        .map_err(ClientError::Protocol)?;
    let records =
        decode_pulled_each(&resp.body, true).map_err(|e| ClientError::Protocol(e.to_string()))?;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let (mut message, decode_error) = match r {
            Ok(m) => (m, None),
            Err(u) => (u.message, Some(u.error.to_string())),
        };
        let flag = retry_flag(&message.topic);
        let key = (flag, message.queue_id);
        let (Some(start), Some(list)) = (starts.get(&key), offsets.get(&key)) else {
            return Err(ClientError::Protocol(format!(
                "message of {}/{} not named in the answer's offset info",
                message.topic, message.queue_id
            )));
        };
        if !list.contains(&message.queue_offset) {
            return Err(ClientError::Protocol(format!(
                "offset {} of {}/{} not in msgOffsetInfo",
                message.queue_offset, message.topic, message.queue_id
            )));
        }
        let handle = ExtraInfo {
            ck_queue_offset: *start,
            pop_time: h.pop_time,
            invisible_time: h.invisible_time,
            revive_qid: h.revive_qid,
            retry: flag,
            broker_name: broker.to_owned(),
            queue_id: message.queue_id,
            offset: Some(message.queue_offset),
        }
        .build();
        let real_topic = std::mem::replace(&mut message.topic, topic.to_owned());
        message
            .properties
            .insert(tern_shell::pop::POP_CK.to_owned(), handle.clone());
        message
            .properties
            .entry(tern_shell::pop::FIRST_POP_TIME.to_owned())
            .or_insert_with(|| h.pop_time.to_string());
        out.push(ReceivedMessage {
            message,
            decode_error,
            receipt_handle: handle,
            real_topic,
            broker_addr: addr.to_owned(),
        });
    }
    Ok(out)
}
