//! Routing bodies: TopicRouteData, ClusterInfo, TopicList, KVTable (§3.2).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{KeyStyle, NumKeyMap, lenient, to_json_with};
use crate::code::version;

/// Route of a topic: which brokers hold its queues (GET_ROUTEINFO_BY_TOPIC body).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicRouteData {
    /// `"brokerName:queueNum;..."` for ordered topics; usually absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_topic_conf: Option<String>,
    /// Queue counts and perms per broker.
    #[serde(deserialize_with = "lenient::vec")]
    pub queue_datas: Vec<QueueData>,
    /// Addresses per broker name.
    #[serde(deserialize_with = "lenient::vec")]
    pub broker_datas: Vec<BrokerData>,
    /// Filter servers per broker address; Java name servers always send `{}`.
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// 5.x static topics; kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_queue_mapping_by_broker: Option<Value>,
}

impl TopicRouteData {
    /// Encodes for a requester of `client_version`: quoted map keys iff version ≥ 401 or
    /// the request asked for standard JSON (pitfall §7.5: Go splits the raw text).
    pub fn encode_for(&self, client_version: i32, accept_standard_json_only: bool) -> Vec<u8> {
        let style = if client_version >= version::V4_9_4 || accept_standard_json_only {
            KeyStyle::Standard
        } else {
            KeyStyle::Fastjson
        };
        to_json_with(self, style)
    }
}

/// Queue layout of a topic on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(from = "QueueDataWire")]
pub struct QueueData {
    /// Broker holding the queues.
    pub broker_name: String,
    /// Readable queues (consumers).
    pub read_queue_nums: i32,
    /// Writable queues (producers).
    pub write_queue_nums: i32,
    /// Perm bits (4 read, 2 write, 1 inherit).
    pub perm: i32,
    /// Topic sysFlag (`topicSynFlag` in ≤ 4.8, still what the Go client reads).
    pub topic_sys_flag: i32,
}

/// QueueData as received: either spelling of the sysFlag, both tolerated.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct QueueDataWire {
    #[serde(deserialize_with = "lenient::string")]
    broker_name: String,
    #[serde(deserialize_with = "lenient::i32")]
    read_queue_nums: i32,
    #[serde(deserialize_with = "lenient::i32")]
    write_queue_nums: i32,
    #[serde(deserialize_with = "lenient::i32")]
    perm: i32,
    topic_sys_flag: Option<Value>,
    topic_syn_flag: Option<Value>,
}

impl From<QueueDataWire> for QueueData {
    fn from(w: QueueDataWire) -> Self {
        let flag = w
            .topic_sys_flag
            .or(w.topic_syn_flag)
            .and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0);
        Self {
            broker_name: w.broker_name,
            read_queue_nums: w.read_queue_nums,
            write_queue_nums: w.write_queue_nums,
            perm: w.perm,
            topic_sys_flag: flag,
        }
    }
}

/// Written with both spellings of the sysFlag: Go reads `topicSynFlag`, Java `topicSysFlag`.
impl Serialize for QueueData {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("QueueData", 6)?;
        st.serialize_field("brokerName", &self.broker_name)?;
        st.serialize_field("perm", &self.perm)?;
        st.serialize_field("readQueueNums", &self.read_queue_nums)?;
        st.serialize_field("topicSynFlag", &self.topic_sys_flag)?;
        st.serialize_field("topicSysFlag", &self.topic_sys_flag)?;
        st.serialize_field("writeQueueNums", &self.write_queue_nums)?;
        st.end()
    }
}

/// Addresses of one broker group (master id 0, slaves > 0).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerData {
    /// Cluster name.
    #[serde(deserialize_with = "lenient::string")]
    pub cluster: String,
    /// Broker name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// brokerId → `ip:port`; numeric keys, quoted or not depending on the reader.
    pub broker_addrs: NumKeyMap<String>,
    /// 5.x zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
    /// 5.x.
    #[serde(deserialize_with = "lenient::bool")]
    pub enable_acting_master: bool,
}

impl BrokerData {
    /// The master's address (broker id 0), which producers send to.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.0.get(&0).map(String::as_str)
    }
}

/// GET_BROKER_CLUSTER_INFO body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    /// brokerName → addresses.
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// clusterName → broker names.
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

/// GET_ALL_TOPIC_LIST_FROM_NAMESERVER / GET_TOPICS_BY_CLUSTER body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TopicList {
    /// Topic names.
    #[serde(deserialize_with = "lenient::vec")]
    pub topic_list: Vec<String>,
    /// Broker the list came from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_addr: Option<String>,
}

/// KVTable: string → string (runtime info, order-topic config).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KvTable {
    /// The entries.
    pub table: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::from_json;

    fn route() -> TopicRouteData {
        TopicRouteData {
            queue_datas: vec![QueueData {
                broker_name: "b".into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![BrokerData {
                cluster: "c".into(),
                broker_name: "b".into(),
                broker_addrs: NumKeyMap([(0, "127.0.0.1:10911".to_string())].into_iter().collect()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn route_keys_are_unquoted_for_old_clients_and_quoted_for_new() {
        let old = String::from_utf8(route().encode_for(317, false)).unwrap();
        assert!(
            old.contains(r#""brokerAddrs":{0:"127.0.0.1:10911"}"#),
            "{old}"
        );
        let new = String::from_utf8(route().encode_for(401, false)).unwrap();
        assert!(
            new.contains(r#""brokerAddrs":{"0":"127.0.0.1:10911"}"#),
            "{new}"
        );
        assert!(serde_json::from_str::<Value>(&new).is_ok());
        assert!(new.contains(r#""filterServerTable":{}"#));
        let forced = String::from_utf8(route().encode_for(63, true)).unwrap();
        assert_eq!(forced, new);
    }

    #[test]
    fn route_decodes_from_either_form() {
        for bytes in [route().encode_for(0, false), route().encode_for(479, false)] {
            let back: TopicRouteData = from_json(&bytes).unwrap();
            assert_eq!(back, route());
            assert_eq!(back.broker_datas[0].master_addr(), Some("127.0.0.1:10911"));
        }
    }

    #[test]
    fn java_cluster_info_with_unquoted_keys_decodes() {
        let text = br#"{"brokerAddrTable":{"b":{"brokerAddrs":{0:"1.2.3.4:10911"},"brokerName":"b","cluster":"c"}},"clusterAddrTable":{"c":["b"]}}"#;
        let info: ClusterInfo = from_json(text).unwrap();
        assert_eq!(
            info.broker_addr_table["b"].master_addr(),
            Some("1.2.3.4:10911")
        );
        assert_eq!(info.cluster_addr_table["c"], vec!["b".to_string()]);
    }
}
