//! Topic, cluster, broker and group commands.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_client::admin::{QueueProgress, Target};
use tern_client::{Admin, MessageQueue};
use tern_shell::body::{
    Connection, QueueData, SubscriptionGroupConfig, TopicConfig, TopicRouteData,
};

use crate::opts::{BROKER_ADDR, CLUSTER_NAME, CONSUMER_GROUP, GROUP_NAME, TOPIC};
use crate::out::{Table, fmt_time, print_json, print_listing, to_value};
use crate::{Args, CliError, Command, Opt, flag, val, wait};

/// `-b` broker or `-c` cluster, one of them required.
pub fn target(args: &Args) -> Result<Target, CliError> {
    match (args.get('b'), args.get('c')) {
        (Some(b), _) => Ok(Target::Broker(b.to_owned())),
        (None, Some(c)) => Ok(Target::Cluster(c.to_owned())),
        (None, None) => Err(CliError::Usage(
            "give a broker address (-b) or a cluster name (-c)".into(),
        )),
    }
}

pub const UPDATE_TOPIC: Command = Command {
    name: "updateTopic",
    desc: "Update or create topic",
    opts: &[
        val('b', "brokerAddr", false, "create topic to which broker"),
        val('c', "clusterName", false, "create topic to which cluster"),
        TOPIC,
        val(
            'r',
            "readQueueNums",
            false,
            "set read queue nums (default 8)",
        ),
        val(
            'w',
            "writeQueueNums",
            false,
            "set write queue nums (default 8)",
        ),
        val(
            'p',
            "perm",
            false,
            "set topic's permission(2|4|6), intro[2:W 4:R; 6:RW] (default 6)",
        ),
        val('o', "order", false, "set topic's order(true|false)"),
        val(
            'a',
            "attributes",
            false,
            "attribute(+a=b,+c=d,-e), e.g. +message.type=FIFO (NORMAL, FIFO, DELAY, TRANSACTION, MIXED)",
        ),
        val(
            'u',
            "unit",
            false,
            "is unit topic (true|false; accepted and ignored)",
        ),
        val(
            's',
            "hasUnitSub",
            false,
            "has unit sub (true|false; accepted and ignored)",
        ),
    ],
    run: update_topic,
};

fn update_topic(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let target = target(args)?;
    let cfg = TopicConfig {
        topic_name: args.req('t')?.to_owned(),
        read_queue_nums: args.num('r', 8)?,
        write_queue_nums: args.num('w', 8)?,
        perm: args.num('p', 6)?,
        order: args.bool('o', false)?,
        attributes: args.get('a').map(signed_attributes).unwrap_or_default(),
        ..TopicConfig::default()
    };
    tern_client::message::check_topic(&cfg.topic_name)?;
    let done = wait(admin.create_topic(&target, &cfg))?;
    if args.json {
        print_json(&json!({ "brokers": done, "topicConfig": to_value(&cfg) }));
        return Ok(());
    }
    for addr in &done {
        println!("create topic to {addr} success.");
    }
    let attributes: Vec<String> = cfg
        .attributes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "TopicConfig [topicName={}, readQueueNums={}, writeQueueNums={}, perm={}, topicFilterType={}, topicSysFlag={}, order={}, attributes={{{}}}]",
        cfg.topic_name,
        cfg.read_queue_nums,
        cfg.write_queue_nums,
        perm_name(cfg.perm),
        cfg.topic_filter_type,
        cfg.topic_sys_flag,
        cfg.order,
        attributes.join(", ")
    );
    Ok(())
}

/// `-a`'s `+a=b,+c=d,-e` as mqadmin's `AttributeParser.parseToMap` reads it: each key
/// keeps its sign; the broker checks keys and values.
fn signed_attributes(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap_or((e, ""));
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect()
}

/// Permission bits of a topic's queues (`PermName`).
const PERM_READ: i32 = 4;
const PERM_WRITE: i32 = 2;
const PERM_INHERIT: i32 = 1;

fn perm_name(perm: i32) -> String {
    let mut s = String::new();
    s.push(if perm & PERM_READ != 0 { 'R' } else { '-' });
    s.push(if perm & PERM_WRITE != 0 { 'W' } else { '-' });
    s.push(if perm & PERM_INHERIT != 0 { 'X' } else { '-' });
    s
}

/// The queues of `topic` a client may write (`for_write`) or read, in route order: each
/// broker with that permission and its write or read queue count (as the Java client
/// makes its publish and subscribe lists from a route).
pub(crate) fn route_queues(
    route: &TopicRouteData,
    topic: &str,
    for_write: bool,
) -> Vec<MessageQueue> {
    let (perm, count): (i32, fn(&QueueData) -> i32) = if for_write {
        (PERM_WRITE, |q| q.write_queue_nums)
    } else {
        (PERM_READ, |q| q.read_queue_nums)
    };
    route
        .queue_datas
        .iter()
        .filter(|q| q.perm & perm != 0)
        .flat_map(|q| {
            (0..count(q).max(0)).map(|id| MessageQueue {
                topic: topic.to_owned(),
                broker_name: q.broker_name.clone(),
                queue_id: id,
            })
        })
        .collect()
}

pub const DELETE_TOPIC: Command = Command {
    name: "deleteTopic",
    desc: "Delete topic from broker and NameServer",
    opts: &[
        TOPIC,
        val('c', "clusterName", true, "delete topic from which cluster"),
    ],
    run: delete_topic,
};

fn delete_topic(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (topic, cluster) = (args.req('t')?, args.req('c')?);
    wait(admin.delete_topic(cluster, topic))?;
    if args.json {
        print_json(&json!({ "topic": topic, "cluster": cluster, "deleted": true }));
    } else {
        println!("delete topic [{topic}] from cluster [{cluster}] success.");
        println!("delete topic [{topic}] from NameServer success.");
    }
    Ok(())
}

pub const TOPIC_LIST: Command = Command {
    name: "topicList",
    desc: "Fetch all topic list from name server",
    opts: &[flag('c', "clusterModel", "show the cluster of each topic")],
    run: topic_list,
};

fn topic_list(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topics = wait(admin.topic_list())?;
    if !args.has('c') {
        if args.json {
            print_json(&json!({ "topicList": topics }));
        } else {
            for t in topics {
                println!("{t}");
            }
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    for t in topics {
        let clusters = match wait(admin.topic_route(&t)) {
            Ok(r) => {
                let mut c: Vec<String> = r.broker_datas.into_iter().map(|b| b.cluster).collect();
                c.sort();
                c.dedup();
                c.join(",")
            }
            Err(_) => String::new(),
        };
        rows.push((clusters, t));
    }
    print_listing(
        args.json,
        || {
            Value::Array(
                rows.iter()
                    .map(|(c, t)| json!({ "cluster": c, "topic": t }))
                    .collect(),
            )
        },
        || {
            Table::of(&["Cluster Name", "Topic"], &rows, |(c, t)| {
                vec![c.clone(), t.clone()]
            })
        },
    );
    Ok(())
}

pub const TOPIC_ROUTE: Command = Command {
    name: "topicRoute",
    desc: "Examine topic route info",
    opts: &[TOPIC, flag('l', "list", "use list format to print data")],
    run: topic_route,
};

fn topic_route(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let route = wait(admin.topic_route(args.req('t')?))?;
    let head = [
        "ClusterName",
        "BrokerName",
        "BrokerAddrs",
        "ReadQueueNums",
        "WriteQueueNums",
        "Perm",
    ];
    let row = |q: &QueueData| {
        let b = route
            .broker_datas
            .iter()
            .find(|b| b.broker_name == q.broker_name);
        let addrs = b
            .map(|b| {
                b.broker_addrs
                    .0
                    .iter()
                    .map(|(id, a)| format!("{id}:{a}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        vec![
            b.map(|b| b.cluster.clone()).unwrap_or_default(),
            q.broker_name.clone(),
            addrs,
            q.read_queue_nums.to_string(),
            q.write_queue_nums.to_string(),
            perm_name(q.perm),
        ]
    };
    print_listing(
        args.json,
        || to_value(&route),
        || Table::of(&head, &route.queue_datas, row),
    );
    Ok(())
}

pub const TOPIC_STATUS: Command = Command {
    name: "topicStatus",
    desc: "Examine topic Status info",
    opts: &[
        TOPIC,
        val(
            'c',
            "cluster",
            false,
            "cluster name (ignored: every broker of the route)",
        ),
    ],
    run: topic_status,
};

fn topic_status(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let stats = wait(admin.topic_stats(args.req('t')?))?;
    let doc = || {
        let rows = stats
            .iter()
            .map(|(q, o)| json!({ "queue": to_value(q), "minOffset": o.min_offset, "maxOffset": o.max_offset, "lastUpdateTimestamp": o.last_update_timestamp }));
        Value::Array(rows.collect())
    };
    let head = [
        "Broker Name",
        "QID",
        "Min Offset",
        "Max Offset",
        "Last Updated",
    ];
    print_listing(args.json, doc, || {
        Table::of(&head, &stats, |(q, o)| {
            vec![
                q.broker_name.clone(),
                q.queue_id.to_string(),
                o.min_offset.to_string(),
                o.max_offset.to_string(),
                fmt_time(o.last_update_timestamp),
            ]
        })
    });
    Ok(())
}

pub const CLUSTER_LIST: Command = Command {
    name: "clusterList",
    desc: "List cluster infos",
    opts: &[flag('m', "moreStats", "print more stats"), CLUSTER_NAME],
    run: cluster_list,
};

fn cluster_list(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let info = wait(admin.cluster_info())?;
    let mut rows = Vec::new();
    for (cluster, names) in &info.cluster_addr_table {
        if args.get('c').is_some_and(|c| c != cluster) {
            continue;
        }
        let mut names = names.clone();
        names.sort();
        for name in names {
            let Some(b) = info.broker_addr_table.get(&name) else {
                continue;
            };
            for (id, addr) in &b.broker_addrs.0 {
                let rt = wait(admin.broker_runtime_info(addr)).unwrap_or_default();
                rows.push((cluster.clone(), name.clone(), *id, addr.clone(), rt));
            }
        }
    }
    let doc = || {
        let docs = rows
            .iter()
            .map(|(c, n, id, a, rt)| json!({ "cluster": c, "brokerName": n, "brokerId": id, "addr": a, "runtime": rt }));
        Value::Array(docs.collect())
    };
    let more = args.has('m');
    let mut head = vec!["Cluster Name", "Broker Name", "BID", "Addr", "Version"];
    if more {
        head.extend(["Put Today", "CommitLog Max", "Boot Time"]);
    }
    print_listing(args.json, doc, || {
        Table::of(&head, &rows, |(c, n, id, a, rt)| {
            let get = |k: &str| rt.get(k).cloned().unwrap_or_else(|| "-".into());
            let mut row = vec![
                c.clone(),
                n.clone(),
                id.to_string(),
                a.clone(),
                get("brokerVersionDesc"),
            ];
            if more {
                let boot = rt
                    .get("bootTimestamp")
                    .and_then(|s| s.parse().ok())
                    .map_or("-".into(), fmt_time);
                // mqadmin's InTotalToday: the total now less the total at midnight.
                let num = |k: &str| rt.get(k).and_then(|s| s.parse::<u64>().ok());
                let today = match (num("msgPutTotalTodayNow"), num("msgPutTotalTodayMorning")) {
                    (Some(now), Some(morning)) => now.saturating_sub(morning).to_string(),
                    (Some(now), None) => now.to_string(),
                    _ => "-".into(),
                };
                row.extend([today, get("commitLogMaxOffset"), boot]);
            }
            row
        })
    });
    Ok(())
}

pub const BROKER_STATUS: Command = Command {
    name: "brokerStatus",
    desc: "Fetch broker runtime status data",
    opts: &[BROKER_ADDR, CLUSTER_NAME],
    run: broker_status,
};

fn broker_status(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let addrs: Vec<String> = match target(args)? {
        Target::Broker(b) => vec![b],
        Target::Cluster(c) => wait(admin.cluster_masters(&c))?
            .into_iter()
            .map(|(_, a)| a)
            .collect(),
    };
    let mut all = serde_json::Map::new();
    for addr in &addrs {
        let rt = wait(admin.broker_runtime_info(addr))?;
        if args.json {
            all.insert(addr.clone(), to_value(&rt));
            continue;
        }
        for (k, v) in &rt {
            if addrs.len() > 1 {
                println!("{addr:<24}{k:<32}: {v}");
            } else {
                println!("{k:<32}: {v}");
            }
        }
    }
    if args.json {
        print_json(&Value::Object(all));
    }
    Ok(())
}

/// Where a subscription group is written (updateSubGroup, setConsumeMode): one broker
/// or every master of a cluster.
pub(crate) const SUB_GROUP_BROKER: Opt = val(
    'b',
    "brokerAddr",
    false,
    "create subscription group to which broker",
);
pub(crate) const SUB_GROUP_CLUSTER: Opt = val(
    'c',
    "clusterName",
    false,
    "create subscription group to which cluster",
);

pub const UPDATE_SUB_GROUP: Command = Command {
    name: "updateSubGroup",
    desc: "Update or create subscription group",
    opts: &[
        SUB_GROUP_BROKER,
        SUB_GROUP_CLUSTER,
        GROUP_NAME,
        val('s', "consumeEnable", false, "consume enable (true|false)"),
        val(
            'm',
            "consumeFromMinEnable",
            false,
            "from min offset (true|false)",
        ),
        val(
            'd',
            "consumeBroadcastEnable",
            false,
            "broadcast (true|false)",
        ),
        val(
            'o',
            "consumeMessageOrderly",
            false,
            "consume message orderly (true|false)",
        ),
        val('q', "retryQueueNums", false, "retry queue nums"),
        val('r', "retryMaxTimes", false, "retry max times"),
        val('i', "brokerId", false, "consumer from which broker id"),
        val(
            'w',
            "whichBrokerWhenConsumeSlowly",
            false,
            "which broker id when consume slowly",
        ),
        val(
            'a',
            "notifyConsumerIdsChanged",
            false,
            "notify consumerId changed (true|false)",
        ),
    ],
    run: update_sub_group,
};

fn update_sub_group(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let target = target(args)?;
    let d = SubscriptionGroupConfig::default();
    let cfg = SubscriptionGroupConfig {
        group_name: args.req('g')?.to_owned(),
        consume_enable: args.bool('s', d.consume_enable)?,
        consume_from_min_enable: args.bool('m', d.consume_from_min_enable)?,
        consume_broadcast_enable: args.bool('d', d.consume_broadcast_enable)?,
        consume_message_orderly: args.bool('o', d.consume_message_orderly)?,
        retry_queue_nums: args.num('q', d.retry_queue_nums)?,
        retry_max_times: args.num('r', d.retry_max_times)?,
        broker_id: args.num('i', d.broker_id)?,
        which_broker_when_consume_slowly: args.num('w', d.which_broker_when_consume_slowly)?,
        notify_consumer_ids_changed_enable: args.bool('a', d.notify_consumer_ids_changed_enable)?,
        ..d
    };
    let done = wait(admin.create_subscription_group(&target, &cfg))?;
    if args.json {
        print_json(&json!({ "brokers": done, "subscriptionGroupConfig": to_value(&cfg) }));
        return Ok(());
    }
    for addr in &done {
        println!("create subscription group to {addr} success.");
    }
    println!("{}", serde_json::to_string(&cfg).unwrap_or_default());
    Ok(())
}

pub const CONSUMER_PROGRESS: Command = Command {
    name: "consumerProgress",
    desc: "Query consumer's progress, speed",
    opts: &[
        GROUP_NAME,
        val('t', "topicName", false, "topic name"),
        flag(
            's',
            "showClientIP",
            "show client ip (not supported: ignored)",
        ),
        val(
            'c',
            "cluster",
            false,
            "cluster name (ignored: every master)",
        ),
    ],
    run: consumer_progress,
};

fn consumer_progress(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let p = wait(admin.consume_progress(args.req('g')?, args.get('t')))?;
    if args.json {
        print_json(&to_value(&p));
        return Ok(());
    }
    progress_table(p.queues.iter().map(|q| (q, None)), false).print();
    println!();
    println!("Consume TPS: {:.2}", p.consume_tps);
    println!("Diff Total: {}", p.diff_total);
    Ok(())
}

/// A group's progress queue by queue, as consumerProgress prints it; brokerConsumeStats
/// prints the same with a Group column after Topic (`group_column`, each row's group).
pub(crate) fn progress_table<'a>(
    queues: impl IntoIterator<Item = (&'a QueueProgress, Option<&'a str>)>,
    group_column: bool,
) -> Table {
    let mut head = vec!["Topic"];
    if group_column {
        head.push("Group");
    }
    head.extend([
        "Broker Name",
        "QID",
        "Broker Offset",
        "Consumer Offset",
        "Diff",
        "LastTime",
    ]);
    Table::of(&head, queues, |(q, group)| {
        let mut row = vec![q.queue.topic.clone()];
        row.extend(group.map(str::to_owned));
        row.extend([
            q.queue.broker_name.clone(),
            q.queue.queue_id.to_string(),
            q.broker_offset.to_string(),
            q.consumer_offset.to_string(),
            q.diff.to_string(),
            fmt_time(q.last_timestamp),
        ]);
        row
    })
}

/// A group's client connections as consumerConnection prints them; producerConnection
/// numbers them first (`numbered`).
pub(crate) fn connection_table(conns: &[Connection], numbered: bool) -> Table {
    let mut head = vec!["ClientId", "ClientAddr", "Language", "Version"];
    if numbered {
        head.insert(0, "ID");
    }
    Table::of(&head, conns.iter().enumerate(), |(i, c)| {
        let mut row = Vec::new();
        if numbered {
            row.push(format!("{:04}", i + 1));
        }
        row.extend([
            c.client_id.clone(),
            c.client_addr.clone(),
            c.language.name().to_owned(),
            c.version.to_string(),
        ]);
        row
    })
}

pub const CONSUMER_CONNECTION: Command = Command {
    name: "consumerConnection",
    desc: "Query consumer's socket connection, client version and subscription",
    opts: &[
        CONSUMER_GROUP,
        val(
            'b',
            "brokerAddr",
            false,
            "broker address (ignored: first master that knows the group)",
        ),
    ],
    run: consumer_connection,
};

fn consumer_connection(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let c = wait(admin.consumer_connection(args.req('g')?))?;
    if args.json {
        print_json(&to_value(&c));
        return Ok(());
    }
    connection_table(&c.connection_set, false).print();
    println!();
    println!("Below is subscription:");
    Table::of(
        &["Topic", "SubExpression"],
        &c.subscription_table,
        |(topic, sub)| vec![topic.clone(), sub.sub_string.clone()],
    )
    .print();
    println!();
    println!("ConsumeType: {}", c.consume_type.name());
    println!("MessageModel: {}", c.message_model.name());
    println!("ConsumeFromWhere: {}", c.consume_from_where.name());
    Ok(())
}
