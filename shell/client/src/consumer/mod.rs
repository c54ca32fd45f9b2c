//! Consumers.
//!
//! * [`pull`]: the pull consumer (lite-pull style): the caller assigns queues, pulls from
//!   offsets it chooses and commits offsets itself.
//! * [`push`]: the push consumer: rebalance (every 20 s and on
//!   NOTIFY_CONSUMER_IDS_CHANGED), per-queue long-polling pull loops, process queues,
//!   concurrent and orderly listeners, retry through CONSUMER_SEND_MSG_BACK and the
//!   `%RETRY%group` subscription, clustering and broadcasting.
//! * [`lite`]: the lite pull consumer (Java's `DefaultLitePullConsumer`): subscribe (with
//!   the push consumer's rebalance) or assign queues, background pulls into a bounded
//!   buffer, `poll`, seek, pause/resume, auto-commit.
//! * [`selector`]: [`MessageSelector`], a tag or SQL92 subscription (Java's
//!   `MessageSelector`).
//! * [`simple`]: [`SimpleConsumer`], RocketMQ 5's receive / ack / change-invisible-duration
//!   consumer over the broker's POP.
//! * [`pop`]: the POP requests both POP consumers send.
//! * [`allocate`]: queue allocation strategies, identical to Java's.
//! * [`offset_store`]: remote offsets (clustering) and local offset files (broadcasting).

pub use tern_shell::allocate;
mod hook;
pub mod lite;
pub mod offset_store;
pub mod pop;
pub mod pull;
mod pull_loop;
pub mod push;
pub mod selector;
pub mod simple;

pub use allocate::AllocateStrategy;
pub use lite::{LitePullConsumer, LitePullConsumerConfig};
pub use pop::ReceivedMessage;
pub use pull::{PullConsumer, PullResult, PullStatus};
pub use push::{
    ConcurrentListener, ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel,
    OrderlyListener, OrderlyStatus, PushConsumer, PushConsumerConfig,
};
pub use selector::{ExpressionType, MessageSelector};
pub use simple::SimpleConsumer;
