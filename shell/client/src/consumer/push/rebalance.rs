//! Rebalance (Java's `RebalanceImpl` + `RebalancePushImpl`): which queues this member
//! owns, where a new one starts, and how an old one is handed over; plus the orderly
//! queue locks (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tern_shell::body::{
    ConsumeFromWhere, LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode};

use super::assignment::Divider;
use super::config::RETRY_PREFIX;
use super::process_queue::ProcessQueue;
use tern_shell::sync::MutexExt;

use super::{Inner, pull_task};
use crate::consumer::allocate::{AllocateStrategy, sort_queues};
use crate::consumer::await_next_rebalance;
use crate::consumer::offset_store::OffsetStore;
use crate::consumer::pull::{OffsetKind, broker_addr, queue_offset};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;

/// Longest wait for an orderly queue's running listener call before handing it over.
const HANDOVER_WAIT: Duration = Duration::from_secs(60);

impl Inner {
    pub(super) async fn rebalance_loop(self: Arc<Self>) {
        loop {
            let kick = self.kick.next();
            let complete = self.rebalance().await;
            let interval = self.config.rebalance_interval;
            if await_next_rebalance(complete, interval, &kick, &self.shutdown).await {
                return;
            }
        }
    }

    /// One rebalance of every subscribed topic; false when some part must be retried soon.
    async fn rebalance(self: &Arc<Self>) -> bool {
        let topics: Vec<String> = self.subs.guard().keys().cloned().collect();
        let mut complete = true;
        for topic in topics {
            if self.shutdown.is_triggered() {
                return true;
            }
            let outcome = match self.divider(&topic).await {
                Divider::Broker => self.rebalance_by_broker(&topic).await,
                Divider::Client => match self.allocation(&topic).await {
                    Ok(mine) => Ok(self.update_table(&topic, mine).await),
                    Err(e) => Err(e),
                },
            };
            match outcome {
                Ok(done) => complete &= done,
                // A POP retry topic exists only once POP consumption needed one.
                Err(ClientError::NoRoute { .. } | ClientError::TopicNotExist { .. })
                    if topic.starts_with(&format!("{}_", self.config.retry_topic())) => {}
                Err(e) => {
                    log::debug!("rebalance of {topic} in {}: {e}", self.config.group);
                    complete = false;
                }
            }
        }
        self.truncate_unsubscribed().await;
        complete
    }

    /// Java's `truncateMessageQueueNotMyTopic`: queues of topics no longer subscribed
    /// (a POP retry topic left when its topic turned to POP) are given up.
    async fn truncate_unsubscribed(self: &Arc<Self>) {
        let subs: BTreeSet<String> = self.subs.guard().keys().cloned().collect();
        let stale: Vec<(MessageQueue, Arc<ProcessQueue>)> = self
            .table
            .guard()
            .iter()
            .filter(|(mq, _)| !subs.contains(&mq.topic))
            .map(|(mq, pq)| (mq.clone(), pq.clone()))
            .collect();
        for (mq, pq) in stale {
            self.remove_queue(mq, pq).await;
        }
        self.pop_table.guard().retain(|mq, pq| {
            let keep = subs.contains(&mq.topic);
            if !keep {
                pq.drop_queue();
            }
            keep
        });
    }

    /// The queues of `topic` this member should own.
    async fn allocation(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        let cfg = &self.config;
        let strategy = self.clustering().then_some(&cfg.allocate_strategy);
        allocate_topic(&self.client, &cfg.group, strategy, topic).await
    }

    /// Drops queues no longer owned, adds new ones; false if some could not be added.
    pub(super) async fn update_table(
        self: &Arc<Self>,
        topic: &str,
        mine: Vec<MessageQueue>,
    ) -> bool {
        let mine: BTreeSet<MessageQueue> = mine.into_iter().collect();
        let stale: Vec<(MessageQueue, Arc<ProcessQueue>)> = self
            .table
            .guard()
            .iter()
            .filter(|(mq, _)| mq.topic == topic && !mine.contains(*mq))
            .map(|(mq, pq)| (mq.clone(), pq.clone()))
            .collect();
        for (mq, pq) in stale {
            self.remove_queue(mq, pq).await;
        }
        let orderly_locks = self.is_orderly() && self.clustering();
        let mut complete = true;
        for mq in mine {
            if self.table.guard().contains_key(&mq) || self.shutdown.is_triggered() {
                continue;
            }
            if orderly_locks && !self.lock_one(&mq).await {
                log::debug!("{mq:?} is still locked by another member");
                complete = false;
                continue;
            }
            let offset = match self.pull_from_where(&mq).await {
                Ok(o) => o,
                Err(e) => {
                    log::warn!("start offset of {mq:?}: {e}");
                    complete = false;
                    continue;
                }
            };
            let pq = Arc::new(ProcessQueue::new());
            pq.set_locked(orderly_locks);
            {
                // Checked under the table's lock: a reset marks its topic before it
                // takes the table, so either it sees this queue or this sees the mark.
                let mut table = self.table.guard();
                if self.resetting.guard().contains(topic) {
                    complete = false;
                    continue;
                }
                self.offsets.update(&mq, offset, false);
                table.insert(mq.clone(), pq.clone());
            }
            log::info!(
                "{} now owns {mq:?} from offset {offset}",
                self.client.client_id()
            );
            runtime::spawn(pull_task::pull_queue(self.clone(), mq, pq, offset));
        }
        complete
    }

    /// Java's `computePullFromWhere`: the group's offset, else per ConsumeFromWhere.
    async fn pull_from_where(&self, mq: &MessageQueue) -> Result<i64> {
        let cfg = &self.config;
        let ts = cfg
            .consume_timestamp_ms
            .unwrap_or(self.start_ms - 30 * 60 * 1000);
        pull_from_where(&self.client, &self.offsets, &cfg.consume_from_where, ts, mq).await
    }

    /// Gives a queue up: stops its pulls and consumption, commits its offset and, for
    /// orderly groups, releases the broker lock once no listener call is running on it.
    async fn remove_queue(self: &Arc<Self>, mq: MessageQueue, pq: Arc<ProcessQueue>) {
        pq.drop_queue();
        self.table.guard().remove(&mq);
        log::info!("{} gives up {mq:?}", self.client.client_id());
        if !(self.is_orderly() && self.clustering()) {
            self.commit_and_forget(&mq).await;
            return;
        }
        let me = self.clone();
        runtime::spawn(async move {
            let waited = std::time::Instant::now();
            while pq.consume_lock.try_lock().is_err() && waited.elapsed() < HANDOVER_WAIT {
                runtime::sleep(Duration::from_millis(10)).await;
            }
            me.commit_and_forget(&mq).await;
            // Re-added meanwhile: the new process queue holds the lock now.
            if !me.table.guard().contains_key(&mq) {
                me.unlock(std::slice::from_ref(&mq)).await;
            }
        });
    }

    /// RESET_CONSUMER_CLIENT_OFFSET (Java's `MQClientInstance.resetOffset`): the owned
    /// queues of `topic` are dropped with what they cached (running listener calls no
    /// longer commit), their new offsets committed to the broker, and a rebalance takes
    /// them again from there. Queues this member does not own are left to their owners.
    pub(super) async fn reset_offsets(
        self: Arc<Self>,
        topic: String,
        offsets: BTreeMap<MessageQueue, i64>,
    ) {
        self.resetting.guard().insert(topic.clone());
        let owned: Vec<(MessageQueue, Arc<ProcessQueue>)> = {
            let mut table = self.table.guard();
            let mqs: Vec<MessageQueue> = table
                .keys()
                .filter(|mq| mq.topic == topic)
                .cloned()
                .collect();
            mqs.into_iter()
                .filter_map(|mq| table.remove(&mq).map(|pq| (mq, pq)))
                .collect()
        };
        for (_, pq) in &owned {
            pq.drop_queue();
        }
        for (mq, pq) in &owned {
            if self.is_orderly() {
                // The listener call running on it finishes before the offset moves.
                let waited = std::time::Instant::now();
                while pq.consume_lock.try_lock().is_err() && waited.elapsed() < HANDOVER_WAIT {
                    runtime::sleep(Duration::from_millis(10)).await;
                }
            }
            if let Some(&offset) = offsets.get(mq) {
                self.offsets.update(mq, offset, false);
                log::info!("{mq:?} of {} reset to offset {offset}", self.config.group);
            }
            self.commit_and_forget(mq).await;
        }
        self.resetting.guard().remove(&topic);
        self.kick();
    }

    async fn commit_and_forget(&self, mq: &MessageQueue) {
        if let Err(e) = self.offsets.persist(mq).await {
            log::warn!("committing {mq:?} before giving it up: {e}");
        }
        self.offsets.remove(mq);
    }

    pub(super) async fn lock_loop(self: Arc<Self>) {
        while !self.shutdown.sleep(self.config.lock_renew_interval).await {
            self.lock_all().await;
        }
    }

    /// Renews the locks of every owned queue; queues refused are marked unlocked.
    async fn lock_all(&self) {
        let owned: Vec<(MessageQueue, Arc<ProcessQueue>)> = self
            .table
            .guard()
            .iter()
            .map(|(m, p)| (m.clone(), p.clone()))
            .collect();
        let mut by_broker: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for (mq, _) in &owned {
            by_broker
                .entry(mq.broker_name.clone())
                .or_default()
                .push(mq.clone());
        }
        let mut granted = BTreeSet::new();
        for (_, mqs) in by_broker {
            match self.lock_batch(&mqs).await {
                Ok(ok) => granted.extend(ok),
                Err(e) => log::warn!("renewing queue locks: {e}"),
            }
        }
        for (mq, pq) in owned {
            pq.set_locked(granted.contains(&mq));
        }
    }

    /// Locks one queue at its broker; true when granted.
    pub(super) async fn lock_one(&self, mq: &MessageQueue) -> bool {
        match self.lock_batch(std::slice::from_ref(mq)).await {
            Ok(ok) => ok.contains(mq),
            Err(e) => {
                log::warn!("locking {mq:?}: {e}");
                false
            }
        }
    }

    async fn lock_batch(&self, mqs: &[MessageQueue]) -> Result<Vec<MessageQueue>> {
        let Some(first) = mqs.first() else {
            return Ok(Vec::new());
        };
        let addr = broker_addr(&self.client, first).await?;
        let body = LockBatchRequestBody {
            consumer_group: self.config.group.clone(),
            client_id: self.client.client_id().to_owned(),
            only_this_broker: false,
            mq_set: mqs.to_vec(),
        };
        let cmd = RemotingCommand::request_code(RequestCode::LockBatchMq)
            .with_body(tern_shell::body::to_json(&body));
        let resp = self.client.invoke_ok(&addr, cmd).await?;
        let r: LockBatchResponseBody = tern_shell::body::from_json(&resp.body)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(r.lock_ok_mq_set)
    }

    /// Releases broker locks (answered, so a successor's lock request comes after).
    pub(super) async fn unlock(&self, mqs: &[MessageQueue]) {
        let mut by_broker: BTreeMap<String, Vec<MessageQueue>> = BTreeMap::new();
        for mq in mqs {
            by_broker
                .entry(mq.broker_name.clone())
                .or_default()
                .push(mq.clone());
        }
        for (_, mqs) in by_broker {
            let Ok(addr) = broker_addr(&self.client, &mqs[0]).await else {
                continue;
            };
            let body = LockBatchRequestBody {
                consumer_group: self.config.group.clone(),
                client_id: self.client.client_id().to_owned(),
                only_this_broker: false,
                mq_set: mqs,
            };
            let cmd = RemotingCommand::request_code(RequestCode::UnlockBatchMq)
                .with_body(tern_shell::body::to_json(&body));
            if let Err(e) = self.client.invoke_ok(&addr, cmd).await {
                log::debug!("unlocking queues: {e}");
            }
        }
    }
}

/// The readable queues of `topic`, and the share of them this client owns in `group`
/// per `strategy` (clustering), or all of them (`None`: broadcasting). Shared by the push
/// and lite pull consumers.
pub(crate) async fn allocate_topic(
    client: &ClientInstance,
    group: &str,
    strategy: Option<&AllocateStrategy>,
    topic: &str,
) -> Result<Vec<MessageQueue>> {
    let route = match client.fetch_route(topic).await {
        Ok(r) => r,
        Err(e) => client.topic_route(topic).await.map_err(|_| e)?,
    };
    let mut all = crate::consumer::readable_queues(topic, &route);
    sort_queues(&mut all);
    let Some(strategy) = strategy else {
        return Ok(all);
    };
    let cids = client.consumer_ids(topic, group).await?;
    Ok(strategy.allocate(client.client_id(), &all, &cids))
}

/// Java's `computePullFromWhere`: the group's stored offset of `mq`, else where `from`
/// says (`timestamp_ms` for [`ConsumeFromWhere::ConsumeFromTimestamp`]). Shared by the
/// push and lite pull consumers.
pub(crate) async fn pull_from_where(
    client: &ClientInstance,
    offsets: &OffsetStore,
    from: &ConsumeFromWhere,
    timestamp_ms: i64,
    mq: &MessageQueue,
) -> Result<i64> {
    if let Some(o) = offsets.read_store(mq).await? {
        if o >= 0 {
            return Ok(o);
        }
    }
    let retry = mq.topic.starts_with(RETRY_PREFIX);
    match from {
        ConsumeFromWhere::ConsumeFromFirstOffset => Ok(0),
        ConsumeFromWhere::ConsumeFromTimestamp if !retry => {
            queue_offset(client, mq, OffsetKind::AtTime(timestamp_ms)).await
        }
        ConsumeFromWhere::ConsumeFromTimestamp => queue_offset(client, mq, OffsetKind::Max).await,
        _ if retry => Ok(0),
        _ => queue_offset(client, mq, OffsetKind::Max).await,
    }
}
