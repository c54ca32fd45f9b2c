//! Controller-mode bodies (RocketMQ 5, `remoting/.../protocol/body/`; fastjson on the
//! wire; docs/design/controller.md §3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{NumKeyMap, lenient};

/// `SyncStateSet`: the replicas that hold every acknowledged message, and its epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SyncStateSet {
    /// Controller ids of the members (Java's `Set<Long>`).
    #[serde(deserialize_with = "lenient::vec")]
    pub sync_state_set: Vec<i64>,
    /// Grows on every change.
    #[serde(deserialize_with = "lenient::i32")]
    pub sync_state_set_epoch: i32,
}

/// `BrokerMemberGroup`: a broker-set's replicas and their addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerMemberGroup {
    /// Cluster name.
    #[serde(deserialize_with = "lenient::string")]
    pub cluster: String,
    /// Broker-set name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// Controller id → remoting address.
    pub broker_addrs: NumKeyMap<String>,
}

/// CONTROLLER_ELECT_MASTER's SUCCESS body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ElectMasterResponseBody {
    /// The set's replicas (absent when the old master stays, as fastjson omits null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker_member_group: Option<BrokerMemberGroup>,
    /// The new SyncStateSet (the new master alone).
    #[serde(deserialize_with = "lenient::vec")]
    pub sync_state_set: Vec<i64>,
}

/// One term of a broker's epoch file (`EpochEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EpochEntryBody {
    /// The master epoch.
    #[serde(deserialize_with = "lenient::i32")]
    pub epoch: i32,
    /// Where the term's log starts.
    #[serde(deserialize_with = "lenient::i64")]
    pub start_offset: i64,
    /// Where it ends (the next term's start; the log's end for the last).
    #[serde(deserialize_with = "lenient::i64")]
    pub end_offset: i64,
}

/// GET_BROKER_EPOCH_CACHE's body (`EpochEntryCache`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EpochEntryCache {
    /// Cluster name.
    #[serde(deserialize_with = "lenient::string")]
    pub cluster_name: String,
    /// Broker-set name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// 0 on a master, the controller id on a slave.
    #[serde(deserialize_with = "lenient::i64")]
    pub broker_id: i64,
    /// The terms, oldest first.
    #[serde(deserialize_with = "lenient::vec")]
    pub epoch_list: Vec<EpochEntryBody>,
    /// The log's end.
    #[serde(deserialize_with = "lenient::i64")]
    pub max_offset: i64,
}

/// One replica in [`ReplicasInfo`] (`ReplicaIdentity`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaIdentity {
    /// Broker-set name.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_name: String,
    /// Controller id.
    #[serde(deserialize_with = "lenient::i64")]
    pub broker_id: i64,
    /// Remoting address.
    #[serde(deserialize_with = "lenient::string")]
    pub broker_address: String,
    /// Whether the answering controller has a live heartbeat from it.
    #[serde(deserialize_with = "lenient::bool")]
    pub alive: bool,
}

/// One broker-set in [`BrokerReplicasInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicasInfo {
    /// The master's controller id (absent when there is none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master_broker_id: Option<i64>,
    /// The master's address ("" when there is none).
    #[serde(deserialize_with = "lenient::string")]
    pub master_address: String,
    /// Master epoch.
    #[serde(deserialize_with = "lenient::i32")]
    pub master_epoch: i32,
    /// SyncStateSet epoch.
    #[serde(deserialize_with = "lenient::i32")]
    pub sync_state_set_epoch: i32,
    /// Members of the SyncStateSet.
    #[serde(deserialize_with = "lenient::vec")]
    pub in_sync_replicas: Vec<ReplicaIdentity>,
    /// The other replicas.
    #[serde(deserialize_with = "lenient::vec")]
    pub not_in_sync_replicas: Vec<ReplicaIdentity>,
}

/// CONTROLLER_GET_SYNC_STATE_DATA's body: broker-set name → replicas.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BrokerReplicasInfo {
    /// Broker-set name → its replicas.
    pub replicas_info_table: BTreeMap<String, ReplicasInfo>,
}

#[cfg(test)]
mod tests {
    use super::super::{from_json, to_json};
    use super::*;

    #[test]
    fn java_shaped_bodies_decode() {
        let sss: SyncStateSet =
            from_json(br#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#).unwrap();
        assert_eq!(sss.sync_state_set, vec![1, 2]);
        assert_eq!(sss.sync_state_set_epoch, 3);
        // fastjson writes broker ids as bare keys.
        let body: ElectMasterResponseBody = from_json(
            br#"{"brokerMemberGroup":{"brokerAddrs":{1:"127.0.0.1:30911",2:"127.0.0.1:30921"},"brokerName":"broker-a","cluster":"DefaultCluster"},"syncStateSet":[1]}"#,
        )
        .unwrap();
        assert_eq!(
            body.broker_member_group
                .as_ref()
                .unwrap()
                .broker_addrs
                .0
                .len(),
            2
        );
        assert_eq!(body.sync_state_set, vec![1]);
        let again: ElectMasterResponseBody = from_json(&to_json(&body)).unwrap();
        assert_eq!(again, body);
    }

    #[test]
    fn replicas_info_round_trips_with_java_names() {
        let mut info = BrokerReplicasInfo::default();
        info.replicas_info_table.insert(
            "broker-a".into(),
            ReplicasInfo {
                master_broker_id: Some(1),
                master_address: "127.0.0.1:30911".into(),
                master_epoch: 2,
                sync_state_set_epoch: 3,
                in_sync_replicas: vec![ReplicaIdentity {
                    broker_name: "broker-a".into(),
                    broker_id: 1,
                    broker_address: "127.0.0.1:30911".into(),
                    alive: true,
                }],
                not_in_sync_replicas: vec![],
            },
        );
        let text = String::from_utf8(to_json(&info)).unwrap();
        for name in [
            "replicasInfoTable",
            "masterBrokerId",
            "inSyncReplicas",
            "notInSyncReplicas",
            "brokerAddress",
            "alive",
        ] {
            assert!(text.contains(name), "{name} missing from {text}");
        }
        assert_eq!(
            from_json::<BrokerReplicasInfo>(text.as_bytes()).unwrap(),
            info
        );
    }
}
