//! Read-only admin codes: producer connections, who consumes a topic, consume time
//! spans, system topics, stats windows, the broker-wide consume stats, consume-queue
//! listings and one topic's config. Answers, codes and remarks as RocketMQ's
//! AdminBrokerProcessor gives them.

use std::collections::{BTreeMap, BTreeSet};

use tern_shell::body::{
    BrokerStatsData, Connection as ConnInfo, ConsumeQueueData, ConsumeStats, ConsumeStatsList,
    GroupList, OffsetWrapper, ProducerConnection, QueryConsumeQueueResponseBody,
    QueryConsumeTimeSpanBody, QueueKeyMap, QueueTimeSpan, TopicList,
};
use tern_shell::headers::{
    GetConsumeStatsInBrokerHeader, GetProducerConnectionListRequestHeader,
    GetTopicConfigRequestHeader, QueryConsumeQueueRequestHeader, QueryConsumeTimeSpanRequestHeader,
    QueryTopicConsumeByWhoRequestHeader, ViewBrokerStatsDataRequestHeader,
};
use tern_shell::runtime::now_ms;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::filter::{PullFilter, record_matches};

/// Most entries one QUERY_CONSUME_QUEUE lists (each is a `pread`, an SQL92 group's also
/// a record read).
pub const MAX_QUERY_CQ_ENTRIES: i32 = 1000;

fn ok_json<T: serde::Serialize>(req: &RemotingCommand, body: &T) -> RemotingCommand {
    RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(body))
}

/// Store time of entry `n`, `-1` when there is none (Java's `getMessageStoreTimeStamp`).
fn store_time(ctx: &BrokerCtx, topic: &str, queue_id: i32, n: i64) -> i64 {
    u64::try_from(n)
        .ok()
        .and_then(|n| ctx.store.store_time_of(topic, queue_id, n))
        .unwrap_or(-1)
}

/// One queue's row of a group's consume stats (GET_CONSUME_STATS,
/// GET_BROKER_CONSUME_STATS): the broker's max offset, the group's committed offset, and
/// the store time of the last message it consumed (the one before its offset, as
/// RocketMQ's `getMessageStoreTimeStamp(topic, queue, consumerOffset - 1)`; 0 when none).
pub(super) fn queue_offsets(ctx: &BrokerCtx, group: &str, topic: &str, q: i32) -> OffsetWrapper {
    let (_, max) = ctx.store.queue_bounds(topic, q);
    let consumer = ctx.offsets.query(group, topic, q).unwrap_or(0).max(0);
    OffsetWrapper {
        broker_offset: max as i64,
        consumer_offset: consumer,
        // Tern keeps no pull offset apart from the committed one.
        pull_offset: consumer,
        last_timestamp: store_time(ctx, topic, q, consumer - 1).max(0),
    }
}

/// GET_PRODUCER_CONNECTION_LIST: the connected members of a producer group.
pub fn producer_connections(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetProducerConnectionListRequestHeader = req.decode_header()?;
    let members = ctx.clients.producer_members(&h.producer_group);
    if members.is_empty() {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!("the producer group[{}] not exist", h.producer_group),
        ));
    }
    let body = ProducerConnection {
        connection_set: members
            .into_iter()
            .map(|m| ConnInfo {
                client_id: m.client_id,
                client_addr: m.conn.peer_addr().to_string(),
                language: m.language,
                version: m.version,
            })
            .collect(),
    };
    Ok(ok_json(req, &body))
}

/// QUERY_TOPIC_CONSUME_BY_WHO: groups online with a subscription to the topic, and groups
/// with offsets in it.
pub fn topic_consume_by_who(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: QueryTopicConsumeByWhoRequestHeader = req.decode_header()?;
    let mut groups: BTreeSet<String> = ctx
        .clients
        .consumer_groups()
        .into_iter()
        .filter(|g| ctx.clients.subscription(g, &h.topic).is_some())
        .collect();
    groups.extend(
        ctx.offsets
            .groups_of_topic(&h.topic)
            .into_iter()
            .map(|(g, _)| g),
    );
    Ok(ok_json(
        req,
        &GroupList {
            group_list: groups.into_iter().collect(),
        },
    ))
}

/// QUERY_CONSUME_TIME_SPAN: per write queue, the oldest and newest store times, the
/// store time of the group's last consumed message and how long its next one has waited.
pub fn consume_time_span(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: QueryConsumeTimeSpanRequestHeader = req.decode_header()?;
    let cfg = ctx.topics.existing(&h.topic)?;
    let mut set = Vec::new();
    for q in 0..cfg.write_queue_nums {
        let (min, max) = ctx.store.queue_bounds(&h.topic, q);
        let (min, max) = (min as i64, max as i64);
        let min_time = store_time(ctx, &h.topic, q, min);
        let consumed = ctx.offsets.query(&h.group, &h.topic, q).unwrap_or(-1);
        let consume_time = if consumed > 0 {
            store_time(ctx, &h.topic, q, consumed - 1)
        } else {
            min_time
        };
        // A group without an offset waits from the queue's start.
        let next = consumed.max(min);
        let delay_time = if next < max {
            match store_time(ctx, &h.topic, q, next) {
                -1 => 0,
                t => now_ms() - t,
            }
        } else {
            0
        };
        set.push(QueueTimeSpan {
            message_queue: ctx.queue(&h.topic, q),
            min_time_stamp: min_time,
            max_time_stamp: store_time(ctx, &h.topic, q, max - 1),
            consume_time_stamp: consume_time,
            delay_time,
        });
    }
    Ok(ok_json(
        req,
        &QueryConsumeTimeSpanBody {
            consume_time_span_set: set,
        },
    ))
}

/// GET_SYSTEM_TOPIC_LIST_FROM_BROKER.
pub fn system_topics(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    Ok(ok_json(
        req,
        &TopicList {
            topic_list: ctx.topics.system_names().into_iter().collect(),
            broker_addr: None,
        },
    ))
}

/// VIEW_BROKER_STATS_DATA: the last minute, hour and day of one stats item, from the
/// counters the broker keeps (see [`crate::metrics::windows`]).
pub fn view_stats(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ViewBrokerStatsDataRequestHeader = req.decode_header()?;
    let found: Option<BrokerStatsData> = ctx.metrics.windows.view(
        &ctx.metrics,
        &ctx.config.cluster_name,
        &h.stats_name,
        &h.stats_key,
    );
    match found {
        Some(d) => Ok(ok_json(req, &d)),
        None => Err(Refusal::new(
            ResponseCode::SystemError,
            format!("The stats <{}> <{}> not exist", h.stats_name, h.stats_key),
        )),
    }
}

/// The group's get rate on `topic` over the last minute (RocketMQ's `tpsGroupGetNums`).
/// GET_BROKER_CONSUME_STATS: the consume stats of every subscription group on every
/// topic it has offsets in (`isOrder`: ordered topics only).
pub fn broker_consume_stats(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetConsumeStatsInBrokerHeader = req.decode_header()?;
    let mut body = ConsumeStatsList {
        broker_addr: ctx.store_host.to_string(),
        ..Default::default()
    };
    for group in ctx.groups.wrapper().subscription_group_table.into_keys() {
        let online = ctx.clients.consumer_group(&group);
        let mut list = Vec::new();
        for (topic, _) in ctx.offsets.topics_of_group(&group) {
            let Some(cfg) = ctx.topics.get(&topic) else {
                continue;
            };
            if h.is_order && !cfg.order {
                continue;
            }
            // An online group that no longer subscribes to the topic is left out.
            if online.as_ref().is_some_and(|g| {
                !g.subscriptions.is_empty() && !g.subscriptions.contains_key(&topic)
            }) {
                continue;
            }
            let table: BTreeMap<_, _> = (0..cfg.write_queue_nums)
                .map(|q| (ctx.queue(&topic, q), queue_offsets(ctx, &group, &topic, q)))
                .collect();
            body.total_diff += table
                .values()
                .map(|o| o.broker_offset - o.consumer_offset)
                .sum::<i64>();
            list.push(ConsumeStats {
                offset_table: QueueKeyMap(table),
                consume_tps: ctx.metrics.consume_tps(&topic, &group),
            });
        }
        body.consume_stats_list
            .push([(group, list)].into_iter().collect());
    }
    Ok(ok_json(req, &body))
}

/// QUERY_CONSUME_QUEUE: `count` entries of a queue from `index`, each evaluated against
/// the group's subscription when a group is named.
pub fn query_consume_queue(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: QueryConsumeQueueRequestHeader = req.decode_header()?;
    let (min, max) = ctx.store.queue_bounds(&h.topic, h.queue_id);
    let configured = ctx
        .topics
        .get(&h.topic)
        .is_some_and(|t| (0..t.read_queue_nums.max(t.write_queue_nums)).contains(&h.queue_id));
    if !configured && max == 0 {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!("{}@{} is not exist!", h.queue_id, h.topic),
        ));
    }
    let mut body = QueryConsumeQueueResponseBody {
        max_queue_index: max as i64,
        min_queue_index: min as i64,
        ..Default::default()
    };
    let mut filter: Option<Result<PullFilter, Refusal>> = None;
    if let Some(group) = h.consumer_group.as_deref() {
        match ctx.clients.subscription(group, &h.topic) {
            None => body.filter_data = Some(format!("{group}@{} is not online!", h.topic)),
            Some(sub) => {
                let sql = !sub.expression_type_or_tag().eq_ignore_ascii_case("TAG");
                body.filter_data = Some(if sql {
                    serde_json::json!({
                        "consumerGroup": group,
                        "topic": h.topic,
                        "expression": sub.sub_string,
                        "expressionType": sub.expression_type,
                        "clientVersion": sub.sub_version,
                    })
                    .to_string()
                } else {
                    // RocketMQ keeps filter data for SQL92 subscriptions only.
                    "null".to_owned()
                });
                filter = Some(ctx.filters.for_pull(
                    ctx.config.enable_property_filter,
                    group,
                    sub.clone(),
                ));
                body.subscription_data = Some(sub);
            }
        }
    }
    let Ok(index) = u64::try_from(h.index) else {
        return Ok(index_missing(req, &h));
    };
    if index < min || index >= max {
        return Ok(index_missing(req, &h));
    }
    let count = h.count.clamp(0, MAX_QUERY_CQ_ENTRIES) as u64;
    for n in index..max.min(index + count) {
        let entry = match ctx.store.queue_entry(&h.topic, h.queue_id, n) {
            Ok(Some(e)) => e,
            // A filler or an entry retention just removed: nothing to list.
            Ok(None) => continue,
            Err(e) => {
                return Err(Refusal::new(ResponseCode::SystemError, e.to_string()));
            }
        };
        let mut one = ConsumeQueueData {
            physic_offset: entry.physical_offset as i64,
            physic_size: entry.size as i32,
            tags_code: entry.tag_code,
            ..Default::default()
        };
        match &filter {
            None => {}
            Some(Err(refused)) => one.msg = Some(refused.remark().to_owned()),
            Some(Ok(PullFilter::All)) => one.eval = true,
            Some(Ok(PullFilter::Tags(codes))) => {
                one.eval = codes.contains(&(entry.tag_code as i32));
            }
            Some(Ok(PullFilter::Sql(expr))) => match ctx.store.record_of(entry) {
                Some(record) => one.eval = record_matches(expr, &record),
                None => one.msg = Some(format!("no record at {}", entry.physical_offset)),
            },
        }
        body.queue_data.push(one);
    }
    Ok(ok_json(req, &body))
}

/// RocketMQ's answer for an index outside the queue: success, a remark, no body.
fn index_missing(req: &RemotingCommand, h: &QueryConsumeQueueRequestHeader) -> RemotingCommand {
    let mut resp = RemotingCommand::response_to(req, ResponseCode::Success);
    resp.remark = Some(format!(
        "Index {} of {}@{} is not exist!",
        h.index, h.queue_id, h.topic
    ));
    resp
}

/// GET_TOPIC_CONFIG: one topic's configuration (`TopicConfigAndQueueMapping`; Tern has
/// no static topics, so no mapping detail).
pub fn topic_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetTopicConfigRequestHeader = req.decode_header()?;
    match ctx.topics.get(&h.topic) {
        Some(t) => Ok(ok_json(req, &t)),
        None => Err(Refusal::new(
            ResponseCode::TopicNotExist,
            format!("No topic in this broker. topic: {}", h.topic),
        )),
    }
}
