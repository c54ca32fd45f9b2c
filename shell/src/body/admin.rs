//! Bodies of the broker's read-only and maintenance admin codes (AdminBrokerProcessor):
//! who consumes a topic, consume time spans, stats windows, the broker-wide consume
//! stats, consume-queue listings.

use serde::{Deserialize, Serialize};

use super::{ConsumeStats, MessageQueue, SubscriptionData, lenient};

/// QUERY_TOPIC_CONSUME_BY_WHO body: the groups that consume a topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GroupList {
    /// Group names (a set in Java).
    #[serde(deserialize_with = "lenient::vec")]
    pub group_list: Vec<String>,
}

/// One queue's times for a group (`QueueTimeSpan`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueTimeSpan {
    /// The queue.
    pub message_queue: MessageQueue,
    /// Store time of its oldest message.
    #[serde(deserialize_with = "lenient::i64")]
    pub min_time_stamp: i64,
    /// Store time of its newest message.
    #[serde(deserialize_with = "lenient::i64")]
    pub max_time_stamp: i64,
    /// Store time of the last message the group consumed.
    #[serde(deserialize_with = "lenient::i64")]
    pub consume_time_stamp: i64,
    /// How long the next unconsumed message has waited, ms (0 when caught up).
    #[serde(deserialize_with = "lenient::i64")]
    pub delay_time: i64,
}

/// QUERY_CONSUME_TIME_SPAN body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueryConsumeTimeSpanBody {
    /// One per write queue.
    #[serde(deserialize_with = "lenient::vec")]
    pub consume_time_span_set: Vec<QueueTimeSpan>,
}

/// One window of a stats item (`BrokerStatsItem`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerStatsItem {
    /// What was added in the window.
    #[serde(deserialize_with = "lenient::i64")]
    pub sum: i64,
    /// `sum` per second over the window.
    pub tps: f64,
    /// `sum` per recorded event in the window.
    pub avgpt: f64,
}

/// VIEW_BROKER_STATS_DATA body: the last minute, hour and day of one stats item.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerStatsData {
    /// The last minute.
    pub stats_minute: BrokerStatsItem,
    /// The last hour.
    pub stats_hour: BrokerStatsItem,
    /// The last day.
    pub stats_day: BrokerStatsItem,
}

/// GET_BROKER_CONSUME_STATS body (`ConsumeStatsList`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumeStatsList {
    /// One map per subscription group: group → the stats of each topic it consumes.
    #[serde(deserialize_with = "lenient::vec")]
    pub consume_stats_list: Vec<std::collections::BTreeMap<String, Vec<ConsumeStats>>>,
    /// The broker answering.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_addr: String,
    /// Messages not yet consumed, over every group and queue.
    #[serde(deserialize_with = "lenient::i64")]
    pub total_diff: i64,
    /// Messages pulled but not yet committed, over every group and queue.
    #[serde(deserialize_with = "lenient::i64")]
    pub total_inflight_diff: i64,
}

/// One consume-queue entry (`ConsumeQueueData`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumeQueueData {
    /// Commit-log offset of the record.
    #[serde(deserialize_with = "lenient::i64")]
    pub physic_offset: i64,
    /// Record size.
    #[serde(deserialize_with = "lenient::i32")]
    pub physic_size: i32,
    /// Tag hash code.
    #[serde(deserialize_with = "lenient::i64")]
    pub tags_code: i64,
    /// Extended unit as JSON (RocketMQ's consume-queue extension; Tern has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extend_data_json: Option<String>,
    /// Filter bit map of the extended unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bit_map: Option<String>,
    /// Whether the group's subscription accepts the entry.
    #[serde(deserialize_with = "lenient::bool")]
    pub eval: bool,
    /// Why an entry could not be evaluated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
}

/// QUERY_CONSUME_QUEUE body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueryConsumeQueueResponseBody {
    /// The group's subscription to the topic, when a group was named and is online.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_data: Option<SubscriptionData>,
    /// The filter data, or why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_data: Option<String>,
    /// The entries listed.
    #[serde(deserialize_with = "lenient::vec")]
    pub queue_data: Vec<ConsumeQueueData>,
    /// The queue's max offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub max_queue_index: i64,
    /// The queue's min offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub min_queue_index: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{from_json, to_json};

    #[test]
    fn java_stats_data_decodes() {
        let text = br#"{"statsDay":{"avgpt":1.0,"sum":30,"tps":0.0003},"statsHour":{"avgpt":1.0,"sum":30,"tps":0.008},"statsMinute":{"avgpt":1.0,"sum":3,"tps":0.05}}"#;
        let d: BrokerStatsData = from_json(text).unwrap();
        assert_eq!(d.stats_day.sum, 30);
        assert_eq!(d.stats_minute.sum, 3);
        assert_eq!(from_json::<BrokerStatsData>(&to_json(&d)).unwrap(), d);
    }

    #[test]
    fn consume_queue_body_omits_absent_fields_like_fastjson() {
        let body = QueryConsumeQueueResponseBody {
            queue_data: vec![ConsumeQueueData {
                physic_offset: 7,
                physic_size: 100,
                tags_code: 3,
                ..Default::default()
            }],
            max_queue_index: 1,
            ..Default::default()
        };
        let text = String::from_utf8(to_json(&body)).unwrap();
        assert!(!text.contains("subscriptionData"), "{text}");
        assert!(text.contains(r#""physicOffset":7"#), "{text}");
        assert_eq!(
            from_json::<QueryConsumeQueueResponseBody>(text.as_bytes()).unwrap(),
            body
        );
    }
}
