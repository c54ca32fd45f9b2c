//! POP mode (Java's `PopProcessQueue`, `DefaultMQPushConsumerImpl.popMessage` and
//! `ConsumeMessagePopConcurrentlyService`): for a queue the broker assigned in POP mode,
//! one task pops batches (long polling) while fewer than `pop_threshold_for_queue` are
//! waiting for their ack, and the worker pool runs the listener on them.
//!
//! The broker keeps the group's progress: a message is done once acked. A listener that
//! asks to reconsume later has its message hidden for `POP_DELAY_LEVEL_SECS[reconsume
//! times]` (CHANGE_MESSAGE_INVISIBLETIME); the broker then delivers it again, from the
//! group's POP retry topic, and sends it to the DLQ after the group's retry limit. A
//! message whose invisible time ran out before (or while) its listener ran is not acked:
//! the broker delivers it again, as it would to any member. Unlike Java, a message past
//! `max_reconsume_times` is never acked unconsumed (Java acks it once it is four hours
//! old): it keeps coming until the broker's retry limit moves it to the DLQ.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tern_shell::body::MessageQueue;
use tern_shell::runtime::{self, Shutdown, now_ms};

use super::config::POP_DELAY_LEVEL_SECS;
use super::listener::{ConsumeContext, ConsumeStatus};
use super::pull_task::{ERROR_PAUSE, FLOW_CONTROL_PAUSE};
use crate::consumer::pull_loop::{Gate, Handled, QueuePuller, pull_loop};
use tern_shell::sync::MutexExt;

use super::{Inner, Listener};
use crate::consumer::pop::{self, PopSpec, ReceivedMessage};
use crate::error::{ClientError, Result};

/// A queue consumed by POP: what its pop task and the listener calls share.
#[derive(Debug)]
pub(super) struct PopQueue {
    /// Triggered when the queue is taken away (rebalance, shutdown).
    dropped: Shutdown,
    /// Popped and not yet acked, changed or given up.
    waiting_ack: AtomicUsize,
    /// When the last POP answered, ms since the epoch.
    last_pop_ms: AtomicI64,
}

impl PopQueue {
    pub(super) fn new() -> Self {
        Self {
            dropped: Shutdown::new(),
            waiting_ack: AtomicUsize::new(0),
            last_pop_ms: AtomicI64::new(0),
        }
    }

    pub(super) fn drop_queue(&self) {
        self.dropped.trigger();
    }

    pub(super) fn is_dropped(&self) -> bool {
        self.dropped.is_triggered()
    }

    pub(super) fn waiting_ack(&self) -> usize {
        self.waiting_ack.load(Ordering::Acquire)
    }

    fn settled(&self, n: usize) {
        self.waiting_ack.fetch_sub(n, Ordering::AcqRel);
    }

    /// Java's `PopProcessQueueInfo`, for GET_CONSUMER_RUNNING_INFO.
    pub(super) fn info(&self) -> serde_json::Value {
        serde_json::json!({
            "waitAckCount": self.waiting_ack(),
            "droped": self.is_dropped(),
            "lastPopTimestamp": self.last_pop_ms.load(Ordering::Acquire),
        })
    }
}

/// The pop task of one queue; ends when the queue is dropped or the consumer stops.
pub(super) async fn pop_loop(inner: Arc<Inner>, mq: MessageQueue, pq: Arc<PopQueue>) {
    let popper = Popper { inner, mq, pq };
    pull_loop(popper).await;
}

/// One POP queue of the push consumer as the pull loop runs it.
struct Popper {
    inner: Arc<Inner>,
    mq: MessageQueue,
    pq: Arc<PopQueue>,
}

impl QueuePuller for Popper {
    const WHAT: &'static str = "POP";
    const ERROR_PAUSE: Duration = ERROR_PAUSE;

    type Pulled = Vec<ReceivedMessage>;

    fn queue(&self) -> &MessageQueue {
        &self.mq
    }

    fn at(&self) -> Option<i64> {
        None
    }

    fn ends(&self) -> (&Shutdown, &Shutdown) {
        (&self.pq.dropped, &self.inner.shutdown)
    }

    fn gate(&self) -> Gate {
        if self.pq.waiting_ack() > self.inner.config.pop_threshold_for_queue {
            return Gate::Flow(FLOW_CONTROL_PAUSE);
        }
        Gate::Open
    }

    fn flow_detail(&self) -> String {
        let waiting = self.pq.waiting_ack();
        format!("{waiting} popped messages wait for an ack")
    }

    /// Dropped mid-POP: what the broker popped for us comes again after the invisible
    /// time, to whoever owns the queue then.
    async fn pull(&self) -> Result<Vec<ReceivedMessage>> {
        pop_once(&self.inner, &self.mq).await
    }

    async fn handle(&mut self, msgs: Vec<ReceivedMessage>) -> Handled {
        let (inner, mq, pq) = (&self.inner, &self.mq, &self.pq);
        pq.last_pop_ms.store(now_ms(), Ordering::Release);
        if msgs.is_empty() {
            return Handled::Pull;
        }
        pq.waiting_ack.fetch_add(msgs.len(), Ordering::AcqRel);
        let batch = inner.config.consume_message_batch_max_size.max(1);
        let mut msgs = msgs.into_iter().peekable();
        while msgs.peek().is_some() {
            let chunk: Vec<ReceivedMessage> = msgs.by_ref().take(batch).collect();
            let (me, mq, pq) = (inner.clone(), mq.clone(), pq.clone());
            inner.pool_submit(move || me.consume_popped(&mq, &pq, chunk));
        }
        Handled::Pull
    }
}

async fn pop_once(inner: &Inner, mq: &MessageQueue) -> Result<Vec<ReceivedMessage>> {
    let cfg = &inner.config;
    let (exp_type, exp) = match inner.subs.guard().get(&mq.topic) {
        Some(s) => (s.expression_type_or_tag().to_owned(), s.sub_string.clone()),
        None => ("TAG".to_owned(), "*".to_owned()),
    };
    let addr = inner.client.master_addr(&mq.broker_name);
    let addr = match addr {
        Some(a) => a,
        None => {
            inner.client.fetch_route(&mq.topic).await?;
            inner
                .client
                .master_addr(&mq.broker_name)
                .ok_or_else(|| ClientError::NotFound(format!("{} has no master", mq.broker_name)))?
        }
    };
    let spec = PopSpec {
        group: &cfg.group,
        topic: &mq.topic,
        broker: &mq.broker_name,
        queue_id: mq.queue_id,
        max: cfg
            .pop_batch_nums
            .clamp(1, tern_shell::pop::MAX_CK_MESSAGES as u32),
        invisible: cfg.pop_invisible_time,
        poll: cfg.broker_suspend_max,
        exp_type: &exp_type,
        exp: &exp,
        init_mode: inner.consume_init_mode(),
        order: false,
        attempt_id: None,
    };
    pop::pop(&inner.client, &addr, &spec).await
}

/// True when `m`'s invisible time is over: the broker may have given it to another member.
fn out_of_time(m: &ReceivedMessage, now: i64) -> bool {
    m.pop_window()
        .is_none_or(|(at, invisible)| at <= 0 || invisible <= 0 || now - at >= invisible)
}

/// How long a message the listener could not consume stays hidden (Java's
/// `changePopInvisibleTime`: the listener's delay level, else the reconsume times).
fn retry_delay(delay_level: i32, reconsume_times: i32) -> Duration {
    let level = if delay_level > 0 {
        delay_level
    } else {
        reconsume_times
    };
    let i = (level.max(0) as usize).min(POP_DELAY_LEVEL_SECS.len() - 1);
    Duration::from_secs(POP_DELAY_LEVEL_SECS[i])
}

impl Inner {
    /// Java's `getConsumeInitMode`: where a group with no progress starts POPing.
    fn consume_init_mode(&self) -> i32 {
        match self.config.consume_from_where {
            tern_shell::body::ConsumeFromWhere::ConsumeFromFirstOffset => 0,
            _ => 1,
        }
    }

    /// Runs the listener on popped messages (on a worker thread) and acks, hides again or
    /// sets aside each one.
    fn consume_popped(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &PopQueue,
        msgs: Vec<ReceivedMessage>,
    ) {
        let n = msgs.len();
        self.consume_popped_batch(mq, pq, msgs);
        pq.settled(n);
    }

    fn consume_popped_batch(
        self: &Arc<Self>,
        mq: &MessageQueue,
        pq: &PopQueue,
        msgs: Vec<ReceivedMessage>,
    ) {
        let Some(Listener::Concurrent(listener)) = self.listener.guard().clone() else {
            return;
        };
        if pq.is_dropped() || self.stopping.load(Ordering::Acquire) {
            return;
        }
        let now = now_ms();
        let (msgs, late): (Vec<_>, Vec<_>) = msgs.into_iter().partition(|m| !out_of_time(m, now));
        for m in &late {
            log::info!(
                "popped message {} ran out of its invisible time before its turn: it comes again",
                m.message.msg_id()
            );
        }
        let (bad, good): (Vec<_>, Vec<_>) =
            msgs.into_iter().partition(|m| m.decode_error.is_some());
        for m in &bad {
            self.set_aside_popped(mq, m);
        }
        if good.is_empty() {
            return;
        }
        let batch: Vec<_> = good.iter().map(|m| m.message.clone()).collect();
        let mut ctx = ConsumeContext::new(mq.clone());
        let status = catch_unwind(AssertUnwindSafe(|| listener.consume(&batch, &mut ctx)))
            .unwrap_or_else(|_| {
                log::warn!(
                    "listener of {} panicked: reconsume later",
                    self.config.group
                );
                ConsumeStatus::ReconsumeLater
            });
        let now = now_ms();
        if pq.is_dropped() || good.iter().any(|m| out_of_time(m, now)) {
            // Java's rule: the queue went away or the batch outlived its invisible time
            // during the call, so its messages may be someone else's now; they come again.
            log::info!(
                "{} popped messages of {mq:?} not acked: the queue was dropped or their invisible time ran out",
                good.len()
            );
            return;
        }
        for m in &good {
            let done = match status {
                ConsumeStatus::Success => {
                    runtime::block_on(pop::ack(&self.client, &self.config.group, m))
                }
                ConsumeStatus::ReconsumeLater if ctx.delay_level < 0 => {
                    self.set_aside_popped(mq, m);
                    continue;
                }
                ConsumeStatus::ReconsumeLater => {
                    let delay = retry_delay(ctx.delay_level, m.message.reconsume_times);
                    runtime::block_on(pop::change_invisible(
                        &self.client,
                        &self.config.group,
                        m,
                        delay,
                    ))
                    .map(drop)
                }
            };
            if let Err(e) = done {
                // Not lost: the broker delivers it again after its invisible time.
                log::warn!("settling popped message {} failed: {e}", m.message.msg_id());
            }
        }
    }

    /// A message the listener cannot have (undecodable body, or delay level −1) goes to
    /// the group's DLQ as stored, then is acked; if either fails it comes again.
    fn set_aside_popped(&self, mq: &MessageQueue, m: &ReceivedMessage) {
        let max = self.config.max_reconsume(false);
        let why = m
            .decode_error
            .as_deref()
            .unwrap_or("the listener asked for the DLQ");
        let moved = runtime::block_on(async {
            self.send_back_rpc(mq, &m.message, -1, max).await?;
            pop::ack(&self.client, &self.config.group, m).await
        });
        match moved {
            Ok(()) => log::error!(
                "message {} ({why}): moved to %DLQ%{}",
                m.message.msg_id(),
                self.config.group
            ),
            Err(e) => log::warn!(
                "message {} ({why}): moving it to the DLQ failed ({e}); it comes again",
                m.message.msg_id()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_follow_javas_pop_delay_levels() {
        assert_eq!(retry_delay(0, 0), Duration::from_secs(10));
        assert_eq!(retry_delay(0, 2), Duration::from_secs(60));
        assert_eq!(retry_delay(3, 0), Duration::from_secs(120));
        assert_eq!(retry_delay(0, 99), Duration::from_secs(7200));
    }
}
