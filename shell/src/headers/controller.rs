//! Controller-mode headers (RocketMQ 5, `remoting/.../header/controller/`): between
//! brokers, admin tools and the controller group (docs/design/controller.md §3).

use super::ext_header;

ext_header! {
    /// CONTROLLER_ALTER_SYNC_STATE_SET (1001) request; the body is the proposed
    /// `SyncStateSet` with the epoch the master holds.
    pub struct AlterSyncStateSetRequestHeader {
        /// The broker-set.
        pub broker_name: String = "brokerName",
        /// The master proposing (its controller id).
        pub master_broker_id: i64 = "masterBrokerId",
        /// The master's epoch.
        pub master_epoch: i32 = "masterEpoch",
        /// When the master sent it (ms).
        pub invoke_time: Option<i64> = "invokeTime",
    }
}

ext_header! {
    /// CONTROLLER_ALTER_SYNC_STATE_SET response.
    pub struct AlterSyncStateSetResponseHeader {
        /// The set's epoch after the change.
        pub new_sync_state_set_epoch: i32 = "newSyncStateSetEpoch",
    }
}

ext_header! {
    /// CONTROLLER_ELECT_MASTER (1002) request, from a broker (its own id), an admin
    /// (`designateElect`) or a controller (id -1, cluster "").
    pub struct ElectMasterRequestHeader {
        /// The cluster (Java's default "").
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: String = "brokerName",
        /// The requester's id, or the designated one; -1 for none (Java's default).
        pub broker_id: Option<i64> = "brokerId",
        /// Elect exactly `brokerId` (mqadmin electMaster).
        pub designate_elect: Option<bool> = "designateElect",
        /// When it was sent (ms).
        pub invoke_time: Option<i64> = "invokeTime",
    }
}

ext_header! {
    /// The master fields of CONTROLLER_ELECT_MASTER's answer (SUCCESS and 2011).
    pub struct ElectMasterResponseHeader {
        /// The master's controller id.
        pub master_broker_id: Option<i64> = "masterBrokerId",
        /// The master's remoting address.
        pub master_address: Option<String> = "masterAddress",
        /// The master epoch.
        pub master_epoch: Option<i32> = "masterEpoch",
        /// The SyncStateSet epoch.
        pub sync_state_set_epoch: Option<i32> = "syncStateSetEpoch",
    }
}

ext_header! {
    /// CONTROLLER_REGISTER_BROKER (1003) request: a broker with an id says where it is.
    pub struct RegisterBrokerToControllerRequestHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: String = "brokerName",
        /// The broker's controller id.
        pub broker_id: i64 = "brokerId",
        /// Its remoting address.
        pub broker_address: String = "brokerAddress",
        /// When it was sent (ms).
        pub invoke_time: Option<i64> = "invokeTime",
    }
}

ext_header! {
    /// CONTROLLER_REGISTER_BROKER response; the master fields only when a live master
    /// exists.
    pub struct RegisterBrokerToControllerResponseHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: Option<String> = "brokerName",
        /// The master's controller id.
        pub master_broker_id: Option<i64> = "masterBrokerId",
        /// The master's remoting address.
        pub master_address: Option<String> = "masterAddress",
        /// The master epoch.
        pub master_epoch: Option<i32> = "masterEpoch",
        /// The SyncStateSet epoch.
        pub sync_state_set_epoch: Option<i32> = "syncStateSetEpoch",
    }
}

ext_header! {
    /// CONTROLLER_GET_REPLICA_INFO (1004) request.
    pub struct GetReplicaInfoRequestHeader {
        /// The broker-set.
        pub broker_name: String = "brokerName",
    }
}

ext_header! {
    /// CONTROLLER_GET_REPLICA_INFO response (the SyncStateSet is the body).
    pub struct GetReplicaInfoResponseHeader {
        /// The master's controller id, when there is a master.
        pub master_broker_id: Option<i64> = "masterBrokerId",
        /// The master's remoting address.
        pub master_address: Option<String> = "masterAddress",
        /// The master epoch.
        pub master_epoch: Option<i32> = "masterEpoch",
    }
}

ext_header! {
    /// CONTROLLER_GET_METADATA_INFO (1005) response: the controller group as this node
    /// sees it.
    pub struct GetMetaDataResponseHeader {
        /// `controllerDLegerGroup`.
        pub group: Option<String> = "group",
        /// The leader's id (`n0`), when there is one.
        pub controller_leader_id: Option<String> = "controllerLeaderId",
        /// The leader's address (a peer address: the leader's controller port).
        pub controller_leader_address: Option<String> = "controllerLeaderAddress",
        /// Whether the answering node is the leader.
        pub is_leader: Option<bool> = "isLeader",
        /// Every peer, `n0:host:port;n1:host:port;` (a trailing `;`, as DLedger writes it).
        pub peers: Option<String> = "peers",
    }
}

ext_header! {
    /// CLEAN_BROKER_DATA (1011) request.
    pub struct CleanControllerBrokerDataRequestHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: String = "brokerName",
        /// Ids to forget, `1;2;3`; none = the whole set.
        pub broker_controller_ids_to_clean: Option<String> = "brokerControllerIdsToClean",
        /// Forget the whole set even if its brokers are alive.
        pub is_clean_living_broker: Option<bool> = "isCleanLivingBroker",
        /// When it was sent (ms).
        pub invoke_time: Option<i64> = "invokeTime",
    }
}

ext_header! {
    /// CONTROLLER_GET_NEXT_BROKER_ID (1012) request.
    pub struct GetNextBrokerIdRequestHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: String = "brokerName",
    }
}

ext_header! {
    /// CONTROLLER_GET_NEXT_BROKER_ID response.
    pub struct GetNextBrokerIdResponseHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: Option<String> = "brokerName",
        /// The id a new replica should apply for.
        pub next_broker_id: Option<i64> = "nextBrokerId",
    }
}

ext_header! {
    /// CONTROLLER_APPLY_BROKER_ID (1013) request.
    pub struct ApplyBrokerIdRequestHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: String = "brokerName",
        /// The id applied for.
        pub applied_broker_id: i64 = "appliedBrokerId",
        /// `addr;timestampMs`: who applied, so a retry by the same broker succeeds.
        pub register_check_code: String = "registerCheckCode",
    }
}

ext_header! {
    /// CONTROLLER_APPLY_BROKER_ID response.
    pub struct ApplyBrokerIdResponseHeader {
        /// The cluster.
        pub cluster_name: Option<String> = "clusterName",
        /// The broker-set.
        pub broker_name: Option<String> = "brokerName",
    }
}

ext_header! {
    /// NOTIFY_BROKER_ROLE_CHANGED (1008), controller → broker, oneway; the body is the
    /// SyncStateSet.
    pub struct NotifyBrokerRoleChangedRequestHeader {
        /// The new master's remoting address.
        pub master_address: Option<String> = "masterAddress",
        /// The master epoch.
        pub master_epoch: Option<i32> = "masterEpoch",
        /// The SyncStateSet epoch.
        pub sync_state_set_epoch: Option<i32> = "syncStateSetEpoch",
        /// The new master's controller id.
        pub master_broker_id: Option<i64> = "masterBrokerId",
    }
}
