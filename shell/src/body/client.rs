//! Client bodies: heartbeats, subscriptions, consumer/producer connections (§3.2).
//!
//! The C++ client sends enums as ordinals, `subVersion` as a string, omits `unitMode`,
//! `classFilterMode` and `expressionType`, and fills `codeSet` with `atoi(tag)` (zeros):
//! every field here is lenient and defaulted, and brokers must recompute tag codes.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{java_enum, lenient};
use crate::code::LanguageCode;

java_enum! {
    /// Pull (`CONSUME_ACTIVELY`) or push (`CONSUME_PASSIVELY`) consumer.
    ConsumeType {
        /// Pull consumer.
        ConsumeActively = "CONSUME_ACTIVELY",
        /// Push consumer (the default).
        #[default]
        ConsumePassively = "CONSUME_PASSIVELY",
        /// 5.x POP consumer.
        ConsumePop = "CONSUME_POP",
    }
}

java_enum! {
    /// Clustering (queues shared in a group) or broadcasting (every consumer gets all).
    MessageModel {
        /// Every consumer gets every message.
        Broadcasting = "BROADCASTING",
        /// Queues are divided among the group (the default).
        #[default]
        Clustering = "CLUSTERING",
    }
}

java_enum! {
    /// Where a new consumer group starts (§6.10).
    ConsumeFromWhere {
        /// Default: the end of the queue.
        #[default]
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// Deprecated.
        ConsumeFromLastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// Deprecated.
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// Deprecated.
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        /// The start of the queue.
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        /// The first message stored after a timestamp.
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
}

impl Serialize for LanguageCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for LanguageCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => LanguageCode::from_name(&s),
            serde_json::Value::Number(n) => n
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .map(LanguageCode::from_raw)
                .unwrap_or(LanguageCode::OtherLanguage),
            _ => LanguageCode::OtherLanguage,
        })
    }
}

/// HEART_BEAT body: who the client is and which groups it runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HeartbeatData {
    /// `clientIP@instanceName[@unitName]`; note Java's capital "ID".
    #[serde(rename = "clientID", deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Producer groups in this client.
    #[serde(deserialize_with = "lenient::vec")]
    pub producer_data_set: Vec<ProducerData>,
    /// Consumer groups in this client.
    #[serde(deserialize_with = "lenient::vec")]
    pub consumer_data_set: Vec<ConsumerData>,
    /// 5.x: ≠ 0 ⇒ heartbeat V2 (subscriptions may be omitted when unchanged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_fingerprint: Option<i32>,
    /// 5.x: subscriptions omitted because unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub without_sub: Option<bool>,
}

/// A producer group in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProducerData {
    /// Producer group name.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
}

/// A consumer group in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerData {
    /// Consumer group name.
    #[serde(deserialize_with = "lenient::string")]
    pub group_name: String,
    /// Push or pull.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Start position for a new group.
    pub consume_from_where: ConsumeFromWhere,
    /// What the group subscribes to.
    #[serde(deserialize_with = "lenient::vec")]
    pub subscription_data_set: Vec<SubscriptionData>,
    /// Unit mode (unused).
    #[serde(deserialize_with = "lenient::bool")]
    pub unit_mode: bool,
}

/// One subscription: topic + tag or SQL expression.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SubscriptionData {
    /// Topic.
    #[serde(deserialize_with = "lenient::string")]
    pub topic: String,
    /// `*`, `tagA || tagB`, or SQL92.
    #[serde(deserialize_with = "lenient::string")]
    pub sub_string: String,
    /// The tags of a TAG expression, trimmed.
    #[serde(deserialize_with = "lenient::vec")]
    pub tags_set: Vec<String>,
    /// Java `String.hashCode()` of each tag (zeros from the C++ client: recompute).
    #[serde(deserialize_with = "lenient::vec")]
    pub code_set: Vec<i32>,
    /// Version of the subscription (ms timestamp); a string from the C++ client.
    #[serde(deserialize_with = "lenient::i64")]
    pub sub_version: i64,
    /// `TAG` (default) or `SQL92`.
    #[serde(deserialize_with = "lenient::string")]
    pub expression_type: String,
    /// Class filter mode (unsupported).
    #[serde(deserialize_with = "lenient::bool")]
    pub class_filter_mode: bool,
}

impl SubscriptionData {
    /// The expression type with the default applied: missing means `TAG`.
    pub fn expression_type_or_tag(&self) -> &str {
        if self.expression_type.is_empty() {
            "TAG"
        } else {
            &self.expression_type
        }
    }

    /// Splits a TAG expression into trimmed tags; `*` or empty means all (empty list).
    pub fn parse_tags(sub_string: &str) -> Vec<String> {
        let s = sub_string.trim();
        if s.is_empty() || s == "*" {
            return Vec::new();
        }
        s.split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// CHECK_CLIENT_CONFIG body: a consumer asks whether the broker accepts one of its
/// subscriptions (Java's consumers send it at start for every non-TAG subscription).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CheckClientRequestBody {
    /// The asking client.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// Its consumer group.
    #[serde(deserialize_with = "lenient::string")]
    pub group: String,
    /// The subscription to check; absent means nothing to check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscription_data: Option<SubscriptionData>,
}

/// One client connection as reported to admin tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Connection {
    /// Client id.
    #[serde(deserialize_with = "lenient::string")]
    pub client_id: String,
    /// `ip:port` of the client.
    #[serde(deserialize_with = "lenient::string")]
    pub client_addr: String,
    /// Client language.
    pub language: LanguageCode,
    /// Client version ordinal.
    #[serde(deserialize_with = "lenient::i32")]
    pub version: i32,
}

impl Default for Connection {
    fn default() -> Self {
        Self {
            client_id: String::new(),
            client_addr: String::new(),
            language: LanguageCode::Java,
            version: 0,
        }
    }
}

/// GET_CONSUMER_CONNECTION_LIST body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerConnection {
    /// Connected clients of the group.
    #[serde(deserialize_with = "lenient::vec")]
    pub connection_set: Vec<Connection>,
    /// topic → subscription.
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    /// Push or pull.
    pub consume_type: ConsumeType,
    /// Clustering or broadcasting.
    pub message_model: MessageModel,
    /// Start position.
    pub consume_from_where: ConsumeFromWhere,
}

/// GET_PRODUCER_CONNECTION_LIST body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ProducerConnection {
    /// Connected clients of the group.
    #[serde(deserialize_with = "lenient::vec")]
    pub connection_set: Vec<Connection>,
}

/// GET_CONSUMER_LIST_BY_GROUP response body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GetConsumerListByGroupResponseBody {
    /// Client ids of the group's consumers.
    #[serde(deserialize_with = "lenient::vec")]
    pub consumer_id_list: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{from_json, to_json};

    #[test]
    fn cpp_heartbeat_with_ordinals_and_string_sub_version_decodes() {
        let text = br#"{"clientID":"127.0.0.1@1234","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,"groupName":"g","messageModel":1,"subscriptionDataSet":[{"codeSet":[0],"subString":"TagA || TagB","subVersion":"1732874400123","tagsSet":["TagA","TagB"],"topic":"T"},{"subString":"*","subVersion":"1","topic":"%RETRY%g"}]}],"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}"#;
        let hb: HeartbeatData = from_json(text).unwrap();
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, ConsumeType::ConsumePassively);
        assert_eq!(c.message_model, MessageModel::Clustering);
        assert_eq!(
            c.consume_from_where,
            ConsumeFromWhere::ConsumeFromLastOffset
        );
        assert_eq!(c.subscription_data_set[0].sub_version, 1_732_874_400_123);
        assert_eq!(c.subscription_data_set[0].expression_type_or_tag(), "TAG");
        assert!(c.subscription_data_set[1].tags_set.is_empty());
    }

    #[test]
    fn heartbeat_is_written_with_enum_names() {
        let hb = HeartbeatData {
            client_id: "c".into(),
            consumer_data_set: vec![ConsumerData {
                group_name: "g".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = String::from_utf8(to_json(&hb)).unwrap();
        assert!(
            text.contains(r#""consumeType":"CONSUME_PASSIVELY""#),
            "{text}"
        );
        assert!(text.contains(r#""clientID":"c""#));
        assert_eq!(from_json::<HeartbeatData>(text.as_bytes()).unwrap(), hb);
    }

    #[test]
    fn tag_expressions_are_trimmed() {
        assert_eq!(
            SubscriptionData::parse_tags(" TagA || TagB "),
            vec!["TagA", "TagB"]
        );
        assert!(SubscriptionData::parse_tags("*").is_empty());
    }

    #[test]
    fn java_check_client_body_decodes() {
        let text = br#"{"clientId":"10.0.0.1@9","group":"g","namespace":null,"subscriptionData":{"classFilterMode":false,"codeSet":[],"expressionType":"SQL92","subString":"a > 5","subVersion":1732874400123,"tagsSet":[],"topic":"T"}}"#;
        let b: CheckClientRequestBody = from_json(text).unwrap();
        assert_eq!(b.group, "g");
        let sub = b.subscription_data.unwrap();
        assert_eq!(
            (sub.expression_type.as_str(), sub.sub_string.as_str()),
            ("SQL92", "a > 5")
        );
        let empty: CheckClientRequestBody = from_json(b"{}").unwrap();
        assert!(empty.subscription_data.is_none());
    }
}
