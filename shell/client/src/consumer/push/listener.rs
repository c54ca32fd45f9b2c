//! Listeners: what the application gives a push consumer.
//!
//! Listeners are plain synchronous callbacks run on the consumer's worker threads (Java's
//! consume thread pool), so they may block and need no executor; a listener that wants
//! async code can `tern_client::block_on` inside.

use tern_shell::body::MessageQueue;
use tern_shell::message::MessageExt;

/// Answer of a concurrent listener (Java's `ConsumeConcurrentlyStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeStatus {
    /// Consumed; the offset may move past these messages.
    Success,
    /// Deliver again later, through the group's retry topic.
    ReconsumeLater,
}

/// Answer of an orderly listener (Java's `ConsumeOrderlyStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderlyStatus {
    /// Consumed; the queue moves on.
    Success,
    /// Stop this queue for a moment and retry the same messages (order is kept).
    SuspendCurrentQueueAMoment,
}

/// What a listener call is told about its messages.
#[derive(Debug, Clone)]
pub struct ConsumeContext {
    /// The queue the messages were pulled from (`%RETRY%group` for redeliveries, whose
    /// messages carry their original topic).
    pub queue: MessageQueue,
    /// Concurrent, on ReconsumeLater: the delay level to retry with; 0 lets the broker
    /// choose (3 + reconsume times), −1 sends the messages straight to the DLQ.
    pub delay_level: i32,
    /// Orderly, on suspend: how long to wait before retrying, in ms; `None` = the
    /// consumer's `suspend_current_queue_time`.
    pub suspend_ms: Option<u64>,
}

impl ConsumeContext {
    pub(crate) fn new(queue: MessageQueue) -> Self {
        Self {
            queue,
            delay_level: 0,
            suspend_ms: None,
        }
    }
}

/// A listener whose messages may be consumed in any order, on many threads at once.
pub trait ConcurrentListener: Send + Sync + 'static {
    /// Consumes a batch (of at most `consume_message_batch_max_size` messages).
    fn consume(&self, msgs: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus;
}

impl<F> ConcurrentListener for F
where
    F: Fn(&[MessageExt], &mut ConsumeContext) -> ConsumeStatus + Send + Sync + 'static,
{
    fn consume(&self, msgs: &[MessageExt], ctx: &mut ConsumeContext) -> ConsumeStatus {
        self(msgs, ctx)
    }
}

/// A listener that sees each queue's messages one call at a time, in queue order.
pub trait OrderlyListener: Send + Sync + 'static {
    /// Consumes a batch of consecutive messages of one queue.
    fn consume(&self, msgs: &[MessageExt], ctx: &mut ConsumeContext) -> OrderlyStatus;
}

impl<F> OrderlyListener for F
where
    F: Fn(&[MessageExt], &mut ConsumeContext) -> OrderlyStatus + Send + Sync + 'static,
{
    fn consume(&self, msgs: &[MessageExt], ctx: &mut ConsumeContext) -> OrderlyStatus {
        self(msgs, ctx)
    }
}
