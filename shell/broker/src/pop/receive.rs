//! POP_MESSAGE (200050) and PEEK_MESSAGE (200052) (`PopMessageProcessor`,
//! `PeekMessageProcessor`).
//!
//! A POP reads each asked queue under its lock (`topic@group@queueId`), from the group's
//! consumer offset, with the request's filter; what it finds is named in a checkpoint
//! appended to revive queue `counter % reviveQueueNum` **before** the offset moves past
//! it, so a crash between the two repeats messages and never loses them. The pop retry
//! topic `%RETRY%<group>_<topic>` is mixed in as RocketMQ does: first in
//! `popFromRetryProbability` percent of POPs, otherwise only when the batch is not full.
//! The body is the stored records as they are (RocketMQ with
//! `popResponseReturnActualRetryTopic=true`); clients rewrite a retry record's topic.

use std::time::{Duration, Instant};

use tern_engine::record::RecordView;
use tern_shell::body::{SubscriptionData, TopicConfig};
use tern_shell::headers::{
    PeekMessageRequestHeader, PopMessageRequestHeader, PopMessageResponseHeader,
};
use tern_shell::pop::{
    MAX_CK_MESSAGES, ORDER_REVIVE_QUEUE, PopCheckPoint, RETRY_NORMAL, msg_offset_entry, retry_flag,
    start_offset_entry,
};
use tern_shell::runtime::{self, now_ms};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use super::order::Block;
use super::records;
use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::filter::PullFilter;
use crate::topics::{PERM_READ, refusals};

/// Longest hold, whatever the client asks (Java asks 15 s, times out 10 s later).
pub(super) const MAX_HOLD: Duration = Duration::from_secs(30);
/// RocketMQ's `isTimeoutTooMuch` slack: a request older than its poll time plus this is
/// answered POLLING_TIMEOUT at once.
pub(super) const BORN_SLACK_MS: i64 = 500;

/// When a POP or NOTIFICATION held from `now` gives up: what is left of the poll time
/// its client gave, counted from its birth, and at most [`MAX_HOLD`].
pub(super) fn hold_deadline(born: i64, poll_time: i64, now: i64) -> Instant {
    let left = born.saturating_add(poll_time).saturating_sub(now).max(0) as u64;
    Instant::now() + Duration::from_millis(left).min(MAX_HOLD)
}

/// Holds a POP or NOTIFICATION until `woken` (its listeners, taken before the read that
/// found nothing) completes, `deadline` passes or the broker shuts down; false at once
/// when the deadline has already passed.
pub(super) async fn hold(
    ctx: &BrokerCtx,
    woken: impl Future<Output = ()>,
    deadline: Instant,
) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return false;
    }
    ctx.shutdown
        .until(async {
            let _ = runtime::timeout(left, woken).await;
        })
        .await;
    true
}
/// Longest wait for reput before a read (see [`crate::processor::pull`]).
pub(super) const CATCH_UP: Duration = Duration::from_secs(1);
/// `ConsumeInitMode.MAX`.
const INIT_MODE_MAX: i32 = 1;

/// What one read of the asked queues found.
#[derive(Debug, Default)]
struct Popped {
    body: Vec<u8>,
    count: u32,
    start_info: Vec<String>,
    msg_info: Vec<String>,
    order_info: Vec<String>,
    rest: i64,
}

/// One POP (or PEEK) as validated.
struct Plan<'a> {
    group: &'a str,
    topic: &'a TopicConfig,
    queue_id: i32,
    max: u32,
    filter: PullFilter,
    pop_time: i64,
    invisible_time: i64,
    revive_qid: i32,
    order: bool,
    attempt_id: &'a str,
    init_mode: i32,
    retry_first: bool,
    /// PEEK: write nothing, move nothing.
    peek: bool,
}

/// The group's settings when it may consume (POP, NOTIFICATION), or RocketMQ's answer:
/// SUBSCRIPTION_GROUP_NOT_EXIST, or NO_PERMISSION for a group with `consumeEnable=false`.
pub(super) fn consumable_group(
    ctx: &BrokerCtx,
    group: &str,
) -> Result<tern_shell::body::SubscriptionGroupConfig, Refusal> {
    match ctx.groups.get_or_create(group) {
        None => Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{group}] does not exist"),
        )),
        Some(g) if !g.consume_enable => Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("subscription group no permission, {group}"),
        )),
        Some(g) => Ok(g),
    }
}

/// The topic for a POP, PEEK or NOTIFICATION, or the answer refusing it.
pub(super) fn readable_topic(
    ctx: &BrokerCtx,
    topic: &str,
    queue_id: i32,
) -> Result<TopicConfig, Refusal> {
    let Some(t) = ctx.topics.get(topic) else {
        return Err(refusals::not_exist(topic));
    };
    if t.perm & PERM_READ == 0 {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("the topic[{topic}] peeking message is forbidden"),
        ));
    }
    if queue_id >= t.read_queue_nums || queue_id < -1 {
        return Err(refusals::queue_illegal(
            ResponseCode::SystemError,
            topic,
            queue_id,
            t.read_queue_nums,
        ));
    }
    Ok(t)
}

fn header(plan_time: i64, invisible: i64, rq: i32, p: &Popped) -> PopMessageResponseHeader {
    let join = |v: &Vec<String>| (!v.is_empty()).then(|| v.join(";"));
    PopMessageResponseHeader {
        pop_time: plan_time,
        invisible_time: invisible,
        revive_qid: rq,
        rest_num: p.rest,
        start_offset_info: join(&p.start_info),
        msg_offset_info: join(&p.msg_info),
        order_count_info: join(&p.order_info),
    }
}

/// POP_MESSAGE.
pub async fn pop(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: PopMessageRequestHeader = req.decode_header()?;
    let now = now_ms();
    let born = h.born_time.filter(|b| *b != 0).unwrap_or(now);
    let order = h.order.unwrap_or(false);
    let cfg = &ctx.config.pop;
    let revive_qid = if order {
        ORDER_REVIVE_QUEUE
    } else {
        (ctx.pop.next_count() % cfg.revive_queue_num as u32) as i32
    };
    let empty = |code| {
        RemotingCommand::response_to(req, code).with_header(&header(
            now,
            h.invisible_time,
            revive_qid,
            &Popped::default(),
        ))
    };
    if ctx.role.get() == BrokerRole::Slave {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            "the broker is a slave: pop is forbidden",
        ));
    }
    if ctx.live.broker_permission() & PERM_READ == 0 {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] pop message is forbidden",
                ctx.config.broker_ip1
            ),
        ));
    }
    if h.max_msg_nums > MAX_CK_MESSAGES as i32 || h.max_msg_nums <= 0 {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            format!(
                "the broker pop message is forbidden: maxMsgNums {} is not in 1..=32",
                h.max_msg_nums
            ),
        ));
    }
    if h.invisible_time <= 0 {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            "invisibleTime must be positive",
        ));
    }
    if now.saturating_sub(born).saturating_sub(h.poll_time.max(0)) > BORN_SLACK_MS {
        return Ok(empty(ResponseCode::PollingTimeout));
    }
    let topic = readable_topic(ctx, &h.topic, h.queue_id)?;
    consumable_group(ctx, &h.consumer_group)?;
    let sub = SubscriptionData {
        topic: h.topic.clone(),
        sub_string: h
            .exp
            .clone()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| "*".into()),
        expression_type: h.exp_type.clone().unwrap_or_else(|| "TAG".into()),
        ..SubscriptionData::default()
    };
    let filter = ctx
        .filters
        .for_pull(ctx.config.enable_property_filter, &h.consumer_group, sub)?;
    let dice = (runtime::now_ms() as u64
        ^ u64::from(ctx.pop.next_count()).wrapping_mul(2_654_435_761))
        % 100;
    let plan = Plan {
        group: &h.consumer_group,
        topic: &topic,
        queue_id: h.queue_id,
        max: h.max_msg_nums as u32,
        filter,
        pop_time: now,
        invisible_time: h.invisible_time,
        revive_qid,
        order,
        attempt_id: h.attempt_id.as_deref().unwrap_or(""),
        init_mode: h.init_mode,
        retry_first: !order && dice < u64::from(cfg.pop_from_retry_probability),
        peek: false,
    };
    // Read your writes: a message whose send was answered before this POP may not be
    // dispatched to its queue yet (reput runs beside appends), as for pulls.
    ctx.store.await_caught_up(CATCH_UP).await;
    let mut popped = read_once(ctx, &plan).await;
    if popped.count == 0 && h.poll_time > 0 {
        let key = super::poll_key(&h.topic, &h.consumer_group, h.queue_id);
        let Some(_slot) = ctx.pop.poll_slot(key, cfg) else {
            return Ok(empty(ResponseCode::PollingFull));
        };
        // New redeliveries arrive in this one; the others are only read.
        let retry = cfg.retry_topic(&h.topic, &h.consumer_group);
        let deadline = hold_deadline(born, h.poll_time, now);
        while popped.count == 0 && !ctx.shutdown.is_triggered() {
            let own = ctx.holds.listen(&h.topic, h.queue_id);
            let retried = ctx.holds.listen(&retry, -1);
            // Listening first: a message dispatched in between is seen by this read.
            let plan = Plan {
                pop_time: now_ms(),
                ..plan_copy(&plan)
            };
            popped = read_once(ctx, &plan).await;
            if popped.count > 0 {
                return Ok(found(req, &plan, popped));
            }
            if !hold(ctx, runtime::race(own, retried), deadline).await {
                break;
            }
        }
    }
    if popped.count == 0 {
        let code = ResponseCode::PollingTimeout;
        return Ok(RemotingCommand::response_to(req, code).with_header(&header(
            now,
            h.invisible_time,
            revive_qid,
            &popped,
        )));
    }
    Ok(found(req, &plan, popped))
}

fn plan_copy<'a>(p: &Plan<'a>) -> Plan<'a> {
    Plan {
        group: p.group,
        topic: p.topic,
        queue_id: p.queue_id,
        max: p.max,
        filter: p.filter.clone(),
        pop_time: p.pop_time,
        invisible_time: p.invisible_time,
        revive_qid: p.revive_qid,
        order: p.order,
        attempt_id: p.attempt_id,
        init_mode: p.init_mode,
        retry_first: p.retry_first,
        peek: p.peek,
    }
}

fn found(req: &RemotingCommand, plan: &Plan<'_>, p: Popped) -> RemotingCommand {
    let hdr = header(plan.pop_time, plan.invisible_time, plan.revive_qid, &p);
    RemotingCommand::response_to(req, ResponseCode::Success)
        .with_header(&hdr)
        .with_remark("FOUND")
        .with_body(p.body)
}

/// Reads the asked queues once, the retry topic mixed in.
async fn read_once(ctx: &BrokerCtx, plan: &Plan<'_>) -> Popped {
    let mut out = Popped::default();
    let n = plan.topic.read_queue_nums.max(1);
    let queues: Vec<i32> = if plan.queue_id < 0 {
        let start = (plan.pop_time.unsigned_abs() % n as u64) as i32;
        (0..n).map(|i| (start + i) % n).collect()
    } else {
        vec![plan.queue_id]
    };
    let retries = if plan.order {
        Vec::new()
    } else {
        ctx.config
            .pop
            .retry_topics_read(&plan.topic.topic_name, plan.group)
    };
    if plan.retry_first {
        for retry in &retries {
            read_queue(ctx, plan, retry, 0, &mut out).await;
        }
    }
    for q in queues {
        read_queue(ctx, plan, &plan.topic.topic_name, q, &mut out).await;
    }
    if !plan.retry_first {
        for retry in &retries {
            if out.count >= plan.max {
                break;
            }
            read_queue(ctx, plan, retry, 0, &mut out).await;
        }
    }
    out
}

/// The group's offset in a queue; a group with none starts as `initMode` says (a retry
/// topic always at its start), committed at once as RocketMQ does.
fn start_offset(
    ctx: &BrokerCtx,
    plan: &Plan<'_>,
    topic: &str,
    queue_id: i32,
    min: u64,
    max: u64,
) -> u64 {
    if let Some(o) = ctx.offsets.query(plan.group, topic, queue_id) {
        return (o.max(0) as u64).max(min);
    }
    let init = if plan.init_mode == INIT_MODE_MAX && retry_flag(topic) == RETRY_NORMAL && min > 0 {
        max.saturating_sub(1).max(min)
    } else {
        // MIN, a retry topic, or a young queue whose offset 0 is still held (RocketMQ
        // checks the page cache; a queue still starting at 0 is read from there).
        min
    };
    if !plan.peek {
        ctx.offsets.commit(plan.group, topic, queue_id, init as i64);
    }
    init
}

/// How many messages of a queue holding `[min, max)` lie past the group's committed
/// offset: what a POP that reads none of them counts as left.
fn unread(ctx: &BrokerCtx, plan: &Plan<'_>, topic: &str, queue_id: i32, min: u64, max: u64) -> i64 {
    let at = ctx
        .offsets
        .query(plan.group, topic, queue_id)
        .unwrap_or(0)
        .max(0) as u64;
    max.saturating_sub(at.max(min)) as i64
}

/// Pops from one queue into `out`.
async fn read_queue(
    ctx: &BrokerCtx,
    plan: &Plan<'_>,
    topic: &str,
    queue_id: i32,
    out: &mut Popped,
) {
    let want = plan.max.saturating_sub(out.count);
    let (min, max) = ctx.store.queue_bounds(topic, queue_id);
    if want == 0 || max == 0 {
        if max > 0 {
            out.rest += unread(ctx, plan, topic, queue_id, min, max);
        }
        return;
    }
    // Held through read, checkpoint and commit: two POPs never take the same messages.
    // A PEEK writes nothing, so it takes no lock.
    let _lock = if plan.peek {
        None
    } else if let Some(l) = ctx.pop.try_lock(topic, plan.group, queue_id) {
        Some(l)
    } else {
        out.rest += unread(ctx, plan, topic, queue_id, min, max);
        return;
    };
    let mut offset = start_offset(ctx, plan, topic, queue_id, min, max);
    let mut want = want;
    if plan.order {
        match ctx
            .pop
            .order
            .check_block(topic, plan.group, queue_id, plan.attempt_id, plan.pop_time)
        {
            Block::Free => {}
            Block::SameAttempt(from) => offset = from,
            Block::Blocked => {
                out.rest += max.saturating_sub(offset) as i64;
                return;
            }
        }
        want = want.min(MAX_CK_MESSAGES as u32);
    }
    let filter = if retry_flag(topic) == RETRY_NORMAL {
        plan.filter.clone()
    } else {
        // The retry topic holds only copies of messages that matched: RocketMQ reads it
        // with SUB_ALL.
        PullFilter::All
    };
    let Some(p) = filter
        .read_off_executor(&ctx.store, topic, queue_id, offset, want)
        .await
    else {
        return;
    };
    out.rest += p.max.saturating_sub(p.next) as i64;
    if p.count == 0 {
        if p.next > offset && !plan.peek && !plan.order {
            // Everything scanned was filtered out: RocketMQ's ck-less "mock" entry.
            ctx.offsets
                .commit(plan.group, topic, queue_id, p.next as i64);
        }
        return;
    }
    let offsets = record_offsets(&p.body);
    if offsets.len() != p.count as usize || offsets.is_empty() {
        log::error!(
            "POP {topic}/{queue_id}@{offset}: the records read do not parse; nothing popped"
        );
        return;
    }
    let flag = retry_flag(topic);
    if !plan.peek {
        if plan.order {
            let counts = ctx.pop.order.update(
                topic,
                plan.group,
                queue_id,
                plan.pop_time,
                plan.invisible_time,
                &offsets,
                plan.attempt_id,
            );
            for (o, c) in offsets.iter().zip(&counts) {
                out.order_info.push(format!("{flag} qo{queue_id}%{o} {c}"));
            }
            let least = counts.iter().min().copied().unwrap_or(0);
            out.order_info.push(format!("{flag} {queue_id} {least}"));
            ctx.offsets
                .commit(plan.group, topic, queue_id, offsets[0] as i64);
        } else {
            let first = offsets[0];
            let ck = PopCheckPoint {
                start_offset: first as i64,
                pop_time: plan.pop_time,
                invisible_time: plan.invisible_time,
                num: offsets.len() as u8,
                queue_id,
                topic: topic.to_owned(),
                cid: plan.group.to_owned(),
                queue_offset_diff: Some(offsets.iter().map(|o| (o - first) as i32).collect()),
                broker_name: ctx.config.broker_name.clone(),
                ..PopCheckPoint::default()
            };
            if let Err(e) = records::append_ck(ctx, plan.revive_qid, &ck) {
                // Not named in a checkpoint, so not handed out: the offset stays.
                log::warn!("POP {topic}/{queue_id}: checkpoint not stored ({e}); nothing popped");
                return;
            }
            ctx.offsets
                .commit(plan.group, topic, queue_id, p.next as i64);
        }
    }
    out.start_info
        .push(start_offset_entry(flag, queue_id, offsets[0]));
    out.msg_info
        .push(msg_offset_entry(flag, queue_id, &offsets));
    out.count += p.count;
    out.body.extend_from_slice(&p.body);
    ctx.metrics
        .messages_out(topic, plan.group, u64::from(p.count), p.body.len() as u64);
}

/// The queue offset of each record in a body of stored records.
fn record_offsets(mut body: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Ok(v) = RecordView::parse(body) else {
            break;
        };
        out.push(v.queue_offset().max(0) as u64);
        body = body.get(v.total_size() as usize..).unwrap_or_default();
    }
    out
}

/// PEEK_MESSAGE: the messages a POP would get, with no checkpoint and no offset moved.
pub async fn peek(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: PeekMessageRequestHeader = req.decode_header()?;
    if h.max_msg_nums > MAX_CK_MESSAGES as i32 || h.max_msg_nums <= 0 {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            format!("maxMsgNums {} is not in 1..=32", h.max_msg_nums),
        ));
    }
    let topic = readable_topic(ctx, &h.topic, h.queue_id)?;
    let now = now_ms();
    let plan = Plan {
        group: &h.consumer_group,
        topic: &topic,
        queue_id: h.queue_id,
        max: h.max_msg_nums as u32,
        filter: PullFilter::All,
        pop_time: now,
        invisible_time: 0,
        revive_qid: 0,
        order: false,
        attempt_id: "",
        init_mode: 0,
        retry_first: false,
        peek: true,
    };
    ctx.store.await_caught_up(CATCH_UP).await;
    let p = read_once(ctx, &plan).await;
    if p.count == 0 {
        return Ok(
            RemotingCommand::response_to(req, ResponseCode::PullNotFound)
                .with_header(&header(now, 0, 0, &p)),
        );
    }
    Ok(found(req, &plan, p))
}
