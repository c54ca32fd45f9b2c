//! The pull loop of one owned queue (Java's `DefaultMQPushConsumerImpl.pullMessage`).
//!
//! PULL_MESSAGE with SUSPEND (the broker holds it up to `broker_suspend_max` when nothing
//! is there), COMMIT_OFFSET carrying the in-memory offset in clustering, no SUBSCRIPTION
//! flag: the broker filters with the subscription from our heartbeat (tags or SQL92),
//! and we re-filter tag subscriptions by tag string. The loop ends when the queue is
//! dropped or the consumer shuts down.

use std::sync::Arc;
use std::time::Duration;

use tern_shell::body::MessageQueue;
use tern_shell::runtime::Shutdown;

use super::process_queue::ProcessQueue;
use tern_shell::sync::MutexExt;

use super::Inner;
use crate::consumer::pull::{PullResult, PullStatus, pull_message};
use crate::consumer::pull_loop::{Gate, Handled, QueuePuller, long_poll, pull_loop};
use crate::error::Result;

/// Pause of a queue over its flow-control thresholds (Java: 50 ms).
pub(super) const FLOW_CONTROL_PAUSE: Duration = Duration::from_millis(50);
/// Pause after a failed pull (Java: 3 s).
pub(super) const ERROR_PAUSE: Duration = Duration::from_secs(3);
/// Pause of an orderly queue whose lock is not held (Java: 3 s; shorter here since the
/// lock is re-requested by the consume task).
const UNLOCKED_PAUSE: Duration = Duration::from_millis(500);

/// Pulls `mq` from `next` into `pq` until the queue is dropped or the consumer stops.
pub(super) async fn pull_queue(
    inner: Arc<Inner>,
    mq: MessageQueue,
    pq: Arc<ProcessQueue>,
    next: i64,
) {
    let orderly = inner.is_orderly();
    let puller = PushPuller {
        inner,
        mq,
        pq,
        orderly,
        next,
    };
    pull_loop(puller).await;
}

/// One owned queue of the push consumer as the pull loop runs it.
struct PushPuller {
    inner: Arc<Inner>,
    mq: MessageQueue,
    pq: Arc<ProcessQueue>,
    orderly: bool,
    /// The offset the next pull starts at.
    next: i64,
}

impl QueuePuller for PushPuller {
    const WHAT: &'static str = "pull";
    const ERROR_PAUSE: Duration = ERROR_PAUSE;

    type Pulled = PullResult;

    fn queue(&self) -> &MessageQueue {
        &self.mq
    }

    fn at(&self) -> Option<i64> {
        Some(self.next)
    }

    fn ends(&self) -> (&Shutdown, &Shutdown) {
        (self.pq.dropped(), &self.inner.shutdown)
    }

    fn gate(&self) -> Gate {
        let (cfg, pq) = (&self.inner.config, &self.pq);
        let (count, bytes) = pq.cached();
        let over_span = !self.orderly && pq.span() > cfg.consume_concurrently_max_span;
        if count > cfg.pull_threshold_for_queue
            || bytes > cfg.pull_threshold_size_for_queue_bytes
            || over_span
        {
            return Gate::Flow(FLOW_CONTROL_PAUSE);
        }
        if self.orderly
            && self.inner.clustering()
            && !pq.is_locked(cfg.lock_max_live.as_millis() as u64)
        {
            return Gate::Closed(UNLOCKED_PAUSE);
        }
        Gate::Open
    }

    fn flow_detail(&self) -> String {
        let (count, bytes) = self.pq.cached();
        format!("{count} msgs, {bytes} bytes cached")
    }

    async fn pull(&self) -> Result<PullResult> {
        pull_once(&self.inner, &self.mq, self.next).await
    }

    async fn handle(&mut self, r: PullResult) -> Handled {
        let (inner, mq, pq, next) = (&self.inner, &self.mq, &self.pq, &mut self.next);
        if pq.is_dropped() || inner.shutdown.is_triggered() {
            return Handled::Stop;
        }
        match r.status {
            PullStatus::Found => {
                // Messages whose body cannot be read go to the DLQ before the queue moves
                // past them; until that worked, the same range is pulled again.
                if !r.undecodable.is_empty() && !inner.set_aside(mq, &r.undecodable).await {
                    return Handled::Pause(ERROR_PAUSE);
                }
                *next = r.next_begin_offset;
                if !r.messages.is_empty() {
                    let msgs = r.messages;
                    pq.put(msgs.clone());
                    inner.dispatch(mq, pq, msgs);
                } else if pq.is_empty() {
                    inner.offsets.update(mq, *next, true);
                }
            }
            PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
                *next = r.next_begin_offset;
                // Java's correctTagsOffset: nothing cached, so everything up to here is done.
                if pq.is_empty() {
                    inner.offsets.update(mq, *next, true);
                }
            }
            PullStatus::OffsetIllegal => {
                log::warn!(
                    "offset {next} of {mq:?} is illegal; continuing at {}",
                    r.next_begin_offset
                );
                *next = r.next_begin_offset;
                inner.offsets.update(mq, *next, false);
                if let Err(e) = inner.offsets.persist(mq).await {
                    log::debug!("persisting corrected offset of {mq:?}: {e}");
                }
            }
        }
        Handled::Pull
    }
}

async fn pull_once(inner: &Inner, mq: &MessageQueue, offset: i64) -> Result<PullResult> {
    let cfg = &inner.config;
    let (sub_version, tags, expression_type) = match inner.subs.guard().get(&mq.topic) {
        Some(s) => (s.sub_version, s.tags_set.clone(), s.expression_type.clone()),
        None => (inner.start_ms, Vec::new(), String::new()),
    };
    let commit = if inner.clustering() {
        inner.offsets.read_memory(mq).filter(|o| *o > 0)
    } else {
        None
    };
    let header =
        long_poll(cfg, mq, offset)
            .commit(commit)
            .filter(None, &expression_type, sub_version);
    pull_message(&inner.client, mq, header, cfg.pull_timeout, &tags).await
}
