//! SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK.
//!
//! Checks come first and answer with RocketMQ's codes: topic name, permissions, queue id,
//! body and properties size. The record is then encoded once into the commit log; the
//! answer waits for the flush policy.

use std::net::SocketAddr;

use tern_engine::properties::{self, key};
use tern_engine::record::{Host, MessageIn};
use tern_shell::headers::{
    ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader, SendMessageResponseHeader,
};
use tern_shell::message::{decode_batch, offset_msg_id};
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::store::{Durability, MAX_RECORD_READ, PutError};
use crate::topics::{PERM_WRITE, refusals, validate_topic};
use crate::transaction::half;

/// Properties longer than this are refused (Java's short length).
const MAX_PROPERTIES: usize = properties::MAX_PROPERTIES_LEN;

/// A record host from a socket address.
pub fn host(addr: SocketAddr) -> Host {
    match addr {
        SocketAddr::V4(a) => Host::V4 {
            ip: a.ip().octets(),
            port: u32::from(a.port()),
        },
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => Host::V4 {
                ip: v4.octets(),
                port: u32::from(a.port()),
            },
            None => Host::V6 {
                ip: a.ip().octets(),
                port: u32::from(a.port()),
            },
        },
    }
}

fn illegal(remark: impl Into<String>) -> Refusal {
    Refusal::new(ResponseCode::MessageIllegal, remark)
}

/// The properties a stored message carries: the producer's, plus CLUSTER.
fn stored_properties(ctx: &BrokerCtx, props: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len() + 32);
    out.extend_from_slice(props);
    if properties::get(props, key::CLUSTER).is_none() {
        if !out.is_empty() && out.last() != Some(&properties::PROPERTY_SEPARATOR) {
            out.push(properties::PROPERTY_SEPARATOR);
        }
        out.extend_from_slice(key::CLUSTER.as_bytes());
        out.push(properties::NAME_VALUE_SEPARATOR);
        out.extend_from_slice(ctx.config.cluster_name.as_bytes());
        out.push(properties::PROPERTY_SEPARATOR);
    }
    out
}

/// The first attempt's msgId on a retried message.
const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";

/// System topics only the broker writes.
const NOT_SENDABLE: [&str; 5] = [
    tern_engine::delay::SCHEDULE_TOPIC,
    tern_engine::timer::TIMER_TOPIC,
    crate::transaction::half::HALF_TOPIC,
    crate::transaction::half::OP_TOPIC,
    crate::transaction::half::CHECK_MAX_TOPIC,
];

/// Resolves the target topic, creating it from the template when allowed.
fn topic_for_send(
    ctx: &BrokerCtx,
    h: &SendMessageRequestHeader,
) -> Result<tern_shell::body::TopicConfig, Refusal> {
    validate_topic(&h.topic)?;
    // The broker's own bookkeeping topics, as RocketMQ's TopicValidator lists them: a
    // record sent there directly would be taken for a delayed or half message.
    // The POP revive topic too: a forged checkpoint would make the revive service copy
    // any topic's messages into a group's retry topic.
    if NOT_SENDABLE.contains(&h.topic.as_str())
        || h.topic.starts_with(tern_shell::pop::REVIVE_TOPIC_PREFIX)
    {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("sending message to topic[{}] is forbidden", h.topic),
        ));
    }
    if let Some(t) = ctx.topics.get(&h.topic) {
        if t.perm & PERM_WRITE == 0 {
            return Err(Refusal::new(
                ResponseCode::NoPermission,
                format!("the topic[{}] sending message is forbidden", h.topic),
            ));
        }
        return Ok(t);
    }
    let created = if h.topic.starts_with("%RETRY%") {
        Some(ctx.topics.ensure(&h.topic, 1, 6))
    } else if ctx.config.auto_create_topic {
        ctx.topics
            .create_from_template(&h.topic, &h.default_topic, h.default_topic_queue_nums, 0)
    } else {
        None
    };
    match created {
        Some(t) => {
            ctx.request_registration();
            Ok(t)
        }
        None => Err(refusals::not_exist(&h.topic)),
    }
}

/// SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE.
pub async fn send(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h = SendMessageRequestHeader::from_command(req)?;
    if ctx.role.get() == crate::config::BrokerRole::Slave {
        // RocketMQ's store answers SERVICE_NOT_AVAILABLE: clients retry elsewhere. Not
        // SLAVE_NOT_AVAILABLE, which clients read as "stored on the master".
        return Err(Refusal::new(
            ResponseCode::ServiceNotAvailable,
            "service not available now: this broker is a slave, messages are put to its master",
        ));
    }
    if let Some(cm) = &ctx.controller {
        // RocketMQ's check before the append (`CommitLog.asyncPutMessage`), answered as
        // its SendMessageProcessor answers IN_SYNC_REPLICAS_NOT_ENOUGH.
        if cm.replica.in_sync_replicas() < ctx.config.controller.min_in_sync_replicas {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                "in-sync replicas not enough",
            ));
        }
    }
    let topic = topic_for_send(ctx, &h)?;
    let queue_id = if h.queue_id < 0 {
        (ctx.store
            .put_count
            .load(std::sync::atomic::Ordering::Relaxed)
            % topic.write_queue_nums.max(1) as u64) as i32
    } else {
        h.queue_id
    };
    if queue_id >= topic.write_queue_nums {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "request queueId[{queue_id}] is illegal, {} writeQueueNums: {}",
                h.topic, topic.write_queue_nums
            ),
        ));
    }
    let props_in = h.properties.as_deref().unwrap_or("").as_bytes();
    let is_half = half::is_half_send(props_in, h.sys_flag);
    if is_half && ctx.config.reject_transaction_message {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending transaction message is forbidden (rejectTransactionMessage=true)",
                ctx.config.broker_ip1
            ),
        ));
    }
    if h.is_batch() {
        if is_half {
            return Err(illegal("transactional messages cannot be sent in a batch"));
        }
        return send_batch(ctx, conn, req, &h, queue_id).await;
    }
    if req.body.len() > ctx.config.max_message_size {
        return Err(illegal(format!(
            "message body size {} exceeds the maximum of {} bytes",
            req.body.len(),
            ctx.config.max_message_size
        )));
    }
    let mut props = stored_properties(ctx, props_in);
    // A half message waits in the half topic until END_TRANSACTION or a check-back.
    let (topic, store_queue, sys_flag) = if is_half {
        props = half::half_properties(&props, &h.topic, queue_id, &h.producer_group);
        (half::HALF_TOPIC, 0, half::half_sys_flag(h.sys_flag))
    } else {
        (h.topic.as_str(), queue_id, h.sys_flag)
    };
    if props.len() > MAX_PROPERTIES {
        return Err(illegal(format!(
            "message properties size {} exceeds the maximum of {MAX_PROPERTIES} bytes",
            props.len()
        )));
    }
    let msg = MessageIn {
        topic,
        queue_id: store_queue,
        flag: h.flag,
        sys_flag,
        born_timestamp: h.born_timestamp,
        born_host: host(conn.peer_addr()),
        store_host: host(ctx.store_host),
        reconsume_times: h.reconsume_times.unwrap_or(0),
        prepared_transaction_offset: 0,
        body: &req.body,
        properties: &props,
    };
    let put = ctx.put(&msg)?;
    // A duplicate waits for its first copy as that copy's own sender does.
    let durability = if properties::get(&props, key::WAIT) == Some("false") {
        Durability::Durable
    } else {
        ctx.await_stored(put.end()).await
    };
    // The queue asked for (a half message's record is in the half queue), or where a
    // duplicate's first copy was sent.
    let answered_queue = if put.duplicate {
        put.queue_id
    } else {
        queue_id
    };
    let mut header = SendMessageResponseHeader::new(
        offset_msg_id(ctx.store_host, put.stored.at.offset as i64),
        answered_queue,
        put.stored.queue_offset as i64,
    );
    header.transaction_id = properties::get(&props, key::UNIQ_KEY).map(str::to_owned);
    // A timer message's handle for RECALL_MESSAGE (RocketMQ's `attachRecallHandle`: not
    // for retries, which are re-sent copies).
    if let (Some(out_ms), Some(uniq)) = (put.timed, header.transaction_id.as_deref()) {
        if !h.topic.starts_with("%RETRY%") {
            header.recall_handle = Some(tern_shell::recall::Handle::encode(
                &h.topic,
                &ctx.config.broker_name,
                out_ms,
                uniq,
            ));
        }
    }
    Ok(respond(req, durability, &header))
}

fn respond(
    req: &RemotingCommand,
    durability: Durability,
    header: &SendMessageResponseHeader,
) -> RemotingCommand {
    let mut resp = RemotingCommand::response_to(req, durability.code()).with_header(header);
    resp.remark = durability.remark();
    resp
}

/// The store's refusal as the client sees it (SEND and END_TRANSACTION): SERVICE_NOT_AVAILABLE
/// with "service not available now: " before [`PutError`]'s text while the store refuses
/// every write; that text alone, with its own code, otherwise.
impl From<PutError> for Refusal {
    fn from(e: PutError) -> Self {
        let unavailable = |e: &PutError| {
            Refusal::new(
                ResponseCode::ServiceNotAvailable,
                format!("service not available now: {e}"),
            )
        };
        match e {
            PutError::DiskFull
            | PutError::OverBudget
            | PutError::Failed(_)
            | PutError::ShuttingDown => unavailable(&e),
            PutError::Illegal(_) => illegal(e.to_string()),
            PutError::Refused(code, remark) => Refusal::new(code, remark),
            PutError::Store(_) => {
                log::error!("{e}");
                Refusal::new(ResponseCode::SystemError, e.to_string())
            }
        }
    }
}

async fn send_batch(
    ctx: &BrokerCtx,
    conn: &ConnectionCtx,
    req: &RemotingCommand,
    h: &SendMessageRequestHeader,
    queue_id: i32,
) -> Answer {
    if h.topic.starts_with("%RETRY%") {
        return Err(illegal("batch messages cannot be sent to a retry topic"));
    }
    let items = match decode_batch(&req.body) {
        Ok(items) if !items.is_empty() => items,
        Ok(_) => return Err(illegal("empty batch")),
        Err(e) => return Err(illegal(format!("malformed batch body: {e}"))),
    };
    let mut props = Vec::with_capacity(items.len());
    for it in &items {
        if it.body.len() > ctx.config.max_message_size {
            return Err(illegal(format!(
                "a message body of {} bytes exceeds the maximum of {} bytes",
                it.body.len(),
                ctx.config.max_message_size
            )));
        }
        let p = stored_properties(ctx, it.properties);
        if p.len() > MAX_PROPERTIES {
            return Err(illegal("message properties exceed 32767 bytes"));
        }
        props.push(p);
    }
    let born = host(conn.peer_addr());
    let store_host = host(ctx.store_host);
    let msgs: Vec<MessageIn<'_>> = items
        .iter()
        .zip(&props)
        .map(|(it, p)| MessageIn {
            topic: &h.topic,
            queue_id,
            flag: it.flag,
            sys_flag: h.sys_flag,
            born_timestamp: h.born_timestamp,
            born_host: born,
            store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: it.body,
            properties: p,
        })
        .collect();
    let puts = ctx.put_batch(&msgs)?;
    let Some(first) = puts.first() else {
        return Err(illegal("empty batch"));
    };
    // As RocketMQ: every message's msgId in order, and the first message's queue and
    // offset. With duplicates among them, each is where it is stored (a duplicate's
    // first copy), so a batch sent again whole is answered as it was the first time.
    let end = puts.iter().map(crate::Put::end).max().unwrap_or(0);
    let durability = ctx.await_stored(end).await;
    let ids: Vec<String> = puts
        .iter()
        .map(|p| offset_msg_id(ctx.store_host, p.stored.at.offset as i64))
        .collect();
    let header = SendMessageResponseHeader::new(
        ids.join(","),
        first.queue_id,
        first.stored.queue_offset as i64,
    );
    Ok(respond(req, durability, &header))
}

/// CONSUMER_SEND_MSG_BACK: a consumer could not process a message; store a copy in the
/// group's retry topic (or its DLQ after too many attempts).
pub async fn send_back(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h: ConsumerSendMsgBackRequestHeader = req.decode_header()?;
    let Some(group) = ctx.groups.get_or_create(&h.group) else {
        return Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group not exist, {}", h.group),
        ));
    };
    let offset = h.offset.max(0) as u64;
    let read = ctx
        .store
        .record_at_off_executor(offset, MAX_RECORD_READ)
        .await;
    let Ok(original) = read else {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!("look message by offset failed, {}", h.offset),
        ));
    };
    let view = match tern_engine::record::RecordView::parse(&original) {
        Ok(v) => v,
        Err(e) => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("look message by offset failed, {}: {e}", h.offset),
            ));
        }
    };
    let reconsume = view.reconsume_times();
    let max = h.max_reconsume_times.unwrap_or(group.retry_max_times);
    let origin_topic = view.topic_str().unwrap_or_default().to_owned();
    let retry_topic_of_origin =
        tern_engine::properties::get(view.properties(), key::RETRY_TOPIC).map(str::to_owned);
    let to_dlq = reconsume >= max || h.delay_level < 0;
    let (topic, queues) = if to_dlq {
        (format!("%DLQ%{}", h.group), 1)
    } else {
        (format!("%RETRY%{}", h.group), group.retry_queue_nums.max(1))
    };
    ctx.topics.ensure(&topic, queues, 6);
    ctx.request_registration();
    let mut props = view.properties().to_vec();
    if !to_dlq {
        // A retry waits in the schedule topic: the consumer's level, or 3 + reconsumeTimes.
        let level = match h.delay_level {
            0 => reconsume.saturating_add(3),
            l => l,
        };
        props =
            crate::schedule::message::with_properties(&props, &[(key::DELAY, &level.to_string())]);
    }
    let mut add = |k: &str, v: &str| {
        props.extend_from_slice(k.as_bytes());
        props.push(properties::NAME_VALUE_SEPARATOR);
        props.extend_from_slice(v.as_bytes());
        props.push(properties::PROPERTY_SEPARATOR);
    };
    if retry_topic_of_origin.is_none() {
        add(key::RETRY_TOPIC, &origin_topic);
    }
    // The first attempt's id stays: a message retried again keeps pointing at the
    // original (RocketMQ keeps an existing ORIGIN_MESSAGE_ID, else the stored msgId).
    if properties::get(view.properties(), ORIGIN_MESSAGE_ID).is_none() {
        let id = h
            .origin_msg_id
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| offset_msg_id(ctx.store_host, h.offset));
        add(ORIGIN_MESSAGE_ID, &id);
    }
    let msg = MessageIn {
        topic: &topic,
        queue_id: 0,
        flag: view.flag(),
        sys_flag: view.sys_flag(),
        born_timestamp: view.born_timestamp(),
        born_host: host(conn.peer_addr()),
        store_host: host(ctx.store_host),
        reconsume_times: reconsume + 1,
        prepared_transaction_offset: 0,
        body: view.body(),
        properties: &props,
    };
    match ctx.put(&msg) {
        Ok(p) => {
            if to_dlq {
                ctx.metrics.sent_to_dlq(&origin_topic, &h.group);
            }
            // Stored is enough for a send-back (RocketMQ answers success on timeouts).
            let _ = ctx.await_stored(p.end()).await;
            Ok(RemotingCommand::response_to(req, ResponseCode::Success))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tern_engine_fs::fs_store::FsStoreError;

    use super::*;

    /// The remarks as they were written out one by one before they were built on
    /// `PutError`'s text: clients see them, so they stay byte for byte.
    #[test]
    fn put_error_remarks_are_unchanged() {
        let unavailable = |remark: &str| Refusal::new(ResponseCode::ServiceNotAvailable, remark);
        let cases = [
            (
                PutError::DiskFull,
                unavailable(
                    "service not available now: the broker's disk is full, writes are refused \
                     until space is freed",
                ),
            ),
            (
                PutError::OverBudget,
                unavailable(
                    "service not available now: the stored backlog is over its budget (an edge \
                     gateway whose uplink is down); writes resume as it drains",
                ),
            ),
            (
                PutError::Illegal("too large".into()),
                Refusal::new(
                    ResponseCode::MessageIllegal,
                    "message cannot be stored: too large",
                ),
            ),
            (
                PutError::Refused(ResponseCode::MessageIllegal, "timer too far".into()),
                Refusal::new(ResponseCode::MessageIllegal, "timer too far"),
            ),
            (
                PutError::Failed("fdatasync: EIO".into()),
                unavailable(
                    "service not available now: the store failed (fdatasync: EIO); writes are \
                     refused until the broker is restarted",
                ),
            ),
            (
                PutError::ShuttingDown,
                unavailable("service not available now: the broker is shutting down"),
            ),
            (
                PutError::Store(FsStoreError::Config {
                    root: PathBuf::from("/s"),
                    reason: "bad geometry",
                }),
                Refusal::new(ResponseCode::SystemError, "append failed: /s: bad geometry"),
            ),
        ];
        for (error, remark) in cases {
            assert_eq!(Refusal::from(error), remark);
        }
    }
}
