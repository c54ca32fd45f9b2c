//! The simple consumer (RocketMQ 5's `SimpleConsumer`), over the broker's POP: `receive`
//! pops up to 32 messages of a subscribed topic (every queue of one broker, `queueId`
//! -1, long polling up to the await duration) and hides them for the invisible duration;
//! each must be acked (`ack`) or it is delivered again, from the group's retry topic,
//! with its reconsume times one higher. `change_invisible_duration` postpones that and
//! returns the message with its new receipt handle.
//!
//! The requests are the Java remoting client's ([`crate::consumer::pop`]). Brokers are
//! taken in turn; topics too.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use tern_shell::pop::MAX_CK_MESSAGES;

use crate::config::ClientConfig;
use crate::consumer::pop::{self, PopSpec};
use crate::consumer::selector::MessageSelector;
use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, PERM_READ};

pub use crate::consumer::pop::ReceivedMessage;

/// How long a `receive` waits for messages by default (Java: 30 s `awaitDuration`; the
/// broker holds a POP at most 30 s).
pub const DEFAULT_AWAIT: Duration = Duration::from_secs(20);

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
        self.inner.subscriptions.guard()
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
        let spec = PopSpec {
            group: &self.inner.group,
            topic,
            broker,
            queue_id: -1,
            max,
            invisible,
            poll: self.inner.await_duration,
            exp_type: selector.expression_type().name(),
            exp: selector.expression(),
            // A new group starts at the queues' first messages (ConsumeInitMode.MIN).
            init_mode: 0,
            order: false,
            attempt_id: None,
        };
        pop::pop(&self.inner.client, &addr, &spec).await
    }

    /// Acks a received message: it is not delivered again.
    pub async fn ack(&self, m: &ReceivedMessage) -> Result<()> {
        pop::ack(&self.inner.client, &self.inner.group, m).await
    }

    /// Hides a received message for `invisible` from now instead; returns it with its new
    /// receipt handle (the old one no longer acks it).
    pub async fn change_invisible_duration(
        &self,
        m: &ReceivedMessage,
        invisible: Duration,
    ) -> Result<ReceivedMessage> {
        pop::change_invisible(&self.inner.client, &self.inner.group, m, invisible).await
    }

    /// Closes the client instance.
    pub async fn shutdown(&self) {
        self.inner.client.shutdown().await;
    }
}
