//! The owned queues and the buffer of pulled batches: which queues run a pull task (the
//! rebalance, assign and seek change that), and how batches go from the tasks to
//! [`super::LitePullConsumer::poll`] with the consume offsets following.
//!
//! Lock order: `queues` before `buffer`; `paused` is never held with `buffer`; the
//! offset store's own lock is taken last.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tern_shell::body::MessageQueue;
use tern_shell::message::{MessageExt, Undecodable};
use tern_shell::runtime::{self, Shutdown};

use tern_shell::sync::MutexExt;

use super::{Batch, Inner, MAX_UNDECODABLE, QueueState, pull_task};
use crate::consumer::await_next_rebalance;
use crate::consumer::push::{allocate_topic, pull_from_where};
use crate::error::{ClientError, Result};

impl Inner {
    /// Adds a pulled batch unless its queue state was dropped meanwhile.
    pub(super) fn push(
        &self,
        st: &Arc<QueueState>,
        msgs: Vec<MessageExt>,
        undecodable: Vec<Undecodable>,
        next_offset: i64,
    ) {
        {
            let mut b = self.buffer.guard();
            if st.dropped.is_triggered() {
                return;
            }
            st.cached.fetch_add(msgs.len(), Ordering::AcqRel);
            b.messages += msgs.len();
            b.batches.push_back(Batch {
                queue: st.clone(),
                msgs,
                undecodable,
                next_offset,
            });
        }
        self.arrived.wake();
    }

    /// A pull matched nothing up to `next`: if none of the queue's messages wait in the
    /// buffer, its consume offset moves there.
    pub(super) fn skip_filtered(&self, st: &QueueState, next: i64) {
        let _b = self.buffer.guard();
        if !st.dropped.is_triggered() && st.cached.load(Ordering::Acquire) == 0 {
            self.offsets.update(&st.mq, next, false);
        }
    }

    /// The oldest live batch of a queue not paused, its queue's consume offset moved
    /// past it (under the buffer lock, so a seek's offset always lands after it).
    /// Batches of paused queues stay buffered: a pull already in flight when the queue
    /// was paused must not hand its messages out before the resume.
    pub(super) fn take(&self) -> Option<Vec<MessageExt>> {
        let paused = self.paused.guard().clone();
        let mut b = self.buffer.guard();
        let mut i = 0;
        while i < b.batches.len() {
            let batch = &b.batches[i];
            if batch.queue.dropped.is_triggered() {
                let n = batch.msgs.len();
                batch.queue.cached.fetch_sub(n, Ordering::AcqRel);
                b.messages = b.messages.saturating_sub(n);
                b.batches.remove(i);
                continue;
            }
            if paused.contains(&batch.queue.mq) {
                i += 1;
                continue;
            }
            let batch = b.batches.remove(i).expect("index within the buffer");
            let n = batch.msgs.len();
            b.messages = b.messages.saturating_sub(n);
            batch.queue.cached.fetch_sub(n, Ordering::AcqRel);
            self.offsets
                .update(&batch.queue.mq, batch.next_offset, false);
            // The errors are handed out with the batch they came in, as the offset moves.
            if !batch.undecodable.is_empty() {
                self.hand_out_undecodable(&batch.queue.mq, batch.undecodable);
            }
            if batch.msgs.is_empty() {
                continue;
            }
            return Some(batch.msgs);
        }
        None
    }

    /// Keeps messages whose body cannot be read for
    /// [`super::LitePullConsumer::take_undecodable`] (the newest [`MAX_UNDECODABLE`]),
    /// each logged at ERROR.
    fn hand_out_undecodable(&self, mq: &MessageQueue, bad: Vec<Undecodable>) {
        let mut kept = self.undecodable.guard();
        for u in bad {
            log::error!(
                "message {} at {mq:?} offset {} cannot be decoded: {}",
                u.message.msg_id(),
                u.message.queue_offset,
                u.error
            );
            if kept.len() == MAX_UNDECODABLE {
                kept.pop_front();
            }
            kept.push_back(u);
        }
    }

    /// Stops a queue state's task and discards its buffered batches.
    pub(super) fn drop_state(&self, st: &Arc<QueueState>) {
        st.dropped.trigger();
        let mut b = self.buffer.guard();
        b.batches.retain(|x| !Arc::ptr_eq(&x.queue, st));
        b.messages = b.batches.iter().map(|x| x.msgs.len()).sum();
    }

    /// Starts (or, with `replace`, restarts) the pull task of `mq` at `offset`.
    pub(super) fn start_queue(
        self: &Arc<Self>,
        mq: &MessageQueue,
        offset: i64,
        replace: bool,
    ) -> bool {
        let mut q = self.queues.guard();
        if let Some(old) = q.get(mq) {
            if !replace {
                return false;
            }
            self.drop_state(old);
        } else if replace {
            return false;
        }
        let st = Arc::new(QueueState {
            mq: mq.clone(),
            dropped: Shutdown::new(),
            cached: AtomicUsize::new(0),
        });
        self.offsets.update(mq, offset, false);
        q.insert(mq.clone(), st.clone());
        runtime::spawn(pull_task::pull_queue(self.clone(), st, offset));
        true
    }

    pub(super) fn restart_queue(self: &Arc<Self>, mq: &MessageQueue, offset: i64) -> Result<()> {
        if self.start_queue(mq, offset, true) {
            log::info!("{mq:?} of {} seeks to {offset}", self.config.group);
            Ok(())
        } else {
            Err(ClientError::NotFound(format!(
                "{mq:?} is not assigned to this consumer"
            )))
        }
    }

    /// Makes the owned queues of `topics` (all topics: `None`) exactly `mine`; false if
    /// some start offset could not be found (retried at the next rebalance).
    pub(super) async fn update_queues(
        self: &Arc<Self>,
        topic: Option<&str>,
        mine: BTreeSet<MessageQueue>,
    ) -> bool {
        let stale: Vec<(MessageQueue, Arc<QueueState>)> = {
            let mut q = self.queues.guard();
            let gone: Vec<MessageQueue> = q
                .keys()
                .filter(|mq| topic.is_none_or(|t| mq.topic == t) && !mine.contains(*mq))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|mq| q.remove(&mq).map(|st| (mq, st)))
                .collect()
        };
        for (mq, st) in stale {
            self.drop_state(&st);
            log::info!("{} gives up {mq:?}", self.client.client_id());
            if let Err(e) = self.offsets.persist(&mq).await {
                log::warn!("committing {mq:?} before giving it up: {e}");
            }
            self.offsets.remove(&mq);
        }
        let cfg = &self.config;
        let ts = cfg
            .consume_timestamp_ms
            .unwrap_or(self.start_ms - 30 * 60 * 1000);
        let mut complete = true;
        for mq in mine {
            if self.queues.guard().contains_key(&mq) || self.shutdown.is_triggered() {
                continue;
            }
            match pull_from_where(
                &self.client,
                &self.offsets,
                &cfg.consume_from_where,
                ts,
                &mq,
            )
            .await
            {
                Ok(offset) => {
                    if self.start_queue(&mq, offset, false) {
                        log::info!(
                            "{} now owns {mq:?} from offset {offset}",
                            self.client.client_id()
                        );
                    }
                }
                Err(e) => {
                    log::warn!("start offset of {mq:?}: {e}");
                    complete = false;
                }
            }
        }
        complete
    }

    pub(super) async fn apply_assignment(self: &Arc<Self>) {
        let mine = self.assigned.guard().clone();
        self.update_queues(None, mine).await;
    }

    pub(super) fn ensure_rebalance_loop(self: &Arc<Self>) {
        if !self.rebalancing.swap(true, Ordering::AcqRel) {
            runtime::spawn(self.clone().rebalance_loop());
        }
    }

    pub(super) async fn rebalance_loop(self: Arc<Self>) {
        loop {
            let kick = self.kick.next();
            let mut complete = true;
            let topics: Vec<String> = self.subs.guard().keys().cloned().collect();
            for topic in topics {
                if self.shutdown.is_triggered() {
                    return;
                }
                let cfg = &self.config;
                let strategy = Some(&cfg.allocate_strategy);
                match allocate_topic(&self.client, &cfg.group, strategy, &topic).await {
                    Ok(mine) => {
                        let mine = mine.into_iter().collect();
                        complete &= self.update_queues(Some(&topic), mine).await;
                    }
                    Err(e) => {
                        log::debug!("rebalance of {topic} in {}: {e}", cfg.group);
                        complete = false;
                    }
                }
            }
            let interval = self.config.rebalance_interval;
            if await_next_rebalance(complete, interval, &kick, &self.shutdown).await {
                return;
            }
        }
    }
}
