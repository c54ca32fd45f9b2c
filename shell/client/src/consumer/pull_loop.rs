//! The loop of one owned queue's pull task, shared by the push consumer (Java's
//! `DefaultMQPushConsumerImpl.pullMessage`) and the lite pull consumer (Java's
//! `DefaultLitePullConsumerImpl.PullTaskImpl`): stop when the queue is dropped or the
//! consumer shuts down, wait while the consumer's gate says so, race the pull against the
//! drop and the shutdown, say a broker's refusal once, pause after a failure. What is
//! pulled, the gate and what a result does are the consumer's ([`QueuePuller`]).

use std::time::Duration;

use tern_shell::body::MessageQueue;
use tern_shell::headers::PullMessageRequestHeader;
use tern_shell::runtime::{self, Shutdown};

use crate::consumer::pull::PullResult;
use crate::error::{ClientError, Result};

/// What the loop does after a pull's result was handled.
pub(crate) enum Handled {
    /// Pull again at once.
    Pull,
    /// Pull again after this pause.
    Pause(Duration),
    /// The queue was dropped or the consumer stopped: end the task.
    Stop,
}

/// One consumer's part of the loop for one queue.
pub(crate) trait QueuePuller {
    /// Names the pull in log lines.
    const WHAT: &'static str;
    /// Pause after a failed pull.
    const ERROR_PAUSE: Duration;

    fn queue(&self) -> &MessageQueue;

    /// The queue's drop signal and the consumer's shutdown: either ends the task.
    fn ends(&self) -> (&Shutdown, &Shutdown);

    /// `Some(pause)` while the queue must not be pulled (flow control, a paused or
    /// unlocked queue): the loop looks again after it.
    fn gate(&mut self) -> Option<Duration>;

    /// One PULL_MESSAGE from `offset`.
    async fn pull(&self, offset: i64) -> Result<PullResult>;

    /// Takes a result of the pull at `*next`, moving `*next` on.
    async fn handle(&mut self, next: &mut i64, r: PullResult) -> Handled;
}

/// Pulls the queue from `next` until it is dropped or the consumer stops.
pub(crate) async fn pull_loop<P: QueuePuller>(mut p: P, mut next: i64) {
    let mut refusal_logged = false;
    loop {
        let (dropped, shutdown) = p.ends();
        if dropped.is_triggered() || shutdown.is_triggered() {
            return;
        }
        if let Some(pause) = p.gate() {
            if paused(p.ends(), pause).await {
                return;
            }
            continue;
        }
        let pulled = runtime::race(async { Some(p.pull(next).await) }, async {
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
                p.handle(&mut next, r).await
            }
            Err(e) => {
                let mq = p.queue();
                // A broker's refusal (a bad SQL92 expression: 23) does not heal by
                // itself: say it once at warn, then keep retrying quietly.
                if matches!(e, ClientError::Broker { .. }) && !refusal_logged {
                    refusal_logged = true;
                    log::warn!("{} of {mq:?} at {next} refused: {e}", P::WHAT);
                } else {
                    log::debug!("{} of {mq:?} at {next} failed: {e}", P::WHAT);
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

/// Sleeps `d`; true when the queue was dropped or the consumer stopped meanwhile (the
/// pull tasks and the push consumer's POP tasks).
pub(crate) async fn paused((dropped, shutdown): (&Shutdown, &Shutdown), d: Duration) -> bool {
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
