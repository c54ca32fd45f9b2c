//! POP consumption headers (RocketMQ 5.x, `PopMessageRequestHeader` and friends;
//! docs/design/pop.md §1). The `RpcRequestHeader` fields every one of them inherits
//! (`ns`, `nsd`, `bname`, `oway`, `lo`) are optional and unused, so they are not
//! declared: extFields the broker does not read are ignored.

use super::ext_header;

ext_header! {
    /// POP_MESSAGE (200050) request.
    pub struct PopMessageRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic.
        pub topic: String = "topic",
        /// Queue; -1 = every read queue of the topic.
        pub queue_id: i32 = "queueId",
        /// At most this many messages (≤ 32).
        pub max_msg_nums: i32 = "maxMsgNums",
        /// How long the popped messages stay invisible, ms.
        pub invisible_time: i64 = "invisibleTime",
        /// Long-polling hold, ms (≤ 0: answer at once).
        pub poll_time: i64 = "pollTime",
        /// When the client sent it, ms. Required by Java's decoder, but RocketMQ's
        /// processor fills it in (`now`) when absent or 0 (the proxy sends none).
        pub born_time: Option<i64> = "bornTime",
        /// Where a group with no offset starts: 0 = MIN, 1 = MAX (`ConsumeInitMode`).
        pub init_mode: i32 = "initMode",
        /// `TAG` or `SQL92`.
        pub exp_type: Option<String> = "expType",
        /// The filter expression.
        pub exp: Option<String> = "exp",
        /// Orderly POP: one batch in flight per queue.
        pub order: Option<bool> = "order",
        /// Orderly POP: a retry of the same request gets the same batch.
        pub attempt_id: Option<String> = "attemptId",
    }
}

ext_header! {
    /// POP_MESSAGE and PEEK_MESSAGE response. The first four are required by the Java
    /// client on every code it accepts (SUCCESS, POLLING_FULL, POLLING_TIMEOUT).
    pub struct PopMessageResponseHeader {
        /// The pop's time, ms: field 2 of every receipt handle.
        pub pop_time: i64 = "popTime",
        /// Invisible time granted, ms.
        pub invisible_time: i64 = "invisibleTime",
        /// Revive queue of the checkpoints (999 = orderly).
        pub revive_qid: i32 = "reviveQid",
        /// Messages left in the queues read.
        pub rest_num: i64 = "restNum",
        /// `flag qid startOffset` per queue read, `;`-joined.
        pub start_offset_info: Option<String> = "startOffsetInfo",
        /// `flag qid o1,o2,...` per queue read, `;`-joined.
        pub msg_offset_info: Option<String> = "msgOffsetInfo",
        /// Orderly only: consume counts (`flag qo{qid}%{offset} count`, `flag qid min`).
        pub order_count_info: Option<String> = "orderCountInfo",
    }
}

ext_header! {
    /// ACK_MESSAGE (200051) request.
    pub struct AckMessageRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// The message's real topic (a retry topic for a revived message).
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// The receipt handle.
        pub extra_info: String = "extraInfo",
        /// The message's queue offset.
        pub offset: i64 = "offset",
    }
}

ext_header! {
    /// CHANGE_MESSAGE_INVISIBLETIME (200053) request.
    pub struct ChangeInvisibleTimeRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// The message's real topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// The receipt handle.
        pub extra_info: String = "extraInfo",
        /// The message's queue offset.
        pub offset: i64 = "offset",
        /// New invisible time from now, ms.
        pub invisible_time: i64 = "invisibleTime",
    }
}

ext_header! {
    /// CHANGE_MESSAGE_INVISIBLETIME response: the client builds the new handle from it.
    pub struct ChangeInvisibleTimeResponseHeader {
        /// Pop time of the new handle.
        pub pop_time: i64 = "popTime",
        /// Invisible time of the new handle.
        pub invisible_time: i64 = "invisibleTime",
        /// Revive queue of the new handle.
        pub revive_qid: i32 = "reviveQid",
    }
}

ext_header! {
    /// NOTIFICATION (200054) request: is there something to pop?
    pub struct NotificationRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic.
        pub topic: String = "topic",
        /// Queue; -1 = every read queue.
        pub queue_id: i32 = "queueId",
        /// Long-polling hold, ms.
        pub poll_time: i64 = "pollTime",
        /// When the client sent it (filled in when absent, as for POP).
        pub born_time: Option<i64> = "bornTime",
        /// Orderly: a blocked queue counts as empty.
        pub order: Option<bool> = "order",
        /// Orderly attempt id.
        pub attempt_id: Option<String> = "attemptId",
    }
}

ext_header! {
    /// NOTIFICATION response.
    pub struct NotificationResponseHeader {
        /// Something can be popped.
        pub has_msg: bool = "hasMsg",
        /// The polling table was full.
        pub polling_full: Option<bool> = "pollingFull",
    }
}

ext_header! {
    /// PEEK_MESSAGE (200052) request: read without popping.
    pub struct PeekMessageRequestHeader {
        /// Topic.
        pub topic: String = "topic",
        /// Queue.
        pub queue_id: i32 = "queueId",
        /// At most this many messages.
        pub max_msg_nums: i32 = "maxMsgNums",
        /// Consumer group (whose offset is read from).
        pub consumer_group: String = "consumerGroup",
    }
}

ext_header! {
    /// POLLING_INFO (200055) request: how many POPs are held on one queue key.
    pub struct PollingInfoRequestHeader {
        /// Consumer group.
        pub consumer_group: String = "consumerGroup",
        /// Topic.
        pub topic: String = "topic",
        /// Queue; -1 for POPs of every queue.
        pub queue_id: i32 = "queueId",
    }
}

ext_header! {
    /// POLLING_INFO response.
    pub struct PollingInfoResponseHeader {
        /// POP requests held now under `topic@group@queueId`.
        pub polling_num: i32 = "pollingNum",
    }
}
