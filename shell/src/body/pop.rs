//! POP consumption's JSON bodies (docs/design/pop.md §1): BATCH_ACK_MESSAGE's acks,
//! the message-request-mode requests and QUERY_ASSIGNMENT.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::pop::{MAX_CK_MESSAGES, RETRY_NORMAL, RETRY_V1, RETRY_V2};

/// Longest bit set accepted in a BatchAck (bytes; bit i = offset `so + i`).
const MAX_BITSET_BYTES: usize = 1024;

/// One entry of a BATCH_ACK_MESSAGE body (`BatchAck`; short names written, long ones
/// accepted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BatchAck {
    /// Consumer group.
    #[serde(rename = "c", alias = "consumerGroup")]
    pub consumer_group: String,
    /// The original topic (the retry flag names the real one).
    #[serde(rename = "t", alias = "topic")]
    pub topic: String,
    /// Retry flag "0", "1" or "2".
    #[serde(rename = "r", alias = "retry")]
    pub retry: String,
    /// Checkpoint start offset.
    #[serde(rename = "so", alias = "startOffset")]
    pub start_offset: i64,
    /// Queue.
    #[serde(rename = "q", alias = "queueId")]
    pub queue_id: i32,
    /// Revive queue.
    #[serde(rename = "rq", alias = "reviveQueueId")]
    pub revive_queue_id: i32,
    /// Pop time.
    #[serde(rename = "pt", alias = "popTime")]
    pub pop_time: i64,
    /// Invisible time.
    #[serde(rename = "it", alias = "invisibleTime")]
    pub invisible_time: i64,
    /// Base64 of `java.util.BitSet.toByteArray()`: bit i acks offset `so + i`.
    #[serde(rename = "b", alias = "bitSet")]
    pub bit_set: String,
}

impl BatchAck {
    /// The acked queue offsets (at most 32).
    pub fn offsets(&self) -> Result<Vec<i64>, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.bit_set.trim())
            .map_err(|e| format!("bit set is not Base64: {e}"))?;
        if bytes.len() > MAX_BITSET_BYTES {
            return Err("bit set too long".into());
        }
        let mut out = Vec::new();
        for (i, b) in bytes.iter().enumerate() {
            for bit in 0..8 {
                if b & (1 << bit) != 0 {
                    let o = self
                        .start_offset
                        .checked_add((i * 8 + bit) as i64)
                        .ok_or("bit set runs past the largest offset")?;
                    out.push(o);
                }
            }
        }
        if out.len() > MAX_CK_MESSAGES {
            return Err("bit set acks more than 32 messages".into());
        }
        Ok(out)
    }

    /// The retry flag as a number.
    pub fn retry_flag(&self) -> Result<u8, String> {
        match self.retry.trim() {
            "0" => Ok(RETRY_NORMAL),
            "1" => Ok(RETRY_V1),
            "2" => Ok(RETRY_V2),
            r => Err(format!("retry flag {r:?} is not 0, 1 or 2")),
        }
    }
}

/// `java.util.BitSet.toByteArray()` of `bits`, Base64: what a client sends as `b`.
pub fn encode_bit_set(bits: &[usize]) -> String {
    let len = bits.iter().max().map_or(0, |m| m / 8 + 1);
    let mut bytes = vec![0u8; len];
    for b in bits {
        bytes[b / 8] |= 1 << (b % 8);
    }
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// BATCH_ACK_MESSAGE (200151) body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct BatchAckMessageRequestBody {
    /// Broker the acks are for.
    #[serde(default)]
    pub broker_name: String,
    /// The acks.
    #[serde(default)]
    pub acks: Vec<BatchAck>,
}

/// `SetMessageRequestModeRequestBody`: one group's way of consuming one topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMessageRequestModeRequestBody {
    /// Topic.
    pub topic: String,
    /// Consumer group.
    pub consumer_group: String,
    /// `PULL` or `POP`.
    #[serde(default = "pull_mode")]
    pub mode: String,
    /// Queues shared per client in POP mode (≤ 0: every queue, queueId -1).
    #[serde(default)]
    pub pop_share_queue_num: i32,
}

fn pull_mode() -> String {
    "PULL".into()
}

/// GET_ALL_MESSAGE_REQUEST_MODE (402) body (`MessageRequestModeSerializeWrapper`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct MessageRequestModeSerializeWrapper {
    /// topic → group → mode.
    pub message_request_mode_map:
        BTreeMap<String, BTreeMap<String, SetMessageRequestModeRequestBody>>,
}

/// QUERY_ASSIGNMENT (400) body: which queues should this client consume, and how?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentRequestBody {
    /// Topic.
    pub topic: String,
    /// Consumer group.
    pub consumer_group: String,
    /// The asking client's id.
    pub client_id: String,
    /// `AVG` or `AVG_BY_CIRCLE`, the strategies the broker serves.
    #[serde(default)]
    pub strategy_name: String,
    /// `CLUSTERING` or `BROADCASTING`.
    #[serde(default)]
    pub message_model: String,
}

/// One assigned queue (`MessageQueueAssignment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueAssignment {
    /// The queue (queue id -1: every queue of that broker, POP).
    pub message_queue: super::MessageQueue,
    /// `PULL` or `POP`.
    pub mode: String,
    /// Unused by RocketMQ's broker; sent empty.
    #[serde(default)]
    pub attachments: BTreeMap<String, String>,
}

/// QUERY_ASSIGNMENT answer; `None` (JSON null) tells the client to keep what it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct QueryAssignmentResponseBody {
    /// The assignments.
    pub message_queue_assignments: Option<Vec<MessageQueueAssignment>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_sets_are_javas_byte_arrays_in_base64() {
        assert_eq!(encode_bit_set(&[0, 1, 2]), "Bw==");
        let b = BatchAck {
            start_offset: 5,
            bit_set: "Bw==".into(),
            ..BatchAck::default()
        };
        assert_eq!(b.offsets().unwrap(), vec![5, 6, 7]);
        let far = BatchAck {
            start_offset: 0,
            bit_set: encode_bit_set(&[40]),
            ..BatchAck::default()
        };
        assert_eq!(far.offsets().unwrap(), vec![40]);
        let bad = BatchAck {
            bit_set: "!!".into(),
            ..BatchAck::default()
        };
        assert!(bad.offsets().is_err());
        let body: BatchAckMessageRequestBody = crate::body::from_json(
            br#"{"brokerName":"b","acks":[{"consumerGroup":"G","topic":"T","retry":"0","startOffset":5,"queueId":0,"reviveQueueId":1,"popTime":9,"invisibleTime":3000,"bitSet":"Aw=="}]}"#,
        )
        .unwrap();
        assert_eq!(body.acks[0].offsets().unwrap(), vec![5, 6]);
    }
}
