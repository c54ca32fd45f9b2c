//! Commands that act on a consumer group through its brokers and clients:
//! resetOffsetByTime, consumerStatus, setConsumeMode.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tern_client::Admin;
use tern_client::admin::RequestMode;
use tern_shell::runtime::now_ms;

use crate::cmd_message::parse_time;
use crate::cmd_topic::{SUB_GROUP_BROKER, SUB_GROUP_CLUSTER, target};
use crate::opts::{CONSUMER_GROUP, GROUP_NAME};
use crate::out::{Table, print_json};
use crate::{Args, CliError, Command, val, wait};

pub const RESET_OFFSET_BY_TIME: Command = Command {
    name: "resetOffsetByTime",
    desc: "Reset consumer offset by timestamp(without client restart).",
    opts: &[
        val('g', "group", true, "set the consumer group"),
        val('t', "topic", true, "set the topic"),
        val(
            's',
            "timestamp",
            true,
            "set the timestamp[now|currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
        ),
        val(
            'f',
            "force",
            false,
            "set the force rollback by timestamp switch[true|false] (default true)",
        ),
    ],
    run: reset_offset_by_time,
};

fn reset_offset_by_time(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (group, topic, when) = (args.req('g')?, args.req('t')?, args.req('s')?);
    // RocketMQ 5's reading of `now`: the current time (4.9 took it as the queues' end).
    let ts = if when.eq_ignore_ascii_case("now") {
        now_ms()
    } else {
        parse_time(when)?
    };
    let force = args.bool('f', true)?;
    let table = wait(admin.reset_offset_by_time(topic, group, ts, force))?;
    if args.json {
        let rows: Vec<Value> = table
            .iter()
            .map(|(q, o)| json!({"brokerName": q.broker_name, "queueId": q.queue_id, "offset": o}))
            .collect();
        print_json(&Value::Array(rows));
        return Ok(());
    }
    println!(
        "start reset consumer offset by specified, group[{group}], topic[{topic}], force[{force}], timestamp(string)[{when}], timestamp(long)[{ts}]"
    );
    Table::of(&["brokerName", "queueId", "offset"], &table, |(q, o)| {
        vec![q.broker_name.clone(), q.queue_id.to_string(), o.to_string()]
    })
    .print();
    Ok(())
}

pub const CONSUMER_STATUS: Command = Command {
    name: "consumerStatus",
    desc: "Query consumer's internal data structure.",
    opts: &[
        CONSUMER_GROUP,
        val('i', "clientId", false, "The consumer's client id"),
        val(
            'b',
            "brokerAddr",
            false,
            "broker address (ignored: the brokers the group is connected to are asked)",
        ),
        crate::flag('s', "jstack", "Run jstack command in the consumer progress"),
    ],
    run: consumer_status,
};

fn consumer_status(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let group = args.req('g')?;
    let jstack = args.has('s');
    if let Some(cid) = args.get('i') {
        let info = wait(admin.consumer_running_info(group, cid, jstack))?;
        if args.json {
            print_json(&info);
        } else {
            print!("{}", format_running_info(&info));
        }
        return Ok(());
    }
    let conns = wait(admin.consumer_connection(group))?;
    let mut infos = BTreeMap::new();
    let head = ["Index", "ClientId", "Version", "Status"];
    let t = Table::of(&head, conns.connection_set.iter().enumerate(), |(i, c)| {
        let status = match wait(admin.consumer_running_info(group, &c.client_id, jstack)) {
            Ok(info) => {
                infos.insert(c.client_id.clone(), info);
                "OK".to_owned()
            }
            // RocketMQ's C++ client answers only some of it; a client may also just leave.
            Err(e) => format!("no running info: {e}"),
        };
        vec![
            (i + 1).to_string(),
            c.client_id.clone(),
            c.version.to_string(),
            status,
        ]
    });
    if args.json {
        print_json(&json!(infos));
        return Ok(());
    }
    t.print();
    println!();
    let subs: BTreeSet<String> = infos
        .values()
        .map(|i| i["subscriptionSet"].to_string())
        .collect();
    if subs.len() <= 1 {
        println!("Same subscription in the same group of consumer");
    } else {
        println!("WARN: Different subscription in the same group of consumer!!!");
    }
    // Every queue owned by exactly one client (clustering): the group is balanced.
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for info in infos.values() {
        if let Some(t) = info["mqTable"].as_object() {
            for k in t.keys() {
                *owners.entry(k.clone()).or_insert(0) += 1;
            }
        }
    }
    let broadcast = infos
        .values()
        .any(|i| i["properties"]["messageModel"] == "BROADCASTING");
    if broadcast || owners.values().all(|n| *n == 1) {
        println!("Rebalance OK");
    } else {
        println!("Rebalance Failed: a queue is owned by more than one client");
    }
    Ok(())
}

/// Java's `ConsumerRunningInfo.formatString` sections, from the client's JSON.
fn format_running_info(info: &Value) -> String {
    let mut s = String::from("#Consumer Properties#\n");
    if let Some(p) = info["properties"].as_object() {
        for (k, v) in p {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            s.push_str(&format!("{k:<40}: {v}\n"));
        }
    }
    s.push_str("\n\n#Consumer Subscription#\n");
    if let Some(subs) = info["subscriptionSet"].as_array() {
        for (i, sub) in subs.iter().enumerate() {
            s.push_str(&format!(
                "{:03} Topic: {:<40} ClassFilter: {:<8} SubExpression: {}\n",
                i + 1,
                sub["topic"].as_str().unwrap_or_default(),
                sub["classFilterMode"].as_bool().unwrap_or(false),
                sub["subString"].as_str().unwrap_or_default()
            ));
        }
    }
    for (title, table) in [
        ("#Consumer MQ Detail#", "mqTable"),
        ("#Consumer Pop Detail#", "mqPopTable"),
    ] {
        s.push_str(&format!("\n\n{title}\n"));
        if let Some(t) = info[table].as_object() {
            for (mq, detail) in t {
                s.push_str(&format!("{mq:<64}  {detail}\n"));
            }
        }
    }
    s
}

pub const SET_CONSUME_MODE: Command = Command {
    name: "setConsumeMode",
    desc: "Set consume message mode. pull/pop etc.",
    opts: &[
        SUB_GROUP_BROKER,
        SUB_GROUP_CLUSTER,
        val('t', "topicName", true, "topic name"),
        GROUP_NAME,
        val('m', "mode", true, "consume mode. PULL/POP"),
        val(
            'q',
            "popShareQueueNum",
            false,
            "num of queue which share in pop mode",
        ),
    ],
    run: set_consume_mode,
};

fn set_consume_mode(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let target = target(args)?;
    let (topic, group) = (args.req('t')?, args.req('g')?);
    let mode = RequestMode::parse(args.req('m')?).map_err(|e| CliError::Usage(e.to_string()))?;
    let share = args.num('q', 0)?;
    let done = wait(admin.set_message_request_mode(&target, topic, group, mode, share))?;
    if args.json {
        print_json(&json!({"brokers": done, "topic": topic, "group": group,
            "mode": mode.name(), "popShareQueueNum": share}));
        return Ok(());
    }
    for _ in &done {
        println!("set consume mode to {} success.", mode.name());
    }
    println!(
        "topic[{topic}] group[{group}] consume mode[{}] popShareQueueNum[{share}]",
        mode.name()
    );
    Ok(())
}
