//! Client management and transaction headers (§2.3 "Client management", "Transactions").

use super::ext_header;

ext_header! {
    /// UNREGISTER_CLIENT request.
    pub struct UnregisterClientRequestHeader {
        /// `clientIP@instanceName`.
        pub client_id: String = "clientID",
        /// Producer group leaving, if any.
        pub producer_group: Option<String> = "producerGroup",
        /// Consumer group leaving, if any.
        pub consumer_group: Option<String> = "consumerGroup",
    }
}

ext_header! {
    /// Requests naming only a consumer group: GET_CONSUMER_LIST_BY_GROUP (38),
    /// NOTIFY_CONSUMER_IDS_CHANGED (40, broker→client), GET_CONSUMER_CONNECTION_LIST (203).
    pub struct ConsumerGroupRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
    }
}

/// GET_CONSUMER_LIST_BY_GROUP request.
pub type GetConsumerListByGroupRequestHeader = ConsumerGroupRequestHeader;
/// NOTIFY_CONSUMER_IDS_CHANGED request (broker→client, oneway).
pub type NotifyConsumerIdsChangedRequestHeader = ConsumerGroupRequestHeader;
/// GET_CONSUMER_CONNECTION_LIST request.
pub type GetConsumerConnectionListRequestHeader = ConsumerGroupRequestHeader;

ext_header! {
    /// GET_PRODUCER_CONNECTION_LIST request.
    pub struct GetProducerConnectionListRequestHeader {
        /// Producer group.
        pub producer_group: String = "producerGroup",
    }
}

ext_header! {
    /// HEART_BEAT response extFields (5.x); 4.x answers with none.
    pub struct HeartbeatResponseHeader {
        /// "true" when the broker understands heartbeat fingerprints.
        pub is_support_heart_beat_v2: Option<bool> = "IS_SUPPORT_HEART_BEAT_V2",
        /// Whether subscriptions changed.
        pub is_sub_change: Option<bool> = "IS_SUB_CHANGE",
    }
}

ext_header! {
    /// GET_CONSUMER_RUNNING_INFO request (broker→client).
    pub struct GetConsumerRunningInfoRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Which client.
        pub client_id: String = "clientId",
        /// Include a thread dump.
        pub jstack_enable: Option<bool> = "jstackEnable",
    }
}

ext_header! {
    /// GET_CONSUMER_STATUS_FROM_CLIENT (broker→client) and INVOKE_BROKER_TO_GET_CONSUMER_STATUS
    /// request.
    pub struct GetConsumerStatusRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Consumer group.
        pub group: String = "group",
        /// Only this client (its id); every client of the group when absent.
        pub client_addr: Option<String> = "clientAddr",
    }
}

ext_header! {
    /// CONSUME_MESSAGE_DIRECTLY request (admin→broker→client), Java's
    /// `ConsumeMessageDirectlyResultRequestHeader`.
    pub struct ConsumeMessageDirectlyResultRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Which client.
        pub client_id: Option<String> = "clientId",
        /// The message's offset msgId (the broker reads the record at its commit-log offset).
        pub msg_id: Option<String> = "msgId",
        /// The broker holding it (the broker fills in its own name).
        pub broker_name: Option<String> = "brokerName",
        /// 5.x: the message's topic.
        pub topic: Option<String> = "topic",
    }
}

/// `commitOrRollback` values of END_TRANSACTION (the sysFlag transaction bits).
pub mod transaction_state {
    /// Not decided yet: the broker ignores it and checks back later.
    pub const UNKNOWN: i32 = 0;
    /// Commit: the half message becomes visible.
    pub const COMMIT: i32 = 0x8;
    /// Rollback: the half message is dropped.
    pub const ROLLBACK: i32 = 0xC;
}

ext_header! {
    /// END_TRANSACTION request (Java sends it oneway).
    pub struct EndTransactionRequestHeader {
        /// Producer group of the half message.
        pub producer_group: String = "producerGroup",
        /// Queue offset of the half message.
        pub tran_state_table_offset: i64 = "tranStateTableOffset",
        /// Commit-log offset of the half message.
        pub commit_log_offset: i64 = "commitLogOffset",
        /// [`transaction_state`] value.
        pub commit_or_rollback: i32 = "commitOrRollback",
        /// True when answering a CHECK_TRANSACTION_STATE.
        pub from_transaction_check: Option<bool> = "fromTransactionCheck",
        /// Offset msgId (or UNIQ_KEY) of the half message.
        pub msg_id: String = "msgId",
        /// The transaction id (UNIQ_KEY).
        pub transaction_id: Option<String> = "transactionId",
        /// 5.x: topic.
        pub topic: Option<String> = "topic",
    }
}

ext_header! {
    /// CHECK_TRANSACTION_STATE request (broker→client, oneway); the body is the half message.
    pub struct CheckTransactionStateRequestHeader {
        /// Queue offset of the half message.
        pub tran_state_table_offset: i64 = "tranStateTableOffset",
        /// Commit-log offset of the half message.
        pub commit_log_offset: i64 = "commitLogOffset",
        /// UNIQ_KEY of the message.
        pub msg_id: Option<String> = "msgId",
        /// Transaction id.
        pub transaction_id: Option<String> = "transactionId",
        /// Offset msgId.
        pub offset_msg_id: Option<String> = "offsetMsgId",
        /// 5.x: topic.
        pub topic: Option<String> = "topic",
    }
}

ext_header! {
    /// RESET_CONSUMER_CLIENT_OFFSET (broker→client) and INVOKE_BROKER_TO_RESET_OFFSET request.
    pub struct ResetOffsetRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Consumer group.
        pub group: String = "group",
        /// Reset to the first offset stored at or after this time (ms).
        pub timestamp: i64 = "timestamp",
        /// Reset even if the consumer is ahead.
        pub is_force: bool = "isForce",
        /// 5.x: one queue only.
        pub queue_id: Option<i32> = "queueId",
        /// 5.x: explicit offset.
        pub offset: Option<i64> = "offset",
    }
}
