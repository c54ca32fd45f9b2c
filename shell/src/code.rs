//! Request codes, response codes and language codes.
//!
//! Every enum keeps unknown values as `Other(raw)`: a peer newer than us may send codes we
//! have never heard of, and the answer to those is "not supported", never a panic or a
//! silently different code.

/// Declares a code enum with a raw-number escape hatch and lossless `from_raw`/`raw`.
macro_rules! code_enum {
    (
        $(#[$meta:meta])*
        $name:ident : $repr:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A value this version does not know, kept as sent.
            Other($repr),
        }

        impl $name {
            /// Maps a wire number to the enum; unknown numbers become `Other`.
            pub fn from_raw(raw: $repr) -> Self {
                match raw {
                    $( $value => Self::$variant, )*
                    other => Self::Other(other),
                }
            }

            /// The wire number.
            pub fn raw(self) -> $repr {
                match self {
                    $( Self::$variant => $value, )*
                    Self::Other(raw) => raw,
                }
            }
        }

        impl From<$repr> for $name {
            fn from(raw: $repr) -> Self {
                Self::from_raw(raw)
            }
        }

        impl From<$name> for $repr {
            fn from(code: $name) -> $repr {
                code.raw()
            }
        }
    };
}

code_enum! {
    /// Request codes (`RequestCode.java`), for requests in both directions.
    RequestCode: i32 {
        SendMessage = 10,
        PullMessage = 11,
        QueryMessage = 12,
        QueryConsumerOffset = 14,
        UpdateConsumerOffset = 15,
        UpdateAndCreateTopic = 17,
        GetAllTopicConfig = 21,
        UpdateBrokerConfig = 25,
        GetBrokerConfig = 26,
        GetBrokerRuntimeInfo = 28,
        SearchOffsetByTimestamp = 29,
        GetMaxOffset = 30,
        GetMinOffset = 31,
        GetEarliestMsgStoretime = 32,
        ViewMessageById = 33,
        HeartBeat = 34,
        UnregisterClient = 35,
        ConsumerSendMsgBack = 36,
        EndTransaction = 37,
        GetConsumerListByGroup = 38,
        CheckTransactionState = 39,
        NotifyConsumerIdsChanged = 40,
        LockBatchMq = 41,
        UnlockBatchMq = 42,
        GetAllConsumerOffset = 43,
        GetAllDelayOffset = 45,
        CheckClientConfig = 46,
        UpdateAndCreateAclConfig = 50,
        DeleteAclConfig = 51,
        GetBrokerClusterAclInfo = 52,
        UpdateGlobalWhiteAddrsConfig = 53,
        GetBrokerClusterAclConfig = 54,
        GetTimerCheckPoint = 60,
        GetTimerMetrics = 61,
        PutKvConfig = 100,
        GetKvConfig = 101,
        DeleteKvConfig = 102,
        RegisterBroker = 103,
        UnregisterBroker = 104,
        GetRouteinfoByTopic = 105,
        GetBrokerClusterInfo = 106,
        UpdateAndCreateSubscriptionGroup = 200,
        GetAllSubscriptionGroupConfig = 201,
        GetTopicStatsInfo = 202,
        GetConsumerConnectionList = 203,
        GetProducerConnectionList = 204,
        WipeWritePermOfBroker = 205,
        GetAllTopicListFromNameserver = 206,
        DeleteSubscriptionGroup = 207,
        GetConsumeStats = 208,
        DeleteTopicInBroker = 215,
        DeleteTopicInNamesrv = 216,
        RegisterTopicInNamesrv = 217,
        GetKvlistByNamespace = 219,
        ResetConsumerClientOffset = 220,
        GetConsumerStatusFromClient = 221,
        InvokeBrokerToResetOffset = 222,
        InvokeBrokerToGetConsumerStatus = 223,
        GetTopicsByCluster = 224,
        QueryTopicConsumeByWho = 300,
        QueryConsumeTimeSpan = 303,
        GetSystemTopicListFromBroker = 305,
        CleanExpiredConsumequeue = 306,
        GetConsumerRunningInfo = 307,
        ConsumeMessageDirectly = 309,
        SendMessageV2 = 310,
        CloneGroupOffset = 314,
        ViewBrokerStatsData = 315,
        CleanUnusedTopic = 316,
        GetBrokerConsumeStats = 317,
        UpdateNamesrvConfig = 318,
        GetNamesrvConfig = 319,
        SendBatchMessage = 320,
        QueryConsumeQueue = 321,
        QueryDataVersion = 322,
        SendReplyMessage = 324,
        SendReplyMessageV2 = 325,
        PushReplyMessageToClient = 326,
        AddWritePermOfBroker = 327,
        GetTopicConfig = 351,
        GetSubscriptionGroupConfig = 352,
        LitePullMessage = 361,
        RecallMessage = 370,
        QueryAssignment = 400,
        SetMessageRequestMode = 401,
        GetAllMessageRequestMode = 402,
        BrokerHeartbeat = 904,
        ControllerAlterSyncStateSet = 1001,
        ControllerElectMaster = 1002,
        ControllerRegisterBroker = 1003,
        ControllerGetReplicaInfo = 1004,
        ControllerGetMetadataInfo = 1005,
        ControllerGetSyncStateData = 1006,
        GetBrokerEpochCache = 1007,
        NotifyBrokerRoleChanged = 1008,
        UpdateControllerConfig = 1009,
        GetControllerConfig = 1010,
        CleanBrokerData = 1011,
        ControllerGetNextBrokerId = 1012,
        ControllerApplyBrokerId = 1013,
        /// Tern's controller group: openraft's AppendEntries between controllers (codes
        /// outside RocketMQ's and DLedger's ranges; docs/design/controller.md §11.3).
        RaftAppendEntries = 52001,
        /// Tern's controller group: openraft's RequestVote.
        RaftVote = 52002,
        /// Tern's controller group: openraft's InstallSnapshot chunk.
        RaftInstallSnapshot = 52003,
        PopMessage = 200050,
        AckMessage = 200051,
        PeekMessage = 200052,
        ChangeMessageInvisibletime = 200053,
        Notification = 200054,
        PollingInfo = 200055,
        PopRollback = 200056,
        BatchAckMessage = 200151,
    }
}

code_enum! {
    /// Response codes (`RemotingSysResponseCode.java` + `ResponseCode.java`).
    ResponseCode: i32 {
        Success = 0,
        SystemError = 1,
        SystemBusy = 2,
        RequestCodeNotSupported = 3,
        TransactionFailed = 4,
        FlushDiskTimeout = 10,
        SlaveNotAvailable = 11,
        FlushSlaveTimeout = 12,
        MessageIllegal = 13,
        ServiceNotAvailable = 14,
        VersionNotSupported = 15,
        NoPermission = 16,
        TopicNotExist = 17,
        TopicExistAlready = 18,
        PullNotFound = 19,
        PullRetryImmediately = 20,
        PullOffsetMoved = 21,
        QueryNotFound = 22,
        SubscriptionParseFailed = 23,
        SubscriptionNotExist = 24,
        SubscriptionNotLatest = 25,
        SubscriptionGroupNotExist = 26,
        FilterDataNotExist = 27,
        FilterDataNotLatest = 28,
        InvalidParameter = 29,
        TransactionShouldCommit = 200,
        TransactionShouldRollback = 201,
        TransactionStateUnknow = 202,
        TransactionStateGroupWrong = 203,
        ConsumerNotOnline = 206,
        ConsumeMsgTimeout = 207,
        NoMessage = 208,
        PollingFull = 209,
        PollingTimeout = 210,
        FlowControl = 215,
        NotLeaderForQueue = 501,
        IllegalOperation = 604,
        GoAway = 1500,
        ControllerFencedMasterEpoch = 2000,
        ControllerFencedSyncStateSetEpoch = 2001,
        ControllerInvalidMaster = 2002,
        ControllerInvalidReplicas = 2003,
        ControllerMasterNotAvailable = 2004,
        ControllerInvalidRequest = 2005,
        ControllerBrokerNotAlive = 2006,
        ControllerNotLeader = 2007,
        ControllerBrokerMetadataNotExist = 2008,
        ControllerInvalidCleanBrokerMetadata = 2009,
        ControllerBrokerNeedToBeRegistered = 2010,
        ControllerMasterStillExist = 2011,
        ControllerElectMasterFailed = 2012,
        ControllerAlterSyncStateSetFailed = 2013,
        ControllerBrokerIdInvalid = 2014,
    }
}

code_enum! {
    /// `LanguageCode.java`: who sent a command. On the wire a name in JSON, a byte in ROCKETMQ.
    LanguageCode: u8 {
        Java = 0,
        Cpp = 1,
        Dotnet = 2,
        Python = 3,
        Delphi = 4,
        Erlang = 5,
        Ruby = 6,
        OtherLanguage = 7,
        Http = 8,
        Go = 9,
        Php = 10,
        Oms = 11,
        Rust = 12,
        NodeJs = 13,
    }
}

impl LanguageCode {
    /// The Java enum name used in JSON headers and bodies.
    pub fn name(self) -> &'static str {
        match self {
            Self::Java => "JAVA",
            Self::Cpp => "CPP",
            Self::Dotnet => "DOTNET",
            Self::Python => "PYTHON",
            Self::Delphi => "DELPHI",
            Self::Erlang => "ERLANG",
            Self::Ruby => "RUBY",
            Self::OtherLanguage => "OTHER",
            Self::Http => "HTTP",
            Self::Go => "GO",
            Self::Php => "PHP",
            Self::Oms => "OMS",
            Self::Rust => "RUST",
            Self::NodeJs => "NODE_JS",
            // A name we cannot give; Java peers map unknown names to failure, OTHER is safe.
            Self::Other(_) => "OTHER",
        }
    }

    /// Parses a Java enum name; unknown names become `OtherLanguage` (Java would fail, we tolerate).
    pub fn from_name(name: &str) -> Self {
        let all = [
            Self::Java,
            Self::Cpp,
            Self::Dotnet,
            Self::Python,
            Self::Delphi,
            Self::Erlang,
            Self::Ruby,
            Self::OtherLanguage,
            Self::Http,
            Self::Go,
            Self::Php,
            Self::Oms,
            Self::Rust,
            Self::NodeJs,
        ];
        all.into_iter()
            .find(|l| l.name() == name)
            .unwrap_or(Self::OtherLanguage)
    }
}

/// `MQVersion` ordinals that change behaviour (wire-protocol.md §1.6).
pub mod version {
    /// V3_0_11: REGISTER_BROKER carries a RegisterBrokerBody from here on.
    pub const V3_0_11: i32 = 37;
    /// V3_4_9: send headers' `maxReconsumeTimes` honoured from here on.
    pub const V3_4_9: i32 = 121;
    /// V4_1_0_SNAPSHOT: Java clients refuse SQL92 filtering against older brokers.
    pub const V4_1_0_SNAPSHOT: i32 = 232;
    /// V4_6_0: what the C++ client 2.x claims.
    pub const V4_6_0: i32 = 333;
    /// V4_9_4: name server answers route data with quoted map keys from here on.
    pub const V4_9_4: i32 = 401;
    /// V5_0_0: compressed register body carries the mapping section from here on.
    pub const V5_0_0: i32 = 413;
    /// V5_3_3: the version Tern claims in its own commands.
    pub const V5_3_3: i32 = 479;
    /// What Tern puts in `version`: a real, recent ordinal (pitfall §7.9).
    pub const CURRENT: i32 = V5_3_3;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_codes_survive_a_round_trip() {
        assert_eq!(RequestCode::from_raw(12345), RequestCode::Other(12345));
        assert_eq!(RequestCode::from_raw(12345).raw(), 12345);
        assert_eq!(ResponseCode::from_raw(-1).raw(), -1);
        assert_eq!(LanguageCode::from_raw(200).raw(), 200);
    }

    #[test]
    fn known_codes_map_to_their_numbers() {
        assert_eq!(RequestCode::SendMessageV2.raw(), 310);
        assert_eq!(RequestCode::from_raw(105), RequestCode::GetRouteinfoByTopic);
        assert_eq!(ResponseCode::from_raw(21), ResponseCode::PullOffsetMoved);
        assert_eq!(LanguageCode::from_name("CPP"), LanguageCode::Cpp);
        assert_eq!(LanguageCode::Rust.name(), "RUST");
    }
}
