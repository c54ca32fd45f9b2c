//! POP over raw frames as RocketMQ 5's Java client sends them: POP_MESSAGE, ACK_MESSAGE
//! and CHANGE_MESSAGE_INVISIBLETIME requests, and receipt handles rebuilt from the answer
//! as `MQClientAPIImpl.processPopResponse` does. Shared by the POP process tests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tern_shell::message::{MessageExt, decode_pulled};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use super::*;

pub const G: &str = "GID_POP";
pub const BROKER: &str = "broker-a";
pub const REVIVE: &str = "rmq_sys_REVIVE_LOG_DefaultCluster";

/// POP_MESSAGE as the Java client builds it.
pub fn pop_req(
    topic: &str,
    queue_id: i32,
    max: i32,
    invisible_ms: i64,
    poll_ms: i64,
) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::PopMessage)
        .with_ext("consumerGroup", G)
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id.to_string())
        .with_ext("maxMsgNums", max.to_string())
        .with_ext("invisibleTime", invisible_ms.to_string())
        .with_ext("pollTime", poll_ms.to_string())
        .with_ext("bornTime", now_ms().to_string())
        .with_ext("initMode", "0")
        .with_ext("expType", "TAG")
        .with_ext("exp", "*")
        .with_ext("order", "false")
        .with_ext("bname", BROKER)
}

pub fn orderly(req: RemotingCommand, attempt: &str) -> RemotingCommand {
    req.with_ext("order", "true").with_ext("attemptId", attempt)
}

pub fn ack_req(topic: &str, queue_id: i32, handle: &str, offset: i64) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::AckMessage)
        .with_ext("consumerGroup", G)
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id.to_string())
        .with_ext("extraInfo", handle)
        .with_ext("offset", offset.to_string())
        .with_ext("bname", BROKER)
}

pub fn cit_req(m: &Got, invisible_ms: i64) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::ChangeMessageInvisibletime)
        .with_ext("consumerGroup", G)
        .with_ext("topic", &m.msg.topic)
        .with_ext("queueId", m.msg.queue_id.to_string())
        .with_ext("extraInfo", &m.handle)
        .with_ext("offset", m.msg.queue_offset.to_string())
        .with_ext("invisibleTime", invisible_ms.to_string())
        .with_ext("bname", BROKER)
}

/// A popped message and its receipt handle.
#[derive(Debug, Clone)]
pub struct Got {
    /// The message.
    pub msg: MessageExt,
    /// Its receipt handle.
    pub handle: String,
}

impl Got {
    pub fn body(&self) -> String {
        String::from_utf8_lossy(&self.msg.body).into_owned()
    }
    pub fn ack(&self) -> RemotingCommand {
        ack_req(
            &self.msg.topic,
            self.msg.queue_id,
            &self.handle,
            self.msg.queue_offset,
        )
    }
}

/// A POP answer.
#[derive(Debug)]
pub struct Popped {
    /// The answer.
    pub resp: RemotingCommand,
    /// Its messages.
    pub msgs: Vec<Got>,
}

impl Popped {
    pub fn field(&self, k: &str) -> &str {
        self.resp
            .ext_fields
            .get(k)
            .unwrap_or_else(|| panic!("answer lacks {k}: {:?}", self.resp))
    }
    pub fn num(&self, k: &str) -> i64 {
        self.field(k).parse().unwrap()
    }
    pub fn bodies(&self) -> Vec<String> {
        self.msgs.iter().map(Got::body).collect()
    }
}

/// `flag qid x` entries of an offset-info header, keyed `flag@qid` as the client keys them.
pub fn info_map(s: &str) -> BTreeMap<String, String> {
    s.split(';')
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut it = e.splitn(3, ' ');
            let (f, q, x) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
            (format!("{f}@{q}"), x.to_owned())
        })
        .collect()
}

/// Sends a POP and rebuilds each message's handle as `MQClientAPIImpl.processPopResponse`
/// does. Every accepted answer must carry popTime, invisibleTime, reviveQid, restNum.
pub async fn pop(c: &Client, req: RemotingCommand) -> Popped {
    let resp = c.call(req).await;
    let code = resp.response_code();
    let mut p = Popped {
        resp,
        msgs: Vec::new(),
    };
    if !matches!(
        code,
        ResponseCode::Success
            | ResponseCode::PollingTimeout
            | ResponseCode::PollingFull
            | ResponseCode::PullNotFound
    ) {
        return p;
    }
    for k in ["popTime", "invisibleTime", "reviveQid", "restNum"] {
        p.num(k);
    }
    if code != ResponseCode::Success {
        return p;
    }
    let starts = info_map(p.field("startOffsetInfo"));
    let offsets = info_map(p.field("msgOffsetInfo"));
    let (pt, it, rq) = (p.num("popTime"), p.num("invisibleTime"), p.num("reviveQid"));
    for m in decode_pulled(&p.resp.body, true).expect("popped records decode") {
        let flag = tern_shell::pop::retry_flag(&m.topic);
        let key = format!("{flag}@{}", m.queue_id);
        let list: Vec<i64> = offsets[&key]
            .split(',')
            .map(|o| o.parse().unwrap())
            .collect();
        assert!(
            list.contains(&m.queue_offset),
            "{} not in msgOffsetInfo {list:?}",
            m.queue_offset
        );
        let handle = format!(
            "{} {pt} {it} {rq} {flag} {BROKER} {} {}",
            starts[&key], m.queue_id, m.queue_offset
        );
        p.msgs.push(Got { msg: m, handle });
    }
    p
}

pub async fn send_bodies(c: &Client, topic: &str, queue_id: i32, bodies: &[&str]) {
    for b in bodies {
        let m = msg(
            topic,
            b.as_bytes(),
            &[("UNIQ_KEY", &format!("UK-{b}")), ("TAGS", "a")],
        );
        send_ok(c, send_v1(&m, queue_id)).await;
    }
}

/// POPs (long polling) until `n` messages came or `within` passed.
pub async fn pop_until(
    c: &Client,
    topic: &str,
    n: usize,
    invisible_ms: i64,
    within: Duration,
) -> Vec<Got> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as i64;
        let p = pop(
            c,
            pop_req(topic, -1, 32, invisible_ms, left.clamp(1, 5_000)),
        )
        .await;
        got.extend(p.msgs);
    }
    got
}
