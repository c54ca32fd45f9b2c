//! Send probes: sendMsgStatus, checkMsgSendRT and clusterRT send real messages and
//! report how long each send took.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tern_client::{Admin, Message, Producer, ProducerConfig, SendResult};
use tern_shell::runtime::now_ms;

use crate::cmd_topic::route_queues;
use crate::opts::TOPIC;
use crate::out::{Table, print_json, queue_text, to_value};
use crate::{Args, CliError, Command, Opt, val, wait};

/// A body of about `size` bytes (mqadmin repeats "hello jodie").
fn body_of(size: usize) -> Vec<u8> {
    "hello jodie".repeat(size.div_ceil(11)).into_bytes()
}

/// A producer with a throwaway group, as mqadmin makes one per run.
fn producer(admin: &Admin, group: String) -> Producer {
    Producer::with_instance(ProducerConfig::new(group), admin.client().clone())
}

fn result_text(r: &SendResult) -> String {
    format!(
        "SendResult [sendStatus={}, msgId={}, offsetMsgId={}, messageQueue={}, queueOffset={}]",
        r.status.name(),
        r.msg_id,
        r.offset_msg_id,
        queue_text(&r.queue),
        r.queue_offset
    )
}

fn positive(args: &Args, c: char, default: usize) -> Result<usize, CliError> {
    let n: usize = args.num(c, default)?;
    if n == 0 {
        return Err(CliError::Usage(format!(
            "option -{c} must be greater than 0"
        )));
    }
    Ok(n)
}

/// `-a` of the two RT probes.
const AMOUNT: Opt = val('a', "amount", false, "message amount | default 100");
/// `-s` of the two RT probes.
const SIZE: Opt = val('s', "size", false, "message size | default 128 Byte");

pub const SEND_MSG_STATUS: Command = Command {
    name: "sendMsgStatus",
    desc: "Send msg to broker",
    opts: &[
        val(
            'b',
            "brokerName",
            true,
            "Broker Name e.g. clusterName_brokerName as DefaultCluster_broker-a",
        ),
        val('s', "messageSize", false, "Message Size, Default: 128"),
        val('c', "count", false, "send message count, Default: 50"),
    ],
    run: send_msg_status,
};

fn send_msg_status(admin: &Admin, args: &Args) -> Result<(), CliError> {
    // The topic is the broker's own (every broker serves its name as a topic).
    let topic = args.req('b')?;
    let size = positive(args, 's', 128)?;
    let count = positive(args, 'c', 50)?;
    let p = producer(admin, "PID_SMSC".into());
    // A first, small send warms the route and the connection (mqadmin's).
    wait(p.send(Message::new(topic, body_of(16))))?;
    let mut rows = Vec::new();
    for _ in 0..count {
        let begin = Instant::now();
        let r = wait(p.send(Message::new(topic, body_of(size))))?;
        let rt = begin.elapsed().as_millis();
        if args.json {
            rows.push(json!({ "rtMs": rt, "sendResult": to_value(&r) }));
        } else {
            println!("rt={rt}ms, {}", result_text(&r));
        }
    }
    if args.json {
        print_json(&Value::Array(rows));
    }
    Ok(())
}

pub const CHECK_MSG_SEND_RT: Command = Command {
    name: "checkMsgSendRT",
    desc: "Check message send response time",
    opts: &[TOPIC, AMOUNT, SIZE],
    run: check_msg_send_rt,
};

fn check_msg_send_rt(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let amount = positive(args, 'a', 100)?;
    let size = positive(args, 's', 128)?;
    let route = wait(admin.topic_route(topic))?;
    // The topic's writable queues in route order; send `i` goes to queue `i % n`.
    let queues = route_queues(&route, topic, true);
    if queues.is_empty() {
        return Err(CliError::Usage(format!(
            "topic {topic} has no writable queue"
        )));
    }
    let p = producer(admin, now_ms().to_string());
    let body = body_of(size);
    let mut rows = Vec::new();
    let mut elapsed = Duration::ZERO;
    for i in 0..amount {
        let q = &queues[i % queues.len()];
        let start = Instant::now();
        let ok = wait(p.send_to_queue(Message::new(topic, body.clone()), q)).is_ok();
        let rt = start.elapsed();
        // The first send pays for the connection; mqadmin leaves it out of the average.
        if i != 0 {
            elapsed += rt;
        }
        rows.push((q.broker_name.clone(), q.queue_id, ok, rt.as_millis()));
    }
    let avg = if amount > 1 {
        elapsed.as_secs_f64() * 1000.0 / (amount - 1) as f64
    } else {
        0.0
    };
    if args.json {
        let sends: Vec<Value> = rows
            .iter()
            .map(|(b, q, ok, rt)| json!({ "brokerName": b, "queueId": q, "sendResult": ok, "rtMs": rt }))
            .collect();
        print_json(&json!({ "sends": sends, "avgRtMs": avg }));
        return Ok(());
    }
    Table::of(
        &["Broker Name", "QID", "Send Result", "RT"],
        rows,
        |(b, q, ok, rt)| vec![b, q.to_string(), ok.to_string(), rt.to_string()],
    )
    .print();
    println!("Avg RT: {avg:.2}");
    Ok(())
}

pub const CLUSTER_RT: Command = Command {
    name: "clusterRT",
    desc: "List All clusters Message Send RT",
    opts: &[
        AMOUNT,
        SIZE,
        val(
            'c',
            "cluster",
            false,
            "cluster name | default display all cluster",
        ),
        val('p', "print log", false, "print as tlog | default false"),
        val(
            'm',
            "machine room",
            false,
            "machine room name | default noname",
        ),
        val(
            'i',
            "interval",
            false,
            "print interval | default 10 seconds",
        ),
    ],
    run: cluster_rt,
};

/// Measures every broker of the chosen clusters, one round every `-i` seconds, until
/// interrupted (as mqadmin does). With `--json`, one round, printed as one document.
fn cluster_rt(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let amount = positive(args, 'a', 100)?;
    let size = positive(args, 's', 128)?;
    let interval = Duration::from_secs(args.num('i', 10u64)?);
    let tlog = args.bool('p', false)?;
    let room = args.get('m').unwrap_or("noname").to_owned();
    let info = wait(admin.cluster_info())?;
    let clusters: Vec<String> = match args.get('c') {
        Some(c) => vec![c.to_owned()],
        None => info.cluster_addr_table.keys().cloned().collect(),
    };
    let p = producer(admin, now_ms().to_string());
    let body = body_of(size);
    if !tlog && !args.json {
        Table::new(&[
            "Cluster Name",
            "Broker Name",
            "RT",
            "successCount",
            "failCount",
        ])
        .print();
    }
    loop {
        let mut round = Vec::new();
        for cluster in &clusters {
            let Some(brokers) = info.cluster_addr_table.get(cluster) else {
                return Err(CliError::Usage(format!("cluster [{cluster}] not exist")));
            };
            for broker in brokers {
                let (mut ok, mut failed, mut elapsed) = (0u64, 0u64, Duration::ZERO);
                for i in 0..amount {
                    let start = Instant::now();
                    // The topic is the broker's own name: each send measures that broker.
                    match wait(p.send(Message::new(broker, body.clone()))) {
                        Ok(_) => ok += 1,
                        Err(_) => failed += 1,
                    }
                    if i != 0 {
                        elapsed += start.elapsed();
                    }
                }
                let rt = if amount > 1 {
                    elapsed.as_secs_f64() * 1000.0 / (amount - 1) as f64
                } else {
                    0.0
                };
                round.push((cluster.clone(), broker.clone(), rt, ok, failed));
            }
        }
        if args.json {
            let rows: Vec<Value> = round
                .iter()
                .map(|(c, b, rt, ok, f)| json!({ "clusterName": c, "brokerName": b, "rtMs": rt, "successCount": ok, "failCount": f }))
                .collect();
            print_json(&Value::Array(rows));
            return Ok(());
        }
        for (c, b, rt, ok, f) in round {
            if tlog {
                println!(
                    "{}|{room}|{c}|{b}|{}",
                    crate::out::fmt_time(now_ms()),
                    rt.round()
                );
            } else {
                println!("{c}  {b}  {rt:.2}  {ok}  {f}");
            }
        }
        std::thread::sleep(interval);
    }
}
