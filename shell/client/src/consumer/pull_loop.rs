//! The loop of one owned queue's task, shared by the push consumer's pull tasks (Java's
//! `DefaultMQPushConsumerImpl.pullMessage`), its POP tasks (`popMessage`) and the lite
//! pull consumer's pull tasks (Java's `DefaultLitePullConsumerImpl.PullTaskImpl`): stop
//! when the queue is dropped or the consumer shuts down, wait while the consumer's gate
//! says so, race the request against the drop and the shutdown, say a broker's refusal
//! once, pause after a failure. What is requested, the gate and what a result does are the
//! consumer's ([`QueuePuller`]).

use std::time::Duration;

use tern_shell::body::MessageQueue;
use tern_shell::headers::PullMessageRequestHeader;
use tern_shell::runtime::{self, Shutdown};

use crate::error::{ClientError, Result};

/// What the loop does after a request's result was handled.
pub(crate) enum Handled {
    /// Request again at once.
    Pull,
    /// Request again after this pause.
    Pause(Duration),
    /// The queue was dropped or the consumer stopped: end the task.
    Stop,
}

/// Whether the queue may be requested now.
pub(crate) enum Gate {
    /// Request it.
    Open,
    /// Over a flow-control threshold: look again after the pause. The loop says so once
    /// (debug, with [`QueuePuller::flow_detail`]) until the queue is let through.
    Flow(Duration),
    /// Held back for another reason (a paused or unlocked queue): look again after it.
    Closed(Duration),
}

/// One consumer's part of the loop for one queue.
pub(crate) trait QueuePuller {
    /// Names the request in log lines ("pull", "POP").
    const WHAT: &'static str;
    /// Pause after a failed request.
    const ERROR_PAUSE: Duration;

    /// What one request brings back: a PULL_MESSAGE's result, a POP's messages.
    type Pulled;

    fn queue(&self) -> &MessageQueue;

    /// Where the next request starts, for log lines: the offset of a PULL_MESSAGE; `None`
    /// for a POP, whose place the broker keeps.
    fn at(&self) -> Option<i64>;

    /// The queue's drop signal and the consumer's shutdown: either ends the task.
    fn ends(&self) -> (&Shutdown, &Shutdown);

    /// Whether the queue may be requested now.
    fn gate(&self) -> Gate;

    /// What put the queue over its flow-control thresholds, for the log line (asked only
    /// when the line is written, not on every look).
    fn flow_detail(&self) -> String;

    /// One request (a PULL_MESSAGE from [`Self::at`], a POP). Dropped unfinished when the
    /// queue is dropped or the consumer stops.
    async fn pull(&self) -> Result<Self::Pulled>;

    /// Takes a result of the request, moving the puller's place on.
    async fn handle(&mut self, r: Self::Pulled) -> Handled;
}

/// Requests the queue until it is dropped or the consumer stops.
pub(crate) async fn pull_loop<P: QueuePuller>(mut p: P) {
    let (mut refusal_logged, mut flow_logged) = (false, false);
    loop {
        let (dropped, shutdown) = p.ends();
        if dropped.is_triggered() || shutdown.is_triggered() {
            return;
        }
        let pause = match p.gate() {
            Gate::Open => {
                flow_logged = false;
                None
            }
            Gate::Flow(pause) => {
                if !flow_logged {
                    flow_logged = true;
                    log::debug!("flow control on {:?}: {}", p.queue(), p.flow_detail());
                }
                Some(pause)
            }
            Gate::Closed(pause) => {
                flow_logged = false;
                Some(pause)
            }
        };
        if let Some(pause) = pause {
            if paused(p.ends(), pause).await {
                return;
            }
            continue;
        }
        let pulled = runtime::race(async { Some(p.pull().await) }, async {
            let (dropped, shutdown) = p.ends();
            runtime::race(dropped.wait(), shutdown.wait()).await;
            None
        })
        .await;
        let Some(result) = pulled else {
            return;
        };
        let handled = match result {
            Ok(r) => {
                refusal_logged = false;
                p.handle(r).await
            }
            Err(e) => {
                let mq = p.queue();
                let at = p.at().map(|n| format!(" at {n}")).unwrap_or_default();
                // A broker's refusal (a bad SQL92 expression: 23, no permission) does not
                // heal by itself: say it once at warn, then keep retrying quietly.
                if matches!(e, ClientError::Broker { .. }) && !refusal_logged {
                    refusal_logged = true;
                    log::warn!("{} of {mq:?}{at} refused: {e}", P::WHAT);
                } else {
                    log::debug!("{} of {mq:?}{at} failed: {e}", P::WHAT);
                }
                Handled::Pause(P::ERROR_PAUSE)
            }
        };
        match handled {
            Handled::Pull => {}
            Handled::Pause(d) => {
                if paused(p.ends(), d).await {
                    return;
                }
            }
            Handled::Stop => return,
        }
    }
}

/// Sleeps `d`; true when the queue was dropped or the consumer stopped meanwhile.
async fn paused((dropped, shutdown): (&Shutdown, &Shutdown), d: Duration) -> bool {
    runtime::race(
        async {
            runtime::sleep(d).await;
            false
        },
        async {
            runtime::race(dropped.wait(), shutdown.wait()).await;
            true
        },
    )
    .await
}

/// The settings of a consumer whose tasks long-poll its queues (push, lite pull).
pub(crate) trait LongPolling {
    /// The group, the most messages a pull asks for, and how long the broker may hold one.
    fn long_polling(&self) -> (&str, i32, Duration);
}

/// The pull the push and lite consumers' tasks send for `mq` from `offset`: at most the
/// batch size of messages (at least one), held by the broker while nothing is there
/// (SUSPEND). Each consumer adds its filter and commit.
pub(crate) fn long_poll(
    cfg: &impl LongPolling,
    mq: &MessageQueue,
    offset: i64,
) -> PullMessageRequestHeader {
    let (group, batch, suspend_max) = cfg.long_polling();
    PullMessageRequestHeader::new(group, mq.topic.clone(), mq.queue_id, offset, batch.max(1))
        .suspend(true, suspend_max.as_millis() as i64)
}
