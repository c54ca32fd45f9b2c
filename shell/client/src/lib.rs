//! Tern's client SDK, for Tern and any RocketMQ 4.x/5.x broker, following the remoting
//! protocol as Apache's Java client uses it (wire-protocol.md).
//!
//! * [`ClientInstance`] ([`instance`]): name servers with fail-over, the topic route cache
//!   (refreshed every 30 s and on demand), broker addresses, heartbeats every 30 s, and a
//!   shutdown that unregisters. Producers, consumers and the admin share one per config.
//! * [`Producer`] ([`producer`]): sync / async / oneway sends, batches, chosen queues and
//!   selectors, retries elsewhere, UNIQ_KEY, zlib over 4 KiB, TBW102 auto-creation.
//! * [`TransactionProducer`] ([`producer::transaction`]): half message, local
//!   transaction, commit or rollback; answers the broker's check-backs.
//! * [`PullConsumer`] ([`consumer`]): assign queues, pull from offsets, commit offsets.
//! * [`LitePullConsumer`] ([`consumer::lite`]): Java's `DefaultLitePullConsumer`:
//!   subscribe (rebalanced) or assign, `poll` from a buffer filled by background pulls,
//!   seek, pause/resume, auto-commit.
//! * [`PushConsumer`] ([`consumer::push`]): subscriptions with tag or SQL92 expressions
//!   ([`MessageSelector`]), rebalance (Java-identical allocation), long polling,
//!   concurrent and orderly listeners on a worker pool, retry through `%RETRY%group`,
//!   clustering (broker offsets) and broadcasting (local offset file).
//! * [`Admin`] ([`admin`]): topics, clusters, groups, consumer progress, message queries;
//!   the `tern-admin` binary is a command line over it.
//!
//! The API is async but names no executor: futures can be awaited from any runtime (IO
//! runs on async-io's reactor through `tern_shell::runtime`); background work (heartbeats,
//! [`Producer::send_async`], pull loops) is spawned there too. Push listeners are plain
//! callbacks run on the consumer's own worker threads.
#![forbid(unsafe_code)]

pub mod admin;
pub mod config;
pub mod consumer;
pub mod error;
pub mod instance;
pub mod message;
pub mod processor;
pub mod producer;

pub use admin::{Admin, ConsumeProgress, QueueProgress, Target};
pub use config::{ClientConfig, ProducerConfig};
pub use consumer::{
    AllocateStrategy, ConcurrentListener, ConsumeContext, ConsumeFromWhere, ConsumeStatus,
    ExpressionType, LitePullConsumer, LitePullConsumerConfig, MessageModel, MessageSelector,
    OrderlyListener, OrderlyStatus, PullConsumer, PullResult, PullStatus, PushConsumer,
    PushConsumerConfig, ReceivedMessage, SimpleConsumer,
};
pub use error::{ClientError, Result};
pub use instance::ClientInstance;
pub use message::{Message, MessageBuilder, MessageExt, MessageQueue};
pub use producer::request::create_reply;
pub use producer::transaction::{
    ListenerError, ListenerResult, LocalTransactionState, TransactionListener, TransactionProducer,
    TransactionSendResult,
};
pub use producer::{HashSelector, Producer, QueueSelector, SendFuture, SendResult, SendStatus};
pub use tern_shell::acl::SessionCredentials;
pub use tern_shell::tls::{ClientTls, ClientTlsSettings};

/// Alias with Java's class name.
pub type MQClient = ClientInstance;

/// Runs a future to completion on the current thread: for binaries and tests that have
/// no executor of their own.
pub fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    tern_shell::runtime::block_on(fut)
}
