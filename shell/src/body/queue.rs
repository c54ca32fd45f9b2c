//! Bodies keyed by message queue: locks, consume stats, topic stats (§3.2).
//!
//! fastjson writes `Map<MessageQueue, X>` with JSON objects as keys; [`QueueKeyMap`]
//! reads and writes that form.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{QueueKeyMap, lenient};

/// A queue: topic + broker + queue id. Ordered like Java's `compareTo` (topic, broker, id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MessageQueue {
    /// Topic.
    #[serde(deserialize_with = "lenient::string")]
    pub topic: String,
    /// Broker name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// Queue id.
    #[serde(deserialize_with = "lenient::i32")]
    pub queue_id: i32,
}

impl MessageQueue {
    /// Queue `queue_id` of `topic` on broker `broker_name`.
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: i32) -> Self {
        Self {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }
}

/// LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request body (the C++ client omits `onlyThisBroker`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockBatchRequestBody {
    /// Group asking for the locks.
    #[serde(deserialize_with = "lenient::string")]
    pub consumer_group: String,
    /// Client asking.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Only lock on this broker (5.x proxy use).
    #[serde(deserialize_with = "lenient::bool")]
    pub only_this_broker: bool,
    /// Queues to lock.
    #[serde(deserialize_with = "lenient::vec")]
    pub mq_set: Vec<MessageQueue>,
}

/// UNLOCK_BATCH_MQ body: same fields as the lock request.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// LOCK_BATCH_MQ response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LockBatchResponseBody {
    /// Queues now locked by the requester.
    #[serde(rename = "lockOKMQSet", deserialize_with = "lenient::vec")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

/// Per-queue progress of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OffsetWrapper {
    /// Queue max offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub broker_offset: i64,
    /// Group's committed offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub consumer_offset: i64,
    /// 5.x: pull offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub pull_offset: i64,
    /// Store time of the last consumed message.
    #[serde(deserialize_with = "lenient::i64")]
    pub last_timestamp: i64,
}

/// GET_CONSUME_STATS body.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumeStats {
    /// queue → progress, with object keys.
    pub offset_table: QueueKeyMap<OffsetWrapper>,
    /// Consume rate.
    pub consume_tps: f64,
}

/// Offsets of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicOffset {
    /// Queue min offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub min_offset: i64,
    /// Queue max offset.
    #[serde(deserialize_with = "lenient::i64")]
    pub max_offset: i64,
    /// Store time of the last message.
    #[serde(deserialize_with = "lenient::i64")]
    pub last_update_timestamp: i64,
}

/// GET_TOPIC_STATS_INFO body.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicStatsTable {
    /// queue → offsets, with object keys.
    pub offset_table: QueueKeyMap<TopicOffset>,
    /// 5.x: put rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_put_tps: Option<f64>,
}

/// Body of reset-offset requests (`ResetOffsetBody`): queue → offset.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResetOffsetBody {
    /// queue → new offset, with object keys.
    pub offset_table: QueueKeyMap<i64>,
}

/// The reset-offset body RocketMQ's C++ client reads (`ResetOffsetBodyForC`): a list,
/// because its JSON parser cannot read fastjson's object keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResetOffsetBodyForC {
    /// One entry per queue.
    pub offset_table: Vec<MessageQueueForC>,
}

/// One queue and its new offset (`MessageQueueForC`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MessageQueueForC {
    /// Broker name.
    pub broker_name: String,
    /// New offset.
    pub offset: i64,
    /// Queue id.
    pub queue_id: i32,
    /// Topic.
    pub topic: String,
}

/// CONSUME_MESSAGE_DIRECTLY answer (`ConsumeMessageDirectlyResult`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumeMessageDirectlyResult {
    /// Consumed by an orderly listener.
    pub order: bool,
    /// Offsets are committed automatically (always, for concurrent listeners).
    pub auto_commit: bool,
    /// `CR_SUCCESS`, `CR_LATER`, `CR_ROLLBACK`, `CR_COMMIT`, `CR_THROW_EXCEPTION` or
    /// `CR_RETURN_NULL`.
    pub consume_result: String,
    /// Why, for CR_THROW_EXCEPTION.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remark: Option<String>,
    /// How long the listener took, ms.
    pub spent_time_mills: i64,
}

/// GET_CONSUMER_STATUS_FROM_CLIENT / INVOKE_BROKER_TO_GET_CONSUMER_STATUS answer
/// (`GetConsumerStatusBody`): a client's offsets, or every client's by client id.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GetConsumerStatusBody {
    /// queue → the client's offset (one client's answer).
    pub message_queue_table: QueueKeyMap<i64>,
    /// client id → queue → offset (the broker's answer).
    pub consumer_table: BTreeMap<String, QueueKeyMap<i64>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{from_json, to_json};

    fn mq(q: i32) -> MessageQueue {
        MessageQueue {
            topic: "t".into(),
            broker_name: "b".into(),
            queue_id: q,
        }
    }

    #[test]
    fn consume_stats_use_object_keys_like_fastjson() {
        let mut stats = ConsumeStats::default();
        stats.offset_table.0.insert(
            mq(0),
            OffsetWrapper {
                broker_offset: 5,
                consumer_offset: 3,
                ..Default::default()
            },
        );
        let text = String::from_utf8(to_json(&stats)).unwrap();
        assert_eq!(
            text,
            r#"{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":5,"consumerOffset":3,"lastTimestamp":0,"pullOffset":0}}}"#
        );
        assert_eq!(from_json::<ConsumeStats>(text.as_bytes()).unwrap(), stats);
    }

    #[test]
    fn java_topic_stats_decode() {
        let text = br#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:{"lastUpdateTimestamp":7,"maxOffset":9,"minOffset":0}}}"#;
        let t: TopicStatsTable = from_json(text).unwrap();
        assert_eq!(t.offset_table.0[&mq(1)].max_offset, 9);
    }

    #[test]
    fn cpp_lock_body_without_only_this_broker_decodes() {
        let text = br#"{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","brokerName":"b","queueId":2}]}"#;
        let body: LockBatchRequestBody = from_json(text).unwrap();
        assert_eq!(body.mq_set, vec![mq(2)]);
        assert!(!body.only_this_broker);
        let resp = LockBatchResponseBody {
            lock_ok_mq_set: vec![mq(2)],
        };
        assert!(
            String::from_utf8(to_json(&resp))
                .unwrap()
                .starts_with(r#"{"lockOKMQSet":["#)
        );
    }
}
