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
    /// Revived messages go to `%RETRY%<group>+<topic>` instead of `%RETRY%<group>_<topic>`
    /// (`enableRetryTopicV2`; the V1 name cannot be parsed back when names hold `_`).
    pub enable_retry_topic_v2: bool,
    /// With V2 on, POPs still read what is left in the V1 retry topic
    /// (`retrieveMessageFromPopRetryTopicV1`).
    pub retrieve_message_from_pop_retry_topic_v1: bool,
    /// QUERY_ASSIGNMENT's mode for a group that never set one: `PULL` or `POP`
    /// (`defaultMessageRequestMode`).
    pub default_message_request_mode: String,
    /// The `popShareQueueNum` that goes with a default POP mode
    /// (`defaultPopShareQueueNum`; ≤ 0: every member reads every queue).
    pub default_pop_share_queue_num: i32,
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
            enable_retry_topic_v2: r.get("enableRetryTopicV2", false)?,
            retrieve_message_from_pop_retry_topic_v1: r
                .get("retrieveMessageFromPopRetryTopicV1", true)?,
            default_message_request_mode: r.get_checked(
                "defaultMessageRequestMode",
                "PULL".to_owned(),
                |m: &String| {
                    if m == "PULL" || m == "POP" {
                        Ok(())
                    } else {
                        Err("PULL or POP".to_owned())
                    }
                },
            )?,
            default_pop_share_queue_num: r.get("defaultPopShareQueueNum", -1i32)?,
        })
    }

    /// Where the revive service puts a group's redeliveries of `topic`.
    pub fn retry_topic(&self, topic: &str, group: &str) -> String {
        tern_shell::pop::pop_retry_topic(topic, group, self.enable_retry_topic_v2)
    }

    /// The retry topics a POP of `topic` reads: the one redeliveries go to, and with V2
    /// on the V1 one too while `retrieveMessageFromPopRetryTopicV1` (RocketMQ reads one
    /// of the two at random per POP; reading both never leaves the old one behind).
    pub fn retry_topics_read(&self, topic: &str, group: &str) -> Vec<String> {
        let mut out = vec![self.retry_topic(topic, group)];
        if self.enable_retry_topic_v2 && self.retrieve_message_from_pop_retry_topic_v1 {
            out.push(tern_shell::pop::pop_retry_topic(topic, group, false));
        }
        out
    }
}
