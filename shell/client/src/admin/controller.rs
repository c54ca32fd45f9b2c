//! A RocketMQ 5 controller group (Tern's `tern-controller` or Java's): its metadata, the
//! SyncStateSet of broker-sets, manual elections and forgetting brokers, as mqadmin's
//! getControllerMetaData, getSyncStateSet, electMaster and cleanBrokerMetadata call them.
//! Leader-only requests go to the leader named by GET_METADATA_INFO on the address given.

use tern_shell::body::{BrokerReplicasInfo, ElectMasterResponseBody, from_json, to_json};
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
}
