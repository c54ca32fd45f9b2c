//! NOTIFICATION (200054, `NotificationProcessor`): whether a POP would find something,
//! answered at once or, held like a POP, when a message arrives or the poll time passes.

use tern_shell::Answer;
use tern_shell::body::TopicConfig;
use tern_shell::headers::{NotificationRequestHeader, NotificationResponseHeader};
use tern_shell::runtime::{self, now_ms};
use tern_shell::{RemotingCommand, ResponseCode};

use super::order::Block;
use super::receive::{BORN_SLACK_MS, CATCH_UP, hold, hold_deadline, readable_topic};
use crate::BrokerCtx;

/// Whether a POP would find something, without reading bodies: some queue (or the
/// retry topic) holds messages past the group's offset; an orderly queue in flight
/// counts as empty.
fn has_message(
    ctx: &BrokerCtx,
    h: &NotificationRequestHeader,
    topic: &TopicConfig,
    now: i64,
) -> bool {
    let queues: Vec<i32> = if h.queue_id < 0 {
        (0..topic.read_queue_nums).collect()
    } else {
        vec![h.queue_id]
    };
    let order = h.order.unwrap_or(false);
    let attempt = h.attempt_id.as_deref().unwrap_or("");
    let ahead = |t: &str, q: i32| {
        let (min, max) = ctx.store.queue_bounds(t, q);
        let at = ctx
            .offsets
            .query(&h.consumer_group, t, q)
            .map_or(min, |o| (o.max(0) as u64).max(min));
        max > at
    };
    let normal = queues.iter().any(|q| {
        ahead(&h.topic, *q)
            && (!order
                || ctx
                    .pop
                    .order
                    .check_block(&h.topic, &h.consumer_group, *q, attempt, now)
                    != Block::Blocked)
    });
    normal
        || (!order
            && ctx
                .config
                .pop
                .retry_topics_read(&h.topic, &h.consumer_group)
                .iter()
                .any(|t| ahead(t, 0)))
}

/// NOTIFICATION: answers `hasMsg` once something can be popped or the poll time passes.
pub async fn notification(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: NotificationRequestHeader = req.decode_header()?;
    let topic = readable_topic(ctx, &h.topic, h.queue_id)?;
    super::receive::consumable_group(ctx, &h.consumer_group)?;
    let answer = |has_msg: bool, full: bool| {
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &NotificationResponseHeader {
                has_msg,
                polling_full: Some(full),
            },
        )
    };
    let now = now_ms();
    let born = h.born_time.filter(|b| *b != 0).unwrap_or(now);
    ctx.store.await_caught_up(CATCH_UP).await;
    if has_message(ctx, &h, &topic, now) {
        return Ok(answer(true, false));
    }
    if h.poll_time <= 0 || now.saturating_sub(born).saturating_sub(h.poll_time) > BORN_SLACK_MS {
        return Ok(answer(false, false));
    }
    let key = super::notification_key(&h.topic, &h.consumer_group, h.queue_id);
    let Some(_slot) = ctx.pop.poll_slot(key, &ctx.config.pop) else {
        return Ok(answer(false, true));
    };
    // New redeliveries arrive in this one; the others are only read.
    let retry = ctx.config.pop.retry_topic(&h.topic, &h.consumer_group);
    let deadline = hold_deadline(born, h.poll_time, now);
    while !ctx.shutdown.is_triggered() {
        let own = ctx.holds.listen(&h.topic, h.queue_id);
        let retried = ctx.holds.listen(&retry, -1);
        if has_message(ctx, &h, &topic, now_ms()) {
            return Ok(answer(true, false));
        }
        if !hold(ctx, runtime::race(own, retried), deadline).await {
            break;
        }
    }
    Ok(answer(false, false))
}
