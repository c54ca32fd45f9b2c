//! Delayed messages on their way into the schedule topic and back out of it.
//!
//! In: a message whose `DELAY` level is above 0 is stored in `SCHEDULE_TOPIC_XXXX`, queue
//! level − 1, with its real topic and queue saved in `REAL_TOPIC` / `REAL_QID` (RocketMQ's
//! `HookUtils.transformDelayLevelMessage`, `CommitLog.putMessage` in 4.9). Out: when due,
//! the record is stored again in its real topic and queue with `DELAY` removed and
//! everything else as it was: body, flag, sysFlag, born time and host, reconsume times,
//! and every property, `UNIQ_KEY` included, so the consumer sees the producer's message
//! id (RocketMQ's `ScheduleMessageService.messageTimeUp`, which also keeps `REAL_TOPIC` and
//! `REAL_QID`).

use tern_engine::delay::{DelayLevels, SCHEDULE_TOPIC, delay_level};
use tern_engine::properties::{self, Properties, key};
use tern_engine::record::{
    MessageIn, RecordView, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK,
};

use crate::store::PutError;
use crate::topics::{NameError, validate_topic};

/// Topics whose records are never moved to the schedule topic: the schedule topic itself
/// and the transaction topics, whose records the transaction service reads where they are
/// (RocketMQ relies on producers clearing `DELAY` on transactional messages; this makes
/// a half message with `DELAY` safe regardless).
const NEVER_DELAYED: [&str; 3] = [
    SCHEDULE_TOPIC,
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
];

/// Why a message asking for a delay level cannot be stored. The Display text is the
/// client's remark after "message cannot be stored: " ([`PutError::Illegal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelayError {
    /// `DELAY` is not a number (its value).
    NotALevel(String),
    /// The properties with `REAL_TOPIC` and `REAL_QID` added are over the record's limit.
    PropertiesTooLong,
}

impl std::fmt::Display for DelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DelayError::NotALevel(raw) => {
                write!(f, "the DELAY property {raw:?} is not a delay level")
            }
            DelayError::PropertiesTooLong => write!(
                f,
                "message properties with REAL_TOPIC and REAL_QID exceed {} bytes",
                properties::MAX_PROPERTIES_LEN
            ),
        }
    }
}

impl std::error::Error for DelayError {}

impl From<DelayError> for PutError {
    fn from(e: DelayError) -> Self {
        PutError::Illegal(e.to_string())
    }
}

/// Why a record of the schedule or timer topic cannot go back to its real topic: it is
/// dropped, with this in the log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreError {
    /// It has no `REAL_TOPIC`.
    NoRealTopic,
    /// Its `REAL_TOPIC` is not a topic name.
    BadRealTopic(NameError),
    /// Its `REAL_TOPIC` is one whose records are never delayed (the topic).
    SystemTopic(String),
    /// It has no `REAL_QID`, or not a queue id.
    NoRealQid,
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RestoreError::NoRealTopic => f.write_str("no REAL_TOPIC property"),
            RestoreError::BadRealTopic(e) => write!(f, "REAL_TOPIC: {e}"),
            RestoreError::SystemTopic(topic) => {
                write!(f, "REAL_TOPIC {topic} is a system topic")
            }
            RestoreError::NoRealQid => f.write_str("no valid REAL_QID property"),
        }
    }
}

impl std::error::Error for RestoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RestoreError::BadRealTopic(e) => Some(e),
            RestoreError::NoRealTopic | RestoreError::SystemTopic(_) | RestoreError::NoRealQid => {
                None
            }
        }
    }
}

/// A message rewritten for the schedule topic.
#[derive(Debug)]
pub struct Scheduled {
    queue_id: i32,
    properties: Vec<u8>,
}

impl Scheduled {
    /// `original`, as it is stored while it waits.
    pub fn message<'a>(&'a self, original: &MessageIn<'a>) -> MessageIn<'a> {
        MessageIn {
            topic: SCHEDULE_TOPIC,
            queue_id: self.queue_id,
            properties: &self.properties,
            ..*original
        }
    }
}

/// The level `msg` waits at: its `DELAY` when that is above 0 and the message is plain or
/// a committed transaction message (RocketMQ's rule), `None` otherwise. A `DELAY` that is
/// not a number is refused, as Java's `Integer.parseInt` would refuse it.
pub fn wanted_level(msg: &MessageIn<'_>) -> Result<Option<i32>, DelayError> {
    let tx = msg.sys_flag & SYSFLAG_TRANSACTION_MASK;
    if !(tx == 0 || tx == SYSFLAG_TRANSACTION_COMMIT) || NEVER_DELAYED.contains(&msg.topic) {
        return Ok(None);
    }
    match properties::get(msg.properties, key::DELAY) {
        None => Ok(None),
        Some(raw) => match delay_level(msg.properties) {
            Some(level) => Ok((level > 0).then_some(level)),
            None => Err(DelayError::NotALevel(raw.to_owned())),
        },
    }
}

/// `msg` rewritten for the schedule topic when it asks for a delay; `None` when it is to
/// be stored as it is. A level above the table is clamped to the last one, and `DELAY`
/// says so, as RocketMQ's `setDelayTimeLevel` does.
pub fn to_schedule(
    msg: &MessageIn<'_>,
    levels: &DelayLevels,
) -> Result<Option<Scheduled>, DelayError> {
    let Some(wanted) = wanted_level(msg)? else {
        return Ok(None);
    };
    let level = levels.clamp(wanted);
    let (real_qid, clamped) = (msg.queue_id.to_string(), level.to_string());
    let mut set = vec![
        (key::REAL_TOPIC, msg.topic),
        (key::REAL_QID, real_qid.as_str()),
    ];
    if level != wanted {
        set.push((key::DELAY, clamped.as_str()));
    }
    let properties = with_properties(msg.properties, &set);
    if properties.len() > properties::MAX_PROPERTIES_LEN {
        return Err(DelayError::PropertiesTooLong);
    }
    Ok(Some(Scheduled {
        queue_id: level - 1,
        properties,
    }))
}

/// A delayed record made ready for its real topic.
#[derive(Debug)]
pub struct Restored {
    /// `REAL_TOPIC`.
    pub topic: String,
    /// `REAL_QID`.
    pub queue_id: i32,
    /// The record's properties without `DELAY`.
    pub properties: Vec<u8>,
}

impl Restored {
    /// Reads the real topic and queue of a record in the schedule topic. Fails, with the
    /// reason, for a record that cannot be delivered (none or a bad real topic or queue).
    pub fn from_view(view: &RecordView<'_>) -> Result<Restored, RestoreError> {
        let props = view.properties();
        let topic = properties::get(props, key::REAL_TOPIC).ok_or(RestoreError::NoRealTopic)?;
        validate_topic(topic).map_err(RestoreError::BadRealTopic)?;
        if NEVER_DELAYED.contains(&topic) {
            return Err(RestoreError::SystemTopic(topic.to_owned()));
        }
        let queue_id = properties::get(props, key::REAL_QID)
            .and_then(|q| q.trim().parse::<i32>().ok())
            .filter(|q| *q >= 0)
            .ok_or(RestoreError::NoRealQid)?;
        Ok(Restored {
            topic: topic.to_owned(),
            queue_id,
            properties: without(props, &[key::DELAY]),
        })
    }

    /// The message to store: the record's fields as they were, in the real topic.
    pub fn message<'a>(&'a self, view: &RecordView<'a>) -> MessageIn<'a> {
        MessageIn::restored(view, &self.topic, self.queue_id, &self.properties)
    }
}

/// `props` with each name in `set` given its value: earlier pairs of that name are
/// dropped and the new pair appended, as Java's `putProperty` replaces a map entry.
pub fn with_properties(props: &[u8], set: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len() + 64);
    for (name, value) in Properties::new(props).filter(|(n, _)| !set.iter().any(|(s, _)| s == n)) {
        push_pair(&mut out, name, value);
    }
    for (name, value) in set {
        push_pair(&mut out, name, value);
    }
    out
}

/// `props` without any pair named in `names`.
pub fn without(props: &[u8], names: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(props.len());
    for (n, v) in Properties::new(props).filter(|(n, _)| !names.contains(n)) {
        push_pair(&mut out, n, v);
    }
    out
}

fn push_pair(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.push(properties::NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
    out.push(properties::PROPERTY_SEPARATOR);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tern_engine::record::{Host, SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK};

    fn levels() -> DelayLevels {
        DelayLevels::parse("1s 2s 3s").unwrap()
    }

    /// A message to `topic` with `props`, every other field set (queue 5, flag 7, born
    /// at 42, 2 reconsumes), for the rewrite tests here and in `timer::message`.
    pub(crate) fn msg<'a>(topic: &'a str, props: &'a [u8]) -> MessageIn<'a> {
        let host = Host::V4 {
            ip: [127, 0, 0, 1],
            port: 1,
        };
        MessageIn {
            topic,
            queue_id: 5,
            flag: 7,
            sys_flag: 0,
            born_timestamp: 42,
            born_host: host,
            store_host: host,
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body: b"body",
            properties: props,
        }
    }

    pub(crate) fn pairs(props: &[u8]) -> Vec<(&str, &str)> {
        Properties::new(props).collect()
    }

    #[test]
    fn a_delayed_message_waits_in_its_levels_queue_with_its_real_place_saved() {
        let props = b"KEYS\x01k\x02DELAY\x012\x02UNIQ_KEY\x01U1\x02";
        let m = msg("Orders", props);
        let s = to_schedule(&m, &levels()).unwrap().expect("delayed");
        let stored = s.message(&m);
        assert_eq!(stored.topic, SCHEDULE_TOPIC);
        assert_eq!(stored.queue_id, 1);
        assert_eq!(
            (stored.flag, stored.born_timestamp, stored.reconsume_times),
            (7, 42, 2)
        );
        assert_eq!(
            pairs(stored.properties),
            [
                ("KEYS", "k"),
                ("DELAY", "2"),
                ("UNIQ_KEY", "U1"),
                ("REAL_TOPIC", "Orders"),
                ("REAL_QID", "5")
            ]
        );
    }

    #[test]
    fn a_level_past_the_table_is_clamped_and_delay_says_so() {
        let m = msg("Orders", b"DELAY\x0118\x02");
        let s = to_schedule(&m, &levels()).unwrap().unwrap();
        assert_eq!(s.message(&m).queue_id, 2);
        assert_eq!(properties::get(&s.properties, key::DELAY), Some("3"));
        assert_eq!(pairs(&s.properties).len(), 3, "one DELAY only");
    }

    #[test]
    fn only_plain_and_committed_messages_with_a_positive_level_are_delayed() {
        let l = levels();
        for props in [
            &b""[..],
            b"DELAY\x010\x02",
            b"DELAY\x01-1\x02",
            b"TAGS\x01a\x02",
        ] {
            assert!(to_schedule(&msg("T", props), &l).unwrap().is_none());
        }
        let delayed = b"DELAY\x011\x02";
        for (flag, expect) in [
            (SYSFLAG_TRANSACTION_PREPARED, false),
            (SYSFLAG_TRANSACTION_ROLLBACK, false),
            (SYSFLAG_TRANSACTION_COMMIT, true),
        ] {
            let m = MessageIn {
                sys_flag: flag,
                ..msg("T", delayed)
            };
            assert_eq!(to_schedule(&m, &l).unwrap().is_some(), expect, "{flag}");
        }
        for topic in NEVER_DELAYED {
            assert!(to_schedule(&msg(topic, delayed), &l).unwrap().is_none());
        }
        let e = to_schedule(&msg("T", b"DELAY\x01soon\x02"), &l).unwrap_err();
        assert_eq!(e, DelayError::NotALevel("soon".into()));
        assert_eq!(
            PutError::from(e).to_string(),
            r#"message cannot be stored: the DELAY property "soon" is not a delay level"#
        );
    }

    #[test]
    fn too_long_properties_are_refused() {
        let mut props = b"DELAY\x011\x02big\x01".to_vec();
        props.resize(properties::MAX_PROPERTIES_LEN - 4, b'x');
        props.push(properties::PROPERTY_SEPARATOR);
        assert_eq!(
            to_schedule(&msg("T", &props), &levels()).unwrap_err(),
            DelayError::PropertiesTooLong
        );
    }

    #[test]
    fn setting_a_property_replaces_every_earlier_pair() {
        let p = with_properties(b"A\x011\x02B\x012\x02A\x013\x02", &[("A", "9"), ("C", "x")]);
        assert_eq!(pairs(&p), [("B", "2"), ("A", "9"), ("C", "x")]);
        assert_eq!(pairs(&without(&p, &["A"])), [("B", "2"), ("C", "x")]);
    }
}
