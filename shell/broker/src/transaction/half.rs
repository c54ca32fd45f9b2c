//! The records transactions are made of, as pure functions over stored bytes: a half
//! message (the producer's message parked in the half topic), the committed copy in the
//! real topic, the re-stored copy a check-back makes, and op records (`RMQ_SYS_TRANS_OP_HALF_TOPIC`,
//! tag `d`, body = comma-terminated half queue offsets) that mark half messages resolved.
//!
//! Property rewriting follows Java's `MessageAccessor`: the string is parsed as Java parses
//! it, then written back pair by pair, so a rewritten record reads as Java would have
//! written it.

use tern_engine::properties::{self, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, Properties, key};
use tern_engine::record::{
    Host, MessageIn, RecordView, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
};

/// Topic half messages wait in (one queue).
pub const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Topic of op records: which half messages are resolved.
pub const OP_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Where half messages go after `transactionCheckMax` unanswered check-backs.
pub const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// The tag of op records that remove a half message (RocketMQ's `REMOVETAG`).
pub const OP_TAG: &str = "d";
/// Most half offsets one op body may name (RocketMQ batches ops; Tern writes one).
pub const MAX_OFFSETS_PER_OP: usize = 4096;

/// Properties a half message carries that its committed copy must not.
const HALF_ONLY: [&str; 5] = [
    key::TRAN_MSG,
    key::REAL_TOPIC,
    key::REAL_QID,
    key::TRANSACTION_CHECK_TIMES,
    key::TRAN_PREPARED_QUEUE_OFFSET,
];

/// Whether a send is the first half of a transaction. Java decides on the `TRAN_MSG`
/// property; the sysFlag says the same for clients that set only the flag.
pub fn is_half_send(props: &[u8], sys_flag: i32) -> bool {
    properties::get(props, key::TRAN_MSG).is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED
}

/// `props` without the pairs named in `remove` or `set`, followed by the pairs of `set`.
pub fn rewrite_properties(props: &[u8], remove: &[&str], set: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len() + 64);
    let mut push = |k: &str, v: &str| {
        out.extend_from_slice(k.as_bytes());
        out.push(NAME_VALUE_SEPARATOR);
        out.extend_from_slice(v.as_bytes());
        out.push(PROPERTY_SEPARATOR);
    };
    for (k, v) in Properties::new(props) {
        if !remove.contains(&k) && !set.iter().any(|(s, _)| *s == k) {
            push(k, v);
        }
    }
    for (k, v) in set {
        push(k, v);
    }
    out
}

/// The properties of a half message: the producer's, plus where it really goes, the
/// transaction id and the producer group (taken from the send header if the client left
/// it out: without it nobody could be asked about the transaction).
pub fn half_properties(props: &[u8], real_topic: &str, real_qid: i32, group: &str) -> Vec<u8> {
    let qid = real_qid.to_string();
    let mut set = vec![
        (key::TRAN_MSG, "true"),
        (key::REAL_TOPIC, real_topic),
        (key::REAL_QID, qid.as_str()),
    ];
    if let Some(uniq) = properties::get(props, key::UNIQ_KEY) {
        set.push((key::TRANSACTION_ID, uniq));
    }
    if properties::get(props, key::PGROUP).is_none() && !group.is_empty() {
        set.push((key::PGROUP, group));
    }
    rewrite_properties(props, &[], &set)
}

/// A half message's sysFlag: the transaction bits cleared, so the store queues it in the
/// half topic like any message (RocketMQ's `resetTransactionValue(.., NOT_TYPE)`).
pub fn half_sys_flag(sys_flag: i32) -> i32 {
    sys_flag & !SYSFLAG_TRANSACTION_MASK
}

/// What a stored half message says about its transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HalfInfo<'a> {
    /// Topic the message is meant for.
    pub real_topic: &'a str,
    /// Queue it is meant for.
    pub real_qid: i32,
    /// Producer group to ask.
    pub group: Option<&'a str>,
    /// The transaction id (UNIQ_KEY, else `__transactionId__`).
    pub uniq: Option<&'a str>,
    /// Check-backs so far.
    pub check_times: u32,
    /// `CHECK_IMMUNITY_TIME_IN_SECONDS`, if the producer set one.
    pub immunity_secs: Option<i64>,
    /// The queue offset of the half message this one is a copy of, if any.
    pub prepared_queue_offset: Option<u64>,
}

/// Why a record is not a usable half message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotHalf {
    /// The record is in another topic.
    WrongTopic,
    /// Its sysFlag carries transaction bits a stored half message never has.
    WrongSysFlag,
    /// REAL_TOPIC or REAL_QID is missing or unreadable.
    NoRealTarget,
}

impl std::fmt::Display for NotHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::WrongTopic => "the record is not in the half topic",
            Self::WrongSysFlag => "the record is not a half message (transaction sysFlag set)",
            Self::NoRealTarget => "the half message has no readable REAL_TOPIC/REAL_QID",
        })
    }
}

impl std::error::Error for NotHalf {}

/// Reads the transaction facts of a record that should be a half message.
pub fn half_info<'a>(view: &RecordView<'a>) -> Result<HalfInfo<'a>, NotHalf> {
    if view.topic() != HALF_TOPIC.as_bytes() {
        return Err(NotHalf::WrongTopic);
    }
    if view.sys_flag() & SYSFLAG_TRANSACTION_MASK != 0 {
        return Err(NotHalf::WrongSysFlag);
    }
    let props = view.properties();
    let real_topic = properties::get(props, key::REAL_TOPIC).ok_or(NotHalf::NoRealTarget)?;
    let real_qid = properties::get(props, key::REAL_QID)
        .and_then(|q| q.trim().parse::<i32>().ok())
        .filter(|q| *q >= 0)
        .ok_or(NotHalf::NoRealTarget)?;
    Ok(HalfInfo {
        real_topic,
        real_qid,
        group: properties::get(props, key::PGROUP),
        uniq: properties::get(props, key::UNIQ_KEY)
            .or_else(|| properties::get(props, key::TRANSACTION_ID)),
        // Java's `getInt` turns garbage into -1, which counts as "not checked yet".
        check_times: properties::get(props, key::TRANSACTION_CHECK_TIMES)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0),
        immunity_secs: properties::get(props, key::CHECK_IMMUNITY_TIME_IN_SECONDS)
            .map(|v| v.trim().parse::<i64>().unwrap_or(-1)),
        prepared_queue_offset: properties::get(props, key::TRAN_PREPARED_QUEUE_OFFSET)
            .and_then(|v| v.trim().parse::<u64>().ok()),
    })
}

/// How old a half message must be before it is checked back: its immunity, else the
/// broker's `transactionTimeOut` (RocketMQ's `getImmunityTime`: -1 or garbage means the
/// default).
pub fn immunity_ms(info: &HalfInfo<'_>, timeout_ms: i64) -> i64 {
    match info.immunity_secs {
        Some(s) if s >= 0 => s.saturating_mul(1000),
        _ => timeout_ms,
    }
}

/// The properties of the committed copy: the half message's, minus the bookkeeping that
/// only made sense in the half topic (Java clears TRAN_MSG, REAL_TOPIC and REAL_QID; the
/// check counters go too). PGROUP and `__transactionId__` stay, as in Java.
pub fn commit_properties(half_props: &[u8]) -> Vec<u8> {
    rewrite_properties(half_props, &HALF_ONLY, &[])
}

/// The committed copy of a half message at `half_offset`, for its real topic and queue.
pub fn commit_message<'a>(
    view: &RecordView<'a>,
    info: &HalfInfo<'a>,
    props: &'a [u8],
    half_offset: u64,
    store_host: Host,
) -> MessageIn<'a> {
    MessageIn {
        sys_flag: half_sys_flag(view.sys_flag()) | SYSFLAG_TRANSACTION_COMMIT,
        store_host,
        prepared_transaction_offset: half_offset as i64,
        ..MessageIn::restored(view, info.real_topic, info.real_qid, props)
    }
}

/// A copy of a stored record with other properties, in `topic`/`queue_id` (re-stored half
/// messages and discarded ones keep everything else, as RocketMQ's `renewHalfMessageInner`).
pub fn copy_message<'a>(
    view: &RecordView<'a>,
    topic: &'a str,
    queue_id: i32,
    props: &'a [u8],
) -> MessageIn<'a> {
    MessageIn::restored(view, topic, queue_id, props)
}

/// The body of an op record resolving the half messages at `offsets`: `"12,"`.
pub fn op_body(offsets: &[u64]) -> Vec<u8> {
    let mut s = String::with_capacity(offsets.len() * 8);
    for o in offsets {
        s.push_str(&o.to_string());
        s.push(',');
    }
    s.into_bytes()
}

/// The properties of an op record.
pub fn op_properties() -> Vec<u8> {
    rewrite_properties(b"", &[], &[(key::TAGS, OP_TAG)])
}

/// The half offsets an op record names; empty for a record that is not a remove op.
/// Unreadable numbers are skipped (Java logs them and goes on).
pub fn op_offsets(view: &RecordView<'_>) -> Vec<u64> {
    if properties::get(view.properties(), key::TAGS) != Some(OP_TAG) {
        return Vec::new();
    }
    let Ok(body) = std::str::from_utf8(view.body()) else {
        return Vec::new();
    };
    body.split(',')
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .take(MAX_OFFSETS_PER_OP)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_engine::record::StoreStamp;

    const HOST: Host = Host::V4 {
        ip: [127, 0, 0, 1],
        port: 10911,
    };

    fn record(m: &MessageIn<'_>, queue_offset: i64, physical_offset: i64) -> Vec<u8> {
        let mut out = vec![0u8; m.encoded_len().unwrap()];
        let stamp = StoreStamp {
            queue_offset,
            physical_offset,
            store_timestamp: 7,
        };
        m.encode(stamp, &mut out).unwrap();
        out
    }

    fn msg<'a>(topic: &'a str, sys_flag: i32, props: &'a [u8]) -> MessageIn<'a> {
        MessageIn {
            topic,
            queue_id: 0,
            flag: 3,
            sys_flag,
            born_timestamp: 5,
            born_host: HOST,
            store_host: HOST,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"payload",
            properties: props,
        }
    }

    #[test]
    fn a_send_is_half_by_property_or_sysflag() {
        assert!(is_half_send(b"TRAN_MSG\x01true\x02", 0));
        assert!(is_half_send(b"", SYSFLAG_TRANSACTION_PREPARED));
        assert!(!is_half_send(b"TRAN_MSG\x01false\x02", 0));
        assert!(!is_half_send(b"", SYSFLAG_TRANSACTION_COMMIT));
    }

    #[test]
    fn rewrite_replaces_removes_and_keeps_the_rest_in_order() {
        let p = b"A\x011\x02B\x012\x02C\x013\x02A\x01again\x02";
        let out = rewrite_properties(p, &["B"], &[("C", "x"), ("D", "4")]);
        assert_eq!(out, b"A\x011\x02A\x01again\x02C\x01x\x02D\x014\x02");
    }

    #[test]
    fn half_then_commit_round_trips_the_user_properties() {
        let user =
            b"TAGS\x01t\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02TRAN_MSG\x01true\x02own\x01v\x02";
        let half = half_properties(user, "Real", 2, "pg");
        let sys_flag = half_sys_flag(SYSFLAG_TRANSACTION_PREPARED | 1);
        assert_eq!(sys_flag, 1);
        let bytes = record(&msg(HALF_TOPIC, sys_flag, &half), 4, 100);
        let view = RecordView::parse(&bytes).unwrap();
        let info = half_info(&view).unwrap();
        assert_eq!(info.real_topic, "Real");
        assert_eq!(info.real_qid, 2);
        assert_eq!(info.group, Some("pg"));
        assert_eq!(info.uniq, Some("U1"));
        assert_eq!(info.check_times, 0);
        assert_eq!(properties::get(&half, key::TRANSACTION_ID), Some("U1"));

        let props = commit_properties(view.properties());
        let commit = commit_message(&view, &info, &props, 100, HOST);
        assert_eq!(commit.topic, "Real");
        assert_eq!(commit.queue_id, 2);
        assert_eq!(commit.sys_flag, 1 | SYSFLAG_TRANSACTION_COMMIT);
        assert_eq!(commit.prepared_transaction_offset, 100);
        assert_eq!(commit.body, b"payload");
        for k in HALF_ONLY {
            assert_eq!(properties::get(&props, k), None, "{k}");
        }
        for (k, v) in [
            ("TAGS", "t"),
            ("KEYS", "k1 k2"),
            ("own", "v"),
            ("PGROUP", "pg"),
            ("__transactionId__", "U1"),
        ] {
            assert_eq!(properties::get(&props, k), Some(v), "{k}");
        }
    }

    #[test]
    fn a_producer_group_given_in_properties_is_kept() {
        let half = half_properties(b"PGROUP\x01mine\x02", "T", 0, "header-group");
        assert_eq!(properties::get(&half, key::PGROUP), Some("mine"));
    }

    #[test]
    fn records_that_are_not_half_messages_are_refused() {
        let half = half_properties(b"", "T", 0, "g");
        let bytes = record(&msg("T", 0, &half), 0, 0);
        let view = RecordView::parse(&bytes).unwrap();
        assert_eq!(half_info(&view), Err(NotHalf::WrongTopic));
        let bytes = record(&msg(HALF_TOPIC, SYSFLAG_TRANSACTION_COMMIT, &half), 0, 0);
        let view = RecordView::parse(&bytes).unwrap();
        assert_eq!(half_info(&view), Err(NotHalf::WrongSysFlag));
        let bytes = record(
            &msg(HALF_TOPIC, 0, b"REAL_TOPIC\x01T\x02REAL_QID\x01x\x02"),
            0,
            0,
        );
        let view = RecordView::parse(&bytes).unwrap();
        assert_eq!(half_info(&view), Err(NotHalf::NoRealTarget));
    }

    #[test]
    fn check_times_and_immunity_read_like_java() {
        let props = half_properties(
            b"TRANSACTION_CHECK_TIMES\x013\x02CHECK_IMMUNITY_TIME_IN_SECONDS\x0110\x02",
            "T",
            0,
            "g",
        );
        let bytes = record(&msg(HALF_TOPIC, 0, &props), 0, 0);
        let view = RecordView::parse(&bytes).unwrap();
        let info = half_info(&view).unwrap();
        assert_eq!(info.check_times, 3);
        assert_eq!(immunity_ms(&info, 6000), 10_000);
        let props = half_properties(
            b"TRANSACTION_CHECK_TIMES\x01x\x02CHECK_IMMUNITY_TIME_IN_SECONDS\x01-1\x02",
            "T",
            0,
            "g",
        );
        let bytes = record(&msg(HALF_TOPIC, 0, &props), 0, 0);
        let view = RecordView::parse(&bytes).unwrap();
        let info = half_info(&view).unwrap();
        assert_eq!(info.check_times, 0);
        assert_eq!(immunity_ms(&info, 6000), 6000);
    }

    #[test]
    fn op_records_name_half_offsets_and_ignore_garbage() {
        let props = op_properties();
        let body = op_body(&[12, 40]);
        assert_eq!(body, b"12,40,");
        let mut m = msg(OP_TOPIC, 0, &props);
        m.body = &body;
        let bytes = record(&m, 0, 0);
        assert_eq!(
            op_offsets(&RecordView::parse(&bytes).unwrap()),
            vec![12, 40]
        );
        m.body = b"7,x,,-3,9";
        let bytes = record(&m, 0, 0);
        assert_eq!(op_offsets(&RecordView::parse(&bytes).unwrap()), vec![7, 9]);
        m.properties = b"TAGS\x01other\x02";
        let bytes = record(&m, 0, 0);
        assert!(op_offsets(&RecordView::parse(&bytes).unwrap()).is_empty());
    }
}
