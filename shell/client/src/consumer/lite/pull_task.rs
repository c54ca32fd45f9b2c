//! The background pull task of one owned queue (Java's `DefaultLitePullConsumerImpl.
//! PullTaskImpl`): long-polling pulls into the consumer's buffer, pausing while the queue
//! is paused or the buffer is over its thresholds.
//!
//! PULL_MESSAGE with SUSPEND and SUBSCRIPTION (the broker filters with this request's
//! expression, as Java's lite consumer asks), no COMMIT_OFFSET: offsets move only when
//! the application polls, and are committed by [`super::LitePullConsumer::commit_sync`]
//! or the auto-commit task. The task ends when its queue state is dropped (queue given
//! away, re-seeked) or the consumer shuts down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tern_shell::headers::PullMessageRequestHeader;
use tern_shell::runtime;

use tern_shell::sync::MutexExt;

use super::{Inner, QueueState};
use crate::consumer::pull::{PullResult, PullStatus, pull_message};
use crate::error::{ClientError, Result};

/// Pause of a paused queue before it looks again (Java: 1 s).
const PAUSED_DELAY: Duration = Duration::from_millis(200);
/// Pause of a queue while the buffer is over a threshold (Java: 50 ms).
const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Pause after a failed pull (Java: 1 s).
const ERROR_DELAY: Duration = Duration::from_secs(1);

pub(super) async fn pull_loop(inner: Arc<Inner>, st: Arc<QueueState>, mut next: i64) {
    let cfg = &inner.config;
    let mq = &st.mq;
    let mut refusal_logged = false;
    loop {
        if st.dropped.is_triggered() || inner.shutdown.is_triggered() {
            return;
        }
        if inner.is_paused(mq) {
            if stopped(&inner, &st, PAUSED_DELAY).await {
                return;
            }
            continue;
        }
        if inner.buffered() >= cfg.pull_threshold_for_all
            || st.cached.load(Ordering::Acquire) >= cfg.pull_threshold_for_queue
        {
            if stopped(&inner, &st, FLOW_CONTROL_DELAY).await {
                return;
            }
            continue;
        }
        let pulled = runtime::race(async { Some(pull_once(&inner, &st, next).await) }, async {
            runtime::race(st.dropped.wait(), inner.shutdown.wait()).await;
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
                    log::warn!("lite pull of {mq:?} at {next} refused: {e}");
                } else {
                    log::debug!("lite pull of {mq:?} at {next} failed: {e}");
                }
                if stopped(&inner, &st, ERROR_DELAY).await {
                    return;
                }
                continue;
            }
        };
        if r.status == PullStatus::OffsetIllegal {
            log::warn!(
                "offset {next} of {mq:?} is illegal; continuing at {}",
                r.next_begin_offset
            );
        }
        next = r.next_begin_offset;
        if !r.messages.is_empty() || !r.undecodable.is_empty() {
            inner.push(&st, r.messages, r.undecodable, next);
        } else if matches!(r.status, PullStatus::Found | PullStatus::NoMatchedMsg) {
            // Everything up to `next` was filtered out: with nothing of this queue left in
            // the buffer, the group's offset may move past it (Java's correctTagsOffset).
            inner.skip_filtered(&st, next);
        }
    }
}

/// Sleeps `d`; true when the queue was dropped or the consumer stopped meanwhile.
async fn stopped(inner: &Inner, st: &QueueState, d: Duration) -> bool {
    runtime::race(
        async {
            runtime::sleep(d).await;
            false
        },
        async {
            runtime::race(st.dropped.wait(), inner.shutdown.wait()).await;
            true
        },
    )
    .await
}

async fn pull_once(inner: &Inner, st: &QueueState, offset: i64) -> Result<PullResult> {
    let cfg = &inner.config;
    let mq = &st.mq;
    let (expression, version, tags, expression_type) = match inner.subs.guard().get(&mq.topic) {
        Some(s) => (
            s.sub_string.clone(),
            s.sub_version,
            s.tags_set.clone(),
            s.expression_type.clone(),
        ),
        None => ("*".to_owned(), inner.start_ms, Vec::new(), String::new()),
    };
    let header = PullMessageRequestHeader::new(
        cfg.group.clone(),
        mq.topic.clone(),
        mq.queue_id,
        offset,
        cfg.pull_batch_size.max(1),
    )
    .suspend(true, cfg.broker_suspend_max.as_millis() as i64)
    .filter(Some(expression), &expression_type, version);
    pull_message(&inner.client, mq, header, cfg.pull_timeout, &tags).await
}
