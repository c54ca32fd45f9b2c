//! Lookups: messages by key and by id, runtime information, topic and consume stats.

use std::collections::BTreeMap;

use tern_engine::record::RecordView;
use tern_shell::acl::guard::Access;
use tern_shell::acl::rules::perm;
use tern_shell::body::{ConsumeStats, KvTable, QueueKeyMap, TopicOffset, TopicStatsTable};
use tern_shell::headers::{
    GetConsumeStatsRequestHeader, QueryMessageRequestHeader, QueryMessageResponseHeader,
    TopicRequestHeader, ViewMessageRequestHeader,
};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode, runtime};

use crate::BrokerCtx;
use crate::store::StoreService;
use tern_shell::runtime::now_ms;

/// Most messages a key query returns (RocketMQ's `maxMsgsNumBatch`; 32 for unique keys).
const MAX_QUERY: usize = 64;

/// QUERY_MESSAGE: messages stored under `topic#key` in the time range, via the index. Hash
/// collisions are filtered out by checking each record's keys.
pub async fn query_message(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: QueryMessageRequestHeader = req.decode_header()?;
    let max = if h.unique_key_query == Some(true) {
        32
    } else {
        (h.max_num.max(1) as usize).min(MAX_QUERY)
    };
    // Finds what was acknowledged before the query (reput indexes beside appends).
    ctx.store
        .await_caught_up(std::time::Duration::from_secs(1))
        .await;
    // The walk may wait for a publication (bounded) and both it and the record reads may
    // meet cold pages: on a blocking thread, so the requests queued on this executor
    // thread (sends) wait for neither.
    let (store, topic, key) = (ctx.store.clone(), h.topic.clone(), h.key.clone());
    let range = (h.begin_timestamp, h.end_timestamp);
    let body =
        runtime::spawn_blocking(move || records_by_key(&store, (&topic, &key), max, range)).await;
    if body.is_empty() {
        return Err(Refusal::new(
            ResponseCode::QueryNotFound,
            format!(
                "can not find message, maybe time range not correct, key: {}",
                h.key
            ),
        ));
    }
    let (index_last_update_timestamp, index_last_update_phyoffset) = ctx.store.index_end();
    let header = QueryMessageResponseHeader {
        index_last_update_timestamp,
        index_last_update_phyoffset,
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_header(&header)
        .with_body(body))
}

/// The stored records under `topic#key` in `range` (store times, ms), newest first, at
/// most `max`, concatenated: the index's offsets with hash collisions and records of a
/// deleted topic filtered out. Blocking: reads the index and the log with `pread`.
fn records_by_key(
    store: &StoreService,
    (topic, key): (&str, &str),
    max: usize,
    (begin, end): (i64, i64),
) -> Vec<u8> {
    let offsets = store.query_index(topic, key, max, begin, end);
    let mut body = Vec::new();
    for off in offsets {
        let Ok(bytes) = store.record_at(off) else {
            continue;
        };
        let Ok(view) = tern_engine::record::RecordView::parse(&bytes) else {
            continue;
        };
        let props = view.properties();
        // A record of a deleted topic is still in the log and the index: it belongs to
        // the topic only while the topic's queue holds it.
        let queued = || {
            let (q, n) = (view.queue_id(), view.queue_offset());
            u64::try_from(n).is_ok_and(|n| {
                store
                    .queue_entry(topic, q, n)
                    .ok()
                    .flatten()
                    .is_some_and(|e| e.physical_offset == off)
            })
        };
        let matches = view.topic() == topic.as_bytes()
            && (tern_engine::properties::get(props, "UNIQ_KEY") == Some(key)
                || tern_engine::properties::get(props, "KEYS")
                    .is_some_and(|ks| tern_engine::properties::has_key(ks, key)))
            && queued();
        if matches {
            body.extend_from_slice(&bytes);
        }
    }
    body
}

/// VIEW_MESSAGE_BY_ID: the record at a commit-log offset (decoded from an offset msgId).
///
/// With ACL on, the caller needs SUB on the record's topic (and on the real topic of a
/// parked half, delayed or timed message): an offset alone must not open the log.
pub fn view_message(ctx: &BrokerCtx, req: &RemotingCommand, access: &Access) -> Answer {
    let h: ViewMessageRequestHeader = req.decode_header()?;
    let not_found = || {
        Err(Refusal::new(
            ResponseCode::SystemError,
            format!("can not find message by the offset, {}", h.offset),
        ))
    };
    let Ok(b) = ctx.store.record_at(h.offset.max(0) as u64) else {
        return not_found();
    };
    if ctx.acl.is_some() {
        let Ok(view) = RecordView::parse(&b) else {
            return not_found();
        };
        if let Err(why) = crate::acl::require_record(access, &view, req.code, perm::SUB) {
            log::warn!("VIEW_MESSAGE_BY_ID at {} refused: {why}", h.offset);
            return Err(why.into());
        }
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success).with_body(b))
}

/// GET_BROKER_RUNTIME_INFO: a KV table of counters, as RocketMQ's admin tools read it.
pub fn runtime_info(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let mut t = BTreeMap::new();
    ctx.store.runtime_stats(&mut t);
    t.insert(
        "brokerVersionDesc".into(),
        format!("Tern {}", env!("CARGO_PKG_VERSION")),
    );
    t.insert(
        "brokerVersion".into(),
        tern_shell::code::version::CURRENT.to_string(),
    );
    ctx.metrics.daily.fill(&ctx.metrics, &mut t);
    t.insert(
        "bootTimestamp".into(),
        (now_ms() - ctx.started.elapsed().as_millis() as i64).to_string(),
    );
    t.insert(
        "runtime".into(),
        format!("[ {} seconds ]", ctx.started.elapsed().as_secs()),
    );
    t.insert("diskFull".into(), ctx.store.disk_full().to_string());
    ctx.schedule.runtime_stats(&ctx.store, &mut t);
    ctx.timer.runtime_stats(&ctx.store, &mut t);
    ctx.extra_stats.fill(&mut t);
    ctx.ha
        .runtime_stats(ctx.role.get() == crate::config::BrokerRole::Slave, &mut t);
    if let Ok(u) = tern_engine_fs::disk::disk_usage(&ctx.config.store_root) {
        t.insert(
            "commitLogDiskRatio".into(),
            format!("{:.4}", u.used_ratio()),
        );
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&KvTable { table: t })))
}

fn last_update(ctx: &BrokerCtx, topic: &str, queue_id: i32, max: u64) -> i64 {
    if max == 0 {
        return 0;
    }
    ctx.store
        .store_time_of(topic, queue_id, max - 1)
        .unwrap_or(0)
}

/// GET_TOPIC_STATS_INFO: min/max offsets of every queue of a topic.
pub fn topic_stats(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: TopicRequestHeader = req.decode_header()?;
    let topic = ctx.topics.existing(&h.topic)?;
    let mut table = BTreeMap::new();
    for q in 0..topic.write_queue_nums.max(topic.read_queue_nums) {
        let (min, max) = ctx.store.queue_bounds(&h.topic, q);
        let ts = last_update(ctx, &h.topic, q, max);
        table.insert(
            ctx.queue(&h.topic, q),
            TopicOffset {
                min_offset: min as i64,
                max_offset: max as i64,
                last_update_timestamp: ts,
            },
        );
    }
    let body = TopicStatsTable {
        offset_table: QueueKeyMap(table),
        topic_put_tps: None,
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&body)))
}

/// GET_CONSUME_STATS: per queue, the broker's max offset, the group's committed offset and
/// the store time of the last message it consumed (the one before its offset, as
/// RocketMQ's `getMessageStoreTimeStamp(topic, queue, consumerOffset - 1)`); and the
/// group's consume TPS over the last minute, summed over the topics.
pub fn consume_stats(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetConsumeStatsRequestHeader = req.decode_header()?;
    let mut topics: Vec<String> = match h.topic.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => vec![t.to_owned()],
        None => ctx
            .offsets
            .topics_of_group(&h.consumer_group)
            .into_iter()
            .map(|(t, _)| t)
            .collect(),
    };
    if let Some(list) = h.topic_list.as_deref() {
        topics.extend(list.split(';').filter(|t| !t.is_empty()).map(str::to_owned));
    }
    let mut table = BTreeMap::new();
    let mut consume_tps = 0.0;
    for topic in topics {
        let Some(cfg) = ctx.topics.get(&topic) else {
            continue;
        };
        consume_tps += ctx.metrics.consume_tps(&topic, &h.consumer_group);
        for q in 0..cfg.read_queue_nums {
            table.insert(
                ctx.queue(&topic, q),
                super::stats::queue_offsets(ctx, &h.consumer_group, &topic, q),
            );
        }
    }
    let body = ConsumeStats {
        offset_table: QueueKeyMap(table),
        consume_tps,
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&body)))
}
