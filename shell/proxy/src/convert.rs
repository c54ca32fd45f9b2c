//! Messages between the 5.x wire form (`apache.rocketmq.v2.Message`) and the stored form
//! (topic, properties, body), as RocketMQ's proxy converts them (`GrpcConverter`,
//! `SendMessageActivity.buildMessage`), with its checks and their codes. A message sent
//! over gRPC is an ordinary record to 4.x consumers and the other way round.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;

use md5::{Digest as _, Md5};
use prost_types::{Duration as PbDuration, Timestamp};
use tern_shell::message::{Message, MessageExt, property, split_keys};

use crate::config::ProxySettings;
use crate::pb::{self, Code, DigestType, Encoding, MessageType, Status};
use crate::status::status;

/// The message group's property (`__SHARDINGKEY`).
pub const SHARDING_KEY: &str = "__SHARDINGKEY";
/// The born host's property.
pub const BORN_HOST: &str = "__BORNHOST";
/// The born time's property (ms).
pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
/// The trace context's property.
pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
/// Set on records the broker moved (exempt from the type check).
const TRANSFER_FLAG: &str = "TRANSFER_FLAG";

/// Property names a user may not set (`MessageConst.STRING_HASH_SET`).
const RESERVED: [&str; 52] = [
    "TRACE_ON",
    "MSG_REGION",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES",
    "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DEL_MS",
    "TIMER_DELAY_LEVEL",
    "__BORNHOST",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "__CRC32#",
];

/// Longest transaction recovery a producer may ask for (`maxTransactionRecoverySecond`).
const MAX_TRANSACTION_RECOVERY_SECONDS: i64 = 3600;

/// A message ready for the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Topic, properties and (identity-encoded) body.
    pub message: Message,
    /// Its type, as the properties make it.
    pub kind: MessageType,
    /// Its message group (FIFO), for the queue choice.
    pub group: Option<String>,
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn bad(code: Code, message: impl Into<String>) -> Status {
    status(code, message)
}

/// Milliseconds since the epoch of `t`.
pub fn timestamp_ms(t: &Timestamp) -> i64 {
    t.seconds.saturating_mul(1000) + i64::from(t.nanos / 1_000_000)
}

/// `ms` since the epoch as a timestamp.
pub fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A protobuf duration in milliseconds (negative ones are 0).
pub fn duration_ms(d: &PbDuration) -> i64 {
    (d.seconds.saturating_mul(1000) + i64::from(d.nanos / 1_000_000)).max(0)
}

/// `d` as a protobuf duration.
pub fn duration(d: std::time::Duration) -> PbDuration {
    PbDuration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// The type a message's properties make it (`TopicMessageType.parseFromMessageProperty`).
pub fn kind_of(props: &BTreeMap<String, String>) -> MessageType {
    if props.get(property::TRAN_MSG).map(String::as_str) == Some("true") {
        MessageType::Transaction
    } else if [
        property::DELAY,
        property::TIMER_DELIVER_MS,
        property::TIMER_DELAY_SEC,
        property::TIMER_DELAY_MS,
    ]
    .iter()
    .any(|k| props.contains_key(*k))
    {
        MessageType::Delay
    } else if props.contains_key(SHARDING_KEY) {
        MessageType::Fifo
    } else {
        MessageType::Normal
    }
}

/// Whether a message of `kind` may go to a topic whose `message.type` attribute is
/// `topic_type` (absent is NORMAL; MIXED takes all).
pub fn type_accepted(kind: MessageType, topic_type: Option<&str>) -> bool {
    match topic_type.unwrap_or("NORMAL") {
        "MIXED" => true,
        t => kind.as_str_name() == t,
    }
}

/// The message types a topic whose `message.type` is `topic_type` accepts, for a route's
/// `accept_message_types`.
pub fn accepted_types(topic_type: Option<&str>) -> Vec<i32> {
    let all = [
        MessageType::Normal,
        MessageType::Fifo,
        MessageType::Delay,
        MessageType::Transaction,
    ];
    match topic_type.unwrap_or("NORMAL") {
        "MIXED" => all.iter().map(|t| *t as i32).collect(),
        t => vec![
            MessageType::from_str_name(t)
                .filter(|k| all.contains(k))
                .unwrap_or(MessageType::Unspecified) as i32,
        ],
    }
}

/// Checks a sent message and makes it a stored one. `peer` is the client's address (the
/// born host when the message names none); `now_ms` bounds the delivery time.
pub fn outgoing(
    m: &pb::Message,
    s: &ProxySettings,
    peer: SocketAddr,
    now_ms: i64,
) -> Result<Outgoing, Status> {
    let topic = m.topic.as_ref().map(|t| t.name.clone()).unwrap_or_default();
    let sys = m.system_properties.clone().unwrap_or_default();
    let body = match Encoding::try_from(sys.body_encoding).unwrap_or(Encoding::Identity) {
        Encoding::Gzip => gunzip(&m.body, s.max_message_size)
            .map_err(|e| bad(Code::MessageCorrupted, format!("body: {e}")))?,
        _ => m.body.clone(),
    };
    if body.is_empty() {
        return Err(bad(Code::MessageBodyEmpty, "message body cannot be empty"));
    }
    if body.len() > s.max_message_size {
        return Err(bad(
            Code::MessageBodyTooLarge,
            format!(
                "message body of {} bytes is over the limit of {} bytes",
                body.len(),
                s.max_message_size
            ),
        ));
    }
    let mut props = BTreeMap::new();
    let mut user_bytes = 0usize;
    if m.user_properties.len() > s.max_user_properties {
        return Err(bad(
            Code::MessagePropertiesTooLarge,
            format!("more than {} user properties", s.max_user_properties),
        ));
    }
    for (k, v) in &m.user_properties {
        if k.is_empty() || RESERVED.contains(&k.as_str()) || has_control(k) || has_control(v) {
            return Err(bad(
                Code::IllegalMessagePropertyKey,
                format!("property key {k:?} is reserved or not allowed"),
            ));
        }
        user_bytes += k.len() + v.len();
        props.insert(k.clone(), v.clone());
    }
    if let Some(tag) = &sys.tag {
        if tag.trim().is_empty() || tag.contains('|') || has_control(tag) {
            return Err(bad(
                Code::IllegalMessageTag,
                format!("tag {tag:?} is not allowed"),
            ));
        }
        user_bytes += tag.len();
        props.insert(property::TAGS.into(), tag.clone());
    }
    if !sys.keys.is_empty() {
        for k in &sys.keys {
            if k.trim().is_empty() || has_control(k) {
                return Err(bad(
                    Code::IllegalMessageKey,
                    format!("key {k:?} is not allowed"),
                ));
            }
            user_bytes += k.len();
        }
        props.insert(property::KEYS.into(), sys.keys.join(" "));
    }
    if user_bytes > s.max_user_property_bytes {
        return Err(bad(
            Code::MessagePropertiesTooLarge,
            format!(
                "user properties, tag and keys over {} bytes",
                s.max_user_property_bytes
            ),
        ));
    }
    if sys.message_id.trim().is_empty() {
        return Err(bad(Code::IllegalMessageId, "message id cannot be empty"));
    }
    props.insert(property::UNIQ_KEY.into(), sys.message_id.clone());
    if sys.lite_topic.is_some() || sys.priority.is_some() {
        return Err(bad(
            Code::MessagePropertyConflictWithType,
            "lite topics and priority messages are not supported",
        ));
    }
    let kind = MessageType::try_from(sys.message_type).unwrap_or(MessageType::Unspecified);
    let group = match &sys.message_group {
        Some(g) => {
            if g.trim().is_empty() || g.len() >= s.max_message_group || has_control(g) {
                return Err(bad(
                    Code::IllegalMessageGroup,
                    format!(
                        "message group must be 1 to {} bytes",
                        s.max_message_group - 1
                    ),
                ));
            }
            props.insert(SHARDING_KEY.into(), g.clone());
            Some(g.clone())
        }
        None => None,
    };
    if let Some(t) = &sys.delivery_timestamp {
        let at = timestamp_ms(t);
        if at - now_ms > s.max_delay.as_millis() as i64 {
            return Err(bad(
                Code::IllegalDeliveryTime,
                format!(
                    "delivery time is more than {} ms ahead",
                    s.max_delay.as_millis()
                ),
            ));
        }
        props.insert(
            property::TIMER_DELIVER_MS.into(),
            at.max(now_ms).to_string(),
        );
    }
    if kind == MessageType::Transaction {
        props.insert(property::TRAN_MSG.into(), "true".into());
        if let Some(d) = &sys.orphaned_transaction_recovery_duration {
            let secs = duration_ms(d) / 1000;
            if secs > MAX_TRANSACTION_RECOVERY_SECONDS {
                return Err(bad(
                    Code::BadRequest,
                    format!("transaction recovery over {MAX_TRANSACTION_RECOVERY_SECONDS} s"),
                ));
            }
            props.insert(
                property::CHECK_IMMUNITY_TIME_IN_SECONDS.into(),
                secs.to_string(),
            );
        }
    }
    // The proxy names each topic's producers after the topic.
    props.insert(property::PGROUP.into(), topic.clone());
    if let Some(tc) = sys.trace_context.as_ref().filter(|t| !t.is_empty()) {
        props.insert(TRACE_CONTEXT.into(), tc.clone());
    }
    let born_host = if sys.born_host.is_empty() {
        peer.ip().to_string()
    } else {
        sys.born_host.clone()
    };
    props.insert(BORN_HOST.into(), born_host);
    let born = sys.born_timestamp.as_ref().map_or(now_ms, timestamp_ms);
    props.insert(BORN_TIMESTAMP.into(), born.to_string());
    let made = kind_of(&props);
    if kind != MessageType::Unspecified && made != kind {
        return Err(bad(
            Code::MessagePropertyConflictWithType,
            format!(
                "message type {} does not match its properties ({})",
                kind.as_str_name(),
                made.as_str_name()
            ),
        ));
    }
    Ok(Outgoing {
        message: Message {
            topic,
            flag: 0,
            properties: props,
            body,
        },
        kind: made,
        group,
    })
}

/// Whether `m` may skip the type check: records the broker moved (`TRANSFER_FLAG`).
pub fn is_transfer(m: &Message) -> bool {
    m.properties.get(TRANSFER_FLAG).map(String::as_str) == Some("true")
}

fn gunzip(b: &[u8], max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(b)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| "not valid gzip".to_string())?;
    if out.len() > max {
        return Err(format!("inflates to more than {max} bytes"));
    }
    Ok(out)
}

/// MD5 of `body`, upper-case hex, as the proxy sends it (both Java and Python check it).
pub fn md5_hex(body: &[u8]) -> String {
    Md5::digest(body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// A stored message as a 5.x client receives it. `topic` is the topic asked for (a retry
/// record shows its original topic); `receipt_handle` is set for POP deliveries.
pub fn incoming(m: &MessageExt, topic: &str, receipt_handle: Option<String>) -> pb::Message {
    let p = &m.properties;
    let user_properties = p
        .iter()
        .filter(|(k, _)| !RESERVED.contains(&k.as_str()) && !is_system_only(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let delivery_timestamp = match p.get(property::TIMER_DELIVER_MS) {
        Some(v) => v.parse::<i64>().ok().map(timestamp),
        None => None,
    };
    let born_host = p
        .get(BORN_HOST)
        .cloned()
        .unwrap_or_else(|| m.born_host.ip().to_string());
    let system = pb::SystemProperties {
        tag: p.get(property::TAGS).cloned(),
        keys: p
            .get(property::KEYS)
            .map(|k| split_keys(k).map(str::to_owned).collect())
            .unwrap_or_default(),
        message_id: p
            .get(property::UNIQ_KEY)
            .cloned()
            .unwrap_or_else(|| m.offset_msg_id.clone()),
        body_digest: Some(pb::Digest {
            r#type: DigestType::Md5 as i32,
            checksum: md5_hex(&m.body),
        }),
        body_encoding: Encoding::Identity as i32,
        message_type: kind_of(p) as i32,
        born_timestamp: Some(timestamp(m.born_timestamp)),
        born_host,
        store_timestamp: Some(timestamp(m.store_timestamp)),
        store_host: m.store_host.to_string(),
        delivery_timestamp,
        receipt_handle,
        queue_id: m.queue_id,
        queue_offset: Some(m.queue_offset),
        invisible_duration: None,
        delivery_attempt: Some(m.reconsume_times.saturating_add(1)),
        message_group: p.get(SHARDING_KEY).cloned(),
        trace_context: p.get(TRACE_CONTEXT).cloned(),
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue: None,
        lite_topic: None,
        priority: None,
    };
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: topic.to_owned(),
        }),
        user_properties,
        system_properties: Some(system),
        body: m.body.clone(),
    }
}

/// Properties the broker or 4.x clients set that are not in `STRING_HASH_SET` but are no
/// user's either.
fn is_system_only(k: &str) -> bool {
    matches!(
        k,
        SHARDING_KEY
            | TRACE_CONTEXT
            | "__transactionId__"
            | "TRANSACTION_CHECK_TIMES"
            | "CHECK_IMMUNITY_TIME_IN_SECONDS"
    ) || k.starts_with("__RMQ.TRANSIENT.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(f: impl FnOnce(&mut pb::Message)) -> Result<Outgoing, Status> {
        let mut m = pb::Message {
            topic: Some(pb::Resource {
                resource_namespace: String::new(),
                name: "T".into(),
            }),
            user_properties: [("color".to_string(), "red".to_string())].into(),
            system_properties: Some(pb::SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_id: "0102FC00000001100F0B20D61D00000000".into(),
                message_type: MessageType::Normal as i32,
                born_timestamp: Some(timestamp(1_700_000_000_000)),
                ..Default::default()
            }),
            body: b"hello".to_vec(),
        };
        f(&mut m);
        outgoing(
            &m,
            &ProxySettings::default(),
            "10.0.0.7:5000".parse().unwrap(),
            1_700_000_000_500,
        )
    }

    fn code(r: Result<Outgoing, Status>) -> Code {
        Code::try_from(r.unwrap_err().code).unwrap()
    }

    #[test]
    fn a_normal_message_keeps_its_tag_keys_id_and_properties() {
        let o = sent(|_| {}).unwrap();
        let p = &o.message.properties;
        assert_eq!(p["TAGS"], "TagA");
        assert_eq!(p["KEYS"], "k1 k2");
        assert_eq!(p["UNIQ_KEY"], "0102FC00000001100F0B20D61D00000000");
        assert_eq!(p["color"], "red");
        assert_eq!(p["PGROUP"], "T");
        assert_eq!(p["__BORNHOST"], "10.0.0.7");
        assert_eq!(p["BORN_TIMESTAMP"], "1700000000000");
        assert_eq!(o.kind, MessageType::Normal);
    }

    #[test]
    fn fifo_delay_and_transaction_set_their_properties() {
        let f = sent(|m| {
            let s = m.system_properties.as_mut().unwrap();
            s.message_type = MessageType::Fifo as i32;
            s.message_group = Some("g1".into());
        })
        .unwrap();
        assert_eq!(f.message.properties[SHARDING_KEY], "g1");
        assert_eq!(f.group.as_deref(), Some("g1"));
        let d = sent(|m| {
            let s = m.system_properties.as_mut().unwrap();
            s.message_type = MessageType::Delay as i32;
            s.delivery_timestamp = Some(timestamp(1_700_000_004_000));
        })
        .unwrap();
        assert_eq!(d.message.properties["TIMER_DELIVER_MS"], "1700000004000");
        let t = sent(|m| {
            let s = m.system_properties.as_mut().unwrap();
            s.message_type = MessageType::Transaction as i32;
            s.orphaned_transaction_recovery_duration =
                Some(duration(std::time::Duration::from_secs(30)));
        })
        .unwrap();
        assert_eq!(t.message.properties["TRAN_MSG"], "true");
        assert_eq!(t.message.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"], "30");
        // A declared type the properties do not make is refused.
        assert_eq!(
            code(sent(|m| m
                .system_properties
                .as_mut()
                .unwrap()
                .message_type = MessageType::Fifo as i32)),
            Code::MessagePropertyConflictWithType
        );
    }

    #[test]
    fn bad_messages_get_the_proxys_codes() {
        assert_eq!(code(sent(|m| m.body.clear())), Code::MessageBodyEmpty);
        assert_eq!(
            code(sent(|m| m.body = vec![0; (4 << 20) + 1])),
            Code::MessageBodyTooLarge
        );
        assert_eq!(
            code(sent(
                |m| m.system_properties.as_mut().unwrap().tag = Some("a|b".into())
            )),
            Code::IllegalMessageTag
        );
        assert_eq!(
            code(sent(
                |m| m.system_properties.as_mut().unwrap().keys = vec![" ".into()]
            )),
            Code::IllegalMessageKey
        );
        assert_eq!(
            code(sent(|m| {
                m.user_properties.insert("UNIQ_KEY".into(), "x".into());
            })),
            Code::IllegalMessagePropertyKey
        );
        assert_eq!(
            code(sent(|m| m
                .system_properties
                .as_mut()
                .unwrap()
                .message_id
                .clear())),
            Code::IllegalMessageId
        );
        assert_eq!(
            code(sent(|m| {
                let s = m.system_properties.as_mut().unwrap();
                s.message_type = MessageType::Fifo as i32;
                s.message_group = Some("g".repeat(64));
            })),
            Code::IllegalMessageGroup
        );
        assert_eq!(
            code(sent(|m| {
                let s = m.system_properties.as_mut().unwrap();
                s.message_type = MessageType::Delay as i32;
                s.delivery_timestamp = Some(timestamp(1_700_000_000_500 + 86_400_001));
            })),
            Code::IllegalDeliveryTime
        );
    }

    #[test]
    fn a_gzip_body_is_stored_inflated() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&[7u8; 10_000]).unwrap();
        let zipped = gz.finish().unwrap();
        let o = sent(|m| {
            m.body = zipped;
            m.system_properties.as_mut().unwrap().body_encoding = Encoding::Gzip as i32;
        })
        .unwrap();
        assert_eq!(o.message.body, vec![7u8; 10_000]);
        assert_eq!(
            code(sent(|m| {
                m.body = b"not gzip".to_vec();
                m.system_properties.as_mut().unwrap().body_encoding = Encoding::Gzip as i32;
            })),
            Code::MessageCorrupted
        );
    }

    #[test]
    fn topic_types_accept_their_messages() {
        assert!(type_accepted(MessageType::Normal, None));
        assert!(!type_accepted(MessageType::Fifo, None));
        assert!(type_accepted(MessageType::Fifo, Some("FIFO")));
        assert!(type_accepted(MessageType::Delay, Some("MIXED")));
        assert_eq!(accepted_types(Some("MIXED")).len(), 4);
        assert_eq!(
            accepted_types(Some("DELAY")),
            vec![MessageType::Delay as i32]
        );
        assert_eq!(
            accepted_types(Some("odd")),
            vec![MessageType::Unspecified as i32]
        );
    }

    #[test]
    fn a_stored_message_reads_back_with_an_md5_digest_and_its_attempt() {
        let o = sent(|_| {}).unwrap();
        let ext = MessageExt {
            topic: "%RETRY%G".into(),
            queue_id: 1,
            queue_offset: 9,
            reconsume_times: 1,
            body: o.message.body.clone(),
            properties: o.message.properties.clone(),
            born_host: "10.0.0.7:5000".parse().unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            flag: 0,
            commit_log_offset: 4096,
            sys_flag: 0,
            born_timestamp: 1,
            store_timestamp: 2,
            prepared_transaction_offset: 0,
            body_crc: 0,
            store_size: 0,
            offset_msg_id: String::new(),
        };
        let m = incoming(&ext, "T", Some("h".into()));
        let s = m.system_properties.unwrap();
        assert_eq!(m.topic.unwrap().name, "T");
        assert_eq!(s.tag.as_deref(), Some("TagA"));
        assert_eq!(s.keys, vec!["k1", "k2"]);
        assert_eq!(s.message_id, "0102FC00000001100F0B20D61D00000000");
        assert_eq!(
            s.body_digest.unwrap().checksum,
            "5D41402ABC4B2A76B9719D911017C592"
        );
        assert_eq!(s.delivery_attempt, Some(2));
        assert_eq!(s.receipt_handle.as_deref(), Some("h"));
        assert_eq!(m.user_properties.len(), 1);
        assert_eq!(m.user_properties["color"], "red");
    }
}
