//! Broker inspection and maintenance commands: consume stats, stats windows, consume
//! queues, queue clean-ups.

use std::time::Duration;

use serde_json::{Value, json};
use tern_client::admin::QueueProgress;
use tern_client::{Admin, ClientError};
use tern_shell::RequestCode;
use tern_shell::body::BrokerStatsData;

use crate::cmd_topic::{progress_table, target};
use crate::opts::{BROKER_ADDR, TOPIC};
use crate::out::{Table, print_json, print_listing, to_value};
use crate::progress::Progress;
use crate::{Args, CliError, Command, flag, val, wait};

pub const BROKER_CONSUME_STATS: Command = Command {
    name: "brokerConsumeStats",
    desc: "Fetch broker consume stats data",
    opts: &[
        val('b', "brokerAddr", true, "Broker address"),
        val(
            't',
            "timeoutMillis",
            false,
            "request timeout Millis (default 50000)",
        ),
        val('l', "level", false, "threshold of print diff"),
        val('o', "order", false, "order topic"),
    ],
    run: broker_consume_stats,
};

fn broker_consume_stats(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let addr = args.req('b')?;
    let timeout = Duration::from_millis(args.num('t', 50_000u64)?);
    let level: i64 = args.num('l', 0)?;
    let stats = wait(admin.broker_consume_stats(addr, args.bool('o', false)?, timeout))?;
    let mut groups = Vec::new();
    let mut rows = Vec::new();
    for map in &stats.consume_stats_list {
        for (group, list) in map {
            groups.push(group.clone());
            for cs in list {
                for (mq, o) in &cs.offset_table.0 {
                    let diff = o.broker_offset - o.consumer_offset;
                    // mqadmin lists queues the group has consumed from, past the level.
                    if diff < level || o.last_timestamp <= 0 {
                        continue;
                    }
                    let q = QueueProgress {
                        queue: mq.clone(),
                        broker_offset: o.broker_offset,
                        consumer_offset: o.consumer_offset,
                        diff,
                        last_timestamp: o.last_timestamp,
                    };
                    rows.push((q, group.clone()));
                }
            }
        }
    }
    if args.json {
        let queues: Vec<Value> = rows
            .iter()
            .map(|(q, g)| {
                json!({
                    "topic": q.queue.topic, "group": g, "brokerName": q.queue.broker_name,
                    "queueId": q.queue.queue_id, "brokerOffset": q.broker_offset,
                    "consumerOffset": q.consumer_offset, "diff": q.diff,
                    "lastTimestamp": q.last_timestamp,
                })
            })
            .collect();
        print_json(&json!({
            "brokerAddr": stats.broker_addr, "groups": groups, "queues": queues,
            "totalDiff": stats.total_diff, "totalInflightDiff": stats.total_inflight_diff,
        }));
        return Ok(());
    }
    progress_table(rows.iter().map(|(q, g)| (q, Some(g.as_str()))), true).print();
    println!();
    println!("Diff Total: {}", stats.total_diff);
    Ok(())
}

/// Sends `code` to the masters `-b`/`-c` name (`-b` one broker, `-c` one cluster's
/// masters, neither: every master) and reports each answer.
fn on_brokers(admin: &Admin, args: &Args, code: RequestCode) -> Result<(), CliError> {
    let addrs = wait(admin.masters_of(target(args).ok().as_ref()))?;
    if addrs.is_empty() {
        return Err(ClientError::NotFound("no master broker found".into()).into());
    }
    let results = wait(admin.on_each_broker(&addrs, code));
    let all_ok = results.iter().all(|(_, r)| r.is_ok());
    if args.json {
        let rows: Vec<Value> = results
            .iter()
            .map(|(a, r)| match r {
                Ok(()) => json!({ "brokerAddr": a, "success": true }),
                Err(e) => json!({ "brokerAddr": a, "success": false, "error": e.to_string() }),
            })
            .collect();
        print_json(&json!({ "success": all_ok, "brokers": rows }));
    } else {
        println!("{}", if all_ok { "success" } else { "false" });
    }
    // The first refusal is the command's failure (exit 1, its reason on stderr).
    match results
        .into_iter()
        .find_map(|(a, r)| r.err().map(|e| (a, e)))
    {
        None => Ok(()),
        Some((addr, e)) => {
            eprintln!("tern-admin: broker {addr} refused");
            Err(e.into())
        }
    }
}

pub const CLEAN_EXPIRED_CQ: Command = Command {
    name: "cleanExpiredCQ",
    desc: "Clean expired ConsumeQueue on broker",
    opts: &[BROKER_ADDR, val('c', "cluster", false, "clustername")],
    run: clean_expired_cq,
};

fn clean_expired_cq(admin: &Admin, args: &Args) -> Result<(), CliError> {
    on_brokers(admin, args, RequestCode::CleanExpiredConsumequeue)
}

pub const CLEAN_UNUSED_TOPIC: Command = Command {
    name: "cleanUnusedTopic",
    desc: "Clean unused topic on broker",
    opts: &[BROKER_ADDR, val('c', "cluster", false, "cluster name")],
    run: clean_unused_topic,
};

fn clean_unused_topic(admin: &Admin, args: &Args) -> Result<(), CliError> {
    on_brokers(admin, args, RequestCode::CleanUnusedTopic)
}

pub const QUERY_CQ: Command = Command {
    name: "queryCq",
    desc: "Query cq command",
    opts: &[
        TOPIC,
        val('q', "queue", true, "queue num, ie. 1"),
        val('i', "index", true, "start queue index."),
        val('c', "count", false, "how many. (default 10)"),
        val('b', "broker", false, "broker addr."),
        val('g', "consumer", false, "consumer group."),
    ],
    run: query_cq,
};

fn query_cq(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let queue: i32 = args.num('q', 0)?;
    let index: i64 = args.num('i', 0)?;
    let count: i32 = args.num('c', 10)?;
    let broker = match args.get('b') {
        Some(b) => b.to_owned(),
        None => wait(admin.topic_masters(topic))?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::NotFound("No topic route data!".into()))?,
    };
    let (body, remark) =
        wait(admin.query_consume_queue(&broker, topic, queue, index, count, args.get('g')))?;
    if args.json {
        let mut v = to_value(&body);
        if let (Some(r), Value::Object(m)) = (remark, &mut v) {
            m.insert("remark".into(), Value::String(r));
        }
        print_json(&v);
        return Ok(());
    }
    const RULE: &str = "======================================";
    if let Some(sub) = &body.subscription_data {
        println!(
            "Subscription data: \n{}\n{RULE}",
            serde_json::to_string_pretty(sub).unwrap_or_default()
        );
    }
    if let Some(f) = &body.filter_data {
        println!("Filter data: \n{f}\n{RULE}");
    }
    println!(
        "Queue data: \nmax: {}, min: {}\n{RULE}",
        body.max_queue_index, body.min_queue_index
    );
    if let Some(r) = remark {
        println!("{r}");
    }
    for (i, d) in body.queue_data.iter().enumerate() {
        println!(
            "idx: {}\nConsumeQueueData{{physicOffset={}, physicSize={}, tagsCode={}, extendDataJson='{}', bitMap='{}', eval={}, msg='{}'}}\n{RULE}",
            index + i as i64,
            d.physic_offset,
            d.physic_size,
            d.tags_code,
            d.extend_data_json.as_deref().unwrap_or("null"),
            d.bit_map.as_deref().unwrap_or("null"),
            d.eval,
            d.msg.as_deref().unwrap_or("null"),
        );
    }
    Ok(())
}

pub const STATS_ALL: Command = Command {
    name: "statsAll",
    desc: "Topic and Consumer tps stats",
    opts: &[
        flag('a', "activeTopic", "print active topic only"),
        val('t', "topic", false, "print select topic only"),
    ],
    run: stats_all,
};

/// mqadmin's `compute24HourSum`: the day's sum, else the hour's, else the minute's.
fn day_sum(d: &BrokerStatsData) -> i64 {
    [&d.stats_day, &d.stats_hour, &d.stats_minute]
        .into_iter()
        .map(|w| w.sum)
        .find(|s| *s != 0)
        .unwrap_or(0)
}

/// The summed minute rate and day count of a stats item over `brokers`; a broker that
/// never counted the item adds nothing (mqadmin skips it the same way).
fn sum_stats(admin: &Admin, brokers: &[String], name: &str, key: &str) -> (f64, i64) {
    let (mut tps, mut sum) = (0.0, 0);
    for b in brokers {
        if let Ok(d) = wait(admin.view_broker_stats(b, name, key)) {
            tps += d.stats_minute.tps;
            sum += day_sum(&d);
        }
    }
    (tps, sum)
}

fn stats_all(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let active = args.has('a');
    let topics: Vec<String> = wait(admin.topic_list())?
        .into_iter()
        .filter(|t| !t.starts_with("%RETRY%") && !t.starts_with("%DLQ%"))
        .filter(|t| {
            args.get('t')
                .is_none_or(|only| only.is_empty() || only == t)
        })
        .collect();
    let mut rows = Vec::new();
    let mut bar = Progress::new("statsAll", topics.len() as u64);
    for topic in &topics {
        let Ok(brokers) = wait(admin.topic_masters(topic)) else {
            bar.advance(1);
            continue;
        };
        let (in_tps, in_day) = sum_stats(admin, &brokers, "TOPIC_PUT_NUMS", topic);
        let groups = wait(admin.topic_consumers(topic)).unwrap_or_default();
        if groups.is_empty() && (!active || in_day > 0) {
            rows.push(json!({
                "topic": topic, "consumerGroup": null, "accumulation": 0,
                "inTps": in_tps, "outTps": null, "inMsg24Hour": in_day,
                "outMsg24Hour": "NO_CONSUMER",
            }));
        }
        for g in groups {
            let key = format!("{topic}@{g}");
            let (out_tps, out_day) = sum_stats(admin, &brokers, "GROUP_GET_NUMS", &key);
            let accumulation =
                wait(admin.consume_progress(&g, Some(topic))).map_or(0, |p| p.diff_total.max(0));
            if !active || in_day > 0 || out_day > 0 {
                rows.push(json!({
                    "topic": topic, "consumerGroup": g, "accumulation": accumulation,
                    "inTps": in_tps, "outTps": out_tps, "inMsg24Hour": in_day,
                    "outMsg24Hour": out_day,
                }));
            }
        }
        bar.advance(1);
    }
    bar.finish();
    // Each column's heading and the key of the row's JSON it shows.
    let columns = [
        ("Topic", "topic"),
        ("Consumer Group", "consumerGroup"),
        ("Accumulation", "accumulation"),
        ("InTPS", "inTps"),
        ("OutTPS", "outTps"),
        ("InMsg24Hour", "inMsg24Hour"),
        ("OutMsg24Hour", "outMsg24Hour"),
    ];
    let text = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => format!("{:.2}", n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    };
    let head: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
    print_listing(
        args.json,
        || json!({ "stats": rows }),
        || {
            Table::of(&head, &rows, |r| {
                columns.iter().map(|(_, k)| text(&r[*k])).collect()
            })
        },
    );
    Ok(())
}
