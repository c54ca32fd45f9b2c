//! The push consumer (Java's `DefaultMQPushConsumer`).
//!
//! * [`rebalance`]: every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED, each subscribed topic's
//!   queues are allocated among the group's members (or all taken, broadcasting); a new
//!   queue starts at the group's offset or where ConsumeFromWhere says, a lost one is
//!   committed (and unlocked, orderly) before it goes.
//! * [`pull_task`]: one task per owned queue, long polling (SUSPEND, 15 s), pausing above
//!   the cache thresholds, carrying the committed offset (COMMIT_OFFSET).
//! * [`consume`]: listeners run on a worker pool; concurrent ones in any order with
//!   ReconsumeLater sent back to `%RETRY%group`; orderly ones one queue-lock holder at a
//!   time, in queue order, retrying the same messages after a pause.
//! * [`process_queue`]: the pulled-but-unconsumed messages of a queue; offsets only move
//!   to its lowest unconsumed message.
//! * [`assignment`] and [`pop`]: with `client_rebalance = false` the broker divides the
//!   queues (QUERY_ASSIGNMENT) and says per queue whether to pull or POP it (the group's
//!   mode); POPed queues are consumed by POP / ACK / CHANGE_INVISIBLETIME, the broker
//!   keeping the group's progress.
//! * Offsets: the broker's (clustering, committed every 5 s and at shutdown) or a local
//!   file (broadcasting), see [`crate::consumer::offset_store`].

mod assignment;
pub mod config;
mod consume;
pub mod listener;
mod pool;
mod pop;
pub mod process_queue;
mod pull_task;
mod rebalance;

pub(crate) use rebalance::{allocate_topic, pull_from_where};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use tern_shell::body::{ConsumeType, ConsumerData, MessageQueue, QueueKeyMap, SubscriptionData};
use tern_shell::runtime::{self, Shutdown, Wakeup};

pub use config::{
    ConsumeFromWhere, MessageModel, POP_DELAY_LEVEL_SECS, PushConsumerConfig, RETRY_PREFIX,
};
pub use listener::{
    ConcurrentListener, ConsumeContext, ConsumeStatus, OrderlyListener, OrderlyStatus,
};

use crate::config::{ClientConfig, ProducerConfig};
use crate::consumer::hook::{Hook, RunningInfo};
use crate::consumer::offset_store::OffsetStore;
use crate::consumer::selector::MessageSelector;
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::processor::ConsumerHook;
use crate::producer::Producer;
use assignment::Divider;
use pool::WorkerPool;
use pop::PopQueue;
use process_queue::ProcessQueue;

/// The application's listener.
#[derive(Clone)]
enum Listener {
    Concurrent(Arc<dyn ConcurrentListener>),
    Orderly(Arc<dyn OrderlyListener>),
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Concurrent(_) => "Concurrent",
            Self::Orderly(_) => "Orderly",
        })
    }
}

/// A push consumer; cloning shares it.
#[derive(Debug, Clone)]
pub struct PushConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: ClientInstance,
    config: PushConsumerConfig,
    /// topic → subscription, `%RETRY%group` included in clustering once started.
    subs: Mutex<BTreeMap<String, SubscriptionData>>,
    listener: Mutex<Option<Listener>>,
    offsets: OffsetStore,
    /// The owned queues that are pulled.
    table: Mutex<HashMap<MessageQueue, Arc<ProcessQueue>>>,
    /// The owned queues that are POPed (queue id −1: every queue of that broker).
    pop_table: Mutex<HashMap<MessageQueue, Arc<PopQueue>>>,
    /// Who divides each topic, once known (`client_rebalance = false` only).
    dividers: Mutex<HashMap<String, Divider>>,
    /// Topics whose offsets are being reset: rebalances add none of their queues
    /// until the new offsets are committed.
    resetting: Mutex<BTreeSet<String>>,
    pool: Mutex<Option<WorkerPool>>,
    /// Sends retries when CONSUMER_SEND_MSG_BACK fails.
    retry_producer: Producer,
    /// Triggered to wake the rebalance loop; replaced after each wake.
    kick: Wakeup,
    /// Stops every loop.
    shutdown: Shutdown,
    /// Set at shutdown: queued listener jobs are skipped (their messages stay uncommitted).
    stopping: AtomicBool,
    started: AtomicBool,
    start_ms: i64,
}

impl PushConsumer {
    /// A push consumer with its own client instance.
    pub fn new(config: PushConsumerConfig, client: ClientConfig) -> Result<Self> {
        Self::with_instance(config, ClientInstance::new(client)?)
    }

    /// A push consumer on a shared client instance.
    pub fn with_instance(config: PushConsumerConfig, client: ClientInstance) -> Result<Self> {
        crate::consumer::check_group(&config.group)?;
        let offsets = match config.message_model {
            MessageModel::Broadcasting => {
                let dir = config.offset_store_dir.clone().unwrap_or_else(|| {
                    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
                    std::path::PathBuf::from(home)
                        .join(".rocketmq_offsets")
                        .join(client.client_id().replace(':', "_"))
                });
                OffsetStore::local(&dir, &config.group)?
            }
            _ => OffsetStore::remote(client.clone(), &config.group),
        };
        let retry_producer =
            Producer::with_instance(ProducerConfig::new("CLIENT_INNER_PRODUCER"), client.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                config,
                subs: Mutex::new(BTreeMap::new()),
                listener: Mutex::new(None),
                offsets,
                table: Mutex::new(HashMap::new()),
                pop_table: Mutex::new(HashMap::new()),
                dividers: Mutex::new(HashMap::new()),
                resetting: Mutex::new(BTreeSet::new()),
                pool: Mutex::new(None),
                retry_producer,
                kick: Wakeup::new(),
                shutdown: Shutdown::new(),
                stopping: AtomicBool::new(false),
                started: AtomicBool::new(false),
                start_ms: now_ms(),
            }),
        })
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.config.group
    }

    /// The client instance.
    pub fn client(&self) -> &ClientInstance {
        &self.inner.client
    }

    /// The settings.
    pub fn config(&self) -> &PushConsumerConfig {
        &self.inner.config
    }

    /// Subscribes to `topic` with a tag expression (`*`, `TagA || TagB`) or any
    /// [`MessageSelector`] (`MessageSelector::sql("a > 5")`). Call before
    /// [`PushConsumer::start`]; subscribing again replaces the expression.
    pub fn subscribe(&self, topic: &str, selector: impl Into<MessageSelector>) -> Result<()> {
        crate::message::check_topic(topic)?;
        let selector = selector.into();
        selector.check()?;
        if self.inner.started.load(Ordering::Acquire) {
            return Err(ClientError::InvalidMessage(
                "subscribe before starting the consumer".into(),
            ));
        }
        let sub = selector.subscription(topic, self.inner.start_ms);
        self.inner.subs.guard().insert(topic.to_owned(), sub);
        Ok(())
    }

    /// Sets a concurrent listener (replacing any listener).
    pub fn register_concurrent(&self, listener: impl ConcurrentListener) {
        *self.inner.listener.guard() = Some(Listener::Concurrent(Arc::new(listener)));
    }

    /// Sets an orderly listener (replacing any listener).
    pub fn register_orderly(&self, listener: impl OrderlyListener) {
        *self.inner.listener.guard() = Some(Listener::Orderly(Arc::new(listener)));
    }

    /// Joins the group: heartbeats, then rebalances and starts pulling. Fails when no
    /// listener or subscription was given, or when a broker refuses an SQL92
    /// subscription (the broker's code and remark, e.g. 23 with the column of a syntax
    /// error).
    pub async fn start(&self) -> Result<()> {
        let inner = &self.inner;
        let Some(listener) = inner.listener.guard().clone() else {
            return Err(ClientError::InvalidMessage("no listener registered".into()));
        };
        if inner.subs.guard().is_empty() {
            return Err(ClientError::InvalidMessage("no subscription".into()));
        }
        let (client, group) = (&inner.client, &inner.config.group);
        if !crate::consumer::claim_start(client, group, &inner.subs, &inner.started).await? {
            return Ok(());
        }
        let cfg = &inner.config;
        if cfg.message_model == MessageModel::Clustering {
            let retry = cfg.retry_topic();
            let sub = MessageSelector::all().subscription(&retry, inner.start_ms);
            inner.subs.guard().insert(retry, sub);
        }
        *inner.pool.guard() = Some(WorkerPool::new(
            &format!("consume-{}", cfg.group),
            cfg.consume_thread_min,
            cfg.consume_thread_max,
        ));
        let hook: Arc<dyn ConsumerHook> = Arc::new(Hook(Arc::downgrade(inner)));
        inner.client.register_hook(&cfg.group, hook);
        inner.client.register_consumer(inner.consumer_data());
        let topics: Vec<String> = inner.subs.guard().keys().cloned().collect();
        crate::consumer::join_brokers(&inner.client, &cfg.group, topics).await;
        runtime::spawn(inner.clone().rebalance_loop());
        runtime::spawn(inner.clone().persist_loop());
        if matches!(listener, Listener::Orderly(_)) && cfg.message_model == MessageModel::Clustering
        {
            runtime::spawn(inner.clone().lock_loop());
        }
        Ok(())
    }

    /// The queues this consumer owns now, pulled or POPed (retry queues included; a
    /// POPed queue id −1 stands for every queue of its broker), sorted.
    pub fn assignment(&self) -> Vec<MessageQueue> {
        let mut v: Vec<MessageQueue> = self.inner.table.guard().keys().cloned().collect();
        v.extend(self.inner.pop_table.guard().keys().cloned());
        crate::consumer::allocate::sort_queues(&mut v);
        v
    }

    /// Asks for a rebalance now (as NOTIFY_CONSUMER_IDS_CHANGED does).
    pub fn rebalance_now(&self) {
        self.inner.kick();
    }

    /// Leaves the group: stops pulling, lets running listener calls finish (up to
    /// `await_termination`), commits offsets, unlocks orderly queues, unregisters and
    /// closes the client instance.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        if !inner.started.load(Ordering::Acquire) || inner.shutdown.is_triggered() {
            inner.client.shutdown().await;
            return;
        }
        inner.shutdown.trigger();
        inner.stopping.store(true, Ordering::Release);
        let pool = inner.pool.guard().clone();
        if let Some(pool) = &pool {
            let deadline = Instant::now() + inner.config.await_termination;
            while pool.pending() > 0 && Instant::now() < deadline {
                runtime::sleep(Duration::from_millis(10)).await;
            }
        }
        let owned: Vec<(MessageQueue, Arc<ProcessQueue>)> = inner.table.guard().drain().collect();
        let mqs: Vec<MessageQueue> = owned.iter().map(|(m, _)| m.clone()).collect();
        inner.offsets.persist_all(&mqs, true).await;
        for (_, pq) in &owned {
            pq.drop_queue();
        }
        // Popped and unacked messages come again after their invisible time.
        for (_, pq) in inner.pop_table.guard().drain() {
            pq.drop_queue();
        }
        if inner.is_orderly() && inner.config.message_model == MessageModel::Clustering {
            inner.unlock(&mqs).await;
        }
        if let Some(pool) = pool {
            pool.close();
        }
        inner.client.shutdown().await;
    }
}

impl Inner {
    fn is_orderly(&self) -> bool {
        matches!(*self.listener.guard(), Some(Listener::Orderly(_)))
    }

    fn clustering(&self) -> bool {
        self.config.message_model != MessageModel::Broadcasting
    }

    fn consumer_data(&self) -> ConsumerData {
        ConsumerData {
            group_name: self.config.group.clone(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: self.config.message_model.clone(),
            consume_from_where: self.config.consume_from_where.clone(),
            subscription_data_set: self.subs.guard().values().cloned().collect(),
            unit_mode: false,
        }
    }

    fn kick(&self) {
        self.kick.wake();
    }

    async fn persist_loop(self: Arc<Self>) {
        let owned = || self.table.guard().keys().cloned().collect();
        let every = self.config.persist_offset_interval;
        self.offsets
            .persist_every(every, &self.shutdown, owned)
            .await;
    }
}

/// The push consumer answers its connections (through [`Hook`]).
impl ConsumerHook for Arc<Inner> {
    fn rebalance_now(&self) {
        self.kick();
    }

    fn running_info(&self) -> Vec<u8> {
        let cfg = &self.config;
        let mut info = RunningInfo::new(
            "CONSUME_PASSIVELY",
            cfg.message_model.name(),
            self.start_ms,
            &self.client,
            self.subs.guard().values().cloned().collect(),
        );
        let threads = self.pool.guard().as_ref().map_or(0, |p| p.threads());
        info.properties.extend([
            ("PROP_CONSUMEORDERLY", self.is_orderly().to_string()),
            (
                "PROP_THREADPOOL_CORE_SIZE",
                cfg.consume_thread_min.to_string(),
            ),
            ("consumeThreads", threads.to_string()),
            ("consumeFromWhere", cfg.consume_from_where.name().to_owned()),
            (
                "allocateMessageQueueStrategy",
                cfg.allocate_strategy.name().to_owned(),
            ),
        ]);
        info.mq_table.0 = self
            .table
            .guard()
            .iter()
            .map(|(mq, pq)| {
                let (count, bytes) = pq.cached();
                let info = serde_json::json!({
                    "commitOffset": self.offsets.read_memory(mq).unwrap_or(-1),
                    "cachedMsgCount": count,
                    "cachedMsgSizeInMiB": bytes / (1024 * 1024),
                    "locked": pq.is_locked(cfg.lock_max_live.as_millis() as u64),
                    "droped": pq.is_dropped(),
                });
                (mq.clone(), info)
            })
            .collect();
        let pop_table = self
            .pop_table
            .guard()
            .iter()
            .map(|(mq, pq)| (mq.clone(), pq.info()))
            .collect();
        info.mq_pop_table = Some(QueueKeyMap(pop_table));
        info.to_json()
    }

    fn reset_offset(&self, topic: &str, offsets: BTreeMap<MessageQueue, i64>) -> bool {
        runtime::spawn(self.clone().reset_offsets(topic.to_owned(), offsets));
        true
    }

    fn consume_directly(
        &self,
        msg: tern_shell::message::MessageExt,
        broker_name: &str,
    ) -> Option<tern_shell::body::ConsumeMessageDirectlyResult> {
        Some(Inner::consume_directly(self, msg, broker_name))
    }

    fn offsets_of(&self, topic: &str) -> BTreeMap<MessageQueue, i64> {
        let owned: Vec<MessageQueue> = self
            .table
            .guard()
            .keys()
            .filter(|mq| mq.topic == topic)
            .cloned()
            .collect();
        owned
            .into_iter()
            .filter_map(|mq| Some((mq.clone(), self.offsets.read_memory(&mq)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_info_is_java_shaped_json() {
        let c = PushConsumer::new(
            PushConsumerConfig::new("g"),
            ClientConfig::new("127.0.0.1:1"),
        )
        .unwrap();
        c.subscribe("T", "A || B").unwrap();
        let q = MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 1,
        };
        c.inner
            .table
            .guard()
            .insert(q, Arc::new(ProcessQueue::new()));
        let body = Hook(Arc::downgrade(&c.inner)).running_info();
        let v: serde_json::Value = tern_shell::body::from_json(&body).unwrap();
        assert_eq!(v["properties"]["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY");
        assert_eq!(v["subscriptionSet"][0]["subString"], "A || B");
        assert_eq!(v["subscriptionSet"][0]["tagsSet"][1], "B");
        assert!(String::from_utf8_lossy(&body).contains("\"queueId\":1"));
    }

    #[test]
    fn start_needs_a_listener_and_a_subscription() {
        let c = PushConsumer::new(
            PushConsumerConfig::new("g"),
            ClientConfig::new("127.0.0.1:1"),
        )
        .unwrap();
        assert!(crate::block_on(c.start()).is_err());
        c.register_concurrent(
            |_: &[tern_shell::message::MessageExt], _: &mut ConsumeContext| ConsumeStatus::Success,
        );
        assert!(crate::block_on(c.start()).is_err(), "no subscription");
        assert!(c.subscribe("bad topic", "*").is_err());
    }
}
