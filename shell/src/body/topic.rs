//! Topic, subscription-group and offset tables: REGISTER_BROKER bodies, admin bodies and
//! the config files that share their JSON shape (§3.2, §3.3, §6.6).

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{BodyError, NumKeyMap, from_json, lenient, to_json};
use crate::code::version;

/// Version stamp of a table; the name server compares it to skip unchanged registrations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DataVersion {
    /// 5.x state version.
    #[serde(deserialize_with = "lenient::i64")]
    pub state_version: i64,
    /// When the table last changed (ms).
    #[serde(deserialize_with = "lenient::i64")]
    pub timestamp: i64,
    /// Change counter.
    #[serde(deserialize_with = "lenient::i64")]
    pub counter: i64,
}

/// A topic's configuration on a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfig {
    /// Topic name.
    #[serde(deserialize_with = "lenient::string")]
    pub topic_name: String,
    /// Readable queues.
    #[serde(deserialize_with = "lenient::i32")]
    pub read_queue_nums: i32,
    /// Writable queues.
    #[serde(deserialize_with = "lenient::i32")]
    pub write_queue_nums: i32,
    /// Perm bits.
    #[serde(deserialize_with = "lenient::i32")]
    pub perm: i32,
    /// `SINGLE_TAG` or `MULTI_TAG`.
    #[serde(deserialize_with = "lenient::string")]
    pub topic_filter_type: String,
    /// Topic sysFlag.
    #[serde(deserialize_with = "lenient::i32")]
    pub topic_sys_flag: i32,
    /// Ordered topic.
    #[serde(deserialize_with = "lenient::bool")]
    pub order: bool,
    /// 5.x attributes.
    pub attributes: BTreeMap<String, String>,
}

impl Default for TopicConfig {
    /// Java's class defaults: 16/16 queues, perm 6, SINGLE_TAG.
    fn default() -> Self {
        Self {
            topic_name: String::new(),
            read_queue_nums: 16,
            write_queue_nums: 16,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }
}

impl TopicConfig {
    /// The compressed-register text form: `name read write perm filterType [attributesJSON]`.
    pub fn encode_text(&self) -> String {
        let attrs = String::from_utf8(to_json(&self.attributes)).unwrap_or_default();
        format!(
            "{} {} {} {} {} {}",
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.topic_filter_type,
            attrs
        )
    }

    /// Parses the text form (4.x writes 5 parts, 5.x 6).
    pub fn decode_text(text: &str) -> Result<Self, BodyError> {
        let parts: Vec<&str> = text.split(' ').collect();
        let [name, read, write, perm, filter, rest @ ..] = parts.as_slice() else {
            return Err(BodyError::Binary("topic config text has too few parts"));
        };
        let int = |s: &str| {
            s.parse::<i32>()
                .map_err(|_| BodyError::Binary("topic config number"))
        };
        let attributes = match rest.first() {
            Some(json) if !json.is_empty() => from_json(json.as_bytes())?,
            _ => BTreeMap::new(),
        };
        Ok(Self {
            topic_name: (*name).to_owned(),
            read_queue_nums: int(read)?,
            write_queue_nums: int(write)?,
            perm: int(perm)?,
            topic_filter_type: (*filter).to_owned(),
            attributes,
            ..Self::default()
        })
    }
}

/// GET_ALL_TOPIC_CONFIG body, topics.json, and the heart of RegisterBrokerBody.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicConfigSerializeWrapper {
    /// topic → config.
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// Version of the table.
    pub data_version: DataVersion,
    /// 5.x static-topic mapping info; kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_info_map: Option<Value>,
    /// 5.x static-topic mapping detail; kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_detail_map: Option<Value>,
    /// 5.x mapping data version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping_data_version: Option<DataVersion>,
}

/// REGISTER_BROKER body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RegisterBrokerBody {
    /// Topics of the broker.
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
    /// Filter servers (unused).
    #[serde(deserialize_with = "lenient::vec")]
    pub filter_server_list: Vec<String>,
}

/// Most topics a compressed register body may declare (bounds allocation from the count).
const MAX_COMPRESSED_TOPICS: usize = 1_000_000;
/// Most bytes a compressed register body may inflate to.
const MAX_INFLATED_BYTES: u64 = 64 * 1024 * 1024;

impl RegisterBrokerBody {
    /// Decodes the body; `compressed` is the header flag, `request_version` the sender's.
    pub fn decode(bytes: &[u8], compressed: bool, request_version: i32) -> Result<Self, BodyError> {
        if !compressed {
            return from_json(bytes);
        }
        let mut inflated = Vec::new();
        flate2::read::ZlibDecoder::new(bytes)
            .take(MAX_INFLATED_BYTES + 1)
            .read_to_end(&mut inflated)
            .map_err(|_| BodyError::Binary("register body is not zlib"))?;
        if inflated.len() as u64 > MAX_INFLATED_BYTES {
            return Err(BodyError::Binary("register body inflates too large"));
        }
        let mut r = Chunks { buf: &inflated };
        let data_version: DataVersion = from_json(r.chunk()?)?;
        let count = r.count()?;
        let mut table = BTreeMap::new();
        for _ in 0..count {
            let text = std::str::from_utf8(r.chunk()?)
                .map_err(|_| BodyError::Binary("topic config not UTF-8"))?;
            let tc = TopicConfig::decode_text(text)?;
            table.insert(tc.topic_name.clone(), tc);
        }
        let filter_server_list: Vec<String> = from_json(r.chunk()?)?;
        let mut mapping = None;
        if request_version >= version::V5_0_0 && !r.buf.is_empty() {
            let n = r.count()?;
            let mut items = Vec::new();
            for _ in 0..n {
                items.push(from_json::<Value>(r.chunk()?)?);
            }
            mapping = Some(Value::Array(items));
        }
        Ok(Self {
            topic_config_serialize_wrapper: TopicConfigSerializeWrapper {
                topic_config_table: table,
                data_version,
                topic_queue_mapping_info_map: mapping,
                ..Default::default()
            },
            filter_server_list,
        })
    }

    /// Encodes the compressed form (zlib, best compression) as a broker of `version` would.
    pub fn encode_compressed(&self, request_version: i32) -> Vec<u8> {
        let mut raw = Vec::new();
        let chunk = |raw: &mut Vec<u8>, b: &[u8]| {
            raw.extend_from_slice(&(b.len() as i32).to_be_bytes());
            raw.extend_from_slice(b);
        };
        let w = &self.topic_config_serialize_wrapper;
        chunk(&mut raw, &to_json(&w.data_version));
        raw.extend_from_slice(&(w.topic_config_table.len() as i32).to_be_bytes());
        for tc in w.topic_config_table.values() {
            chunk(&mut raw, tc.encode_text().as_bytes());
        }
        chunk(&mut raw, &to_json(&self.filter_server_list));
        if request_version >= version::V5_0_0 {
            raw.extend_from_slice(&0i32.to_be_bytes());
        }
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        // Writing to a Vec cannot fail.
        let _ = enc.write_all(&raw);
        enc.finish().unwrap_or_default()
    }
}

/// Length-prefixed chunks of the compressed register body.
struct Chunks<'a> {
    buf: &'a [u8],
}

impl<'a> Chunks<'a> {
    fn int(&mut self) -> Result<i32, BodyError> {
        let (head, rest) = self
            .buf
            .split_at_checked(4)
            .ok_or(BodyError::Binary("truncated"))?;
        self.buf = rest;
        let mut a = [0u8; 4];
        a.copy_from_slice(head);
        Ok(i32::from_be_bytes(a))
    }

    fn count(&mut self) -> Result<usize, BodyError> {
        usize::try_from(self.int()?)
            .ok()
            .filter(|n| *n <= MAX_COMPRESSED_TOPICS)
            .ok_or(BodyError::Binary("bad count"))
    }

    fn chunk(&mut self) -> Result<&'a [u8], BodyError> {
        let n = usize::try_from(self.int()?).map_err(|_| BodyError::Binary("negative length"))?;
        let (head, rest) = self
            .buf
            .split_at_checked(n)
            .ok_or(BodyError::Binary("truncated"))?;
        self.buf = rest;
        Ok(head)
    }
}

/// A consumer group's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupConfig {
    /// Group name.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
    /// Consumption allowed.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_enable: bool,
    /// May start from the min offset.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_from_min_enable: bool,
    /// Broadcasting allowed.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_broadcast_enable: bool,
    /// Queues of the retry topic.
    #[serde(deserialize_with = "lenient::i32")]
    pub retry_queue_nums: i32,
    /// Reconsumes before the DLQ.
    #[serde(deserialize_with = "lenient::i32")]
    pub retry_max_times: i32,
    /// Preferred broker id.
    #[serde(deserialize_with = "lenient::i64")]
    pub broker_id: i64,
    /// Broker to use when consumption is slow.
    #[serde(deserialize_with = "lenient::i64")]
    pub which_broker_when_consume_slowly: i64,
    /// Send NOTIFY_CONSUMER_IDS_CHANGED on membership change.
    #[serde(deserialize_with = "lenient::bool")]
    pub notify_consumer_ids_changed_enable: bool,
    /// 5.x.
    #[serde(deserialize_with = "lenient::bool")]
    pub consume_message_orderly: bool,
    /// 5.x.
    #[serde(deserialize_with = "lenient::i32")]
    pub group_sys_flag: i32,
    /// 5.x.
    #[serde(deserialize_with = "lenient::i32")]
    pub consume_timeout_minute: i32,
    /// 5.x retry policy, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_retry_policy: Option<Value>,
    /// 5.x, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_data_set: Option<Value>,
    /// 5.x attributes.
    pub attributes: BTreeMap<String, String>,
}

impl Default for SubscriptionGroupConfig {
    /// Java's class defaults.
    fn default() -> Self {
        Self {
            group_name: String::new(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            retry_queue_nums: 1,
            retry_max_times: 16,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            consume_message_orderly: false,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            group_retry_policy: None,
            subscription_data_set: None,
            attributes: BTreeMap::new(),
        }
    }
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG body and subscriptionGroup.json.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionGroupWrapper {
    /// group → config.
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
    /// 5.x forbidden table, kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forbidden_table: Option<Value>,
    /// Version of the table.
    pub data_version: DataVersion,
}

/// GET_ALL_CONSUMER_OFFSET body and consumerOffset.json: `topic@group` → queue → offset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerOffsetSerializeWrapper {
    /// `topic@group` → {queueId: offset} with unquoted keys.
    pub offset_table: BTreeMap<String, NumKeyMap<i64>>,
    /// 5.x version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<DataVersion>,
}

/// GET_ALL_DELAY_OFFSET body and delayOffset.json: delay level → SCHEDULE queue offset.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DelayOffsetSerializeWrapper {
    /// level → offset with unquoted keys.
    pub offset_table: NumKeyMap<i64>,
    /// Version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<DataVersion>,
}

/// The name server's kvConfig.json: namespace → key → value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KvConfigSerializeWrapper {
    /// namespace → (key → value).
    pub config_table: BTreeMap<String, BTreeMap<String, String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> RegisterBrokerBody {
        let mut b = RegisterBrokerBody::default();
        let w = &mut b.topic_config_serialize_wrapper;
        w.data_version = DataVersion {
            state_version: 0,
            timestamp: 1700,
            counter: 3,
        };
        for name in ["TBW102", "orders"] {
            let tc = TopicConfig {
                topic_name: name.into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                ..Default::default()
            };
            w.topic_config_table.insert(name.into(), tc);
        }
        b
    }

    #[test]
    fn compressed_register_body_round_trips_for_4x_and_5x() {
        for v in [version::V4_9_4, version::CURRENT] {
            let bytes = body().encode_compressed(v);
            assert_eq!(
                &bytes[..1],
                &[0x78],
                "zlib header, as java.util.zip.Deflater writes"
            );
            let back = RegisterBrokerBody::decode(&bytes, true, v).unwrap();
            assert_eq!(
                back.topic_config_serialize_wrapper.topic_config_table,
                body().topic_config_serialize_wrapper.topic_config_table
            );
            assert_eq!(back.topic_config_serialize_wrapper.data_version.counter, 3);
        }
    }

    #[test]
    fn java_4x_topic_text_without_attributes_decodes() {
        let tc = TopicConfig::decode_text("T 8 8 6 SINGLE_TAG").unwrap();
        assert_eq!((tc.read_queue_nums, tc.perm), (8, 6));
        assert!(TopicConfig::decode_text("T 8").is_err());
    }

    #[test]
    fn garbage_compressed_body_is_an_error() {
        assert!(RegisterBrokerBody::decode(b"not zlib", true, 0).is_err());
    }

    #[test]
    fn consumer_offsets_are_written_with_unquoted_queue_ids() {
        let mut w = ConsumerOffsetSerializeWrapper::default();
        w.offset_table.insert(
            "t@g".into(),
            NumKeyMap([(0, 12), (1, 7)].into_iter().collect()),
        );
        assert_eq!(to_json(&w), br#"{"offsetTable":{"t@g":{0:12,1:7}}}"#);
        assert_eq!(
            from_json::<ConsumerOffsetSerializeWrapper>(&to_json(&w)).unwrap(),
            w
        );
    }

    #[test]
    fn java_topics_json_decodes() {
        let text = br#"{"dataVersion":{"counter":2,"timestamp":17},"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}"#;
        let w: TopicConfigSerializeWrapper = from_json(text).unwrap();
        assert_eq!(w.topic_config_table["T"].write_queue_nums, 4);
        assert_eq!(w.data_version.counter, 2);
    }

    #[test]
    fn java_data_version_with_state_version_round_trips() {
        // fastjson's DataVersion in a 5.x controller-mode register body: the master epoch
        // (`nextVersion(epoch)`) as stateVersion, long enough to need i64.
        let text = br#"{"counter":7,"stateVersion":3,"timestamp":1700000000123}"#;
        let v: DataVersion = from_json(text).unwrap();
        assert_eq!(
            v,
            DataVersion {
                state_version: 3,
                timestamp: 1_700_000_000_123,
                counter: 7,
            }
        );
        let back: Value = serde_json::from_slice(&to_json(&v)).unwrap();
        let java: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(back, java);
        let big = br#"{"counter":1,"stateVersion":4294967296,"timestamp":1}"#;
        assert_eq!(
            from_json::<DataVersion>(big).unwrap().state_version,
            1 << 32
        );
        // 4.x writes no stateVersion: 0, as Java's field default.
        let old: DataVersion = from_json(br#"{"counter":7,"timestamp":1}"#).unwrap();
        assert_eq!(old.state_version, 0);
        // Inside the register body the name server decodes.
        let body = br#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":7,"stateVersion":3,"timestamp":1700000000123},"topicConfigTable":{}}}"#;
        let b = RegisterBrokerBody::decode(body, false, version::CURRENT).unwrap();
        assert_eq!(b.topic_config_serialize_wrapper.data_version, v);
    }
}
