//! ACL admin headers (RocketMQ 4.x's plain ACL, request codes 50–54).

use super::ext_header;

ext_header! {
    /// UPDATE_AND_CREATE_ACL_CONFIG (`CreateAccessConfigRequestHeader`).
    pub struct CreateAccessConfigRequestHeader {
        /// The account.
        pub access_key: String = "accessKey",
        /// Its secret.
        pub secret_key: Option<String> = "secretKey",
        /// Addresses that need no signature.
        pub white_remote_address: Option<String> = "whiteRemoteAddress",
        /// Admin account.
        pub admin: Option<bool> = "admin",
        /// Default permission on topics (`DENY`, `PUB`, `SUB`, `PUB|SUB`, `ANY`).
        pub default_topic_perm: Option<String> = "defaultTopicPerm",
        /// Default permission on groups.
        pub default_group_perm: Option<String> = "defaultGroupPerm",
        /// `topic=PERM` entries, comma-separated.
        pub topic_perms: Option<String> = "topicPerms",
        /// `group=PERM` entries, comma-separated.
        pub group_perms: Option<String> = "groupPerms",
    }
}

ext_header! {
    /// DELETE_ACL_CONFIG (`DeleteAccessConfigRequestHeader`).
    pub struct DeleteAccessConfigRequestHeader {
        /// The account.
        pub access_key: String = "accessKey",
    }
}

ext_header! {
    /// UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (`UpdateGlobalWhiteAddrsConfigRequestHeader`).
    pub struct UpdateGlobalWhiteAddrsConfigRequestHeader {
        /// Address patterns, comma-separated (empty: none).
        pub global_white_addrs: Option<String> = "globalWhiteAddrs",
        /// 4.9: which ACL file; the broker's own is the only one here.
        pub acl_file_full_path: Option<String> = "aclFileFullPath",
    }
}

ext_header! {
    /// GET_BROKER_CLUSTER_ACL_INFO answer (`GetBrokerAclConfigResponseHeader`).
    pub struct GetBrokerAclConfigResponseHeader {
        /// The ACL file's DataVersion, as JSON.
        pub version: String = "version",
        /// file → DataVersion JSON (one file here).
        pub all_acl_file_version: Option<String> = "allAclFileVersion",
        /// Broker name.
        pub broker_name: String = "brokerName",
        /// Broker address.
        pub broker_addr: String = "brokerAddr",
        /// Cluster name.
        pub cluster_name: String = "clusterName",
    }
}
