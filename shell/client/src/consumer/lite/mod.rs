//! The lite pull consumer (Java's `DefaultLitePullConsumer`): the application polls,
//! background tasks pull.
//!
//! * Queues come from [`LitePullConsumer::subscribe`] (clustering: the push consumer's
//!   rebalance allocation, every 20 s and on NOTIFY_CONSUMER_IDS_CHANGED) or from
//!   [`LitePullConsumer::assign`] (manual); the two are exclusive, as in Java.
//! * One task per owned queue long-polls into one bounded buffer (see [`pull_task`]);
//!   [`LitePullConsumer::poll`] hands out one pulled batch (at most `pull_batch_size`
//!   messages of one queue) and moves that queue's consume offset past it.
//! * Offsets are the group's at the broker: committed every 5 s (auto-commit), by
//!   [`LitePullConsumer::commit_sync`], when a queue is given away, and at shutdown.
//! * [`LitePullConsumer::seek`] restarts a queue's task at an offset: its buffered
//!   messages are dropped and its consume offset set there.

mod config;
mod pull_task;
mod queues;

pub use config::LitePullConsumerConfig;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use tern_shell::body::{ConsumeType, ConsumerData, MessageModel, MessageQueue, SubscriptionData};
use tern_shell::message::{MessageExt, Undecodable};
use tern_shell::runtime::{self, Shutdown, Wakeup};

use crate::config::ClientConfig;
use crate::consumer::hook::{Hook, RunningInfo};
use crate::consumer::offset_store::OffsetStore;
use crate::consumer::pull::{OffsetKind, queue_offset};
use crate::consumer::push::allocate_topic;
use crate::consumer::selector::{MessageSelector, check_in_broker};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::processor::ConsumerHook;

/// Most undecodable messages kept for [`LitePullConsumer::take_undecodable`].
const MAX_UNDECODABLE: usize = 1024;

/// How the consumer's queues are chosen; fixed by the first of subscribe / assign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Unset,
    Subscribe,
    Assign,
}

/// A lite pull consumer; cloning shares it.
#[derive(Debug, Clone)]
pub struct LitePullConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: ClientInstance,
    config: LitePullConsumerConfig,
    offsets: OffsetStore,
    mode: Mutex<Mode>,
    /// topic → subscription (subscribe mode).
    subs: Mutex<BTreeMap<String, SubscriptionData>>,
    /// The queues the application assigned (assign mode), applied once started.
    assigned: Mutex<BTreeSet<MessageQueue>>,
    /// The owned queues, each with its running pull task's state.
    queues: Mutex<HashMap<MessageQueue, Arc<QueueState>>>,
    /// Queues whose pulls the application paused.
    paused: Mutex<HashSet<MessageQueue>>,
    buffer: Mutex<Buffer>,
    /// Messages polled past whose body could not be read, oldest first.
    undecodable: Mutex<VecDeque<Undecodable>>,
    /// Triggered when a batch enters the buffer; replaced once seen triggered.
    arrived: Wakeup,
    /// Triggered to wake the rebalance loop; replaced after each wake.
    kick: Wakeup,
    /// Stops every task.
    shutdown: Shutdown,
    started: AtomicBool,
    rebalancing: AtomicBool,
    start_ms: i64,
}

/// One owned queue as its pull task runs it; a seek replaces it.
#[derive(Debug)]
struct QueueState {
    mq: MessageQueue,
    /// Triggered when the queue is given away or re-seeked: its task stops and its
    /// buffered batches are discarded.
    dropped: Shutdown,
    /// Messages of this state in the buffer.
    cached: AtomicUsize,
}

/// Pulled batches waiting for [`LitePullConsumer::poll`], oldest first.
#[derive(Debug, Default)]
struct Buffer {
    batches: VecDeque<Batch>,
    /// Messages in `batches` (bounded by `pull_threshold_for_all` through the tasks).
    messages: usize,
}

#[derive(Debug)]
struct Batch {
    queue: Arc<QueueState>,
    msgs: Vec<MessageExt>,
    /// Messages of the pulled range whose body could not be read.
    undecodable: Vec<Undecodable>,
    /// Where the pull after this batch starts: the queue's consume offset once polled.
    next_offset: i64,
}

impl LitePullConsumer {
    /// A lite pull consumer with its own client instance.
    pub fn new(config: LitePullConsumerConfig, client: ClientConfig) -> Result<Self> {
        Self::with_instance(config, ClientInstance::new(client)?)
    }

    /// A lite pull consumer on a shared client instance.
    pub fn with_instance(config: LitePullConsumerConfig, client: ClientInstance) -> Result<Self> {
        crate::consumer::check_group(&config.group)?;
        let offsets = OffsetStore::remote(client.clone(), &config.group);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                config,
                offsets,
                mode: Mutex::new(Mode::Unset),
                subs: Mutex::new(BTreeMap::new()),
                assigned: Mutex::new(BTreeSet::new()),
                queues: Mutex::new(HashMap::new()),
                paused: Mutex::new(HashSet::new()),
                buffer: Mutex::new(Buffer::default()),
                undecodable: Mutex::new(VecDeque::new()),
                arrived: Wakeup::new(),
                kick: Wakeup::new(),
                shutdown: Shutdown::new(),
                started: AtomicBool::new(false),
                rebalancing: AtomicBool::new(false),
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

    /// Subscribes to `topic` with a tag expression (`*`, `TagA || TagB`) or any
    /// [`MessageSelector`] (`MessageSelector::sql("a > 5")`); the group's members then
    /// share its queues. Not after [`LitePullConsumer::assign`].
    pub fn subscribe(&self, topic: &str, selector: impl Into<MessageSelector>) -> Result<()> {
        crate::message::check_topic(topic)?;
        let selector = selector.into();
        selector.check()?;
        self.inner.set_mode(Mode::Subscribe)?;
        let sub = selector.subscription(topic, now_ms());
        self.inner
            .subs
            .guard()
            .insert(topic.to_owned(), sub.clone());
        if self.inner.started.load(Ordering::Acquire) {
            self.inner.announce();
            let (inner, topic) = (self.inner.clone(), topic.to_owned());
            runtime::spawn(async move {
                if let Err(e) = inner.client.fetch_route(&topic).await {
                    log::info!("route of {topic} not available yet: {e}");
                }
                // Too late to fail `subscribe`: say it loudly, the pulls will be refused.
                if let Err(e) = check_in_broker(&inner.client, &inner.config.group, &sub).await {
                    log::error!("the broker refuses the subscription to {topic}: {e}");
                }
                inner.client.send_heartbeat_to_all_brokers().await;
                inner.kick();
            });
            self.inner.ensure_rebalance_loop();
        }
        Ok(())
    }

    /// Takes exactly these queues (no rebalance); each starts at the group's offset, or
    /// where `consume_from_where` says. Not after [`LitePullConsumer::subscribe`].
    pub async fn assign(&self, queues: Vec<MessageQueue>) -> Result<()> {
        self.inner.set_mode(Mode::Assign)?;
        *self.inner.assigned.guard() = queues.into_iter().collect();
        if self.inner.started.load(Ordering::Acquire) {
            self.inner.announce();
            self.inner.client.send_heartbeat_to_all_brokers().await;
            self.inner.apply_assignment().await;
        }
        Ok(())
    }

    /// Joins the group (heartbeats) and starts pulling: the assigned queues at once, the
    /// subscribed topics after their first rebalance. Fails when a broker refuses an
    /// SQL92 subscription (its code and remark).
    pub async fn start(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.shutdown.is_triggered() {
            return Err(ClientError::Shutdown);
        }
        let (client, group) = (&inner.client, &inner.config.group);
        if !crate::consumer::claim_start(client, group, &inner.subs, &inner.started).await? {
            return Ok(());
        }
        let hook: Arc<dyn ConsumerHook> = Arc::new(Hook(Arc::downgrade(inner)));
        inner.client.register_hook(&inner.config.group, hook);
        inner.announce();
        crate::consumer::join_brokers(&inner.client, &inner.config.group, inner.topics()).await;
        let mode = *inner.mode.guard();
        match mode {
            Mode::Subscribe => inner.ensure_rebalance_loop(),
            Mode::Assign => inner.apply_assignment().await,
            Mode::Unset => {}
        }
        if inner.config.auto_commit {
            runtime::spawn(inner.clone().commit_loop());
        }
        Ok(())
    }

    /// Waits up to `timeout` for pulled messages and returns one batch (at most
    /// `pull_batch_size` messages, all of one queue, in queue order); empty on timeout
    /// or after shutdown. The queue's consume offset moves past the batch.
    pub async fn poll(&self, timeout: Duration) -> Vec<MessageExt> {
        let inner = &self.inner;
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = inner.arrived.next();
            if let Some(msgs) = inner.take() {
                return msgs;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || inner.shutdown.is_triggered() {
                return Vec::new();
            }
            runtime::race(
                runtime::sleep(left),
                runtime::race(arrived.wait(), inner.shutdown.wait()),
            )
            .await;
        }
    }

    /// Messages that [`LitePullConsumer::poll`] went past because their body could not
    /// be read (corrupt, or compressed in a way no RocketMQ version defines), oldest
    /// first, each with its error (the newest 1,024 are kept; each is also logged at
    /// ERROR). They stay in the broker's log: [`LitePullConsumer::seek`] reads them again.
    pub fn take_undecodable(&self) -> Vec<Undecodable> {
        self.inner.undecodable.guard().drain(..).collect()
    }

    /// The queues owned now, sorted.
    pub fn assignment(&self) -> Vec<MessageQueue> {
        let mut v: Vec<MessageQueue> = self.inner.queues.guard().keys().cloned().collect();
        crate::consumer::allocate::sort_queues(&mut v);
        v
    }

    /// The readable queues of `topic` (Java's `fetchMessageQueues`), for [`Self::assign`].
    pub async fn fetch_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        allocate_topic(&self.inner.client, &self.inner.config.group, None, topic).await
    }

    /// Restarts an owned queue at `offset` (within its min and max offsets): buffered
    /// messages of it are discarded and its consume offset is set to `offset`.
    pub async fn seek(&self, queue: &MessageQueue, offset: i64) -> Result<()> {
        self.inner.owned(queue)?;
        let client = &self.inner.client;
        let min = queue_offset(client, queue, OffsetKind::Min).await?;
        let max = queue_offset(client, queue, OffsetKind::Max).await?;
        if offset < min || offset > max {
            return Err(ClientError::InvalidMessage(format!(
                "seek offset {offset} of {queue:?} is outside [{min}, {max}]"
            )));
        }
        self.inner.restart_queue(queue, offset)
    }

    /// Restarts an owned queue at its smallest stored offset.
    pub async fn seek_to_begin(&self, queue: &MessageQueue) -> Result<()> {
        self.inner.owned(queue)?;
        let min = queue_offset(&self.inner.client, queue, OffsetKind::Min).await?;
        self.inner.restart_queue(queue, min)
    }

    /// Restarts an owned queue at its end: only messages written from now on come.
    pub async fn seek_to_end(&self, queue: &MessageQueue) -> Result<()> {
        self.inner.owned(queue)?;
        let max = queue_offset(&self.inner.client, queue, OffsetKind::Max).await?;
        self.inner.restart_queue(queue, max)
    }

    /// Stops pulling these queues; their buffered messages are held back from
    /// [`Self::poll`] until [`Self::resume`].
    pub fn pause(&self, queues: &[MessageQueue]) {
        self.inner.paused.guard().extend(queues.iter().cloned());
    }

    /// Pulls these queues again.
    pub fn resume(&self, queues: &[MessageQueue]) {
        let mut p = self.inner.paused.guard();
        for q in queues {
            p.remove(q);
        }
        drop(p);
        // A poll waiting now may have held-back batches to hand out.
        self.inner.arrived.wake();
    }

    /// Commits the consume offsets of every owned queue and waits for the brokers;
    /// every queue is tried, the first failure is returned.
    pub async fn commit_sync(&self) -> Result<()> {
        let mut first = Ok(());
        for mq in self.assignment() {
            if let Err(e) = self.inner.offsets.persist(&mq).await {
                log::warn!("committing {mq:?}: {e}");
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Stops pulling, commits the consume offsets, unregisters and closes the client
    /// instance. Messages still buffered are dropped (their offsets were not committed).
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        if inner.shutdown.is_triggered() {
            return;
        }
        inner.shutdown.trigger();
        let owned: Vec<(MessageQueue, Arc<QueueState>)> = inner.queues.guard().drain().collect();
        for (_, st) in &owned {
            inner.drop_state(st);
        }
        if inner.started.load(Ordering::Acquire) {
            let mqs: Vec<MessageQueue> = owned.into_iter().map(|(m, _)| m).collect();
            inner.offsets.persist_all(&mqs, true).await;
        }
        inner.client.shutdown().await;
    }
}

impl Inner {
    fn set_mode(&self, want: Mode) -> Result<()> {
        let mut m = self.mode.guard();
        match *m {
            Mode::Unset => {
                *m = want;
                Ok(())
            }
            have if have == want => Ok(()),
            _ => Err(ClientError::InvalidMessage(
                "subscribe and assign cannot be mixed on one lite pull consumer".into(),
            )),
        }
    }

    /// Topics of the subscriptions or of the assigned queues.
    fn topics(&self) -> BTreeSet<String> {
        let mut t: BTreeSet<String> = self.subs.guard().keys().cloned().collect();
        t.extend(self.assigned.guard().iter().map(|q| q.topic.clone()));
        t
    }

    /// Puts the group in heartbeats: subscriptions, or `*` on every assigned topic.
    fn announce(&self) {
        let mut subs: Vec<SubscriptionData> = self.subs.guard().values().cloned().collect();
        if subs.is_empty() {
            subs = self
                .topics()
                .iter()
                .map(|t| MessageSelector::all().subscription(t, self.start_ms))
                .collect();
        }
        self.client.register_consumer(ConsumerData {
            group_name: self.config.group.clone(),
            consume_type: ConsumeType::ConsumeActively,
            message_model: MessageModel::Clustering,
            consume_from_where: self.config.consume_from_where.clone(),
            subscription_data_set: subs,
            unit_mode: false,
        });
    }

    fn is_paused(&self, mq: &MessageQueue) -> bool {
        self.paused.guard().contains(mq)
    }

    fn buffered(&self) -> usize {
        self.buffer.guard().messages
    }

    fn owned(&self, mq: &MessageQueue) -> Result<()> {
        if self.queues.guard().contains_key(mq) {
            Ok(())
        } else {
            Err(ClientError::NotFound(format!(
                "{mq:?} is not assigned to this consumer"
            )))
        }
    }

    fn kick(&self) {
        self.kick.wake();
    }

    async fn commit_loop(self: Arc<Self>) {
        let owned = || self.queues.guard().keys().cloned().collect();
        let every = self.config.auto_commit_interval;
        self.offsets
            .persist_every(every, &self.shutdown, owned)
            .await;
    }
}

/// The lite pull consumer answers its connections (through [`Hook`]).
impl ConsumerHook for Arc<Inner> {
    fn rebalance_now(&self) {
        self.kick();
    }

    fn running_info(&self) -> Vec<u8> {
        let owned: Vec<String> = self
            .queues
            .guard()
            .keys()
            .map(crate::consumer::allocate::java_to_string)
            .collect();
        let mut info = RunningInfo::new(
            "CONSUME_ACTIVELY",
            "CLUSTERING",
            self.start_ms,
            &self.client,
            self.subs.guard().values().cloned().collect(),
        );
        info.properties.insert("ownedQueues", owned.join(","));
        info.to_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer() -> LitePullConsumer {
        let cfg = LitePullConsumerConfig::new("g");
        LitePullConsumer::new(cfg, ClientConfig::new("127.0.0.1:1")).unwrap()
    }

    fn mq(i: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: i,
        }
    }

    fn state(i: i32) -> Arc<QueueState> {
        Arc::new(QueueState {
            mq: mq(i),
            dropped: Shutdown::new(),
            cached: AtomicUsize::new(0),
        })
    }

    fn msgs(offsets: std::ops::Range<i64>) -> Vec<MessageExt> {
        offsets
            .map(|o| crate::consumer::stored_message(o, Vec::new()))
            .collect()
    }

    #[test]
    fn java_defaults_and_exclusive_modes() {
        let cfg = LitePullConsumerConfig::new("g");
        assert_eq!(cfg.pull_batch_size, 10);
        assert_eq!(cfg.pull_threshold_for_all, 10_000);
        assert!(cfg.auto_commit);
        assert_eq!(cfg.auto_commit_interval, Duration::from_secs(5));
        let c = consumer();
        c.subscribe("T", "*").unwrap();
        assert!(crate::block_on(c.assign(vec![mq(0)])).is_err());
        assert!(c.subscribe("bad topic", "*").is_err());
        assert!(crate::block_on(c.seek(&mq(0), 0)).is_err(), "not owned");
        assert!(
            LitePullConsumer::new(LitePullConsumerConfig::new(""), c.client().config().clone())
                .is_err()
        );
    }

    #[test]
    fn polled_batches_move_offsets_and_dropped_ones_vanish() {
        let c = consumer();
        let inner = &c.inner;
        let (s0, s1) = (state(0), state(1));
        inner.push(&s0, msgs(0..3), Vec::new(), 3);
        inner.push(&s1, msgs(0..2), Vec::new(), 2);
        inner.push(&s0, msgs(3..5), Vec::new(), 5);
        assert_eq!(inner.buffered(), 7);
        assert_eq!(s0.cached.load(Ordering::Acquire), 5);
        let first = crate::block_on(c.poll(Duration::ZERO));
        assert_eq!(first.len(), 3);
        assert_eq!(inner.offsets.read_memory(&mq(0)), Some(3));
        // A seek drops the state: its batches go, later pushes are refused.
        inner.drop_state(&s1);
        inner.push(&s1, msgs(2..4), Vec::new(), 4);
        assert_eq!(inner.buffered(), 2);
        let next = crate::block_on(c.poll(Duration::ZERO));
        assert_eq!(next.len(), 2);
        assert_eq!(inner.offsets.read_memory(&mq(0)), Some(5));
        assert_eq!(inner.offsets.read_memory(&mq(1)), None);
        assert!(crate::block_on(c.poll(Duration::from_millis(20))).is_empty());
        // Filtered-out ranges move the offset only when nothing of the queue waits.
        inner.push(&s0, msgs(5..6), Vec::new(), 6);
        inner.skip_filtered(&s0, 9);
        assert_eq!(inner.offsets.read_memory(&mq(0)), Some(5));
        crate::block_on(c.poll(Duration::ZERO));
        inner.skip_filtered(&s0, 9);
        assert_eq!(inner.offsets.read_memory(&mq(0)), Some(9));
    }

    #[test]
    fn batches_of_paused_queues_wait_for_the_resume() {
        let c = consumer();
        let inner = &c.inner;
        let (s0, s1) = (state(0), state(1));
        inner.push(&s0, msgs(0..3), Vec::new(), 3);
        inner.push(&s1, msgs(0..2), Vec::new(), 2);
        c.pause(&[mq(0)]);
        let got = crate::block_on(c.poll(Duration::ZERO));
        assert_eq!(got.len(), 2, "the unpaused queue's batch comes first");
        assert!(crate::block_on(c.poll(Duration::from_millis(20))).is_empty());
        assert_eq!(inner.buffered(), 3, "held back, not dropped");
        assert_eq!(inner.offsets.read_memory(&mq(0)), None);
        c.resume(&[mq(0)]);
        assert_eq!(crate::block_on(c.poll(Duration::ZERO)).len(), 3);
        assert_eq!(inner.offsets.read_memory(&mq(0)), Some(3));
    }
}
