//! Broker admin headers (§2.3 "Broker admin").

use super::ext_header;

ext_header! {
    /// UPDATE_AND_CREATE_TOPIC request.
    pub struct CreateTopicRequestHeader {
        /// Topic to create or update.
        pub topic: String = "topic",
        /// Template topic (Java sends `TBW102`).
        pub default_topic: String = "defaultTopic",
        /// Readable queues.
        pub read_queue_nums: i32 = "readQueueNums",
        /// Writable queues.
        pub write_queue_nums: i32 = "writeQueueNums",
        /// Perm bits (6 = read + write).
        pub perm: i32 = "perm",
        /// `SINGLE_TAG` or `MULTI_TAG`.
        pub topic_filter_type: String = "topicFilterType",
        /// Topic sysFlag.
        pub topic_sys_flag: Option<i32> = "topicSysFlag",
        /// Ordered topic.
        pub order: bool = "order",
        /// 5.x attributes in `+k=v,...` form.
        pub attributes: Option<String> = "attributes",
        /// 5.x: overwrite attributes.
        pub force: Option<bool> = "force",
    }
}

ext_header! {
    /// Requests naming one topic: DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO,
    /// QUERY_TOPIC_CONSUME_BY_WHO, REGISTER_TOPIC_IN_NAMESRV.
    pub struct TopicRequestHeader {
        /// The topic.
        pub topic: String = "topic",
    }
}

/// DELETE_TOPIC_IN_BROKER request.
pub type DeleteTopicRequestHeader = TopicRequestHeader;
/// GET_TOPIC_STATS_INFO request.
pub type GetTopicStatsInfoRequestHeader = TopicRequestHeader;

ext_header! {
    /// GET_ALL_TOPIC_CONFIG request; 5.x paging fields, all absent ⇒ everything.
    pub struct GetAllTopicConfigRequestHeader {
        /// Page start.
        pub topic_seq: Option<i32> = "topicSeq",
        /// DataVersion JSON the pager started from.
        pub data_version: Option<String> = "dataVersion",
        /// Page size.
        pub max_topic_num: Option<i32> = "maxTopicNum",
    }
}

ext_header! {
    /// GET_ALL_TOPIC_CONFIG response (5.x).
    pub struct GetAllTopicConfigResponseHeader {
        /// Number of topics in total.
        pub total_topic_num: Option<i32> = "totalTopicNum",
    }
}

ext_header! {
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG request; 5.x paging fields.
    pub struct GetAllSubscriptionGroupRequestHeader {
        /// Page start.
        pub group_seq: Option<i32> = "groupSeq",
        /// DataVersion JSON the pager started from.
        pub data_version: Option<String> = "dataVersion",
        /// Page size.
        pub max_group_num: Option<i32> = "maxGroupNum",
    }
}

ext_header! {
    /// DELETE_SUBSCRIPTIONGROUP request.
    pub struct DeleteSubscriptionGroupRequestHeader {
        /// Group to delete.
        pub group_name: String = "groupName",
        /// Also delete its offsets.
        pub clean_offset: Option<bool> = "cleanOffset",
    }
}

ext_header! {
    /// GET_CONSUME_STATS request.
    pub struct GetConsumeStatsRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Restrict to one topic.
        pub topic: Option<String> = "topic",
        /// 5.x: restrict to a `;`-separated topic list.
        pub topic_list: Option<String> = "topicList",
    }
}

/// QUERY_TOPIC_CONSUME_BY_WHO request.
pub type QueryTopicConsumeByWhoRequestHeader = TopicRequestHeader;

ext_header! {
    /// QUERY_CONSUME_TIME_SPAN request.
    pub struct QueryConsumeTimeSpanRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Consumer group.
        pub group: String = "group",
    }
}

ext_header! {
    /// CLONE_GROUP_OFFSET request.
    pub struct CloneGroupOffsetRequestHeader {
        /// Group whose offsets are copied.
        pub src_group: String = "srcGroup",
        /// Group that gets them.
        pub dest_group: String = "destGroup",
        /// Only this topic; absent or blank means every topic of the source group.
        pub topic: Option<String> = "topic",
        /// The source group is offline: copy without checking its subscriptions.
        pub offline: Option<bool> = "offline",
    }
}

ext_header! {
    /// VIEW_BROKER_STATS_DATA request.
    pub struct ViewBrokerStatsDataRequestHeader {
        /// Stats name (`TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`, ...).
        pub stats_name: String = "statsName",
        /// Stats key (a topic, `topic@group`, or the cluster name).
        pub stats_key: String = "statsKey",
    }
}

ext_header! {
    /// GET_BROKER_CONSUME_STATS request (Java's field is `isOrder`).
    pub struct GetConsumeStatsInBrokerHeader {
        /// Only ordered topics.
        pub is_order: bool = "isOrder",
    }
}

ext_header! {
    /// QUERY_CONSUME_QUEUE request.
    pub struct QueryConsumeQueueRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Queue id.
        pub queue_id: i32 = "queueId",
        /// First queue offset to list.
        pub index: i64 = "index",
        /// Entries to list.
        pub count: i32 = "count",
        /// Group whose subscription is evaluated against each entry.
        pub consumer_group: Option<String> = "consumerGroup",
    }
}

ext_header! {
    /// GET_TOPIC_CONFIG request.
    pub struct GetTopicConfigRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Logical queue mapping wanted too (static topics; Tern has none).
        pub lo: Option<bool> = "lo",
    }
}

ext_header! {
    /// GET_SUBSCRIPTIONGROUP_CONFIG request.
    pub struct GetSubscriptionGroupConfigRequestHeader {
        /// Group.
        pub group: String = "group",
    }
}
