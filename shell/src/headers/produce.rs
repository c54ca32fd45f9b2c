//! Produce-side headers: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320),
//! RECALL_MESSAGE (370), and the reply path: SEND_REPLY_MESSAGE (324/325) uses the send
//! header, PUSH_REPLY_MESSAGE_TO_CLIENT (326) its own.

use super::{FromExtFields, HeaderError, ext_header};
use crate::code::RequestCode;
use crate::ext_fields::CompactString;
use crate::frame::RemotingCommand;

ext_header! {
    /// SEND_MESSAGE request (`SendMessageRequestHeader.java`), the long-name form.
    pub struct SendMessageRequestHeader {
        /// Producer group; transaction check-backs go to this group.
        pub producer_group: String = "producerGroup",
        /// Target topic.
        pub topic: String = "topic",
        /// Template topic for auto-creation, normally `TBW102`.
        pub default_topic: String = "defaultTopic",
        /// Queue count of an auto-created topic.
        pub default_topic_queue_nums: i32 = "defaultTopicQueueNums",
        /// Target queue; < 0 lets the broker pick.
        pub queue_id: i32 = "queueId",
        /// Message sysFlag (§4.2): compression, transaction type, ...
        pub sys_flag: i32 = "sysFlag",
        /// Producer's timestamp in ms.
        pub born_timestamp: i64 = "bornTimestamp",
        /// User flag, stored as is.
        pub flag: i32 = "flag",
        /// Properties string `k\u1v\u2...`.
        pub properties: Option<String> = "properties",
        /// How often this message was consumed before (retries).
        pub reconsume_times: Option<i32> = "reconsumeTimes",
        /// Unit mode (unused by Tern, kept for round-trips).
        pub unit_mode: Option<bool> = "unitMode",
        /// True when the body is a batch (§4.5); the C++ client sends "1".
        pub batch: Option<bool> = "batch",
        /// Per-message retry limit.
        pub max_reconsume_times: Option<i32> = "maxReconsumeTimes",
    }
}

ext_header! {
    /// SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request: the same fields with one-letter names,
    /// which Java sends to save header bytes.
    pub struct SendMessageRequestHeaderV2 {
        /// producerGroup.
        pub a: String = "a",
        /// topic.
        pub b: String = "b",
        /// defaultTopic.
        pub c: String = "c",
        /// defaultTopicQueueNums.
        pub d: i32 = "d",
        /// queueId.
        pub e: i32 = "e",
        /// sysFlag.
        pub f: i32 = "f",
        /// bornTimestamp.
        pub g: i64 = "g",
        /// flag.
        pub h: i32 = "h",
        /// properties.
        pub i: Option<String> = "i",
        /// reconsumeTimes.
        pub j: Option<i32> = "j",
        /// unitMode.
        pub k: Option<bool> = "k",
        /// maxReconsumeTimes.
        pub l: Option<i32> = "l",
        /// batch.
        pub m: Option<bool> = "m",
        /// brokerName (5.x).
        pub n: Option<String> = "n",
    }
}

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v2: SendMessageRequestHeaderV2) -> Self {
        Self {
            producer_group: v2.a,
            topic: v2.b,
            default_topic: v2.c,
            default_topic_queue_nums: v2.d,
            queue_id: v2.e,
            sys_flag: v2.f,
            born_timestamp: v2.g,
            flag: v2.h,
            properties: v2.i,
            reconsume_times: v2.j,
            unit_mode: v2.k,
            batch: v2.m,
            max_reconsume_times: v2.l,
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    fn from(h: SendMessageRequestHeader) -> Self {
        Self {
            a: h.producer_group,
            b: h.topic,
            c: h.default_topic,
            d: h.default_topic_queue_nums,
            e: h.queue_id,
            f: h.sys_flag,
            g: h.born_timestamp,
            h: h.flag,
            i: h.properties,
            j: h.reconsume_times,
            k: h.unit_mode,
            l: h.max_reconsume_times,
            m: h.batch,
            n: None,
        }
    }
}

impl SendMessageRequestHeader {
    /// Decodes the send header of any send request: long names for SEND_MESSAGE (10), letters
    /// for SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320, which also implies `batch`).
    pub fn from_command(cmd: &RemotingCommand) -> Result<Self, HeaderError> {
        match RequestCode::from_raw(cmd.code) {
            RequestCode::SendMessageV2 | RequestCode::SendReplyMessageV2 => {
                SendMessageRequestHeaderV2::from_ext_fields(&cmd.ext_fields).map(Into::into)
            }
            RequestCode::SendBatchMessage => {
                let mut h: Self =
                    SendMessageRequestHeaderV2::from_ext_fields(&cmd.ext_fields)?.into();
                h.batch = Some(true);
                Ok(h)
            }
            _ => Self::from_ext_fields(&cmd.ext_fields),
        }
    }

    /// True when the body is a batch (§4.5).
    pub fn is_batch(&self) -> bool {
        self.batch.unwrap_or(false)
    }
}

ext_header! {
    /// Response to any send request. Java reads `MSG_REGION`/`TRACE_ON` unconditionally
    /// (pitfall §7.4), so the broker fills them through [`SendMessageResponseHeader::new`].
    pub struct SendMessageResponseHeader {
        /// Offset msgId(s) (§5.1), comma-joined for batches.
        pub msg_id: String = "msgId",
        /// Queue the message went to.
        pub queue_id: i32 = "queueId",
        /// Queue offset of the (first) message.
        pub queue_offset: i64 = "queueOffset",
        /// The UNIQ_KEY of a transactional half message.
        pub transaction_id: Option<String> = "transactionId",
        /// 5.x: batch's unique id.
        pub batch_uniq_id: Option<String> = "batchUniqId",
        /// 5.x: handle to recall a delayed message.
        pub recall_handle: Option<String> = "recallHandle",
        /// Region of the broker; Java clients read it from every send response.
        pub msg_region: Option<CompactString> = "MSG_REGION",
        /// Whether message tracing is on; Java clients read it from every send response.
        pub trace_on: Option<CompactString> = "TRACE_ON",
    }
}

impl SendMessageResponseHeader {
    /// A send response with the extFields every Java client expects.
    pub fn new(msg_id: String, queue_id: i32, queue_offset: i64) -> Self {
        Self {
            msg_id,
            queue_id,
            queue_offset,
            msg_region: Some(CompactString::const_new("DefaultRegion")),
            trace_on: Some(CompactString::const_new("true")),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ExtFields;
    use crate::headers::ToExtFields;

    #[test]
    fn v2_letters_decode_into_long_names() {
        let cmd = RemotingCommand::request_code(RequestCode::SendMessageV2)
            .with_ext("a", "pg")
            .with_ext("b", "T")
            .with_ext("c", "TBW102")
            .with_ext("d", "4")
            .with_ext("e", "1")
            .with_ext("f", "0")
            .with_ext("g", "1700000000000")
            .with_ext("h", "0")
            .with_ext("i", "TAGS\u{1}a\u{2}")
            .with_ext("m", "false");
        let h = SendMessageRequestHeader::from_command(&cmd).unwrap();
        assert_eq!(h.producer_group, "pg");
        assert_eq!(h.topic, "T");
        assert_eq!(h.queue_id, 1);
        assert_eq!(h.born_timestamp, 1_700_000_000_000);
        assert_eq!(h.properties.as_deref(), Some("TAGS\u{1}a\u{2}"));
        assert!(!h.is_batch());
    }

    #[test]
    fn batch_code_implies_batch_flag() {
        let v2 = SendMessageRequestHeaderV2 {
            a: "g".into(),
            b: "t".into(),
            ..Default::default()
        };
        let cmd = RemotingCommand::request(RequestCode::SendBatchMessage, &v2);
        assert!(
            SendMessageRequestHeader::from_command(&cmd)
                .unwrap()
                .is_batch()
        );
    }

    #[test]
    fn send_response_always_carries_region_and_trace() {
        let mut ext = ExtFields::new();
        SendMessageResponseHeader::new("ID".into(), 2, 9).to_ext_fields(&mut ext);
        assert_eq!(ext["MSG_REGION"], "DefaultRegion");
        assert_eq!(ext["TRACE_ON"], "true");
        assert_eq!(ext["queueOffset"], "9");
    }
}

ext_header! {
    /// RECALL_MESSAGE request (5.3.2, `RecallMessageRequestHeader.java`): cancels a timer
    /// message not yet delivered.
    pub struct RecallMessageRequestHeader {
        /// The producer's group.
        pub producer_group: Option<String> = "producerGroup",
        /// The message's topic.
        pub topic: String = "topic",
        /// The handle its send answered with.
        pub recall_handle: String = "recallHandle",
    }
}

ext_header! {
    /// RECALL_MESSAGE response.
    pub struct RecallMessageResponseHeader {
        /// The recalled message's id (its UNIQ_KEY).
        pub msg_id: String = "msgId",
    }
}

ext_header! {
    /// PUSH_REPLY_MESSAGE_TO_CLIENT request (broker→requester, `ReplyMessageRequestHeader`):
    /// the replier's send header plus where and when the reply was received.
    pub struct ReplyMessageRequestHeader {
        /// The replier's producer group.
        pub producer_group: String = "producerGroup",
        /// The reply topic (`<cluster>_REPLY_TOPIC`).
        pub topic: String = "topic",
        /// Template topic of the replier's send.
        pub default_topic: String = "defaultTopic",
        /// Queue count of the template.
        pub default_topic_queue_nums: i32 = "defaultTopicQueueNums",
        /// Queue the replier chose.
        pub queue_id: i32 = "queueId",
        /// Record flags (compression of the body among them).
        pub sys_flag: i32 = "sysFlag",
        /// When the replier sent it, ms.
        pub born_timestamp: i64 = "bornTimestamp",
        /// Application flag.
        pub flag: i32 = "flag",
        /// The reply's properties string (CORRELATION_ID among them).
        pub properties: Option<String> = "properties",
        /// Reconsume times.
        pub reconsume_times: Option<i32> = "reconsumeTimes",
        /// Unit mode.
        pub unit_mode: Option<bool> = "unitMode",
        /// The replier's address.
        pub born_host: String = "bornHost",
        /// The broker's address.
        pub store_host: String = "storeHost",
        /// When the broker took the reply, ms.
        pub store_timestamp: i64 = "storeTimestamp",
    }
}
