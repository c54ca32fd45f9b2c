//! Admin requests answered through a consumer group's clients (RocketMQ's
//! `Broker2Client` and `AdminBrokerProcessor.callConsumer`):
//!
//! * INVOKE_BROKER_TO_RESET_OFFSET (222): the group's offsets of a topic move to a time
//!   (or to explicit offsets, 5.x). A running group is reset through its clients, each
//!   told with RESET_CONSUMER_CLIENT_OFFSET (220) in the body form its language reads (a
//!   list for the C++ client, whose JSON parser cannot read fastjson's object keys); the
//!   clients commit the new offsets themselves, as RocketMQ 4.x's do. A group with no
//!   client online, or one consuming the topic by POP (whose progress the broker keeps),
//!   is reset here, in the broker's offset table. RocketMQ 4.9 answers
//!   CONSUMER_NOT_ONLINE for the former and leaves it to mqadmin's fallback; 5.2 resets
//!   every group in the broker.
//! * INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): every client's offsets of a topic,
//!   asked with GET_CONSUMER_STATUS_FROM_CLIENT (221), 5 s each, all at once.
//! * GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309): handed to one
//!   client by id and its answer passed back (10 s; CONSUME_MSG_TIMEOUT after that).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tern_shell::body::{
    GetConsumerStatusBody, MessageQueue, MessageQueueForC, QueueKeyMap, ResetOffsetBody,
    ResetOffsetBodyForC, from_json, to_json,
};
use tern_shell::code::RequestCode;
use tern_shell::headers::{
    ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader, ResetOffsetRequestHeader,
};
use tern_shell::message::decode_offset_msg_id;
use tern_shell::{Answer, Refusal};
use tern_shell::{Connection, LanguageCode, RemotingCommand, RemotingError, ResponseCode, runtime};

use crate::BrokerCtx;
use crate::clients::Member;
use crate::config::BrokerRole;
use crate::store::MAX_RECORD_READ;

/// How long a client may take over GET_CONSUMER_STATUS_FROM_CLIENT (RocketMQ: 5 s).
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client may take over a forwarded request (RocketMQ: 10 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a reset names no offsets to move to; its text is the remark RocketMQ answers.
#[derive(Debug)]
enum ResetError {
    /// An explicit offset outside its queue (or a queue past the topic's read queues).
    OutOfRange {
        /// The offset asked for.
        offset: i64,
        /// The queue's min offset.
        min: u64,
        /// The queue's max offset.
        max: u64,
    },
    /// A queue id past the topic's read queues.
    IllegalQueue {
        /// The queue id asked for.
        queue_id: i32,
        /// The topic asked for.
        topic: String,
    },
}

impl fmt::Display for ResetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { offset, min, max } => write!(
                f,
                "Target offset {offset} not in consume queue range [{min}-{max}]"
            ),
            Self::IllegalQueue { queue_id, topic } => {
                write!(f, "queueId[{queue_id}] is illegal, topic:[{topic}]")
            }
        }
    }
}

impl std::error::Error for ResetError {}

/// A reset refused: SYSTEM_ERROR with the reason, as RocketMQ answers.
impl From<ResetError> for Refusal {
    fn from(e: ResetError) -> Self {
        Refusal::new(ResponseCode::SystemError, e.to_string())
    }
}

/// The new offset of every read queue of the topic on this broker.
fn reset_targets(
    ctx: &BrokerCtx,
    h: &ResetOffsetRequestHeader,
    read_queues: i32,
) -> Result<BTreeMap<i32, i64>, ResetError> {
    let store = &ctx.store;
    let by_time = |q: i32| -> i64 {
        if h.timestamp < 0 {
            store.queue_bounds(&h.topic, q).1 as i64
        } else {
            store.offset_at_time(&h.topic, q, h.timestamp) as i64
        }
    };
    let mut out = BTreeMap::new();
    match (h.queue_id.filter(|q| *q >= 0), h.offset.filter(|o| *o >= 0)) {
        (Some(q), Some(offset)) => {
            let (min, max) = store.queue_bounds(&h.topic, q);
            if q >= read_queues || offset < min as i64 || offset > max as i64 {
                return Err(ResetError::OutOfRange { offset, min, max });
            }
            out.insert(q, offset);
        }
        (Some(q), None) if q < read_queues => {
            out.insert(q, by_time(q));
        }
        (Some(q), None) => {
            return Err(ResetError::IllegalQueue {
                queue_id: q,
                topic: h.topic.clone(),
            });
        }
        (None, _) => {
            for q in 0..read_queues {
                let target = by_time(q);
                // Without force, an offset only moves back (RocketMQ's rule).
                let now = ctx.offsets.query(&h.group, &h.topic, q);
                let chosen = match now {
                    Some(now) if !h.is_force && target >= now => now,
                    _ => target,
                };
                out.insert(q, chosen);
            }
        }
    }
    Ok(out)
}

/// INVOKE_BROKER_TO_RESET_OFFSET.
pub fn reset_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ResetOffsetRequestHeader = req.decode_header()?;
    log::info!(
        "[reset-offset] reset offset started: topic={} group={} timestamp={} force={}",
        h.topic,
        h.group,
        h.timestamp,
        h.is_force
    );
    if ctx.role.get() == BrokerRole::Slave {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            "Can not reset offset in slave broker",
        ));
    }
    let Some(topic) = ctx.topics.get(&h.topic) else {
        return Err(Refusal::new(
            ResponseCode::TopicNotExist,
            format!("Topic {} does not exist", h.topic),
        ));
    };
    let online = ctx.clients.consumer_group(&h.group);
    let known = online.is_some()
        || ctx.groups.get(&h.group).is_some()
        || ctx
            .offsets
            .topics_of_group(&h.group)
            .iter()
            .any(|(t, _)| *t == h.topic);
    if !known {
        return Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("Group {} does not exist", h.group),
        ));
    }
    let targets = reset_targets(ctx, &h, topic.read_queue_nums)?;
    let table: BTreeMap<MessageQueue, i64> = targets
        .iter()
        .map(|(q, o)| (ctx.queue(&h.topic, *q), *o))
        .collect();
    let pop = ctx
        .pop
        .modes
        .get(&h.topic, &h.group)
        .is_some_and(|m| m.mode == "POP");
    let members: Vec<Member> = online
        .map(|g| g.members.into_values().collect())
        .unwrap_or_default();
    if members.is_empty() || pop {
        for (q, o) in &targets {
            ctx.offsets.commit(&h.group, &h.topic, *q, *o);
        }
        log::info!(
            "[reset-offset] {} of {} reset in the broker ({} queues)",
            h.topic,
            h.group,
            targets.len()
        );
    } else {
        tell_clients(&h, &table, members);
        // The clients drop their queues and wait for the pull in flight on each.
        ctx.holds.release_later(&h.group, &RELEASE_AFTER);
    }
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_body(to_json(
            &ResetOffsetBody {
                offset_table: QueueKeyMap(table),
            },
        )),
    )
}

/// When a reset's clients have their pulls held from before answered
/// (`PullHolds::release_later`).
const RELEASE_AFTER: [Duration; 3] = [
    Duration::from_millis(200),
    Duration::from_millis(800),
    Duration::from_secs(2),
];

/// RESET_CONSUMER_CLIENT_OFFSET to each member, oneway, each write in a task of its own
/// so a client that stopped reading delays nobody.
fn tell_clients(
    h: &ResetOffsetRequestHeader,
    table: &BTreeMap<MessageQueue, i64>,
    members: Vec<Member>,
) {
    let header = ResetOffsetRequestHeader {
        topic: h.topic.clone(),
        group: h.group.clone(),
        timestamp: h.timestamp,
        is_force: false,
        queue_id: None,
        offset: None,
    };
    let java = to_json(&ResetOffsetBody {
        offset_table: QueueKeyMap(table.clone()),
    });
    let cpp = to_json(&ResetOffsetBodyForC {
        offset_table: table
            .iter()
            .map(|(mq, o)| MessageQueueForC {
                broker_name: mq.broker_name.clone(),
                offset: *o,
                queue_id: mq.queue_id,
                topic: mq.topic.clone(),
            })
            .collect(),
    });
    for m in members {
        let body = if m.language == LanguageCode::Cpp {
            cpp.clone()
        } else {
            java.clone()
        };
        let cmd = RemotingCommand::request(RequestCode::ResetConsumerClientOffset, &header)
            .with_body(body)
            .oneway();
        let group = h.group.clone();
        runtime::spawn(async move {
            if let Err(e) = m.conn.oneway(cmd).await {
                log::warn!("[reset-offset] telling {} of {group}: {e}", m.client_id);
            }
        });
    }
}

/// INVOKE_BROKER_TO_GET_CONSUMER_STATUS.
pub async fn consumer_status(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetConsumerStatusRequestHeader = req.decode_header()?;
    let members: Vec<Member> = ctx
        .clients
        .consumer_group(&h.group)
        .map(|g| g.members.into_values().collect())
        .unwrap_or_default();
    if members.is_empty() {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "No Any Consumer online in the consumer group: [{}]",
                h.group
            ),
        ));
    }
    let ask = GetConsumerStatusRequestHeader {
        topic: h.topic.clone(),
        group: h.group.clone(),
        client_addr: None,
    };
    let only = h.client_addr.as_deref().filter(|c| !c.is_empty());
    let asked: Vec<_> = members
        .into_iter()
        .filter(|m| only.is_none_or(|c| c == m.client_id))
        .map(|m| {
            let cmd = RemotingCommand::request(RequestCode::GetConsumerStatusFromClient, &ask);
            runtime::spawn(async move {
                let answer = m.conn.request(cmd, STATUS_TIMEOUT).await;
                (m.client_id, answer)
            })
        })
        .collect();
    let mut body = GetConsumerStatusBody::default();
    for task in asked {
        let (client_id, answer) = task.await;
        match answer {
            Ok(resp) if resp.response_code() == ResponseCode::Success => {
                match from_json::<GetConsumerStatusBody>(&resp.body) {
                    Ok(b) => {
                        body.consumer_table.insert(client_id, b.message_queue_table);
                    }
                    Err(e) => log::warn!("consumer status of {client_id}: bad body: {e}"),
                }
            }
            // RocketMQ's C++ client never answers 221: it is left out, as in RocketMQ.
            Ok(resp) => log::info!("consumer status of {client_id}: code {}", resp.code),
            Err(e) => log::info!("consumer status of {client_id}: {e}"),
        }
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success).with_body(to_json(&body)))
}

/// The connection of client `client_id` in `group`.
fn find_client(ctx: &BrokerCtx, group: &str, client_id: &str) -> Option<Connection> {
    ctx.clients
        .consumer_connections(group)
        .into_iter()
        .find(|(id, _)| id == client_id)
        .map(|(_, c)| c)
}

/// Hands `req` (its code, fields and body) to a client and passes its answer back.
async fn call_consumer(
    ctx: &BrokerCtx,
    req: &RemotingCommand,
    group: &str,
    client_id: &str,
    body: Vec<u8>,
) -> Answer {
    let Some(conn) = find_client(ctx, group, client_id) else {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!("The Consumer <{group}> <{client_id}> not online"),
        ));
    };
    let mut call = RemotingCommand::request_code(req.request_code_enum()).with_body(body);
    call.code = req.code;
    call.ext_fields = req.ext_fields.clone();
    match conn.request(call, CALL_TIMEOUT).await {
        Ok(mut resp) => {
            resp.opaque = req.opaque;
            Ok(resp)
        }
        Err(RemotingError::Timeout) => Err(Refusal::new(
            ResponseCode::ConsumeMsgTimeout,
            format!("consumer <{group}> <{client_id}> Timeout: no answer in {CALL_TIMEOUT:?}"),
        )),
        Err(e) => Err(Refusal::new(
            ResponseCode::SystemError,
            format!("invoke consumer <{group}> <{client_id}> Exception: {e}"),
        )),
    }
}

/// GET_CONSUMER_RUNNING_INFO, forwarded.
pub async fn running_info(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetConsumerRunningInfoRequestHeader = req.decode_header()?;
    call_consumer(ctx, req, &h.consumer_group, &h.client_id, Vec::new()).await
}

/// CONSUME_MESSAGE_DIRECTLY, forwarded with the stored record as its body.
pub async fn consume_directly(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ConsumeMessageDirectlyResultRequestHeader = req.decode_header()?;
    let (Some(client_id), Some(msg_id)) = (h.client_id.as_deref(), h.msg_id.as_deref()) else {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            "the custom field <clientId> and <msgId> are needed",
        ));
    };
    let record = match decode_offset_msg_id(msg_id) {
        Ok(id) => {
            let offset = id.commit_log_offset.max(0) as u64;
            ctx.store
                .record_at_off_executor(offset, MAX_RECORD_READ)
                .await
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(format!("msgId {msg_id} is not an offset msgId: {e}")),
    };
    let record = match record {
        Ok(r) => r,
        Err(why) => {
            return Err(Refusal::new(ResponseCode::SystemError, why));
        }
    };
    let mut forwarded = req.clone();
    forwarded
        .ext_fields
        .insert("brokerName", ctx.config.broker_name.clone());
    call_consumer(ctx, &forwarded, &h.consumer_group, client_id, record).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients see these texts as remarks: each one, byte for byte.
    #[test]
    fn every_reset_error_says_what_it_said_as_a_string() {
        let out = ResetError::OutOfRange {
            offset: 9,
            min: 2,
            max: 7,
        };
        assert_eq!(
            out.to_string(),
            "Target offset 9 not in consume queue range [2-7]"
        );
        let queue = ResetError::IllegalQueue {
            queue_id: 4,
            topic: "T".into(),
        };
        assert_eq!(queue.to_string(), "queueId[4] is illegal, topic:[T]");
    }
}
