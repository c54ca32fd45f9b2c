//! The Messages page: queries by key, by id and by topic and time range, a message's
//! whole record, which groups consumed it (Java's `messageTrackDetail`: the group's
//! committed offset of the message's queue against the message's offset), and re-sending
//! it to one consumer (CONSUME_MESSAGE_DIRECTLY).

use base64::Engine;
use serde_json::{Value, json};
use tern_client::admin::TOOLS_CONSUMER_GROUP;
use tern_client::{Admin, ClientError, PullConsumer, PullStatus, Result};
use tern_shell::body::MessageQueue;
use tern_shell::message::{MessageExt, property};

/// Most messages a time-range query returns (the earliest, over all queues).
pub const MAX_RANGE_MESSAGES: usize = 200;
/// Most messages read while looking for them (each queue gives at most
/// [`MAX_RANGE_MESSAGES`], its earliest).
const MAX_RANGE_READ: usize = 4 * MAX_RANGE_MESSAGES;
/// Most messages a key query asks each broker for.
const MAX_KEY_MESSAGES: i32 = 64;

/// One line of a result list.
pub fn summary(m: &MessageExt) -> Value {
    json!({
        "msgId": m.msg_id(),
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "tags": m.properties.get(property::TAGS),
        "keys": m.properties.get(property::KEYS),
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "storeTimestamp": m.store_timestamp,
        "bodySize": m.body.len(),
    })
}

/// The whole record: properties, body as text (when UTF-8) and base64, hosts and times.
pub fn detail(m: &MessageExt) -> Value {
    let mut v = summary(m);
    let text = std::str::from_utf8(&m.body).ok();
    let extra = json!({
        "bornTimestamp": m.born_timestamp,
        "bornHost": m.born_host.to_string(),
        "storeHost": m.store_host.to_string(),
        "reconsumeTimes": m.reconsume_times,
        "commitLogOffset": m.commit_log_offset,
        "bodyCrc": m.body_crc,
        "properties": m.properties,
        "bodyText": text,
        "bodyBase64": base64::engine::general_purpose::STANDARD.encode(&m.body),
    });
    if let (Value::Object(a), Value::Object(b)) = (&mut v, extra) {
        a.extend(b);
    }
    v
}

/// Messages of `topic` whose KEYS hold `key`, stored in `[begin, end]` (ms).
pub async fn by_key(
    admin: &Admin,
    topic: &str,
    key: &str,
    begin: i64,
    end: i64,
) -> Result<Vec<MessageExt>> {
    admin
        .query_by_key(topic, key, MAX_KEY_MESSAGES, begin, end)
        .await
}

/// The message with `id`: an offset msgId, or with `topic` a unique key (the client's
/// msgId). None found is an error a person can read.
pub async fn by_id(admin: &Admin, id: &str, topic: Option<&str>) -> Result<Vec<MessageExt>> {
    if topic.is_none() && tern_shell::message::decode_offset_msg_id(id).is_err() {
        return Err(ClientError::InvalidMessage(format!(
            "{id} is not an offset msgId (the broker's id of a stored message); to look up \
             a client's msgId, give its topic too"
        )));
    }
    let found = admin.find_message(id, topic).await?;
    if found.is_empty() {
        return Err(ClientError::NotFound(format!(
            "no message with id {id}{}",
            topic.map(|t| format!(" in topic {t}")).unwrap_or_default()
        )));
    }
    Ok(found)
}

/// Messages of `topic` stored in `[begin, end)` (ms), queue by queue, at most
/// [`MAX_RANGE_MESSAGES`]; pulled as `TOOLS_CONSUMER`, which commits nothing.
pub async fn by_time(admin: &Admin, topic: &str, begin: i64, end: i64) -> Result<Vec<MessageExt>> {
    let consumer = PullConsumer::with_instance(TOOLS_CONSUMER_GROUP, admin.client().clone());
    let queues = match consumer.fetch_queues(topic).await {
        // A group's DLQ exists once a message died: none yet is an empty list.
        Err(ClientError::NoRoute { .. }) if topic.starts_with("%DLQ%") => return Ok(Vec::new()),
        r => r?,
    };
    let mut out = Vec::new();
    for q in &queues {
        let start = consumer.search_offset(q, begin).await?;
        let stop = consumer.search_offset(q, end).await?.max(start);
        let mut got = Vec::new();
        pull_range(&consumer, q, start, stop, &mut got).await?;
        out.extend(got);
        if out.len() >= MAX_RANGE_READ {
            break;
        }
    }
    out.retain(|m| (begin..end).contains(&m.store_timestamp));
    out.sort_by_key(|m| (m.store_timestamp, m.queue_id, m.queue_offset));
    out.truncate(MAX_RANGE_MESSAGES);
    Ok(out)
}

async fn pull_range(
    c: &PullConsumer,
    q: &MessageQueue,
    start: i64,
    stop: i64,
    out: &mut Vec<MessageExt>,
) -> Result<()> {
    let mut offset = start;
    // Bounded: each round moves `offset` on or stops.
    while offset < stop && out.len() < MAX_RANGE_MESSAGES {
        let r = c.pull(q, offset, (stop - offset).min(32) as i32).await?;
        if r.status != PullStatus::Found || r.next_begin_offset <= offset {
            break;
        }
        out.extend(r.messages.into_iter().filter(|m| m.queue_offset < stop));
        offset = r.next_begin_offset;
    }
    Ok(())
}

/// Which groups consumed `m`: every group subscribed to its topic, with its committed
/// offset on the message's queue, whether that is past the message, and its online
/// clients (the targets of a re-send).
pub async fn track(admin: &Admin, m: &MessageExt) -> Result<Vec<Value>> {
    let broker = broker_of(admin, m).await;
    let mut out = Vec::new();
    for group in admin.topic_consumers(&m.topic).await? {
        let progress = admin.consume_progress(&group, Some(&m.topic)).await;
        let offset = progress.as_ref().ok().and_then(|p| {
            p.queues
                .iter()
                .find(|q| {
                    q.queue.queue_id == m.queue_id
                        && broker.as_deref().is_none_or(|b| q.queue.broker_name == b)
                })
                .map(|q| q.consumer_offset)
        });
        let clients: Vec<String> = match admin.consumer_connection(&group).await {
            Ok(c) => c.connection_set.into_iter().map(|c| c.client_id).collect(),
            Err(_) => Vec::new(),
        };
        let state = match offset {
            // Java's TrackType names.
            Some(o) if o > m.queue_offset => "CONSUMED",
            Some(_) if clients.is_empty() => "NOT_ONLINE",
            Some(_) => "NOT_CONSUME_YET",
            None => "UNKNOWN (no offset on this queue)",
        };
        out.push(json!({
            "group": group,
            "consumerOffset": offset,
            "state": state,
            "clients": clients,
        }));
    }
    Ok(out)
}

/// The name of the broker that stores `m`, from its store host.
async fn broker_of(admin: &Admin, m: &MessageExt) -> Option<String> {
    let host = m.store_host.to_string();
    let info = admin.cluster_info().await.ok()?;
    info.broker_addr_table
        .values()
        .find(|b| b.broker_addrs.0.values().any(|a| *a == host))
        .map(|b| b.broker_name.clone())
}
