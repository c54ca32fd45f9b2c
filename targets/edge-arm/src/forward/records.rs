//! From stored records to what is sent: which records are forwarded, which stay local,
//! which cannot be sent (dead letters), and runs of one topic and local queue.

use tern_broker::store::LogRecord;
use tern_client::Message;
use tern_engine::record::RecordView;
use tern_shell::message::{
    MessageExt, SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_TYPE_MASK, string_to_properties,
};

/// Topics that hold the local broker's own state, never forwarded: delayed messages
/// wait in the schedule topic and are forwarded once delivered to their topic (timer
/// messages never wait here: the gateway passes them through);
/// transaction halves are forwarded as their commit; retries, dead letters and POP's
/// revive records belong to local consumer groups.
pub fn is_local_only(topic: &str) -> bool {
    topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || topic.starts_with("rmq_sys_REVIVE_LOG_")
        || matches!(
            topic,
            "SCHEDULE_TOPIC_XXXX"
                | "rmq_sys_wheel_timer"
                | "RMQ_SYS_TRANS_HALF_TOPIC"
                | "RMQ_SYS_TRANS_OP_HALF_TOPIC"
                | "TRANS_CHECK_MAX_TIME_TOPIC"
                | "OFFSET_MOVED_EVENT"
        )
}

/// Properties the local broker added for its own bookkeeping; the central broker adds
/// its own.
const LOCAL_PROPERTIES: &[&str] = &[
    "REAL_TOPIC",
    "REAL_QID",
    "DELAY",
    "TRAN_MSG",
    "PGROUP",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "MSG_REGION",
    "TRACE_ON",
];

/// Transaction bits of sysFlag: a prepared half or a rollback is not a message to send.
const SYSFLAG_TRANSACTION_MASK: i32 = 0x3 << 2;
const SYSFLAG_TRANSACTION_NOT_TYPE: i32 = 0;
const SYSFLAG_TRANSACTION_COMMIT: i32 = 0x2 << 2;

/// One run of records of the same topic and local queue.
#[derive(Debug)]
pub struct Run {
    /// Topic.
    pub topic: String,
    /// Queue id in the local broker.
    pub local_queue: i32,
    /// The messages, in log order.
    pub msgs: Vec<Message>,
    /// Each message's record offset in the local log.
    pub offsets: Vec<u64>,
    /// For a run of one message whose body is forwarded compressed as stored: the
    /// sysFlag's compression bits.
    pub compression: Option<i32>,
}

/// What a stretch of the log holds, in log order.
#[derive(Debug)]
pub enum Item {
    /// Messages to send.
    Run(Run),
    /// A record of a user topic that cannot be turned into a message to send (not a
    /// record, a bad CRC, a body compressed in a way this build cannot inflate): kept as
    /// a dead letter with `why`.
    Undecodable {
        /// Its log offset.
        offset: u64,
        /// Its topic, when the record's header could be read.
        topic: Option<String>,
        /// Why.
        why: String,
    },
}

/// Whether a record of `topic` with `sys_flag` is sent at all.
fn forwarded(topic: &str, sys_flag: i32) -> bool {
    !is_local_only(topic)
        && matches!(
            sys_flag & SYSFLAG_TRANSACTION_MASK,
            SYSFLAG_TRANSACTION_NOT_TYPE | SYSFLAG_TRANSACTION_COMMIT
        )
}

/// The message to send for a decoded record.
fn to_message(m: MessageExt) -> Message {
    let mut out = Message::new(m.topic, m.body);
    out.flag = m.flag;
    out.properties = m.properties;
    strip_local(&mut out);
    out
}

fn strip_local(m: &mut Message) {
    for k in LOCAL_PROPERTIES {
        m.properties.remove(*k);
    }
}

/// Why a record of a forwarded topic cannot be sent.
#[derive(Debug)]
pub struct Unsendable {
    /// Its topic, when the record's header could be read.
    pub topic: Option<String>,
    /// Why.
    pub why: String,
}

/// A message to send, from one stored record.
#[derive(Debug)]
pub struct Decoded {
    /// The message.
    pub msg: Message,
    /// Its local queue.
    pub queue: i32,
    /// Set when the body stays compressed as stored (sysFlag compression bits).
    pub compression: Option<i32>,
}

/// RocketMQ 5's compression types (sysFlag bits 8-10) this gateway forwards without
/// inflating: `MessageSysFlag.COMPRESSION_LZ4_TYPE` and `COMPRESSION_ZSTD_TYPE`. The
/// central cluster stores the body and the bits; 5.x consumers inflate it. (ZLIB, type
/// 3 or the 4.x flag alone, is inflated here and sent as plain bytes.)
const FORWARDED_COMPRESSED: [i32; 2] = [0x1 << 8, 0x2 << 8];

/// The message to send for stored record bytes: `Ok(None)` for a record that stays
/// local.
pub fn decode(bytes: &[u8]) -> Result<Option<Decoded>, Unsendable> {
    let view = RecordView::parse(bytes).map_err(|e| Unsendable {
        topic: None,
        why: format!("not a record: {e:?}"),
    })?;
    let topic = String::from_utf8_lossy(view.topic()).into_owned();
    if !forwarded(&topic, view.sys_flag()) {
        return Ok(None);
    }
    if let Err(e) = view.verify_crc() {
        return Err(Unsendable {
            topic: Some(topic),
            why: format!("body CRC: {e:?}"),
        });
    }
    let sys_flag = view.sys_flag();
    let kind = sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK;
    if sys_flag & SYSFLAG_COMPRESSED != 0 && FORWARDED_COMPRESSED.contains(&kind) {
        let mut msg = Message::new(topic, view.body());
        msg.flag = view.flag();
        msg.properties = string_to_properties(view.properties());
        strip_local(&mut msg);
        return Ok(Some(Decoded {
            msg,
            queue: view.queue_id(),
            compression: Some(SYSFLAG_COMPRESSED | kind),
        }));
    }
    let m = MessageExt::from_view(&view).map_err(|e| Unsendable {
        topic: Some(topic),
        why: e.to_string(),
    })?;
    let queue = m.queue_id;
    Ok(Some(Decoded {
        msg: to_message(m),
        queue,
        compression: None,
    }))
}

/// A message asking the central broker for a due time (and not a copy a timer already
/// delivered, which carries `TIMER_OUT_MS`).
pub fn is_timed(msg: &Message) -> bool {
    !msg.properties.contains_key("TIMER_OUT_MS")
        && ["TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_DELIVER_MS"]
            .iter()
            .any(|k| msg.properties.contains_key(*k))
}

/// Splits records into runs of one topic and local queue and records that cannot be
/// sent, in log order; `skip` names topics left out (parked ones).
pub fn items(records: &[LogRecord], skip: impl Fn(&str) -> bool) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    for r in records {
        let Decoded {
            msg,
            queue,
            compression,
        } = match decode(&r.bytes) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(Unsendable { topic, why }) => {
                if topic.as_deref().is_some_and(&skip) {
                    continue;
                }
                out.push(Item::Undecodable {
                    offset: r.offset,
                    topic,
                    why,
                });
                continue;
            }
        };
        if skip(&msg.topic) {
            continue;
        }
        let alone = is_timed(&msg);
        match out.last_mut() {
            // A compressed body goes alone: a batch carries no per-message sysFlag. A
            // timer message too: brokers refuse (Tern) or do not time (RocketMQ) one in a
            // batch.
            Some(Item::Run(run))
                if run.topic == msg.topic
                    && run.local_queue == queue
                    && run.compression.is_none()
                    && compression.is_none()
                    && !alone
                    && !run.msgs.iter().any(is_timed) =>
            {
                run.msgs.push(msg);
                run.offsets.push(r.offset);
            }
            _ => out.push(Item::Run(Run {
                topic: msg.topic.clone(),
                local_queue: queue,
                msgs: vec![msg],
                offsets: vec![r.offset],
                compression,
            })),
        }
    }
    out
}
