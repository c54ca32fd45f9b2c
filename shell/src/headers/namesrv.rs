//! Name server headers (§2.3 "Name server").

use super::ext_header;

ext_header! {
    /// REGISTER_BROKER request.
    pub struct RegisterBrokerRequestHeader {
        /// Broker name (master and slaves share it).
        pub broker_name: String = "brokerName",
        /// `ip1:listenPort`, what clients dial.
        pub broker_addr: String = "brokerAddr",
        /// Cluster the broker belongs to.
        pub cluster_name: String = "clusterName",
        /// `ip2:haPort`, what slaves dial.
        pub ha_server_addr: String = "haServerAddr",
        /// 0 = master.
        pub broker_id: i64 = "brokerId",
        /// 5.x: expiry for this broker.
        pub heartbeat_timeout_millis: Option<i64> = "heartbeatTimeoutMillis",
        /// 5.x.
        pub enable_acting_master: Option<bool> = "enableActingMaster",
        /// Body is the compressed form (§3.3).
        pub compressed: Option<bool> = "compressed",
        /// Masked CRC32 of the body; 0 ⇒ not checked.
        pub body_crc32: Option<i32> = "bodyCrc32",
    }
}

ext_header! {
    /// REGISTER_BROKER response.
    pub struct RegisterBrokerResponseHeader {
        /// Master's HA address, for slaves.
        pub ha_server_addr: Option<String> = "haServerAddr",
        /// Master's address, for slaves.
        pub master_addr: Option<String> = "masterAddr",
    }
}

ext_header! {
    /// UNREGISTER_BROKER and QUERY_DATA_VERSION request.
    pub struct BrokerIdentityRequestHeader {
        /// Broker name.
        pub broker_name: String = "brokerName",
        /// `ip:port`.
        pub broker_addr: String = "brokerAddr",
        /// Cluster name.
        pub cluster_name: String = "clusterName",
        /// 0 = master.
        pub broker_id: i64 = "brokerId",
    }
}

/// UNREGISTER_BROKER request.
pub type UnRegisterBrokerRequestHeader = BrokerIdentityRequestHeader;
/// QUERY_DATA_VERSION request.
pub type QueryDataVersionRequestHeader = BrokerIdentityRequestHeader;

ext_header! {
    /// QUERY_DATA_VERSION response.
    pub struct QueryDataVersionResponseHeader {
        /// True when the broker's topic config differs from what the name server holds.
        pub changed: bool = "changed",
    }
}

ext_header! {
    /// BROKER_HEARTBEAT request (5.x, oneway).
    pub struct BrokerHeartbeatRequestHeader {
        /// Cluster name.
        pub cluster_name: String = "clusterName",
        /// `ip:port`.
        pub broker_addr: String = "brokerAddr",
        /// Broker name.
        pub broker_name: String = "brokerName",
        /// 0 = master; in controller mode the broker's controller-assigned id.
        pub broker_id: Option<i64> = "brokerId",
        /// Controller mode: the last epoch in the broker's epoch file.
        pub epoch: Option<i32> = "epoch",
        /// Controller mode: the broker's max commit-log offset.
        pub max_offset: Option<i64> = "maxOffset",
        /// Controller mode: the broker's confirm offset.
        pub confirm_offset: Option<i64> = "confirmOffset",
        /// Controller mode: how long the controller may wait for the next heartbeat
        /// (`controllerHeartBeatTimeoutMills`).
        pub heartbeat_timeout_mills: Option<i64> = "heartbeatTimeoutMills",
        /// Controller mode: `brokerElectionPriority` (lower wins).
        pub election_priority: Option<i32> = "electionPriority",
    }
}

ext_header! {
    /// GET_ROUTEINFO_BY_TOPIC request.
    pub struct GetRouteInfoRequestHeader {
        /// Topic whose route is wanted.
        pub topic: String = "topic",
        /// 5.x: ask for quoted map keys regardless of version.
        pub accept_standard_json_only: Option<bool> = "acceptStandardJsonOnly",
    }
}

ext_header! {
    /// DELETE_TOPIC_IN_NAMESRV request.
    pub struct DeleteTopicFromNamesrvRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Only in this cluster.
        pub cluster_name: Option<String> = "clusterName",
    }
}

ext_header! {
    /// PUT_KV_CONFIG request.
    pub struct PutKvConfigRequestHeader {
        /// Namespace (e.g. `ORDER_TOPIC_CONFIG`).
        pub namespace: String = "namespace",
        /// Key.
        pub key: String = "key",
        /// Value.
        pub value: String = "value",
    }
}

ext_header! {
    /// GET_KV_CONFIG and DELETE_KV_CONFIG request.
    pub struct KvConfigKeyRequestHeader {
        /// Namespace.
        pub namespace: String = "namespace",
        /// Key.
        pub key: String = "key",
    }
}

/// GET_KV_CONFIG request.
pub type GetKvConfigRequestHeader = KvConfigKeyRequestHeader;
/// DELETE_KV_CONFIG request.
pub type DeleteKvConfigRequestHeader = KvConfigKeyRequestHeader;

ext_header! {
    /// GET_KV_CONFIG response.
    pub struct GetKvConfigResponseHeader {
        /// The value (absent with code 22).
        pub value: Option<String> = "value",
    }
}

ext_header! {
    /// GET_KVLIST_BY_NAMESPACE request.
    pub struct GetKvListByNamespaceRequestHeader {
        /// Namespace.
        pub namespace: String = "namespace",
    }
}

ext_header! {
    /// GET_TOPICS_BY_CLUSTER request.
    pub struct GetTopicsByClusterRequestHeader {
        /// Cluster name.
        pub cluster: String = "cluster",
    }
}

ext_header! {
    /// WIPE_WRITE_PERM_OF_BROKER and ADD_WRITE_PERM_OF_BROKER request.
    pub struct BrokerNameRequestHeader {
        /// Broker name.
        pub broker_name: String = "brokerName",
    }
}

ext_header! {
    /// WIPE_WRITE_PERM_OF_BROKER response.
    pub struct WipeWritePermOfBrokerResponseHeader {
        /// Topics changed.
        pub wipe_topic_count: i32 = "wipeTopicCount",
    }
}

ext_header! {
    /// ADD_WRITE_PERM_OF_BROKER response.
    pub struct AddWritePermOfBrokerResponseHeader {
        /// Topics changed.
        pub add_topic_count: i32 = "addTopicCount",
    }
}
