//! QUERY_ASSIGNMENT (400, `QueryAssignmentProcessor`): the broker balances a group's
//! queues for clients that ask (Java's `setClientRebalance(false)`), in the mode the
//! group was given by SET_MESSAGE_REQUEST_MODE ([`super::modes`]; PULL when none).
//!
//! The topic's queues over every broker come from the name servers' route
//! (GET_ROUTEINFO_BY_TOPIC, cached 30 s like RocketMQ's `TopicRouteInfoManager`), or, when
//! no name server answers, from this broker's own topic config; the group's clients from
//! heartbeats. PULL assignments use the named strategy (`AVG`, `AVG_BY_CIRCLE`, the two
//! RocketMQ's broker registers); POP ones `allocate4Pop`: with `popShareQueueNum` ≤ 0 (or
//! at least the other clients' count) every client gets every broker once with queue id
//! -1, otherwise its own share plus the next N clients' shares.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;
use tern_shell::{Answer, Refusal};

use tern_shell::allocate::{AllocateStrategy, sort_queues};
use tern_shell::body::{
    MessageQueue, MessageQueueAssignment, QueryAssignmentRequestBody, QueryAssignmentResponseBody,
    TopicRouteData, from_json, to_json,
};
use tern_shell::headers::GetRouteInfoRequestHeader;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use crate::BrokerCtx;
use crate::topics::PERM_READ;

/// How long a topic's route is reused.
const ROUTE_TTL: Duration = Duration::from_secs(30);
/// How long one name server may take to answer.
const ROUTE_TIMEOUT: Duration = Duration::from_secs(3);
/// Most topics whose routes are cached; past it the cache starts over.
const MAX_ROUTES: usize = 10_000;

/// Topic → (when fetched, its queues over every broker).
#[derive(Debug, Default)]
pub struct Routes {
    map: Mutex<HashMap<String, (Instant, Vec<MessageQueue>)>>,
}

impl Routes {
    fn get(&self, topic: &str) -> Option<Vec<MessageQueue>> {
        let m = self.map.guard();
        m.get(topic)
            .filter(|(at, _)| at.elapsed() < ROUTE_TTL)
            .map(|(_, q)| q.clone())
    }

    fn put(&self, topic: &str, queues: Vec<MessageQueue>) {
        let mut m = self.map.guard();
        if m.len() >= MAX_ROUTES && !m.contains_key(topic) {
            m.clear();
        }
        m.insert(topic.to_owned(), (Instant::now(), queues));
    }
}

/// The readable queues of `topic` on every broker, sorted as Java sorts them.
async fn topic_queues(ctx: &BrokerCtx, topic: &str) -> Option<Vec<MessageQueue>> {
    if let Some(q) = ctx.pop.routes.get(topic) {
        return Some(q);
    }
    for addr in &ctx.config.namesrv_addrs {
        let req = ctx.signed(RemotingCommand::request(
            RequestCode::GetRouteinfoByTopic,
            &GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: None,
            },
        ));
        let Ok(resp) = ctx.namesrv.invoke(addr, req, ROUTE_TIMEOUT).await else {
            continue;
        };
        if resp.response_code() != ResponseCode::Success {
            continue;
        }
        let Ok(route) = from_json::<TopicRouteData>(&resp.body) else {
            continue;
        };
        let mut queues: Vec<MessageQueue> = route
            .queue_datas
            .iter()
            .filter(|q| q.perm & PERM_READ != 0)
            .flat_map(|q| {
                (0..q.read_queue_nums.clamp(0, 1024)).map(|i| MessageQueue {
                    topic: topic.to_owned(),
                    broker_name: q.broker_name.clone(),
                    queue_id: i,
                })
            })
            .collect();
        sort_queues(&mut queues);
        ctx.pop.routes.put(topic, queues.clone());
        return Some(queues);
    }
    // No name server answered: this broker's own queues.
    let t = ctx.topics.get(topic).filter(|t| t.perm & PERM_READ != 0)?;
    Some(
        (0..t.read_queue_nums)
            .map(|i| ctx.queue(topic, i))
            .collect(),
    )
}

/// `allocate4Pop`.
fn allocate_for_pop(
    strategy: &AllocateStrategy,
    client: &str,
    mqs: &[MessageQueue],
    cids: &[String],
    share: i32,
) -> Vec<MessageQueue> {
    if share <= 0 || share as usize >= cids.len().saturating_sub(1) {
        return mqs
            .iter()
            .map(|q| MessageQueue {
                queue_id: -1,
                ..q.clone()
            })
            .collect();
    }
    let Some(index) = cids.iter().position(|c| c == client) else {
        return Vec::new();
    };
    if cids.len() > mqs.len() {
        // More clients than queues: each one gets one, queues shared round the ring.
        return vec![mqs[index % mqs.len()].clone()];
    }
    let mut out = strategy.allocate(client, mqs, cids);
    for i in 1..=share as usize {
        out.extend(strategy.allocate(&cids[(index + i) % cids.len()], mqs, cids));
    }
    out
}

/// The queues for one client, or `None` ("invalid, keep what you have").
async fn balance(
    ctx: &BrokerCtx,
    b: &QueryAssignmentRequestBody,
    mode: &str,
    share: i32,
) -> Option<Vec<MessageQueue>> {
    match b.message_model.as_str() {
        "BROADCASTING" => topic_queues(ctx, &b.topic).await,
        "CLUSTERING" => {
            let mqs = topic_queues(ctx, &b.topic).await?;
            let cids = ctx.clients.consumer_group(&b.consumer_group)?.client_ids();
            let strategy = match b.strategy_name.as_str() {
                "AVG" => AllocateStrategy::Averagely,
                "AVG_BY_CIRCLE" => AllocateStrategy::AveragelyByCircle,
                other => {
                    log::warn!("QUERY_ASSIGNMENT: unsupported strategy {other:?}");
                    return None;
                }
            };
            if mqs.is_empty() || cids.is_empty() {
                return Some(Vec::new());
            }
            Some(if mode == "POP" {
                allocate_for_pop(&strategy, &b.client_id, &mqs, &cids, share)
            } else {
                strategy.allocate(&b.client_id, &mqs, &cids)
            })
        }
        _ => None,
    }
}

/// QUERY_ASSIGNMENT.
pub async fn query_assignment(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let b: QueryAssignmentRequestBody = match from_json(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return Err(Refusal::new(ResponseCode::SystemError, e.to_string()));
        }
    };
    // A retry topic is always pulled; otherwise the group's mode, or
    // `defaultMessageRequestMode` / `defaultPopShareQueueNum` when it set none.
    let cfg = &ctx.config.pop;
    let (mode, share) = match ctx.pop.modes.get(&b.topic, &b.consumer_group) {
        _ if tern_shell::pop::is_retry_topic(&b.topic) => ("PULL".to_owned(), 0),
        Some(m) => (m.mode, m.pop_share_queue_num),
        None if cfg.default_message_request_mode == "POP" => {
            ("POP".to_owned(), cfg.default_pop_share_queue_num)
        }
        None => ("PULL".to_owned(), 0),
    };
    let assignments = balance(ctx, &b, &mode, share).await.map(|qs| {
        // A set, as Java's: a shared share may name a queue twice.
        let unique: BTreeSet<(String, String, i32)> = qs
            .into_iter()
            .map(|q| (q.topic, q.broker_name, q.queue_id))
            .collect();
        unique
            .into_iter()
            .map(|(topic, broker_name, queue_id)| MessageQueueAssignment {
                message_queue: MessageQueue {
                    topic,
                    broker_name,
                    queue_id,
                },
                mode: mode.clone(),
                attachments: Default::default(),
            })
            .collect()
    });
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_body(to_json(
            &QueryAssignmentResponseBody {
                message_queue_assignments: assignments,
            },
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mqs(n: i32) -> Vec<MessageQueue> {
        (0..n).map(|i| MessageQueue::new("T", "b", i)).collect()
    }

    #[test]
    fn pop_shares_are_rocketmqs() {
        let cids: Vec<String> = ["c1", "c2", "c3"].iter().map(|s| s.to_string()).collect();
        let avg = AllocateStrategy::Averagely;
        // No share: every broker once with queue id -1.
        let all = allocate_for_pop(&avg, "c1", &mqs(4), &cids, 0);
        assert!(all.iter().all(|q| q.queue_id == -1));
        // Share 1 of 3 clients: own block plus the next client's.
        let ids: Vec<i32> = allocate_for_pop(&avg, "c1", &mqs(6), &cids, 1)
            .iter()
            .map(|q| q.queue_id)
            .collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        let ids: Vec<i32> = allocate_for_pop(&avg, "c3", &mqs(6), &cids, 1)
            .iter()
            .map(|q| q.queue_id)
            .collect();
        assert_eq!(ids, [4, 5, 0, 1]);
        // More clients than queues: one each, round the ring.
        let many: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
        let ids: Vec<i32> = allocate_for_pop(&avg, "c4", &mqs(2), &many, 1)
            .iter()
            .map(|q| q.queue_id)
            .collect();
        assert_eq!(ids, [0]);
        assert!(allocate_for_pop(&avg, "stranger", &mqs(6), &cids, 1).is_empty());
    }
}
