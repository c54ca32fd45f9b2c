//! RocketMQ's system topic names (`TopicValidator`), for the broker that creates them and
//! for tools that tell them apart from users' topics.

/// RocketMQ's system topics (`TopicValidator`'s set), whatever a broker created.
pub const SYSTEM_TOPICS: [&str; 10] = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "CHECKPOINT_TOPIC",
];

/// Prefix of every other system topic (revive logs, the timer topic).
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";

/// `TopicValidator.isSystemTopic` without a broker's own extra names.
pub fn is_system_topic(topic: &str) -> bool {
    SYSTEM_TOPICS.contains(&topic) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
}
