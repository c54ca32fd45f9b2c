//! The refusals of a request naming a topic or queue the broker does not serve, worded
//! once as RocketMQ words them (SEND, PULL, POP and its ACK each checked them in its own
//! copy of the text).

use tern_shell::{Refusal, ResponseCode};

/// TOPIC_NOT_EXIST for `topic`.
pub(crate) fn not_exist(topic: &str) -> Refusal {
    Refusal::new(
        ResponseCode::TopicNotExist,
        format!("topic[{topic}] not exist, apply first please!"),
    )
}

/// A queue id outside `topic`'s `read_queue_nums` read queues. The code is the request's:
/// SYSTEM_ERROR for a pull or a POP, MESSAGE_ILLEGAL for an ACK, as in RocketMQ.
pub(crate) fn queue_illegal(
    code: ResponseCode,
    topic: &str,
    queue_id: i32,
    read_queue_nums: i32,
) -> Refusal {
    Refusal::new(
        code,
        format!(
            "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{read_queue_nums}]"
        ),
    )
}
