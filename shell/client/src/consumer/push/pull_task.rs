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
use tern_shell::headers::PullMessageRequestHeader;
use tern_shell::runtime;

use super::process_queue::ProcessQueue;
use tern_shell::sync::MutexExt;

use super::Inner;
use crate::consumer::pull::{PullResult, PullStatus, pull_message};
use crate::error::{ClientError, Result};

/// Pause of a queue over its flow-control thresholds (Java: 50 ms).
pub(super) const FLOW_CONTROL_PAUSE: Duration = Duration::from_millis(50);
/// Pause after a failed pull (Java: 3 s).
pub(super) const ERROR_PAUSE: Duration = Duration::from_secs(3);
/// Pause of an orderly queue whose lock is not held (Java: 3 s; shorter here since the
/// lock is re-requested by the consume task).
const UNLOCKED_PAUSE: Duration = Duration::from_millis(500);

pub(super) async fn pull_loop(
    inner: Arc<Inner>,
    mq: MessageQueue,
    pq: Arc<ProcessQueue>,
    mut next: i64,
) {
    let cfg = &inner.config;
    let orderly = inner.is_orderly();
    let mut flow_logged = false;
    let mut refusal_logged = false;
    loop {
        if pq.is_dropped() || inner.shutdown.is_triggered() {
            return;
        }
        let (count, bytes) = pq.cached();
        let over_span = !orderly && pq.span() > cfg.consume_concurrently_max_span;
        if count > cfg.pull_threshold_for_queue
            || bytes > cfg.pull_threshold_size_for_queue_bytes
            || over_span
        {
            if !flow_logged {
                log::debug!("flow control on {mq:?}: {count} msgs, {bytes} bytes cached");
                flow_logged = true;
            }
            if paused(&inner, pq.wait_dropped(), FLOW_CONTROL_PAUSE).await {
                return;
            }
            continue;
        }
        flow_logged = false;
        if orderly && inner.clustering() && !pq.is_locked(cfg.lock_max_live.as_millis() as u64) {
            if paused(&inner, pq.wait_dropped(), UNLOCKED_PAUSE).await {
                return;
            }
            continue;
        }
        let pulled = runtime::race(async { Some(pull_once(&inner, &mq, next).await) }, async {
            runtime::race(pq.wait_dropped(), inner.shutdown.wait()).await;
            None
        })
        .await;
        let Some(result) = pulled else {
            return;
        };
        let r = match result {
            Ok(r) => {
                refusal_logged = false;
                r
            }
            Err(e) => {
                // A broker's refusal (a bad SQL92 expression: 23) does not heal by
                // itself: say it once at warn, then keep retrying quietly.
                if matches!(e, ClientError::Broker { .. }) && !refusal_logged {
                    refusal_logged = true;
                    log::warn!("pull of {mq:?} at {next} refused: {e}");
                } else {
                    log::debug!("pull of {mq:?} at {next} failed: {e}");
                }
                if paused(&inner, pq.wait_dropped(), ERROR_PAUSE).await {
                    return;
                }
                continue;
            }
        };
        if pq.is_dropped() || inner.shutdown.is_triggered() {
            return;
        }
        match r.status {
            PullStatus::Found => {
                // Messages whose body cannot be read go to the DLQ before the queue moves
                // past them; until that worked, the same range is pulled again.
                if !r.undecodable.is_empty() && !inner.set_aside(&mq, &r.undecodable).await {
                    if paused(&inner, pq.wait_dropped(), ERROR_PAUSE).await {
                        return;
                    }
                    continue;
                }
                next = r.next_begin_offset;
                if !r.messages.is_empty() {
                    let msgs = r.messages;
                    pq.put(msgs.clone());
                    inner.dispatch(&mq, &pq, msgs);
                } else if pq.is_empty() {
                    inner.offsets.update(&mq, next, true);
                }
            }
            PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
                next = r.next_begin_offset;
                // Java's correctTagsOffset: nothing cached, so everything up to here is done.
                if pq.is_empty() {
                    inner.offsets.update(&mq, next, true);
                }
            }
            PullStatus::OffsetIllegal => {
                log::warn!(
                    "offset {next} of {mq:?} is illegal; continuing at {}",
                    r.next_begin_offset
                );
                next = r.next_begin_offset;
                inner.offsets.update(&mq, next, false);
                if let Err(e) = inner.offsets.persist(&mq).await {
                    log::debug!("persisting corrected offset of {mq:?}: {e}");
                }
            }
        }
    }
}

/// Sleeps `d`; true when the queue was dropped (`dropped` finished) or the consumer
/// stopped meanwhile. Shared by the pull and POP tasks.
pub(super) async fn paused(
    inner: &Inner,
    dropped: impl std::future::Future<Output = ()>,
    d: Duration,
) -> bool {
    runtime::race(
        async {
            runtime::sleep(d).await;
            false
        },
        async {
            runtime::race(dropped, inner.shutdown.wait()).await;
            true
        },
    )
    .await
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
    let header = PullMessageRequestHeader::new(
        cfg.group.clone(),
        mq.topic.clone(),
        mq.queue_id,
        offset,
        cfg.pull_batch_size.max(1),
    )
    .suspend(true, cfg.broker_suspend_max.as_millis() as i64)
    .commit(commit)
    .filter(None, &expression_type, sub_version);
    pull_message(&inner.client, mq, header, cfg.pull_timeout, &tags).await
}
