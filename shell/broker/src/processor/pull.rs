//! PULL_MESSAGE: read a queue from an offset, filter by tag code or SQL92 on properties,
//! answer with the stored records as they are; when nothing is there and the client
//! allows it, hold the request until a matching message arrives or the client's suspend
//! timeout passes.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tern_shell::body::{MessageModel, SubscriptionData, SubscriptionGroupConfig};
use tern_shell::headers::{PullMessageRequestHeader, PullMessageResponseHeader, pull_sys_flag};
use tern_shell::runtime;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::filter::PullFilter;
use crate::topics::{PERM_READ, refusals};

/// RocketMQ's `MixAll.MASTER_ID`.
const MASTER_ID: i64 = 0;

/// Longest hold, whatever the client asks (Java asks 15 s and times out at 30 s).
const MAX_HOLD: Duration = Duration::from_secs(30);

/// RocketMQ's `ForbiddenType`, in the header of a NO_PERMISSION answer to a pull.
const FORBIDDEN_BROKER: i32 = 1;
const FORBIDDEN_GROUP: i32 = 2;
const FORBIDDEN_BROADCASTING: i32 = 4;

/// NO_PERMISSION with `forbiddenType`, as RocketMQ answers a pull it refuses.
fn forbidden(req: &RemotingCommand, kind: i32, remark: String) -> RemotingCommand {
    let mut resp = RemotingCommand::error_response(req, ResponseCode::NoPermission, remark);
    resp.ext_fields.insert("forbiddenType", kind.to_string());
    resp
}

/// What a pull answers with, before encoding.
struct Reply {
    code: ResponseCode,
    next: u64,
    min: u64,
    max: u64,
    body: Vec<u8>,
    /// Records in `body`.
    count: u32,
    /// The log offset of the last entry scanned ([`crate::store::Pulled::last_physical`]).
    last_physical: Option<u64>,
}

/// Reads once from `queue_offset`: RocketMQ's GetMessageStatus mapped to response codes
/// (wire-protocol.md §2.3).
///
/// Off the executor when it would wait for the disk ([`PullFilter::read_off_executor`]).
async fn read(
    ctx: &BrokerCtx,
    h: &PullMessageRequestHeader,
    queue_offset: i64,
    filter: &PullFilter,
) -> Reply {
    let offset = queue_offset.max(0) as u64;
    let max_msgs = h.max_msg_nums.max(1) as u32;
    let pulled = filter
        .read_off_executor(&ctx.store, &h.topic, h.queue_id, offset, max_msgs)
        .await;
    let Some(p) = pulled else {
        // The queue was never written.
        let code = if queue_offset != 0 {
            ResponseCode::PullOffsetMoved
        } else {
            ResponseCode::PullNotFound
        };
        return Reply {
            code,
            next: 0,
            min: 0,
            max: 0,
            body: Vec::new(),
            count: 0,
            last_physical: None,
        };
    };
    let (min, max) = (p.min, p.max);
    let last_physical = p.last_physical;
    let answer = |code, next| Reply {
        code,
        next,
        min,
        max,
        body: Vec::new(),
        count: 0,
        last_physical,
    };
    if max == 0 {
        return answer(
            if queue_offset != 0 {
                ResponseCode::PullOffsetMoved
            } else {
                ResponseCode::PullNotFound
            },
            0,
        );
    }
    if queue_offset < 0 || offset < min {
        return answer(ResponseCode::PullOffsetMoved, min);
    }
    if offset == max {
        return answer(ResponseCode::PullNotFound, offset);
    }
    if offset > max {
        return answer(
            ResponseCode::PullOffsetMoved,
            if min == 0 { min } else { max },
        );
    }
    if p.count > 0 {
        return Reply {
            code: ResponseCode::Success,
            next: p.next,
            min,
            max,
            body: p.body,
            count: p.count,
            last_physical,
        };
    }
    if p.all_filtered {
        return answer(ResponseCode::PullRetryImmediately, p.next);
    }
    answer(ResponseCode::PullRetryImmediately, p.next.max(offset))
}

/// While a pull is held, messages that arrive but do not match are stepped over without
/// answering (Java's hold service does not wake a pull for them): the held offset moves
/// past them and the pull keeps waiting.
fn skip(answer: &mut Reply, offset: &mut i64) {
    if answer.code == ResponseCode::PullRetryImmediately
        && answer.next >= answer.max
        && answer.next > *offset as u64
    {
        *offset = answer.next as i64;
        answer.code = ResponseCode::PullNotFound;
    }
}

/// RocketMQ's `TOTAL_PHYSICAL_MEMORY_SIZE * accessMessageInMemoryMaxRatio / 100`: a
/// reader further behind the log's end than this reads pages long gone from memory.
fn memory_budget(ratio: u32) -> u64 {
    static TOTAL: OnceLock<u64> = OnceLock::new();
    let total = *TOTAL.get_or_init(|| {
        let info = rustix::system::sysinfo();
        // `c_ulong`: u32 on 32-bit targets.
        #[allow(clippy::useless_conversion)]
        u64::from(info.totalram).saturating_mul(u64::from(info.mem_unit))
    });
    total / 100 * u64::from(ratio.min(100))
}

/// Which replica the client should pull this queue from next (RocketMQ's
/// `suggestWhichBrokerId`, from `PullMessageProcessor.composeResponseHeader`): with
/// `slaveReadEnable`, the group's `whichBrokerWhenConsumeSlowly` for a reader far behind
/// (`log_end` taken before the read), else the group's `brokerId`; a slave that
/// follows a live master sends a reader that is not behind back to it, and answers
/// PULL_RETRY_IMMEDIATELY instead of holding or reporting nothing.
fn suggest(
    ctx: &BrokerCtx,
    group: &SubscriptionGroupConfig,
    answer: &mut Reply,
    log_end: u64,
) -> i64 {
    let behind = answer.last_physical.is_some_and(|p| {
        log_end.saturating_sub(p) > memory_budget(ctx.config.access_message_in_memory_max_ratio)
    });
    let mut id = match (ctx.config.slave_read_enable, behind) {
        (false, _) => MASTER_ID,
        (true, true) => group.which_broker_when_consume_slowly,
        (true, false) => group.broker_id,
    };
    // RocketMQ's `minBrokerIdInGroup == MASTER_ID`: Tern's slave knows its master is up
    // while its replication connection is open. With the master gone it serves on.
    if ctx.role.is_slave() && !behind && ctx.ha.following_master() {
        id = MASTER_ID;
        if answer.code != ResponseCode::Success {
            answer.code = ResponseCode::PullRetryImmediately;
        }
    }
    id
}

/// PULL_MESSAGE / LITE_PULL_MESSAGE.
pub async fn pull(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: PullMessageRequestHeader = req.decode_header()?;
    // RocketMQ's checks, in its order, with its codes, remarks and forbiddenType.
    if ctx.live.broker_permission() & PERM_READ == 0 {
        return Ok(forbidden(
            req,
            FORBIDDEN_BROKER,
            format!(
                "the broker[{}] pulling message is forbidden",
                ctx.config.broker_ip1
            ),
        ));
    }
    let Some(group) = ctx.groups.get_or_create(&h.consumer_group) else {
        return Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{}] does not exist", h.consumer_group),
        ));
    };
    if !group.consume_enable {
        return Ok(forbidden(
            req,
            FORBIDDEN_GROUP,
            format!("subscription group no permission, {}", h.consumer_group),
        ));
    }
    let Some(topic) = ctx.topics.get(&h.topic) else {
        return Err(refusals::not_exist(&h.topic));
    };
    if topic.perm & PERM_READ == 0 {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("the topic[{}] pulling message is forbidden", h.topic),
        ));
    }
    if h.queue_id < 0 || h.queue_id >= topic.read_queue_nums {
        return Err(refusals::queue_illegal(
            ResponseCode::SystemError,
            &h.topic,
            h.queue_id,
            topic.read_queue_nums,
        ));
    }
    if !group.consume_broadcast_enable
        && h.sys_flag & pull_sys_flag::SUBSCRIPTION == 0
        && ctx
            .clients
            .consumer_group(&h.consumer_group)
            .is_some_and(|g| g.message_model == MessageModel::Broadcasting)
    {
        return Ok(forbidden(
            req,
            FORBIDDEN_BROADCASTING,
            format!(
                "the consumer group[{}] can not consume by broadcast way",
                h.consumer_group
            ),
        ));
    }
    // The subscription: this request's when it carries one, else the heartbeat's.
    let sub = if h.sys_flag & pull_sys_flag::SUBSCRIPTION != 0 {
        let expr = h.subscription.clone().unwrap_or_else(|| "*".into());
        SubscriptionData {
            topic: h.topic.clone(),
            sub_string: expr,
            expression_type: h.expression_type.clone().unwrap_or_default(),
            sub_version: h.sub_version,
            ..SubscriptionData::default()
        }
    } else {
        match ctx.clients.subscription(&h.consumer_group, &h.topic) {
            Some(s) if s.sub_version < h.sub_version => {
                return Err(Refusal::new(
                    ResponseCode::SubscriptionNotLatest,
                    "the consumer's subscription not latest",
                ));
            }
            Some(s) => s,
            None if h.sys_flag & pull_sys_flag::LITE_PULL != 0 => SubscriptionData {
                topic: h.topic.clone(),
                sub_string: "*".into(),
                ..SubscriptionData::default()
            },
            None => {
                return Err(Refusal::new(
                    ResponseCode::SubscriptionNotExist,
                    format!(
                        "the consumer's subscription not exist, group: {}",
                        h.consumer_group
                    ),
                ));
            }
        }
    };
    let enable_sql = ctx.config.enable_property_filter;
    let filter = ctx.filters.for_pull(enable_sql, &h.consumer_group, sub)?;
    // A slave's offsets are a copy of its master's, refreshed by `slave_sync`, so a pull's
    // commit flag is ignored there (RocketMQ's `storeOffsetEnable` is false on a slave).
    // UPDATE_CONSUMER_OFFSET still stores, as in RocketMQ.
    let store_offset = ctx.role.get() != BrokerRole::Slave;
    if store_offset && h.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0 && h.commit_offset >= 0 {
        ctx.offsets
            .commit(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
    }
    let mut offset = h.queue_offset;
    let log_end = ctx.store.log_end();
    let mut answer = read(ctx, &h, offset, &filter).await;
    if matches!(
        answer.code,
        ResponseCode::PullNotFound | ResponseCode::PullOffsetMoved
    ) {
        // Read your writes: a message acknowledged before this pull may not be
        // dispatched yet (reput runs beside appends). Wait for reput, never for a lock,
        // and only when it is behind.
        if !ctx.store.caught_up() {
            ctx.store.await_caught_up(Duration::from_secs(1)).await;
            answer = read(ctx, &h, offset, &filter).await;
        }
    }
    let suggested = suggest(ctx, &group, &mut answer, log_end);
    if answer.code == ResponseCode::PullNotFound && h.sys_flag & pull_sys_flag::SUSPEND != 0 {
        let hold = if ctx.config.long_polling {
            Duration::from_millis(h.suspend_timeout_millis.max(0) as u64).min(MAX_HOLD)
        } else {
            ctx.config.short_polling
        };
        let deadline = Instant::now() + hold;
        while answer.code == ResponseCode::PullNotFound && !ctx.shutdown.is_triggered() {
            let listener = ctx.holds.listen(&h.topic, h.queue_id);
            answer = read(ctx, &h, offset, &filter).await;
            skip(&mut answer, &mut offset);
            if answer.code != ResponseCode::PullNotFound {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let released = ctx.holds.listen_release(&h.consumer_group);
            let woke = runtime::race(
                async { runtime::timeout(left, listener).await.is_ok() },
                async {
                    runtime::race(released, ctx.shutdown.wait()).await;
                    false
                },
            )
            .await;
            answer = read(ctx, &h, offset, &filter).await;
            skip(&mut answer, &mut offset);
            if !woke {
                break;
            }
        }
        if answer.code == ResponseCode::PullNotFound && offset != h.queue_offset {
            // Java's answer for a pull whose messages were all filtered out.
            answer.code = ResponseCode::PullRetryImmediately;
        }
    }
    if answer.code == ResponseCode::Success {
        ctx.metrics.pulled(
            &h.topic,
            &h.consumer_group,
            h.queue_id,
            (u64::from(answer.count), answer.body.len() as u64),
            answer.next,
        );
    }
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: suggested,
        next_begin_offset: answer.next as i64,
        min_offset: answer.min as i64,
        max_offset: answer.max as i64,
        ..PullMessageResponseHeader::default()
    };
    Ok(RemotingCommand::response_to(req, answer.code)
        .with_header(&header)
        .with_body(answer.body))
}
