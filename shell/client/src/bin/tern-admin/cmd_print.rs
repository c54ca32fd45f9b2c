//! printMsg and printMsgByQueue: every message of a topic or of one queue over an
//! offset or time range, pulled with the tools' consumer group.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_client::admin::TOOLS_CONSUMER_GROUP;
use tern_client::consumer::PullStatus;
use tern_client::message::property;
use tern_client::{Admin, MessageExt, MessageQueue, PullConsumer};

use crate::cmd_message::{BEGIN_TIMESTAMP_HELP, END_TIMESTAMP, parse_time};
use crate::opts::TOPIC;
use crate::out::{body_text, message_json, print_json, queue_text};
use crate::progress::Progress;
use crate::{Args, CliError, Command, Opt, val, wait};

/// Messages asked for per pull (mqadmin's).
const PULL_BATCH: i32 = 32;

fn check_charset(args: &Args) -> Result<(), CliError> {
    match args.get('c') {
        None => Ok(()),
        Some(c) if c.eq_ignore_ascii_case("UTF-8") || c.eq_ignore_ascii_case("UTF8") => Ok(()),
        Some(c) => Err(CliError::Usage(format!(
            "charset {c:?} is not supported: bodies are printed as UTF-8"
        ))),
    }
}

fn message_line(m: &MessageExt, body: bool) -> String {
    format!(
        "MSGID: {} MessageExt [queueId={}, queueOffset={}, storeTimestamp={}, tags={}, keys={}] BODY: {}",
        m.msg_id(),
        m.queue_id,
        m.queue_offset,
        m.store_timestamp,
        m.tags().unwrap_or(""),
        m.properties.get(property::KEYS).map_or("", |s| s),
        if body {
            body_text(m)
        } else {
            "NOT PRINT BODY".into()
        }
    )
}

/// The offsets `[min, max)` of `q`, narrowed by `-b`/`-e` times.
fn range(c: &PullConsumer, q: &MessageQueue, args: &Args) -> Result<(i64, i64), CliError> {
    let mut min = wait(c.min_offset(q))?;
    let mut max = wait(c.max_offset(q))?;
    if let Some(b) = args.get('b') {
        min = wait(c.search_offset(q, parse_time(b)?))?;
    }
    if let Some(e) = args.get('e') {
        max = wait(c.search_offset(q, parse_time(e)?))?;
    }
    Ok((min, max))
}

/// Pulls `[min, max)` of `q` with `expr`, handing each message to `each`; returns the
/// status that ended the queue (mqadmin prints it) and the offset reached.
fn pull_range(
    c: &PullConsumer,
    q: &MessageQueue,
    expr: &str,
    (min, max): (i64, i64),
    bar: &mut Progress,
    each: &mut dyn FnMut(MessageExt, &Progress),
) -> Result<(Option<PullStatus>, i64), CliError> {
    let mut offset = min;
    while offset < max {
        let r = wait(c.pull_with_expression(q, expr, offset, PULL_BATCH))?;
        let next = r.next_begin_offset;
        match r.status {
            PullStatus::Found => {
                for m in r.messages.into_iter().filter(|m| m.queue_offset < max) {
                    each(m, bar);
                }
            }
            PullStatus::NoMatchedMsg => {}
            status @ (PullStatus::NoNewMsg | PullStatus::OffsetIllegal) => {
                bar.advance((max - offset).max(0) as u64);
                return Ok((Some(status), next));
            }
        }
        if next <= offset {
            break;
        }
        bar.advance((next.min(max) - offset) as u64);
        offset = next;
    }
    Ok((None, offset))
}

/// The two print commands' options that mqadmin gives them alike.
const CHARSET: Opt = val('c', "charsetName", false, "CharsetName(eg: UTF-8)");
const SUB_EXPRESSION: Opt = val(
    's',
    "subExpression",
    false,
    "Subscribe Expression(eg: TagA || TagB)",
);
const BEGIN_TIMESTAMP: Opt = val('b', "beginTimestamp", false, BEGIN_TIMESTAMP_HELP);

pub const PRINT_MSG: Command = Command {
    name: "printMsg",
    desc: "Print Message Detail",
    opts: &[
        TOPIC,
        CHARSET,
        SUB_EXPRESSION,
        BEGIN_TIMESTAMP,
        END_TIMESTAMP,
        val('d', "printBody", false, "print body (default true)"),
        val(
            'l',
            "lmqParentTopic",
            false,
            "Lmq parent topic (not supported)",
        ),
    ],
    run: print_msg,
};

fn print_msg(admin: &Admin, args: &Args) -> Result<(), CliError> {
    check_charset(args)?;
    if args.has('l') {
        return Err(CliError::Usage(
            "-l: Tern has no light message queues (LMQ)".into(),
        ));
    }
    let topic = args.req('t')?;
    let expr = args.get('s').unwrap_or("*");
    let body = args.bool('d', true)?;
    let consumer = PullConsumer::with_instance(TOOLS_CONSUMER_GROUP, admin.client().clone());
    let queues = wait(consumer.fetch_queues(topic))?;
    let mut ranges = Vec::new();
    for q in &queues {
        ranges.push(range(&consumer, q, args)?);
    }
    let total: i64 = ranges.iter().map(|(a, b)| (b - a).max(0)).sum();
    let mut bar = Progress::new("printMsg", total as u64);
    let mut docs = Vec::new();
    for (q, r) in queues.iter().zip(ranges) {
        if !args.json {
            bar.println(&format!(
                "minOffset={}, maxOffset={}, {}",
                r.0,
                r.1,
                queue_text(q)
            ));
        }
        let mut msgs = Vec::new();
        let (status, offset) = pull_range(&consumer, q, expr, r, &mut bar, &mut |m, bar| {
            if args.json {
                msgs.push(message_json(&m));
            } else {
                bar.println(&message_line(&m, body));
            }
        })?;
        if args.json {
            docs.push(json!({
                "queue": q, "minOffset": r.0, "maxOffset": r.1, "messages": msgs,
            }));
        } else {
            if let Some(s) = status {
                bar.println(&format!(
                    "{} print msg finished. status={s:?}, offset={offset}",
                    queue_text(q)
                ));
            }
            bar.println("--------------------------------------------------------");
        }
    }
    bar.finish();
    if args.json {
        print_json(&Value::Array(docs));
    }
    Ok(())
}

pub const PRINT_MSG_BY_QUEUE: Command = Command {
    name: "printMsgByQueue",
    desc: "Print Message Detail by queueId",
    opts: &[
        TOPIC,
        val('a', "brokerName", true, "broker name"),
        val('i', "queueId", true, "queue id"),
        CHARSET,
        SUB_EXPRESSION,
        BEGIN_TIMESTAMP,
        END_TIMESTAMP,
        val(
            'p',
            "print msg",
            false,
            "print msg. eg: true | false(default)",
        ),
        val(
            'd',
            "printBody",
            false,
            "print body. eg: true | false(default)",
        ),
        val(
            'f',
            "calculate",
            false,
            "calculate by tag. eg: true | false(default)",
        ),
    ],
    run: print_msg_by_queue,
};

fn print_msg_by_queue(admin: &Admin, args: &Args) -> Result<(), CliError> {
    check_charset(args)?;
    let q = MessageQueue {
        topic: args.req('t')?.to_owned(),
        broker_name: args.req('a')?.to_owned(),
        queue_id: args.num('i', 0)?,
    };
    let (print, body, by_tag) = (
        args.bool('p', false)?,
        args.bool('d', false)?,
        args.bool('f', false)?,
    );
    let expr = args.get('s').unwrap_or("*");
    let consumer = PullConsumer::with_instance(TOOLS_CONSUMER_GROUP, admin.client().clone());
    let r = range(&consumer, &q, args)?;
    let mut bar = Progress::new("printMsgByQueue", (r.1 - r.0).max(0) as u64);
    let mut tags: BTreeMap<String, u64> = BTreeMap::new();
    let mut msgs = Vec::new();
    pull_range(&consumer, &q, expr, r, &mut bar, &mut |m, bar| {
        if by_tag {
            if let Some(t) = m.tags().filter(|t| !t.trim().is_empty()) {
                *tags.entry(t.to_owned()).or_default() += 1;
            }
        }
        if args.json {
            if print {
                msgs.push(message_json(&m));
            }
        } else if print {
            bar.println(&message_line(&m, body));
        }
    })?;
    bar.finish();
    // mqadmin's order: most frequent tag first.
    let mut counted: Vec<(String, u64)> = tags.into_iter().collect();
    counted.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    if args.json {
        let tags: Vec<Value> = counted
            .iter()
            .map(|(t, n)| json!({ "tag": t, "count": n }))
            .collect();
        print_json(&json!({
            "queue": q, "minOffset": r.0, "maxOffset": r.1, "messages": msgs, "tags": tags,
        }));
        return Ok(());
    }
    for (t, n) in counted {
        println!("Tag: {t:<30} Count: {n}");
    }
    Ok(())
}
