//! Running listeners (Java's `ConsumeMessageConcurrentlyService` and
//! `ConsumeMessageOrderlyService`) on the worker pool, and what follows their answers:
//! offsets, send-back to the retry topic, orderly suspension.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use tern_shell::body::{ConsumeMessageDirectlyResult, MessageQueue};
use tern_shell::headers::ConsumerSendMsgBackRequestHeader;
use tern_shell::message::{Message, MessageExt, Undecodable, property};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode};

use super::listener::{ConsumeContext, ConsumeStatus, OrderlyStatus};
use super::process_queue::ProcessQueue;
use super::{Inner, Listener};
use crate::consumer::pull::broker_addr;
use crate::error::Result;

/// Java's `MessageConst` keys of the send-back fallback.
const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// Reconsume count carried by a resent retry message (the producer moves it to the header).
pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
/// Reconsume limit carried by a resent retry message.
pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
/// Pause before messages whose send-back failed are consumed again locally (Java: 5 s).
const SEND_BACK_FAILED_PAUSE: Duration = Duration::from_secs(5);
/// An orderly task yields its worker after this long, so other queues get a turn.
const ORDERLY_SLICE: Duration = Duration::from_millis(500);

impl Inner {
    pub(super) fn pool_submit(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) {
        if let Some(pool) = self.pool.guard().as_ref() {
            pool.submit(job);
        }
    }

    /// Hands freshly pulled messages to the listener.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &Arc<ProcessQueue>,
        msgs: Vec<MessageExt>,
    ) {
        let listener = self.listener.guard().clone();
        match listener {
            Some(Listener::Concurrent(_)) => {
                let batch = self.config.consume_message_batch_max_size.max(1);
                for chunk in msgs.chunks(batch) {
                    self.submit_concurrent(mq, pq, chunk.to_vec());
                }
            }
            Some(Listener::Orderly(_)) => self.schedule_orderly(mq, pq),
            None => {}
        }
    }

    fn submit_concurrent(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &Arc<ProcessQueue>,
        msgs: Vec<MessageExt>,
    ) {
        let (me, mq, pq) = (self.clone(), mq.clone(), pq.clone());
        self.pool_submit(move || me.consume_concurrently(&mq, &pq, msgs));
    }

    fn consume_concurrently(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &Arc<ProcessQueue>,
        mut msgs: Vec<MessageExt>,
    ) {
        let Some(Listener::Concurrent(listener)) = self.listener.guard().clone() else {
            return;
        };
        if pq.is_dropped() || self.stopping.load(Ordering::Acquire) {
            return;
        }
        self.reset_retry_topic(&mut msgs);
        let mut ctx = ConsumeContext::new(mq.clone());
        let status = catch_unwind(AssertUnwindSafe(|| listener.consume(&msgs, &mut ctx)))
            .unwrap_or_else(|_| {
                log::warn!(
                    "listener of {} panicked: reconsume later",
                    self.config.group
                );
                ConsumeStatus::ReconsumeLater
            });
        if pq.is_dropped() {
            // Given away meanwhile: the new owner starts from the committed offset.
            return;
        }
        let mut failed = Vec::new();
        if status == ConsumeStatus::ReconsumeLater {
            if self.clustering() {
                for m in &msgs {
                    if !runtime::block_on(self.send_back(mq, m, ctx.delay_level)) {
                        failed.push(m.clone());
                    }
                }
            } else {
                for m in &msgs {
                    log::warn!("broadcasting: message {} dropped after failure", m.msg_id());
                }
            }
        }
        let done: Vec<i64> = msgs
            .iter()
            .filter(|m| !failed.iter().any(|f| f.queue_offset == m.queue_offset))
            .map(|m| m.queue_offset)
            .collect();
        if let Some(offset) = pq.remove(&done) {
            self.offsets.update(mq, offset, true);
        }
        if !failed.is_empty() {
            for m in &mut failed {
                m.reconsume_times = m.reconsume_times.saturating_add(1);
            }
            let (me, mq, pq) = (self.clone(), mq.clone(), pq.clone());
            runtime::spawn(async move {
                runtime::sleep(SEND_BACK_FAILED_PAUSE).await;
                me.submit_concurrent(&mq, &pq, failed);
            });
        }
    }

    /// CONSUME_MESSAGE_DIRECTLY (Java's `consumeMessageDirectly`): the listener on one
    /// message an admin chose, outside the queues' flow; nothing is committed or sent back.
    pub(super) fn consume_directly(
        &self,
        msg: MessageExt,
        broker_name: &str,
    ) -> ConsumeMessageDirectlyResult {
        let mq = MessageQueue {
            topic: msg.topic.clone(),
            broker_name: broker_name.to_owned(),
            queue_id: msg.queue_id,
        };
        let mut msgs = vec![msg];
        self.reset_retry_topic(&mut msgs);
        let mut ctx = ConsumeContext::new(mq);
        let listener = self.listener.guard().clone();
        let started = Instant::now();
        let (order, verdict) = match &listener {
            Some(Listener::Concurrent(l)) => (
                false,
                catch_unwind(AssertUnwindSafe(|| l.consume(&msgs, &mut ctx))).map(|s| match s {
                    ConsumeStatus::Success => "CR_SUCCESS",
                    ConsumeStatus::ReconsumeLater => "CR_LATER",
                }),
            ),
            Some(Listener::Orderly(l)) => (
                true,
                catch_unwind(AssertUnwindSafe(|| l.consume(&msgs, &mut ctx))).map(|s| match s {
                    OrderlyStatus::Success => "CR_SUCCESS",
                    OrderlyStatus::SuspendCurrentQueueAMoment => "CR_LATER",
                }),
            ),
            None => (false, Ok("CR_RETURN_NULL")),
        };
        let (result, remark) = match verdict {
            Ok(r) => (r, None),
            Err(_) => (
                "CR_THROW_EXCEPTION",
                Some("the listener panicked".to_owned()),
            ),
        };
        ConsumeMessageDirectlyResult {
            order,
            auto_commit: true,
            consume_result: result.to_owned(),
            remark,
            spent_time_mills: started.elapsed().as_millis() as i64,
        }
    }

    /// Java's `resetRetryAndNamespace`: a redelivery shows its original topic.
    fn reset_retry_topic(&self, msgs: &mut [MessageExt]) {
        let retry = self.config.retry_topic();
        for m in msgs {
            if m.topic == retry {
                if let Some(t) = m.properties.get(property::RETRY_TOPIC) {
                    m.topic = t.clone();
                }
            }
        }
    }

    /// CONSUMER_SEND_MSG_BACK; when the broker refuses, the message is resent to the retry
    /// topic by the inner producer (Java's fallback). True when either worked.
    async fn send_back(&self, mq: &MessageQueue, msg: &MessageExt, delay_level: i32) -> bool {
        let orderly = self.is_orderly();
        let max = self.config.max_reconsume(orderly);
        match self.send_back_rpc(mq, msg, delay_level, max).await {
            Ok(()) => return true,
            Err(e) => log::warn!("send-back of {} failed ({e}); resending", msg.msg_id()),
        }
        let mut m = Message::new(self.config.retry_topic(), msg.body.clone());
        m.flag = msg.flag;
        m.properties = msg.properties.clone();
        m.properties
            .entry(ORIGIN_MESSAGE_ID.into())
            .or_insert_with(|| msg.msg_id().to_owned());
        m.properties
            .insert(property::RETRY_TOPIC.into(), msg.topic.clone());
        m.properties
            .insert(RECONSUME_TIME.into(), (msg.reconsume_times + 1).to_string());
        m.properties
            .insert(MAX_RECONSUME_TIMES.into(), max.to_string());
        m.properties.insert(
            property::DELAY.into(),
            (3 + msg.reconsume_times).to_string(),
        );
        match self.retry_producer.send(m).await {
            Ok(_) => true,
            Err(e) => {
                log::warn!("resending {} to the retry topic failed: {e}", msg.msg_id());
                false
            }
        }
    }

    /// Sets aside messages whose body cannot be decompressed: in clustering, each goes to
    /// the group's DLQ as stored (CONSUMER_SEND_MSG_BACK with delay level −1: the broker
    /// copies the record, compression flags and all), logged at ERROR; in broadcasting,
    /// which has no DLQ, each is logged at ERROR and skipped (it stays in the broker's
    /// log). False if a send-back failed: the caller pulls the range again later.
    pub(super) async fn set_aside(&self, mq: &MessageQueue, bad: &[Undecodable]) -> bool {
        let orderly = self.is_orderly();
        let max = self.config.max_reconsume(orderly);
        for u in bad {
            let m = &u.message;
            if !self.clustering() {
                log::error!(
                    "message {} at {mq:?} offset {} cannot be decoded ({}): skipped (broadcasting has no DLQ)",
                    m.msg_id(),
                    m.queue_offset,
                    u.error
                );
                continue;
            }
            match self.send_back_rpc(mq, m, -1, max).await {
                Ok(()) => log::error!(
                    "message {} at {mq:?} offset {} cannot be decoded ({}): moved to %DLQ%{}",
                    m.msg_id(),
                    m.queue_offset,
                    u.error,
                    self.config.group
                ),
                Err(e) => {
                    log::warn!(
                        "message {} cannot be decoded ({}) and moving it to the DLQ failed: {e}",
                        m.msg_id(),
                        u.error
                    );
                    return false;
                }
            }
        }
        true
    }

    pub(super) async fn send_back_rpc(
        &self,
        mq: &MessageQueue,
        msg: &MessageExt,
        delay_level: i32,
        max: i32,
    ) -> Result<()> {
        let addr = broker_addr(&self.client, mq).await?;
        let h = ConsumerSendMsgBackRequestHeader {
            offset: msg.commit_log_offset,
            group: self.config.group.clone(),
            delay_level,
            origin_msg_id: Some(msg.msg_id().to_owned()),
            origin_topic: Some(msg.topic.clone()),
            unit_mode: Some(false),
            max_reconsume_times: Some(max),
        };
        let cmd = RemotingCommand::request(RequestCode::ConsumerSendMsgBack, &h);
        self.client.invoke_ok(&addr, cmd).await.map(drop)
    }

    /// Queues the orderly task of `pq` unless one is queued or running.
    fn schedule_orderly(self: &Arc<Self>, mq: &MessageQueue, pq: &Arc<ProcessQueue>) {
        if pq.try_schedule() {
            self.submit_orderly(mq, pq);
        }
    }

    fn submit_orderly(self: &Arc<Self>, mq: &MessageQueue, pq: &Arc<ProcessQueue>) {
        let (me, mq, pq) = (self.clone(), mq.clone(), pq.clone());
        self.pool_submit(move || me.consume_orderly(&mq, &pq));
    }

    /// Re-queues the orderly task of `pq` after `d` (it stays scheduled meanwhile).
    fn submit_orderly_later(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &Arc<ProcessQueue>,
        d: Duration,
    ) {
        let (me, mq, pq) = (self.clone(), mq.clone(), pq.clone());
        runtime::spawn(async move {
            runtime::sleep(d).await;
            if pq.is_dropped() || me.shutdown.is_triggered() {
                pq.unschedule();
                return;
            }
            me.submit_orderly(&mq, &pq);
        });
    }

    /// The orderly task of one queue: consumes its messages in offset order, one batch at
    /// a time, while the queue's broker lock is held.
    fn consume_orderly(self: &Arc<Self>, mq: &MessageQueue, pq: &Arc<ProcessQueue>) {
        let Some(Listener::Orderly(listener)) = self.listener.guard().clone() else {
            pq.unschedule();
            return;
        };
        let cfg = &self.config;
        let started = Instant::now();
        loop {
            if pq.is_dropped() || self.stopping.load(Ordering::Acquire) {
                pq.unschedule();
                return;
            }
            if self.clustering() && !pq.is_locked(cfg.lock_max_live.as_millis() as u64) {
                // Lost (or never renewed) the lock: ask again, retry shortly.
                let (me, mq2, pq2) = (self.clone(), mq.clone(), pq.clone());
                runtime::spawn(async move {
                    if me.lock_one(&mq2).await {
                        pq2.set_locked(true);
                    }
                });
                self.submit_orderly_later(mq, pq, Duration::from_millis(100));
                return;
            }
            if started.elapsed() > ORDERLY_SLICE {
                self.submit_orderly(mq, pq);
                return;
            }
            let guard = pq.consume_lock.guard();
            if pq.is_dropped() {
                drop(guard);
                pq.unschedule();
                return;
            }
            let mut msgs = pq.first(cfg.consume_message_batch_max_size.max(1));
            if msgs.is_empty() {
                drop(guard);
                pq.unschedule();
                // A pull may have added messages after `first` and before `unschedule`.
                if !pq.is_empty() && pq.try_schedule() {
                    continue;
                }
                return;
            }
            self.reset_retry_topic(&mut msgs);
            let offsets: Vec<i64> = msgs.iter().map(|m| m.queue_offset).collect();
            let mut ctx = ConsumeContext::new(mq.clone());
            let status = catch_unwind(AssertUnwindSafe(|| listener.consume(&msgs, &mut ctx)))
                .unwrap_or(OrderlyStatus::SuspendCurrentQueueAMoment);
            let status = match status {
                OrderlyStatus::SuspendCurrentQueueAMoment
                    if msgs
                        .iter()
                        .all(|m| m.reconsume_times >= cfg.max_reconsume(true)) =>
                {
                    // Out of retries: to the DLQ, then the queue moves on.
                    let all_sent = msgs
                        .iter()
                        .all(|m| runtime::block_on(self.send_back(mq, m, -1)));
                    if all_sent {
                        OrderlyStatus::Success
                    } else {
                        status
                    }
                }
                s => s,
            };
            match status {
                OrderlyStatus::Success => {
                    if let Some(offset) = pq.remove(&offsets) {
                        self.offsets.update(mq, offset, true);
                    }
                    drop(guard);
                }
                OrderlyStatus::SuspendCurrentQueueAMoment => {
                    pq.bump_reconsume(&offsets);
                    drop(guard);
                    let pause = ctx
                        .suspend_ms
                        .map(Duration::from_millis)
                        .unwrap_or(cfg.suspend_current_queue_time);
                    self.submit_orderly_later(mq, pq, pause);
                    return;
                }
            }
        }
    }
}
