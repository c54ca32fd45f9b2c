//! Push consumer settings, with `DefaultMQPushConsumer`'s defaults (wire-protocol.md §6.10).

use std::path::PathBuf;
use std::time::Duration;

pub use tern_shell::body::{ConsumeFromWhere, MessageModel};

use crate::consumer::allocate::AllocateStrategy;

/// Settings of one push consumer.
#[derive(Debug, Clone)]
pub struct PushConsumerConfig {
    /// Consumer group.
    pub group: String,
    /// Clustering (queues shared in the group) or broadcasting (every member gets all).
    pub message_model: MessageModel,
    /// Where a queue starts when the group has no offset for it (Java: last offset).
    pub consume_from_where: ConsumeFromWhere,
    /// For [`ConsumeFromWhere::ConsumeFromTimestamp`]: ms since the epoch
    /// (Java: half an hour before start).
    pub consume_timestamp_ms: Option<i64>,
    /// How queues are divided in clustering.
    pub allocate_strategy: AllocateStrategy,
    /// Worker threads kept for listeners (Java: 20).
    pub consume_thread_min: usize,
    /// Most worker threads (Java: 20; grown to when all are busy).
    pub consume_thread_max: usize,
    /// Messages handed to one listener call (Java: 1).
    pub consume_message_batch_max_size: usize,
    /// Messages asked for in one pull (Java: 32).
    pub pull_batch_size: i32,
    /// Cached messages per queue above which its pulls pause (Java: 1000).
    pub pull_threshold_for_queue: usize,
    /// Cached bytes per queue above which its pulls pause (Java: 100 MiB).
    pub pull_threshold_size_for_queue_bytes: u64,
    /// Concurrent mode: largest offset span cached in a queue before its pulls pause
    /// (Java: 2000).
    pub consume_concurrently_max_span: i64,
    /// How long the broker may hold a pull with nothing to return (Java: 15 s).
    pub broker_suspend_max: Duration,
    /// Budget of one long-polling pull RPC (Java: 30 s).
    pub pull_timeout: Duration,
    /// Full rebalance period (Java: 20 s); membership changes also trigger one.
    pub rebalance_interval: Duration,
    /// How often offsets are committed to the broker (Java: 5 s).
    pub persist_offset_interval: Duration,
    /// Orderly mode: how often queue locks are renewed (Java: 20 s).
    pub lock_renew_interval: Duration,
    /// Orderly mode: a lock not renewed for this long is treated as lost (Java: 30 s).
    pub lock_max_live: Duration,
    /// Orderly mode: pause before retrying a queue whose listener asked to suspend
    /// (Java: 1 s).
    pub suspend_current_queue_time: Duration,
    /// Reconsumes before a message goes to the DLQ; `None` = Java's default (16 for
    /// concurrent listeners, unlimited for orderly ones).
    pub max_reconsume_times: Option<i32>,
    /// Broadcasting: folder of the local offset file; default
    /// `$HOME/.rocketmq_offsets/<client id>` (Java's layout). The file is
    /// `<dir>/<group>/offsets.json`.
    pub offset_store_dir: Option<PathBuf>,
    /// How long shutdown waits for running listener calls (their offsets are then
    /// committed).
    pub await_termination: Duration,
    /// Queues are divided by this client (Java's default, `true`), or by the broker
    /// (QUERY_ASSIGNMENT, `false`), which also says per queue whether to pull or POP
    /// (the group's mode, set with SET_MESSAGE_REQUEST_MODE / `setConsumeMode`).
    /// Orderly listeners and broadcasting always divide here, as in Java.
    pub client_rebalance: bool,
    /// POP mode: messages popped and not yet acked per queue above which its POPs pause
    /// (Java: 96).
    pub pop_threshold_for_queue: usize,
    /// POP mode: messages asked for in one POP (Java: 32, at most 32).
    pub pop_batch_nums: u32,
    /// POP mode: how long a popped message stays hidden from the group before the
    /// broker delivers it again (Java: 60 s). A listener call still running when it runs
    /// out is not acked: the message comes again.
    pub pop_invisible_time: Duration,
}

impl PushConsumerConfig {
    /// Java's defaults for `group`.
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            message_model: MessageModel::Clustering,
            consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
            consume_timestamp_ms: None,
            allocate_strategy: AllocateStrategy::Averagely,
            consume_thread_min: 20,
            consume_thread_max: 20,
            consume_message_batch_max_size: 1,
            pull_batch_size: 32,
            pull_threshold_for_queue: 1000,
            pull_threshold_size_for_queue_bytes: 100 * 1024 * 1024,
            consume_concurrently_max_span: 2000,
            broker_suspend_max: Duration::from_secs(15),
            pull_timeout: Duration::from_secs(30),
            rebalance_interval: Duration::from_secs(20),
            persist_offset_interval: Duration::from_secs(5),
            lock_renew_interval: Duration::from_secs(20),
            lock_max_live: Duration::from_secs(30),
            suspend_current_queue_time: Duration::from_secs(1),
            max_reconsume_times: None,
            offset_store_dir: None,
            await_termination: Duration::from_secs(10),
            client_rebalance: true,
            pop_threshold_for_queue: 96,
            pop_batch_nums: 32,
            pop_invisible_time: Duration::from_secs(60),
        }
    }

    /// The group's retry topic, `%RETRY%group`.
    pub fn retry_topic(&self) -> String {
        format!("{RETRY_PREFIX}{}", self.group)
    }

    /// The reconsume limit in effect for concurrent (`orderly == false`) or orderly
    /// listeners.
    pub fn max_reconsume(&self, orderly: bool) -> i32 {
        match self.max_reconsume_times {
            Some(n) if n >= 0 => n,
            _ if orderly => i32::MAX,
            _ => 16,
        }
    }
}

/// POP mode: how long a message whose listener asked to reconsume later stays hidden,
/// by its reconsume times (Java's `popDelayLevel`: 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m
/// 10m 20m 30m 1h 2h; the last for every later attempt).
pub const POP_DELAY_LEVEL_SECS: [u64; 16] = [
    10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// Prefix of retry topics.
pub const RETRY_PREFIX: &str = "%RETRY%";

impl crate::consumer::pull_loop::LongPolling for PushConsumerConfig {
    fn long_polling(&self) -> (&str, i32, Duration) {
        (&self.group, self.pull_batch_size, self.broker_suspend_max)
    }
}
