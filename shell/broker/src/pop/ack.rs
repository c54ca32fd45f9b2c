//! ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME
//! (200053) (`AckMessageProcessor`, `ChangeInvisibleTimeProcessor`).
//!
//! An ack is a record in the checkpoint's revive queue, answered once appended (no flush
//! wait: a lost ack only makes the message revive, a duplicate RocketMQ allows). A
//! change of invisible time appends a new one-message checkpoint **first**, then acks
//! the old one, so a crash between the two can only revive the message twice. Orderly
//! handles (revive queue 999) change the queue's batch instead ([`super::order`]).

use tern_shell::body::BatchAckMessageRequestBody;
use tern_shell::body::from_json;
use tern_shell::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
};
use tern_shell::pop::{AckMsg, ExtraInfo, MAX_BATCH_ACKS, ORDER_REVIVE_QUEUE, PopCheckPoint};
use tern_shell::runtime::now_ms;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use super::order::OrderAck;
use super::records;
use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::topics::refusals;

/// Checks topic, queue and revive queue of an ack or change; returns the queue bounds.
fn check_target(
    ctx: &BrokerCtx,
    topic: &str,
    queue_id: i32,
    revive_qid: i32,
) -> Result<(u64, u64), Refusal> {
    if ctx.role.get() == BrokerRole::Slave {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            "the broker is a slave: ack is forbidden",
        ));
    }
    let Some(t) = ctx.topics.get(topic) else {
        return Err(refusals::not_exist(topic));
    };
    if queue_id < 0 || queue_id >= t.read_queue_nums {
        return Err(refusals::queue_illegal(
            ResponseCode::MessageIllegal,
            topic,
            queue_id,
            t.read_queue_nums,
        ));
    }
    if revive_qid != ORDER_REVIVE_QUEUE && revive_qid >= ctx.config.pop.revive_queue_num {
        return Err(Refusal::new(
            ResponseCode::MessageIllegal,
            format!("reviveQid {revive_qid} is illegal"),
        ));
    }
    Ok(ctx.store.queue_bounds(topic, queue_id))
}

fn handle(extra: &str) -> Result<ExtraInfo, Refusal> {
    ExtraInfo::parse(extra).map_err(|e| Refusal::new(ResponseCode::MessageIllegal, e))
}

/// An orderly ack: moves the group's offset to the first unacked message of the batch
/// and wakes held POPs once the queue is free.
async fn ack_orderly(
    ctx: &BrokerCtx,
    group: &str,
    topic: &str,
    queue_id: i32,
    pop_time: i64,
    offset: u64,
) -> Result<(), Refusal> {
    let Some(_lock) = ctx.pop.lock(topic, group, queue_id).await else {
        return Err(Refusal::new(
            ResponseCode::SystemBusy,
            "the queue is busy, try again",
        ));
    };
    match ctx
        .pop
        .order
        .ack(topic, group, queue_id, pop_time, offset, now_ms())
    {
        OrderAck::Acked { commit, unblocked } => {
            ctx.offsets.commit(group, topic, queue_id, commit as i64);
            if unblocked {
                ctx.holds.wake(topic, queue_id);
            }
            Ok(())
        }
        // RocketMQ ignores an ack of an older batch and answers SUCCESS.
        OrderAck::Stale => Ok(()),
        OrderAck::NotInBatch => Err(Refusal::new(
            ResponseCode::MessageIllegal,
            format!("offset {offset} is not in the batch in flight"),
        )),
    }
}

/// ACK_MESSAGE.
pub async fn ack(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: AckMessageRequestHeader = req.decode_header()?;
    let extra = handle(&h.extra_info)?;
    let (min, max) = check_target(ctx, &h.topic, h.queue_id, extra.revive_qid)?;
    if h.offset < min as i64 || h.offset > max as i64 {
        return Err(Refusal::new(
            ResponseCode::NoMessage,
            format!("offset {} is not in [{min}, {max}]", h.offset),
        ));
    }
    if extra.revive_qid == ORDER_REVIVE_QUEUE {
        ack_orderly(
            ctx,
            &h.consumer_group,
            &h.topic,
            h.queue_id,
            extra.pop_time,
            h.offset as u64,
        )
        .await?;
        return Ok(RemotingCommand::response_to(req, ResponseCode::Success));
    }
    let a = AckMsg::of_handle(&extra, h.consumer_group, h.topic, h.queue_id, h.offset);
    match records::append_ack(ctx, extra.revive_qid, &a) {
        Ok(_) => Ok(RemotingCommand::response_to(req, ResponseCode::Success)),
        // RocketMQ logs a failed put and answers SUCCESS (the message then revives); a
        // refusal tells the client its ack did not land.
        Err(e) => Err(Refusal::new(
            ResponseCode::SystemError,
            format!("ack not stored: {e}"),
        )),
    }
}

/// BATCH_ACK_MESSAGE: one `bAck` record per entry, offsets outside the queue skipped.
pub async fn batch_ack(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    if req.body.is_empty() {
        return Err(Refusal::new(
            ResponseCode::NoMessage,
            "empty batch ack body",
        ));
    }
    let body: BatchAckMessageRequestBody = match from_json(&req.body) {
        Ok(b) => b,
        Err(e) => return Err(Refusal::new(ResponseCode::SystemError, e.to_string())),
    };
    if body.acks.is_empty() {
        return Err(Refusal::new(ResponseCode::NoMessage, "no acks in the body"));
    }
    if body.acks.len() > MAX_BATCH_ACKS {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            format!("more than {MAX_BATCH_ACKS} acks in one body"),
        ));
    }
    for b in &body.acks {
        let (retry, offsets) = match (b.retry_flag(), b.offsets()) {
            (Ok(r), Ok(o)) => (r, o),
            (Err(e), _) | (_, Err(e)) => return Err(Refusal::new(ResponseCode::MessageIllegal, e)),
        };
        let info = ExtraInfo {
            ck_queue_offset: b.start_offset,
            pop_time: b.pop_time,
            invisible_time: b.invisible_time,
            revive_qid: b.revive_queue_id,
            retry,
            broker_name: body.broker_name.clone(),
            queue_id: b.queue_id,
            offset: None,
        };
        let topic = info.real_topic(&b.topic, &b.consumer_group);
        let (min, max) = check_target(ctx, &topic, b.queue_id, b.revive_queue_id)?;
        let offsets: Vec<i64> = offsets
            .into_iter()
            .filter(|o| *o >= min as i64 && *o <= max as i64)
            .collect();
        if offsets.is_empty() {
            continue;
        }
        if b.revive_queue_id == ORDER_REVIVE_QUEUE {
            for o in offsets {
                ack_orderly(
                    ctx,
                    &b.consumer_group,
                    &topic,
                    b.queue_id,
                    b.pop_time,
                    o as u64,
                )
                .await?;
            }
            continue;
        }
        let a = AckMsg {
            ack_offset: -1,
            start_offset: b.start_offset,
            consumer_group: b.consumer_group.clone(),
            topic,
            queue_id: b.queue_id,
            pop_time: b.pop_time,
            broker_name: body.broker_name.clone(),
            ack_offset_list: Some(offsets),
        };
        if let Err(e) = records::append_ack(ctx, b.revive_queue_id, &a) {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("ack not stored: {e}"),
            ));
        }
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// CHANGE_MESSAGE_INVISIBLETIME.
pub async fn change_invisible_time(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ChangeInvisibleTimeRequestHeader = req.decode_header()?;
    let extra = handle(&h.extra_info)?;
    let (min, max) = check_target(ctx, &h.topic, h.queue_id, extra.revive_qid)?;
    if h.offset < min as i64 || h.offset >= max as i64 {
        return Err(Refusal::new(
            ResponseCode::NoMessage,
            format!("offset {} is not in [{min}, {max})", h.offset),
        ));
    }
    if h.invisible_time < 0 {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            "invisibleTime must not be negative",
        ));
    }
    let now = now_ms();
    if extra.revive_qid == ORDER_REVIVE_QUEUE {
        let Some(_lock) = ctx.pop.lock(&h.topic, &h.consumer_group, h.queue_id).await else {
            return Err(Refusal::new(
                ResponseCode::SystemBusy,
                "the queue is busy, try again",
            ));
        };
        let next = now.saturating_add(h.invisible_time);
        ctx.pop.order.change_visible(
            &h.topic,
            &h.consumer_group,
            h.queue_id,
            extra.pop_time,
            h.offset as u64,
            next,
        );
        return Ok(
            RemotingCommand::response_to(req, ResponseCode::Success).with_header(
                &ChangeInvisibleTimeResponseHeader {
                    pop_time: extra.pop_time,
                    invisible_time: next.saturating_sub(extra.pop_time),
                    revive_qid: ORDER_REVIVE_QUEUE,
                },
            ),
        );
    }
    let ck = PopCheckPoint {
        start_offset: h.offset,
        pop_time: now,
        invisible_time: h.invisible_time,
        num: 1,
        queue_id: h.queue_id,
        topic: h.topic.clone(),
        cid: h.consumer_group.clone(),
        queue_offset_diff: Some(vec![0]),
        broker_name: extra.broker_name.clone(),
        ..PopCheckPoint::default()
    };
    if let Err(e) = records::append_ck(ctx, extra.revive_qid, &ck) {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!("checkpoint not stored: {e}"),
        ));
    }
    let old = AckMsg::of_handle(&extra, h.consumer_group, h.topic, h.queue_id, h.offset);
    if let Err(e) = records::append_ack(ctx, extra.revive_qid, &old) {
        // The new checkpoint is stored: the message revives at the old time too.
        log::warn!("CHANGE_MESSAGE_INVISIBLETIME: ack of the old handle not stored: {e}");
    }
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &ChangeInvisibleTimeResponseHeader {
                pop_time: now,
                invisible_time: h.invisible_time,
                revive_qid: extra.revive_qid,
            },
        ),
    )
}
