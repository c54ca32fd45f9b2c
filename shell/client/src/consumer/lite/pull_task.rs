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

use tern_shell::body::MessageQueue;
use tern_shell::runtime::Shutdown;

use tern_shell::sync::MutexExt;

use super::{Inner, QueueState};
use crate::consumer::pull::{PullResult, PullStatus, pull_message};
use crate::consumer::pull_loop::{Gate, Handled, QueuePuller, long_poll, pull_loop};
use crate::error::Result;

/// Pause of a paused queue before it looks again (Java: 1 s).
const PAUSED_DELAY: Duration = Duration::from_millis(200);
/// Pause of a queue while the buffer is over a threshold (Java: 50 ms).
const FLOW_CONTROL_DELAY: Duration = Duration::from_millis(50);
/// Pause after a failed pull (Java: 1 s).
const ERROR_DELAY: Duration = Duration::from_secs(1);

/// Pulls the queue of `st` from `next` into the buffer until `st` is dropped or the
/// consumer stops.
pub(super) async fn pull_queue(inner: Arc<Inner>, st: Arc<QueueState>, next: i64) {
    pull_loop(LitePuller { inner, st, next }).await;
}

/// One owned queue of the lite pull consumer as the pull loop runs it.
struct LitePuller {
    inner: Arc<Inner>,
    st: Arc<QueueState>,
    /// The offset the next pull starts at.
    next: i64,
}

impl QueuePuller for LitePuller {
    const WHAT: &'static str = "lite pull";
    const ERROR_PAUSE: Duration = ERROR_DELAY;

    type Pulled = PullResult;

    fn queue(&self) -> &MessageQueue {
        &self.st.mq
    }

    fn at(&self) -> Option<i64> {
        Some(self.next)
    }

    fn ends(&self) -> (&Shutdown, &Shutdown) {
        (&self.st.dropped, &self.inner.shutdown)
    }

    fn gate(&self) -> Gate {
        let (inner, st) = (&self.inner, &self.st);
        if inner.is_paused(&st.mq) {
            return Gate::Closed(PAUSED_DELAY);
        }
        if inner.buffered() >= inner.config.pull_threshold_for_all
            || st.cached.load(Ordering::Acquire) >= inner.config.pull_threshold_for_queue
        {
            return Gate::Flow(FLOW_CONTROL_DELAY);
        }
        Gate::Open
    }

    fn flow_detail(&self) -> String {
        let queue = self.st.cached.load(Ordering::Acquire);
        let all = self.inner.buffered();
        format!("{all} msgs buffered by the consumer, {queue} from this queue")
    }

    async fn pull(&self) -> Result<PullResult> {
        pull_once(&self.inner, &self.st, self.next).await
    }

    async fn handle(&mut self, r: PullResult) -> Handled {
        let (inner, st, next) = (&self.inner, &self.st, &mut self.next);
        if r.status == PullStatus::OffsetIllegal {
            log::warn!(
                "offset {next} of {:?} is illegal; continuing at {}",
                st.mq,
                r.next_begin_offset
            );
        }
        *next = r.next_begin_offset;
        if !r.messages.is_empty() || !r.undecodable.is_empty() {
            inner.push(st, r.messages, r.undecodable, *next);
        } else if matches!(r.status, PullStatus::Found | PullStatus::NoMatchedMsg) {
            // Everything up to `next` was filtered out: with nothing of this queue left in
            // the buffer, the group's offset may move past it (Java's correctTagsOffset).
            inner.skip_filtered(st, *next);
        }
        Handled::Pull
    }
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
    let header = long_poll(cfg, mq, offset).filter(Some(expression), &expression_type, version);
    pull_message(&inner.client, mq, header, cfg.pull_timeout, &tags).await
}
