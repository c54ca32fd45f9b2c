//! Consume-side headers: pull, offsets, queries, send-back (wire-protocol.md §2.3 "Consume").

use super::ext_header;

/// PULL sysFlag bits (`PullSysFlag.java`).
pub mod pull_sys_flag {
    /// Store `commitOffset` as the group's offset.
    pub const COMMIT_OFFSET: i32 = 0x1;
    /// Long polling allowed.
    pub const SUSPEND: i32 = 0x2;
    /// Use this request's subscription instead of the heartbeat's.
    pub const SUBSCRIPTION: i32 = 0x4;
    /// Class filter (unsupported).
    pub const CLASS_FILTER: i32 = 0x8;
    /// Lite pull consumer.
    pub const LITE_PULL: i32 = 0x10;
}

ext_header! {
    /// PULL_MESSAGE / LITE_PULL_MESSAGE request.
    pub struct PullMessageRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic to pull from.
        pub topic: String = "topic",
        /// Queue to pull from.
        pub queue_id: i32 = "queueId",
        /// First consume-queue index wanted.
        pub queue_offset: i64 = "queueOffset",
        /// At most this many messages (32 by default).
        pub max_msg_nums: i32 = "maxMsgNums",
        /// [`pull_sys_flag`] bits.
        pub sys_flag: i32 = "sysFlag",
        /// Offset to commit when COMMIT_OFFSET is set.
        pub commit_offset: i64 = "commitOffset",
        /// Long-poll hold time in ms (15000 from Java).
        pub suspend_timeout_millis: i64 = "suspendTimeoutMillis",
        /// Subscription expression when SUBSCRIPTION is set.
        pub subscription: Option<String> = "subscription",
        /// Version of the subscription (ms timestamp).
        pub sub_version: i64 = "subVersion",
        /// `TAG` or `SQL92`.
        pub expression_type: Option<String> = "expressionType",
        /// 5.x: byte cap for the answer.
        pub max_msg_bytes: Option<i32> = "maxMsgBytes",
        /// 5.x: who asks (proxy etc).
        pub request_source: Option<i32> = "requestSource",
        /// 5.x proxy's client id; the misspelling is Java's.
        pub proxy_frowad_client_id: Option<String> = "proxyFrowardClientId",
    }
}

/// One pull spec for every puller: the fields Java's `PullAPIWrapper.pullKernelImpl` fills,
/// with the sysFlag bits composed from what is asked (Java's `PullSysFlag.buildSysFlag`),
/// so a flag and the field it governs cannot disagree.
impl PullMessageRequestHeader {
    /// A pull of up to `max_msg_nums` messages of `topic`/`queue_id` from `queue_offset`
    /// for `consumer_group`: no flag, expression type TAG (Java's default), the broker
    /// filtering with the group's subscription from its heartbeat.
    pub fn new(
        consumer_group: impl Into<String>,
        topic: impl Into<String>,
        queue_id: i32,
        queue_offset: i64,
        max_msg_nums: i32,
    ) -> Self {
        Self {
            consumer_group: consumer_group.into(),
            topic: topic.into(),
            queue_id,
            queue_offset,
            max_msg_nums,
            expression_type: Some("TAG".into()),
            ..Self::default()
        }
    }

    /// Long polling (SUSPEND) when `suspend`: the broker holds the pull up to
    /// `timeout_millis` while nothing is there. The hold time is sent either way, as Java
    /// sends `brokerSuspendMaxTimeMillis` with every pull.
    pub fn suspend(mut self, suspend: bool, timeout_millis: i64) -> Self {
        if suspend {
            self.sys_flag |= pull_sys_flag::SUSPEND;
        }
        self.suspend_timeout_millis = timeout_millis;
        self
    }

    /// Asks the broker to store `offset` as the group's (COMMIT_OFFSET), when given.
    pub fn commit(mut self, offset: Option<i64>) -> Self {
        if let Some(offset) = offset {
            self.sys_flag |= pull_sys_flag::COMMIT_OFFSET;
            self.commit_offset = offset;
        }
        self
    }

    /// Filters with `expression` (SUBSCRIPTION) when given, else with the heartbeat's;
    /// `expression_type` is `TAG` (also when empty, as Java's `SubscriptionData` defaults)
    /// or `SQL92`, `sub_version` the subscription's version.
    pub fn filter(
        mut self,
        expression: Option<String>,
        expression_type: &str,
        sub_version: i64,
    ) -> Self {
        if expression.is_some() {
            self.sys_flag |= pull_sys_flag::SUBSCRIPTION;
        }
        self.subscription = expression;
        if !expression_type.is_empty() {
            self.expression_type = Some(expression_type.to_owned());
        }
        self.sub_version = sub_version;
        self
    }
}

ext_header! {
    /// PULL_MESSAGE response. All four offsets are required by Java (pitfall §7.3).
    pub struct PullMessageResponseHeader {
        /// Broker id to pull from next time (0 = master).
        pub suggest_which_broker_id: i64 = "suggestWhichBrokerId",
        /// Where the next pull should start.
        pub next_begin_offset: i64 = "nextBeginOffset",
        /// Queue's minimum offset.
        pub min_offset: i64 = "minOffset",
        /// Queue's maximum offset (next to be written).
        pub max_offset: i64 = "maxOffset",
        /// 5.x.
        pub offset_delta: Option<i64> = "offsetDelta",
        /// 5.x.
        pub topic_sys_flag: Option<i32> = "topicSysFlag",
        /// 5.x.
        pub group_sys_flag: Option<i32> = "groupSysFlag",
        /// 5.x.
        pub forbidden_type: Option<i32> = "forbiddenType",
    }
}

ext_header! {
    /// QUERY_CONSUMER_OFFSET request.
    pub struct QueryConsumerOffsetRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// 5.x: answer 0 instead of 22 when nothing is stored.
        pub set_zero_if_not_found: Option<bool> = "setZeroIfNotFound",
    }
}

ext_header! {
    /// Response carrying one `offset` (QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET).
    pub struct OffsetResponseHeader {
        /// The offset asked for.
        pub offset: i64 = "offset",
    }
}

ext_header! {
    /// UPDATE_CONSUMER_OFFSET request (Java sends it oneway).
    pub struct UpdateConsumerOffsetRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// The offset to store.
        pub commit_offset: i64 = "commitOffset",
    }
}

ext_header! {
    /// GET_MAX_OFFSET request.
    pub struct GetMaxOffsetRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// 5.x: committed (default true) or written offset.
        pub committed: Option<bool> = "committed",
    }
}

ext_header! {
    /// GET_MIN_OFFSET and GET_EARLIEST_MSG_STORETIME request.
    pub struct TopicQueueRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
    }
}

/// GET_MIN_OFFSET request (same fields as [`TopicQueueRequestHeader`]).
pub type GetMinOffsetRequestHeader = TopicQueueRequestHeader;
/// GET_EARLIEST_MSG_STORETIME request (same fields as [`TopicQueueRequestHeader`]).
pub type GetEarliestMsgStoretimeRequestHeader = TopicQueueRequestHeader;

ext_header! {
    /// GET_EARLIEST_MSG_STORETIME response.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        /// Store timestamp (ms) of the queue's first message.
        pub timestamp: i64 = "timestamp",
    }
}

ext_header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP request.
    pub struct SearchOffsetRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// Store time (ms) to search for.
        pub timestamp: i64 = "timestamp",
        /// `LOWER` (default) or `UPPER`, case-insensitive.
        pub boundary_type: Option<String> = "boundaryType",
    }
}

ext_header! {
    /// QUERY_MESSAGE request (by key or UNIQ_KEY).
    pub struct QueryMessageRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// The key (or UNIQ_KEY when `_UNIQUE_KEY_QUERY` is "true").
        pub key: String = "key",
        /// At most this many results.
        pub max_num: i32 = "maxNum",
        /// Store-time window start (ms).
        pub begin_timestamp: i64 = "beginTimestamp",
        /// Store-time window end (ms).
        pub end_timestamp: i64 = "endTimestamp",
        /// "true" when `key` is a UNIQ_KEY.
        pub unique_key_query: Option<bool> = "_UNIQUE_KEY_QUERY",
    }
}

ext_header! {
    /// QUERY_MESSAGE response.
    pub struct QueryMessageResponseHeader {
        /// Last index update time (ms).
        pub index_last_update_timestamp: i64 = "indexLastUpdateTimestamp",
        /// Last indexed commit-log offset.
        pub index_last_update_phyoffset: i64 = "indexLastUpdatePhyoffset",
    }
}

ext_header! {
    /// VIEW_MESSAGE_BY_ID request.
    pub struct ViewMessageRequestHeader {
        /// Commit-log offset decoded from the offset msgId.
        pub offset: i64 = "offset",
        /// 5.x: topic, for permission checks.
        pub topic: Option<String> = "topic",
    }
}

ext_header! {
    /// CONSUMER_SEND_MSG_BACK request: a consumer gives a message back for retry.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// Commit-log offset of the consumed message.
        pub offset: i64 = "offset",
        /// Consumer group (decides the retry topic).
        pub group: String = "group",
        /// 0 ⇒ 3 + reconsumeTimes; < 0 ⇒ straight to DLQ.
        pub delay_level: i32 = "delayLevel",
        /// UNIQ_KEY of the original message.
        pub origin_msg_id: Option<String> = "originMsgId",
        /// Topic of the original message.
        pub origin_topic: Option<String> = "originTopic",
        /// Unit mode.
        pub unit_mode: Option<bool> = "unitMode",
        /// Retry limit from the client.
        pub max_reconsume_times: Option<i32> = "maxReconsumeTimes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ExtFields;
    use crate::headers::{FromExtFields, ToExtFields};

    #[test]
    fn pull_request_round_trips_through_ext_fields() {
        let h = PullMessageRequestHeader {
            consumer_group: "g".into(),
            topic: "t".into(),
            queue_id: 2,
            queue_offset: 10,
            max_msg_nums: 32,
            sys_flag: pull_sys_flag::SUSPEND | pull_sys_flag::COMMIT_OFFSET,
            commit_offset: 9,
            suspend_timeout_millis: 15000,
            subscription: Some("*".into()),
            sub_version: 1,
            expression_type: Some("TAG".into()),
            ..Default::default()
        };
        let mut ext = ExtFields::new();
        h.to_ext_fields(&mut ext);
        assert_eq!(ext["suspendTimeoutMillis"], "15000");
        assert!(!ext.contains_key("maxMsgBytes"));
        assert_eq!(PullMessageRequestHeader::from_ext_fields(&ext).unwrap(), h);
    }

    #[test]
    fn the_pull_spec_sets_a_flag_with_its_field() {
        let plain = PullMessageRequestHeader::new("g", "t", 2, 10, 32);
        assert_eq!(plain.sys_flag, 0);
        assert_eq!(plain.expression_type.as_deref(), Some("TAG"));
        let h = plain
            .suspend(false, 20_000)
            .commit(None)
            .filter(None, "", 3);
        assert_eq!(
            (h.sys_flag, h.suspend_timeout_millis, h.sub_version),
            (0, 20_000, 3)
        );
        let h = PullMessageRequestHeader::new("g", "t", 2, 10, 32)
            .suspend(true, 15_000)
            .commit(Some(9))
            .filter(Some("a > 1".into()), "SQL92", 1);
        let all =
            pull_sys_flag::SUSPEND | pull_sys_flag::COMMIT_OFFSET | pull_sys_flag::SUBSCRIPTION;
        assert_eq!(h.sys_flag, all);
        assert_eq!(h.commit_offset, 9);
        assert_eq!(h.subscription.as_deref(), Some("a > 1"));
        assert_eq!(h.expression_type.as_deref(), Some("SQL92"));
    }
}
