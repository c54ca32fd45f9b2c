//! POP's configuration keys, with RocketMQ's names and defaults (`BrokerConfig.java`),
//! plus Tern's own (named so).

use std::time::Duration;

use tern_shell::config::{ConfigError, ConfigReader, in_range};

/// POP settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PopConfig {
    /// Queues of the revive topic (`reviveQueueNum`).
    pub revive_queue_num: i32,
    /// How often the revive service reads the revive queues (`reviveInterval`).
    pub revive_interval: Duration,
    /// Percent of POPs that read the pop retry topic first (`popFromRetryProbability`).
    pub pop_from_retry_probability: u32,
    /// Held POPs per queue key before POLLING_FULL (`popPollingSize`).
    pub pop_polling_size: usize,
    /// Held POPs in all before POLLING_FULL (`maxPopPollingSize`).
    pub max_pop_polling_size: usize,
    /// Tern's: CKs the revive service keeps waiting in memory; past it, it stops reading
    /// the revive queues until some are due (`popMaxPendingCk`).
    pub pop_max_pending_ck: usize,
    /// Tern's: a revived copy whose reconsumeTimes would pass the group's
    /// `retryMaxTimes` (16) goes to `%DLQ%<group>` instead of the retry topic
    /// (`popReviveToDlq`). RocketMQ's broker never does this; its clients send such a
    /// message back (CONSUMER_SEND_MSG_BACK), which Tern serves too.
    pub pop_revive_to_dlq: bool,
}

impl PopConfig {
    /// Reads the keys.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            revive_queue_num: r.get_checked("reviveQueueNum", 8i32, in_range(1, 64))?,
            revive_interval: Duration::from_millis(r.get_checked(
                "reviveInterval",
                1_000u64,
                in_range(10, 60_000),
            )?),
            pop_from_retry_probability: r.get_checked(
                "popFromRetryProbability",
                20u32,
                in_range(0, 100),
            )?,
            pop_polling_size: r.get_checked("popPollingSize", 1024usize, in_range(1, 100_000))?,
            max_pop_polling_size: r.get_checked(
                "maxPopPollingSize",
                100_000usize,
                in_range(1, 1_000_000),
            )?,
            pop_max_pending_ck: r.get_checked(
                "popMaxPendingCk",
                200_000usize,
                in_range(1, 10_000_000),
            )?,
            pop_revive_to_dlq: r.get("popReviveToDlq", true)?,
        })
    }
}
