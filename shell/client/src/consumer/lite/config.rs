//! Lite pull consumer settings, with `DefaultLitePullConsumer`'s defaults.

use std::time::Duration;

use tern_shell::body::ConsumeFromWhere;

use crate::consumer::allocate::AllocateStrategy;

/// Settings of one lite pull consumer.
#[derive(Debug, Clone)]
pub struct LitePullConsumerConfig {
    /// Consumer group (clustering: the group's members share the queues).
    pub group: String,
    /// Where a queue starts when the group has no offset for it (Java: last offset).
    pub consume_from_where: ConsumeFromWhere,
    /// For [`ConsumeFromWhere::ConsumeFromTimestamp`]: ms since the epoch
    /// (Java: half an hour before start).
    pub consume_timestamp_ms: Option<i64>,
    /// How subscribed topics' queues are divided among the group's members.
    pub allocate_strategy: AllocateStrategy,
    /// Messages asked for in one pull, and so at most returned by one poll (Java: 10).
    pub pull_batch_size: i32,
    /// Buffered messages of all queues above which pulls pause (Java: 10000).
    pub pull_threshold_for_all: usize,
    /// Buffered messages of one queue above which its pulls pause (Java: 1000).
    pub pull_threshold_for_queue: usize,
    /// Commit the polled offsets every `auto_commit_interval` (Java: true).
    pub auto_commit: bool,
    /// Period of the automatic commit (Java: 5 s).
    pub auto_commit_interval: Duration,
    /// How long the broker may hold a pull with nothing to return (Java: 20 s).
    pub broker_suspend_max: Duration,
    /// Budget of one long-polling pull RPC (Java: 30 s).
    pub pull_timeout: Duration,
    /// Full rebalance period of subscriptions (Java: 20 s); membership changes also
    /// trigger one.
    pub rebalance_interval: Duration,
}

impl LitePullConsumerConfig {
    /// Java's defaults for `group`.
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
            consume_timestamp_ms: None,
            allocate_strategy: AllocateStrategy::Averagely,
            pull_batch_size: 10,
            pull_threshold_for_all: 10_000,
            pull_threshold_for_queue: 1000,
            auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            broker_suspend_max: Duration::from_secs(20),
            pull_timeout: Duration::from_secs(30),
            rebalance_interval: Duration::from_secs(20),
        }
    }
}

impl crate::consumer::pull_loop::LongPolling for LitePullConsumerConfig {
    fn long_polling(&self) -> (&str, i32, Duration) {
        (&self.group, self.pull_batch_size, self.broker_suspend_max)
    }
}
