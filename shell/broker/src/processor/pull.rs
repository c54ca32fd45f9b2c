//! PULL_MESSAGE: read a queue from an offset, filter by tag code, answer with the stored
//! records as they are; when nothing is there and the client allows it, hold the request
//! until a message arrives or the client's suspend timeout passes.

use std::time::{Duration, Instant};

use tern_engine::hash::java_string_hash;
use tern_shell::body::SubscriptionData;
use tern_shell::headers::{PullMessageRequestHeader, PullMessageResponseHeader, pull_sys_flag};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, ResponseCode};

use super::bad_header;
use crate::BrokerCtx;
use crate::clients::normalize_subscription;
use crate::topics::PERM_READ;

/// Longest hold, whatever the client asks (Java asks 15 s and times out at 30 s).
const MAX_HOLD: Duration = Duration::from_secs(30);

/// What a pull answers with, before encoding.
struct Answer {
    code: ResponseCode,
    next: u64,
    min: u64,
    max: u64,
    body: Vec<u8>,
}

fn tag_filter(sub: &SubscriptionData) -> Option<Vec<i32>> {
    let tags = SubscriptionData::parse_tags(&sub.sub_string);
    if tags.is_empty() {
        return None;
    }
    Some(tags.iter().map(|t| java_string_hash(t)).collect())
}

/// Reads once: RocketMQ's GetMessageStatus mapped to response codes (wire-protocol.md §2.3).
fn read(ctx: &BrokerCtx, h: &PullMessageRequestHeader, codes: Option<&[i32]>) -> Answer {
    let offset = h.queue_offset.max(0) as u64;
    let filter = codes.map(|codes| move |tag: i64| codes.contains(&(tag as i32)));
    let filter_ref: Option<&dyn Fn(i64) -> bool> =
        filter.as_ref().map(|f| f as &dyn Fn(i64) -> bool);
    let max_msgs = h.max_msg_nums.max(1) as u32;
    let Some(p) = ctx
        .store
        .read_queue(&h.topic, h.queue_id, offset, max_msgs, filter_ref)
    else {
        // The queue was never written.
        let code = if h.queue_offset != 0 {
            ResponseCode::PullOffsetMoved
        } else {
            ResponseCode::PullNotFound
        };
        return Answer {
            code,
            next: 0,
            min: 0,
            max: 0,
            body: Vec::new(),
        };
    };
    let (min, max) = (p.min, p.max);
    let answer = |code, next| Answer {
        code,
        next,
        min,
        max,
        body: Vec::new(),
    };
    if max == 0 {
        return answer(
            if h.queue_offset != 0 {
                ResponseCode::PullOffsetMoved
            } else {
                ResponseCode::PullNotFound
            },
            0,
        );
    }
    if h.queue_offset < 0 || offset < min {
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
        return Answer {
            code: ResponseCode::Success,
            next: p.next,
            min,
            max,
            body: p.body,
        };
    }
    if p.all_filtered {
        return answer(ResponseCode::PullRetryImmediately, p.next);
    }
    answer(ResponseCode::PullRetryImmediately, p.next.max(offset))
}

/// PULL_MESSAGE / LITE_PULL_MESSAGE.
pub async fn pull(ctx: &BrokerCtx, req: &RemotingCommand) -> RemotingCommand {
    let h: PullMessageRequestHeader = match req.decode_header() {
        Ok(h) => h,
        Err(e) => return bad_header(req, e),
    };
    let Some(topic) = ctx.topics.get(&h.topic) else {
        return RemotingCommand::error_response(
            req,
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist, apply first please!", h.topic),
        );
    };
    if topic.perm & PERM_READ == 0 {
        return RemotingCommand::error_response(
            req,
            ResponseCode::NoPermission,
            format!("the topic[{}] pulling message is forbidden", h.topic),
        );
    }
    if h.queue_id < 0 || h.queue_id >= topic.read_queue_nums {
        return RemotingCommand::error_response(
            req,
            ResponseCode::SystemError,
            format!(
                "queueId[{}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}]",
                h.queue_id, h.topic, topic.read_queue_nums
            ),
        );
    }
    if ctx.groups.get_or_create(&h.consumer_group).is_none() {
        return RemotingCommand::error_response(
            req,
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{}] does not exist", h.consumer_group),
        );
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
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SubscriptionNotLatest,
                    "the consumer's subscription not latest",
                );
            }
            Some(s) => s,
            None if h.sys_flag & pull_sys_flag::LITE_PULL != 0 => SubscriptionData {
                topic: h.topic.clone(),
                sub_string: "*".into(),
                ..SubscriptionData::default()
            },
            None => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SubscriptionNotExist,
                    format!(
                        "the consumer's subscription not exist, group: {}",
                        h.consumer_group
                    ),
                );
            }
        }
    };
    if !sub.expression_type_or_tag().eq_ignore_ascii_case("TAG") {
        return RemotingCommand::error_response(
            req,
            ResponseCode::SubscriptionParseFailed,
            format!(
                "expression type {} is not supported by this broker yet; use TAG",
                sub.expression_type
            ),
        );
    }
    let sub = normalize_subscription(sub);
    let codes = tag_filter(&sub);
    if h.sys_flag & pull_sys_flag::COMMIT_OFFSET != 0 && h.commit_offset >= 0 {
        ctx.offsets
            .commit(&h.consumer_group, &h.topic, h.queue_id, h.commit_offset);
    }
    let mut answer = read(ctx, &h, codes.as_deref());
    if answer.code == ResponseCode::PullNotFound && h.sys_flag & pull_sys_flag::SUSPEND != 0 {
        let hold = if ctx.config.long_polling {
            Duration::from_millis(h.suspend_timeout_millis.max(0) as u64).min(MAX_HOLD)
        } else {
            ctx.config.short_polling
        };
        let deadline = Instant::now() + hold;
        while answer.code == ResponseCode::PullNotFound && !ctx.shutdown.is_triggered() {
            let listener = ctx.holds.listen(&h.topic, h.queue_id);
            answer = read(ctx, &h, codes.as_deref());
            if answer.code != ResponseCode::PullNotFound {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let woke = runtime::race(
                async { runtime::timeout(left, listener).await.is_ok() },
                async {
                    ctx.shutdown.wait().await;
                    false
                },
            )
            .await;
            answer = read(ctx, &h, codes.as_deref());
            if !woke {
                break;
            }
        }
    }
    let header = PullMessageResponseHeader {
        suggest_which_broker_id: 0,
        next_begin_offset: answer.next as i64,
        min_offset: answer.min as i64,
        max_offset: answer.max as i64,
        ..PullMessageResponseHeader::default()
    };
    RemotingCommand::response_to(req, answer.code)
        .with_header(&header)
        .with_body(answer.body)
}
