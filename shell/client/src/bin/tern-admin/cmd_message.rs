//! Message commands: send, consume, and the three queries.

use serde_json::{Value, json};
use tern_client::admin::TOOLS_CONSUMER_GROUP;
use tern_client::consumer::PullStatus;
use tern_client::message::property;
use tern_client::{
    Admin, ClientError, Message, MessageBuilder, MessageExt, MessageQueue, Producer,
    ProducerConfig, PullConsumer,
};
use tern_shell::runtime::now_ms;

use crate::opts::TOPIC;
use crate::out::{
    Table, body_text, message_detail, message_json, print_json, print_listing, queue_text, to_value,
};
use crate::{Args, CliError, Command, Opt, flag, val, wait};

/// `-t` of sendMessage and consumeMessage (mqadmin capitalises it there).
const MESSAGE_TOPIC: Opt = val('t', "topic", true, "Topic name");

pub const SEND_MESSAGE: Command = Command {
    name: "sendMessage",
    desc: "Send a message",
    opts: &[
        MESSAGE_TOPIC,
        val('p', "body", true, "UTF-8 string format of the message body"),
        val('k', "key", false, "Message keys"),
        val('c', "tags", false, "Message tags"),
        val('b', "broker", false, "Send message to target broker"),
        val('i', "qid", false, "Send message to target queue"),
    ],
    run: send_message,
};

fn send_message(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let mut msg = Message::new(topic, args.req('p')?.as_bytes().to_vec());
    if let Some(k) = args.get('k') {
        msg = msg.with_keys(k.split_whitespace());
    }
    if let Some(c) = args.get('c') {
        msg = msg.with_tags(c);
    }
    let queue = match (args.get('b'), args.get('i')) {
        (Some(b), Some(_)) => Some(MessageQueue {
            topic: topic.to_owned(),
            broker_name: b.to_owned(),
            queue_id: args.num('i', 0)?,
        }),
        (None, Some(_)) => {
            return Err(CliError::Usage(
                "Broker name must be set if the queue is chosen!".into(),
            ));
        }
        _ => None,
    };
    // A throwaway group per run, as mqadmin does.
    let config = ProducerConfig::new(now_ms().to_string());
    let producer = Producer::with_instance(config, admin.client().clone());
    let result = match &queue {
        Some(q) => wait(producer.send_to_queue(msg, q))?,
        None => wait(producer.send(msg))?,
    };
    if args.json {
        print_json(&to_value(&result));
        return Ok(());
    }
    let head = ["Broker Name", "QID", "Send Result", "MsgId"];
    Table::of(&head, [&result], |r| {
        vec![
            r.queue.broker_name.clone(),
            r.queue.queue_id.to_string(),
            r.status.name().to_owned(),
            r.msg_id.clone(),
        ]
    })
    .print();
    println!("OffsetMsgId: {}", result.offset_msg_id);
    println!("QueueOffset: {}", result.queue_offset);
    Ok(())
}

pub const CONSUME_MESSAGE: Command = Command {
    name: "consumeMessage",
    desc: "Consume message",
    opts: &[
        MESSAGE_TOPIC,
        val('b', "brokerName", false, "Broker name"),
        val('i', "queueId", false, "Queue Id"),
        val('o', "offset", false, "Queue offset"),
        val('g', "consumerGroup", false, "Consumer group name"),
        val('s', "beginTimestamp", false, BEGIN_TIMESTAMP_HELP),
        END_TIMESTAMP,
        val(
            'c',
            "MessageNumber",
            false,
            "Number of message to be consumed (default 128)",
        ),
    ],
    run: consume_message,
};

/// mqadmin's help of a begin time: milliseconds or its date form (what [`parse_time`] reads).
pub(crate) const BEGIN_TIMESTAMP_HELP: &str =
    "Begin timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]";
/// The end of a time range, as mqadmin's message commands take it.
pub(crate) const END_TIMESTAMP: Opt = val(
    'e',
    "endTimestamp",
    false,
    "End timestamp[currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS]",
);

/// Milliseconds, or `yyyy-MM-dd#HH:mm:ss:SSS` read as UTC.
pub(crate) fn parse_time(s: &str) -> Result<i64, CliError> {
    if let Ok(ms) = s.parse() {
        return Ok(ms);
    }
    let bad = || CliError::Usage(format!("{s:?} is neither ms nor yyyy-MM-dd#HH:mm:ss:SSS"));
    let (date, time) = s.split_once('#').ok_or_else(bad)?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let t: Vec<i64> = time
        .split(':')
        .map(|p| p.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let (&[y, m, day], &[hh, mm, ss, ms]) = (&d[..], &t[..]) else {
        return Err(bad());
    };
    // days_from_civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(days * 86_400_000 + hh * 3_600_000 + mm * 60_000 + ss * 1000 + ms)
}

fn consume_message(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let count: i64 = args.num('c', 128)?;
    if count <= 0 {
        return Err(CliError::Usage(
            "please input a positive messageNumber!".into(),
        ));
    }
    if args.has('i') && !args.has('b') {
        return Err(CliError::Usage(
            "Please set the brokerName before queueId!".into(),
        ));
    }
    if args.has('o') && !args.has('i') {
        return Err(CliError::Usage("please set queueId before offset!".into()));
    }
    let begin = args.get('s').map(parse_time).transpose()?;
    let end = args.get('e').map(parse_time).transpose()?;
    let group = args.get('g').unwrap_or(TOOLS_CONSUMER_GROUP);
    let consumer = PullConsumer::with_instance(group, admin.client().clone());
    let queues = match (args.get('b'), args.get('i')) {
        (Some(b), Some(_)) => vec![MessageQueue {
            topic: topic.to_owned(),
            broker_name: b.to_owned(),
            queue_id: args.num('i', 0)?,
        }],
        (Some(b), None) => wait(consumer.fetch_queues(topic))?
            .into_iter()
            .filter(|q| q.broker_name == b)
            .collect(),
        _ => wait(consumer.fetch_queues(topic))?,
    };
    let from: Option<i64> = args.get('o').map(|_| args.num('o', 0)).transpose()?;
    let mut left = count;
    let mut all = Vec::new();
    for q in &queues {
        if left == 0 {
            break;
        }
        let mut start = wait(consumer.min_offset(q))?;
        let mut stop = wait(consumer.max_offset(q))?;
        if let Some(t) = begin {
            start = wait(consumer.search_offset(q, t))?;
        }
        if let Some(t) = end {
            stop = wait(consumer.search_offset(q, t))?;
        }
        if let Some(o) = from {
            start = start.max(o);
        }
        let got = pull_queue(&consumer, q, start, stop, &mut left, args.json)?;
        all.extend(got);
    }
    if args.json {
        print_json(&Value::Array(all.iter().map(message_json).collect()));
    }
    Ok(())
}

/// Pulls `[start, stop)` of one queue, at most `left` messages, printing as it goes
/// (unless JSON is wanted: then the messages are returned for one document at the end).
fn pull_queue(
    c: &PullConsumer,
    q: &MessageQueue,
    start: i64,
    stop: i64,
    left: &mut i64,
    json: bool,
) -> Result<Vec<MessageExt>, CliError> {
    let mut out = Vec::new();
    if start >= stop {
        return Ok(out);
    }
    let mut offset = start;
    let name = queue_text(q);
    while *left > 0 && offset < stop {
        let max = (*left).min(stop - offset).min(32) as i32;
        let r = wait(c.pull(q, offset, max))?;
        match r.status {
            PullStatus::Found => {
                for m in r.messages.into_iter().filter(|m| m.queue_offset < stop) {
                    if *left == 0 {
                        break;
                    }
                    *left -= 1;
                    if !json {
                        print_line(&m);
                    }
                    out.push(m);
                }
            }
            PullStatus::NoMatchedMsg => {}
            PullStatus::NoNewMsg | PullStatus::OffsetIllegal => {
                if !json {
                    println!(
                        "{name} print msg finished. status={:?}, offset={}",
                        r.status, r.next_begin_offset
                    );
                }
                return Ok(out);
            }
        }
        if r.next_begin_offset <= offset {
            break;
        }
        offset = r.next_begin_offset;
    }
    if !json {
        println!("{name} print msg finished. offset={offset}");
    }
    Ok(out)
}

fn print_line(m: &MessageExt) {
    println!(
        "MSGID: {} QID: {} OFFSET: {} TAGS: {} KEYS: {} BODY: {}",
        m.msg_id(),
        m.queue_id,
        m.queue_offset,
        m.tags().unwrap_or(""),
        m.properties.get(property::KEYS).map_or("", |s| s),
        body_text(m)
    );
}

fn print_messages(msgs: &[MessageExt], json: bool) {
    if json {
        print_json(&Value::Array(msgs.iter().map(message_json).collect()));
        return;
    }
    for (i, m) in msgs.iter().enumerate() {
        if i > 0 {
            println!();
        }
        print!("{}", message_detail(m));
    }
}

pub const QUERY_MSG_BY_ID: Command = Command {
    name: "queryMsgById",
    desc: "Query Message by Id",
    opts: &[
        val(
            'i',
            "msgId",
            true,
            "Message Id (offset msgId; comma-separated for several)",
        ),
        val(
            't',
            "topic",
            false,
            "topic, to look the id up as a unique key too",
        ),
    ],
    run: query_msg_by_id,
};

fn query_msg_by_id(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let mut found = Vec::new();
    for id in args
        .req('i')?
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        found.extend(wait(admin.find_message(id, args.get('t')))?);
    }
    if found.is_empty() {
        return Err(ClientError::NotFound("no message found".into()).into());
    }
    print_messages(&found, args.json);
    Ok(())
}

pub const QUERY_MSG_BY_UNIQUE_KEY: Command = Command {
    name: "queryMsgByUniqueKey",
    desc: "Query Message by Unique key",
    opts: &[
        val('i', "msgId", true, "Message Id (UNIQ_KEY)"),
        val('t', "topic", true, "The topic of msg"),
        flag('a', "showAll", "Print all message, the limit is 32"),
    ],
    run: query_msg_by_unique_key,
};

fn query_msg_by_unique_key(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let mut msgs = wait(admin.query_by_unique_key(args.req('t')?, args.req('i')?))?;
    if msgs.is_empty() {
        return Err(ClientError::NotFound(format!(
            "no message with unique key {}",
            args.req('i')?
        ))
        .into());
    }
    if !args.has('a') {
        msgs.truncate(1);
    }
    print_messages(&msgs, args.json);
    Ok(())
}

pub const QUERY_MSG_BY_KEY: Command = Command {
    name: "queryMsgByKey",
    desc: "Query Message by Key",
    opts: &[
        TOPIC,
        val('k', "msgKey", true, "Message Key"),
        val('b', "beginTimestamp", false, "Begin timestamp (ms)"),
        val('e', "endTimestamp", false, "End timestamp (ms)"),
        val(
            'c',
            "maxNum",
            false,
            "The maximum number of messages returned by the query, default:64",
        ),
    ],
    run: query_msg_by_key,
};

fn query_msg_by_key(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (topic, key) = (args.req('t')?, args.req('k')?);
    let begin = args.num('b', 0i64)?;
    let end = args.num('e', i64::MAX)?;
    let max = args.num('c', 64i32)?;
    let msgs = wait(admin.query_by_key(topic, key, max, begin, end))?;
    print_listing(
        args.json,
        || Value::Array(msgs.iter().map(message_json).collect()),
        || {
            Table::of(&["Message ID", "QID", "Offset"], &msgs, |m| {
                vec![
                    m.msg_id().to_owned(),
                    m.queue_id.to_string(),
                    m.queue_offset.to_string(),
                ]
            })
        },
    );
    Ok(())
}

pub const QUERY_MSG_BY_OFFSET: Command = Command {
    name: "queryMsgByOffset",
    desc: "Query Message by offset",
    opts: &[
        TOPIC,
        val('b', "brokerName", true, "Broker Name"),
        val('i', "queueId", true, "Queue Id"),
        val('o', "offset", true, "Queue Offset"),
    ],
    run: query_msg_by_offset,
};

fn query_msg_by_offset(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let q = MessageQueue {
        topic: args.req('t')?.to_owned(),
        broker_name: args.req('b')?.to_owned(),
        queue_id: args.num('i', 0)?,
    };
    let m = wait(admin.query_by_offset(&q, args.num('o', 0)?))?;
    if args.json {
        print_json(&json!([message_json(&m)]));
    } else {
        print!("{}", message_detail(&m));
    }
    Ok(())
}
