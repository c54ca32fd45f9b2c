//! A RocketMQ 5 controller group (Tern's `tern-controller` or Java's): its metadata, the
//! SyncStateSet of broker-sets, manual elections and forgetting brokers, as mqadmin's
//! getControllerMetaData, getSyncStateSet, electMaster and cleanBrokerMetadata call them.
//! Leader-only requests go to the leader named by GET_METADATA_INFO on the address given.
//! Also the brokers' own view of their terms (GET_BROKER_EPOCH_CACHE, mqadmin's
//! getBrokerEpoch), asked of every replica the name servers list.

use tern_shell::body::{
    BrokerReplicasInfo, ElectMasterResponseBody, EpochEntryCache, from_json, to_json,
};
use tern_shell::headers::{
    CleanControllerBrokerDataRequestHeader, ElectMasterRequestHeader, ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
};
use tern_shell::{RemotingCommand, RequestCode};

use super::Admin;
use crate::error::{ClientError, Result};

/// What a controller node says of its group (GET_METADATA_INFO).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerMetadata {
    /// `controllerDLegerGroup`.
    pub group: Option<String>,
    /// The leader's id (`n0`), when there is one.
    pub leader_id: Option<String>,
    /// The leader's address.
    pub leader_addr: Option<String>,
    /// Whether the node asked is the leader.
    pub is_leader: bool,
    /// Every peer, `n0:host:port` each.
    pub peers: Vec<String>,
}

/// A manual election's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    /// Master id, address and epochs.
    pub header: ElectMasterResponseHeader,
    /// The set's replicas and the new SyncStateSet.
    pub body: ElectMasterResponseBody,
}

/// Which broker-sets a command covers, by the name servers' cluster info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerSets {
    /// One broker-set by name (mqadmin's `-b brokerName`).
    Named(String),
    /// Every broker-set of a cluster (`-c clusterName`).
    Cluster(String),
}

/// One replica of a broker-set, as the name servers list it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReplicaAddr {
    /// The broker-set's name.
    pub broker_name: String,
    /// Its id in the set (0 for the master).
    pub broker_id: i64,
    /// Its remoting address.
    pub addr: String,
}

/// One replica's answer to GET_BROKER_EPOCH_CACHE: its terms, or why it gave none (a
/// broker not in controller mode answers SYSTEM_ERROR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEpochs {
    /// The replica asked.
    pub replica: ReplicaAddr,
    /// What it answered.
    pub cache: Result<EpochEntryCache>,
}

impl Admin {
    /// GET_METADATA_INFO from the controller node at `addr`.
    pub async fn controller_metadata(&self, addr: &str) -> Result<ControllerMetadata> {
        let cmd = RemotingCommand::request_code(RequestCode::ControllerGetMetadataInfo);
        let resp = self.client().invoke_ok(addr, cmd).await?;
        let h: GetMetaDataResponseHeader = resp
            .decode_header()
            .map_err(|e| ClientError::Protocol(format!("GET_METADATA_INFO from {addr}: {e}")))?;
        Ok(ControllerMetadata {
            group: h.group,
            leader_id: h.controller_leader_id,
            leader_addr: h.controller_leader_address.filter(|a| !a.is_empty()),
            is_leader: h.is_leader.unwrap_or(false),
            peers: h
                .peers
                .unwrap_or_default()
                .split(';')
                .filter(|p| !p.trim().is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    /// The leader's address, as the node at `addr` knows it.
    async fn controller_leader(&self, addr: &str) -> Result<String> {
        self.controller_metadata(addr)
            .await?
            .leader_addr
            .ok_or_else(|| {
                ClientError::NotFound(format!("the controller at {addr} knows no leader"))
            })
    }

    /// CONTROLLER_GET_SYNC_STATE_DATA for `names`, from the leader.
    pub async fn sync_state_data(
        &self,
        controller: &str,
        names: &[String],
    ) -> Result<BrokerReplicasInfo> {
        let leader = self.controller_leader(controller).await?;
        let cmd = RemotingCommand::request_code(RequestCode::ControllerGetSyncStateData)
            .with_body(to_json(&names));
        let resp = self.client().invoke_ok(&leader, cmd).await?;
        from_json(&resp.body)
            .map_err(|e| ClientError::Protocol(format!("sync state data from {leader}: {e}")))
    }

    /// CONTROLLER_ELECT_MASTER designating `broker_id` (mqadmin electMaster).
    pub async fn elect_master(
        &self,
        controller: &str,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> Result<Elected> {
        let leader = self.controller_leader(controller).await?;
        let h = ElectMasterRequestHeader {
            cluster_name: Some(cluster.to_owned()),
            broker_name: broker_name.to_owned(),
            broker_id: Some(broker_id),
            designate_elect: Some(true),
            invoke_time: Some(tern_shell::runtime::now_ms()),
        };
        let cmd = RemotingCommand::request(RequestCode::ControllerElectMaster, &h);
        let resp = self.client().invoke_ok(&leader, cmd).await?;
        Ok(Elected {
            header: resp.decode_header().map_err(|e| {
                ClientError::Protocol(format!("ELECT_MASTER answer from {leader}: {e}"))
            })?,
            body: from_json(&resp.body).unwrap_or_default(),
        })
    }

    /// CLEAN_BROKER_DATA (mqadmin cleanBrokerMetadata): forget replicas `ids` (`1;2`) of
    /// `broker_name`, or the whole set.
    pub async fn clean_broker_metadata(
        &self,
        controller: &str,
        cluster: Option<&str>,
        broker_name: &str,
        ids: Option<&str>,
        clean_living: bool,
    ) -> Result<()> {
        let leader = self.controller_leader(controller).await?;
        let h = CleanControllerBrokerDataRequestHeader {
            cluster_name: cluster.map(str::to_owned),
            broker_name: broker_name.to_owned(),
            broker_controller_ids_to_clean: ids.map(str::to_owned),
            is_clean_living_broker: Some(clean_living),
            invoke_time: Some(tern_shell::runtime::now_ms()),
        };
        let cmd = RemotingCommand::request(RequestCode::CleanBrokerData, &h);
        self.client().invoke_ok(&leader, cmd).await?;
        Ok(())
    }

    /// Every master and slave address of `sets` (mqadmin's
    /// `fetchMasterAndSlaveAddrBy{BrokerName,ClusterName}`), sorted by set and id, each
    /// address once. A name the name servers do not know is an error, not an empty list.
    pub async fn replica_addrs(&self, sets: &BrokerSets) -> Result<Vec<ReplicaAddr>> {
        let info = self.cluster_info().await?;
        let names: Vec<String> = match sets {
            BrokerSets::Named(n) => {
                if !info.broker_addr_table.contains_key(n) {
                    return Err(ClientError::NotFound(format!(
                        "broker {n} not found on the name servers"
                    )));
                }
                vec![n.clone()]
            }
            BrokerSets::Cluster(c) => info.cluster_addr_table.get(c).cloned().ok_or_else(|| {
                ClientError::NotFound(format!(
                    "cluster {c} not found: make sure the specified clusterName exists \
                     or the name server connected to is correct"
                ))
            })?,
        };
        let mut out: Vec<ReplicaAddr> = names
            .iter()
            .filter_map(|n| Some((n, info.broker_addr_table.get(n)?)))
            .flat_map(|(n, b)| {
                b.broker_addrs.0.iter().map(move |(id, addr)| ReplicaAddr {
                    broker_name: n.clone(),
                    broker_id: *id,
                    addr: addr.clone(),
                })
            })
            .filter(|r| !r.addr.is_empty())
            .collect();
        out.sort();
        let mut seen = std::collections::BTreeSet::new();
        out.retain(|r| seen.insert(r.addr.clone()));
        Ok(out)
    }

    /// GET_BROKER_EPOCH_CACHE (no header) from the broker at `addr`: its epoch entries
    /// and max offset. Only brokers in controller mode keep them; others answer
    /// SYSTEM_ERROR (code 1) with a remark.
    pub async fn broker_epoch_cache(&self, addr: &str) -> Result<EpochEntryCache> {
        let cmd = RemotingCommand::request_code(RequestCode::GetBrokerEpochCache);
        let resp = self.client().invoke_ok(addr, cmd).await?;
        from_json(&resp.body)
            .map_err(|e| ClientError::Protocol(format!("epoch cache from {addr}: {e}")))
    }

    /// GET_BROKER_EPOCH_CACHE from every master and slave of `sets` (mqadmin
    /// getBrokerEpoch), one answer or error per replica, in [`Admin::replica_addrs`]
    /// order. A replica that fails does not stop the others.
    pub async fn broker_epochs(&self, sets: &BrokerSets) -> Result<Vec<BrokerEpochs>> {
        let mut out = Vec::new();
        for replica in self.replica_addrs(sets).await? {
            let cache = self.broker_epoch_cache(&replica.addr).await;
            out.push(BrokerEpochs { replica, cache });
        }
        Ok(out)
    }
}
