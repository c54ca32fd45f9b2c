//! Offsets: committed consumer offsets and queue bounds, searches by time.

use std::collections::BTreeMap;

use tern_shell::body::{ConsumerOffsetSerializeWrapper, NumKeyMap};
use tern_shell::headers::{
    GetEarliestMsgStoretimeResponseHeader, GetMaxOffsetRequestHeader, OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader, TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;

fn offset_response(req: &RemotingCommand, offset: i64) -> RemotingCommand {
    RemotingCommand::response_to(req, ResponseCode::Success)
        .with_header(&OffsetResponseHeader { offset })
}

/// QUERY_CONSUMER_OFFSET: the committed offset; when none, 0 if the queue still holds its
/// first message (RocketMQ's behaviour, so a new group reads from the start of a young
/// queue), else QUERY_NOT_FOUND so the client applies its ConsumeFromWhere.
pub fn query_consumer_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: QueryConsumerOffsetRequestHeader = req.decode_header()?;
    if let Some(o) = ctx.offsets.query(&h.consumer_group, &h.topic, h.queue_id) {
        return Ok(offset_response(req, o));
    }
    let (min, _) = ctx.store.queue_bounds(&h.topic, h.queue_id);
    if min == 0 && h.set_zero_if_not_found != Some(false) {
        return Ok(offset_response(req, 0));
    }
    Err(Refusal::new(
        ResponseCode::QueryNotFound,
        "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
    ))
}

/// UPDATE_CONSUMER_OFFSET.
pub fn update_consumer_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: UpdateConsumerOffsetRequestHeader = req.decode_header()?;
    let topic = ctx.topics.existing(&h.topic)?;
    // A peer must not grow the offset table with queues the topic does not have.
    if !crate::offsets::valid_queue_id(h.queue_id, &topic) {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "queueId[{}] is illegal, topic:[{}] has {} queues",
                h.queue_id,
                h.topic,
                topic.read_queue_nums.max(topic.write_queue_nums)
            ),
        ));
    }
    ctx.offsets
        .commit(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_MAX_OFFSET: the next queue offset to be written. Counts what was acknowledged
/// before the request: waits for reput (at most 1 s) when it is behind the log.
pub async fn max_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetMaxOffsetRequestHeader = req.decode_header()?;
    ctx.store
        .await_caught_up(std::time::Duration::from_secs(1))
        .await;
    Ok(offset_response(
        req,
        ctx.store.queue_bounds(&h.topic, h.queue_id).1 as i64,
    ))
}

/// GET_MIN_OFFSET.
pub fn min_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: TopicQueueRequestHeader = req.decode_header()?;
    Ok(offset_response(
        req,
        ctx.store.queue_bounds(&h.topic, h.queue_id).0 as i64,
    ))
}

/// SEARCH_OFFSET_BY_TIMESTAMP: the first offset stored at or after the time (LOWER), or
/// the last one stored at or before it (UPPER).
pub fn search_by_time(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: SearchOffsetRequestHeader = req.decode_header()?;
    let upper = h
        .boundary_type
        .as_deref()
        .is_some_and(|b| b.eq_ignore_ascii_case("UPPER"));
    let (min, _) = ctx.store.queue_bounds(&h.topic, h.queue_id);
    let store = &ctx.store;
    let found = if upper {
        store
            .offset_at_time(&h.topic, h.queue_id, h.timestamp.saturating_add(1))
            .saturating_sub(1)
            .max(min)
    } else {
        store.offset_at_time(&h.topic, h.queue_id, h.timestamp)
    };
    Ok(offset_response(req, found as i64))
}

/// GET_EARLIEST_MSG_STORETIME: store time of the queue's oldest message; -1 when the queue
/// holds none (Java answers SUCCESS with the store's -1, and its client would throw on an
/// error code).
pub fn earliest_time(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: TopicQueueRequestHeader = req.decode_header()?;
    let (min, _) = ctx.store.queue_bounds(&h.topic, h.queue_id);
    let ts = ctx.store.store_time_of(&h.topic, h.queue_id, min);
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &GetEarliestMsgStoretimeResponseHeader {
                timestamp: ts.unwrap_or(-1),
            },
        ),
    )
}

/// GET_ALL_CONSUMER_OFFSET: the whole table, as consumerOffset.json.
pub fn all_consumer_offsets(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let table: BTreeMap<String, NumKeyMap<i64>> = ctx
        .offsets
        .snapshot()
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                NumKeyMap(v.into_iter().map(|(q, o)| (i64::from(q), o)).collect()),
            )
        })
        .collect();
    let body = ConsumerOffsetSerializeWrapper {
        offset_table: table,
        ..Default::default()
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&body)))
}
