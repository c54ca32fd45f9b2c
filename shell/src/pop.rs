//! POP consumption's wire formats, shared by the broker and the client
//! (docs/design/pop.md §1–§3): receipt handles (`ExtraInfoUtil`), the offset-info strings
//! of a POP answer, pop retry topic names, and the checkpoint and ack records the broker
//! writes to its revive topic. The request and answer bodies (BATCH_ACK_MESSAGE, request
//! modes, QUERY_ASSIGNMENT) are in [`crate::body`].
//!
//! Everything here reads peer or disk data: parsers return `Result`, never panic, and
//! bound what they accept.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Separator of a receipt handle's fields (`MessageConst.KEY_SEPARATOR`).
pub const KEY_SEPARATOR: char = ' ';
/// Revive queue id of an orderly pop (`KeyBuilder.POP_ORDER_REVIVE_QUEUE`): no records.
pub const ORDER_REVIVE_QUEUE: i32 = 999;
/// Longest receipt handle accepted.
pub const MAX_EXTRA_INFO_BYTES: usize = 512;
/// The revive topic is this plus the cluster name (`PopAckConstants.REVIVE_TOPIC`).
pub const REVIVE_TOPIC_PREFIX: &str = "rmq_sys_REVIVE_LOG_";
/// The system group whose consumer offsets are the revive progress.
pub const REVIVE_GROUP: &str = "CID_RMQ_SYS_REVIVE_GROUP";
/// Tag of a checkpoint record.
pub const CK_TAG: &str = "ck";
/// Tag of an ack record.
pub const ACK_TAG: &str = "ack";
/// Tag of a batch-ack record.
pub const BATCH_ACK_TAG: &str = "bAck";
/// Property holding a message's receipt handle.
pub const POP_CK: &str = "POP_CK";
/// Property: the pop time of a message's first delivery.
pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
/// Most messages one checkpoint covers (its `bm` is an `int` bit map).
pub const MAX_CK_MESSAGES: usize = 32;
/// Most entries one BATCH_ACK_MESSAGE body may hold.
pub const MAX_BATCH_ACKS: usize = 1024;

/// Retry flag of a handle: the message was read from the topic itself.
pub const RETRY_NORMAL: u8 = 0;
/// Retry flag: read from the v1 pop retry topic `%RETRY%{group}_{topic}`.
pub const RETRY_V1: u8 = 1;
/// Retry flag: read from the v2 pop retry topic `%RETRY%{group}+{topic}`.
pub const RETRY_V2: u8 = 2;

const RETRY_PREFIX: &str = "%RETRY%";

/// The revive topic of a cluster.
pub fn revive_topic(cluster: &str) -> String {
    format!("{REVIVE_TOPIC_PREFIX}{cluster}")
}

/// The pop retry topic of `group` on `topic` (`KeyBuilder.buildPopRetryTopic`).
pub fn pop_retry_topic(topic: &str, group: &str, v2: bool) -> String {
    if v2 {
        format!("{RETRY_PREFIX}{group}+{topic}")
    } else {
        format!("{RETRY_PREFIX}{group}_{topic}")
    }
}

/// The retry flag of a topic a message was read from (`ExtraInfoUtil.getRetry`).
pub fn retry_flag(topic: &str) -> u8 {
    match topic.strip_prefix(RETRY_PREFIX) {
        Some(rest) if rest.contains('+') => RETRY_V2,
        Some(_) => RETRY_V1,
        None => RETRY_NORMAL,
    }
}

/// Whether a topic is a retry topic (`%RETRY%…`).
pub fn is_retry_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_PREFIX)
}

/// A receipt handle (`POP_CK`, the `extraInfo` of ACK and CHANGE_INVISIBLETIME).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraInfo {
    /// Start offset of the checkpoint the message belongs to.
    pub ck_queue_offset: i64,
    /// Pop time, ms.
    pub pop_time: i64,
    /// Invisible time, ms.
    pub invisible_time: i64,
    /// Revive queue of the checkpoint ([`ORDER_REVIVE_QUEUE`] for orderly).
    pub revive_qid: i32,
    /// [`RETRY_NORMAL`], [`RETRY_V1`] or [`RETRY_V2`].
    pub retry: u8,
    /// Broker that popped it.
    pub broker_name: String,
    /// Queue it was read from.
    pub queue_id: i32,
    /// Its queue offset (absent in the old 7-field form).
    pub offset: Option<i64>,
}

impl ExtraInfo {
    /// Parses the 7- or 8-field form; every number is checked.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.len() > MAX_EXTRA_INFO_BYTES {
            return Err(format!(
                "extraInfo longer than {MAX_EXTRA_INFO_BYTES} bytes"
            ));
        }
        let f: Vec<&str> = s.split(KEY_SEPARATOR).collect();
        // RocketMQ's proxy (CLUSTER mode) sends its 5.x receipt handle, which adds the
        // commit-log offset as a 9th field; Java's broker reads fields by index and
        // ignores it, and so does this (checked as a number, not kept).
        if !(7..=9).contains(&f.len()) {
            return Err(format!("extraInfo has {} fields, not 7, 8 or 9", f.len()));
        }
        let num = |i: usize, what: &str| -> Result<i64, String> {
            f[i].parse::<i64>()
                .map_err(|_| format!("extraInfo field {what} {:?} is not a number", f[i]))
        };
        let small = |i: usize, what: &str| -> Result<i32, String> {
            i32::try_from(num(i, what)?).map_err(|_| format!("extraInfo field {what} out of range"))
        };
        let retry = match f[4] {
            "0" => RETRY_NORMAL,
            "1" => RETRY_V1,
            "2" => RETRY_V2,
            other => return Err(format!("extraInfo retry flag {other:?} is not 0, 1 or 2")),
        };
        let info = Self {
            ck_queue_offset: num(0, "ckQueueOffset")?,
            pop_time: num(1, "popTime")?,
            invisible_time: num(2, "invisibleTime")?,
            revive_qid: small(3, "reviveQid")?,
            retry,
            broker_name: f[5].to_owned(),
            queue_id: small(6, "queueId")?,
            offset: if f.len() >= 8 {
                Some(num(7, "offset")?)
            } else {
                None
            },
        };
        if f.len() == 9 {
            num(8, "commitLogOffset")?;
        }
        if info.queue_id < 0 || info.ck_queue_offset < 0 || info.revive_qid < 0 {
            return Err("extraInfo has a negative queue id, offset or revive queue".into());
        }
        Ok(info)
    }

    /// The handle as the Java client builds it (`buildExtraInfo`).
    pub fn build(&self) -> String {
        let mut s = format!(
            "{} {} {} {} {} {} {}",
            self.ck_queue_offset,
            self.pop_time,
            self.invisible_time,
            self.revive_qid,
            self.retry,
            self.broker_name,
            self.queue_id
        );
        if let Some(o) = self.offset {
            s.push(KEY_SEPARATOR);
            s.push_str(&o.to_string());
        }
        s
    }

    /// The topic the message was read from, given the request's topic and group
    /// (`ExtraInfoUtil.getRealTopic`).
    pub fn real_topic(&self, topic: &str, group: &str) -> String {
        match self.retry {
            RETRY_V1 => pop_retry_topic(topic, group, false),
            RETRY_V2 => pop_retry_topic(topic, group, true),
            _ => topic.to_owned(),
        }
    }
}

/// One `startOffsetInfo` entry: `flag qid startOffset`.
pub fn start_offset_entry(flag: u8, queue_id: i32, start: u64) -> String {
    format!("{flag} {queue_id} {start}")
}

/// One `msgOffsetInfo` entry: `flag qid o1,o2,...`.
pub fn msg_offset_entry(flag: u8, queue_id: i32, offsets: &[u64]) -> String {
    let list: Vec<String> = offsets.iter().map(u64::to_string).collect();
    format!("{flag} {queue_id} {}", list.join(","))
}

/// `(flag, queueId)` → start offset, from a `startOffsetInfo` header.
pub fn parse_start_offset_info(s: &str) -> Result<BTreeMap<(u8, i32), i64>, String> {
    let mut out = BTreeMap::new();
    for entry in s.split(';').filter(|e| !e.is_empty()) {
        let (flag, qid, rest) = entry_parts(entry)?;
        let start = rest
            .parse::<i64>()
            .map_err(|_| format!("startOffsetInfo entry {entry:?} is malformed"))?;
        out.insert((flag, qid), start);
    }
    Ok(out)
}

/// `(flag, queueId)` → queue offsets, from a `msgOffsetInfo` header.
pub fn parse_msg_offset_info(s: &str) -> Result<BTreeMap<(u8, i32), Vec<i64>>, String> {
    let mut out = BTreeMap::new();
    for entry in s.split(';').filter(|e| !e.is_empty()) {
        let (flag, qid, rest) = entry_parts(entry)?;
        let offsets = rest
            .split(',')
            .map(|o| o.parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| format!("msgOffsetInfo entry {entry:?} is malformed"))?;
        out.insert((flag, qid), offsets);
    }
    Ok(out)
}

fn entry_parts(entry: &str) -> Result<(u8, i32, &str), String> {
    let mut it = entry.splitn(3, KEY_SEPARATOR);
    let bad = || format!("offset info entry {entry:?} is malformed");
    let flag = it
        .next()
        .and_then(|f| f.parse::<u8>().ok())
        .ok_or_else(bad)?;
    let qid = it
        .next()
        .and_then(|q| q.parse::<i32>().ok())
        .ok_or_else(bad)?;
    let rest = it.next().ok_or_else(bad)?;
    Ok((flag, qid, rest))
}

/// A checkpoint record's body (`PopCheckPoint`, short JSON names): the messages one pop
/// read from one queue, and which of them are acked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PopCheckPoint {
    /// First queue offset read.
    #[serde(rename = "so")]
    pub start_offset: i64,
    /// Pop time, ms.
    #[serde(rename = "pt")]
    pub pop_time: i64,
    /// Invisible time, ms.
    #[serde(rename = "it")]
    pub invisible_time: i64,
    /// Acked bits (kept 0 on disk: acks are their own records).
    #[serde(rename = "bm", default)]
    pub bit_map: i32,
    /// Messages covered.
    #[serde(rename = "n")]
    pub num: u8,
    /// Queue read.
    #[serde(rename = "q")]
    pub queue_id: i32,
    /// Topic read (normal or pop retry).
    #[serde(rename = "t")]
    pub topic: String,
    /// Consumer group.
    #[serde(rename = "c")]
    pub cid: String,
    /// Revive-queue offset (set on read; not meaningful on disk).
    #[serde(rename = "ro", default)]
    pub revive_offset: i64,
    /// Queue-offset differences from `so`, one per message (absent = contiguous).
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub queue_offset_diff: Option<Vec<i32>>,
    /// Broker that popped.
    #[serde(rename = "bn", default)]
    pub broker_name: String,
    /// How many times the revive put this checkpoint back after failing.
    #[serde(rename = "rp", default, skip_serializing_if = "Option::is_none")]
    pub re_put_times: Option<String>,
}

impl PopCheckPoint {
    /// Parses and checks a stored body: at most 32 messages, one diff per message,
    /// diffs ascending from 0.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let ck: Self = crate::body::from_json(body).map_err(|e| e.to_string())?;
        if ck.num == 0 || usize::from(ck.num) > MAX_CK_MESSAGES {
            return Err(format!("checkpoint covers {} messages", ck.num));
        }
        if let Some(d) = &ck.queue_offset_diff {
            if d.len() != usize::from(ck.num) || d.windows(2).any(|w| w[0] >= w[1]) || d[0] < 0 {
                return Err("checkpoint offset diffs are malformed".into());
            }
        }
        if ck.start_offset < 0 || ck.queue_id < 0 {
            return Err("checkpoint has a negative offset or queue".into());
        }
        Ok(ck)
    }

    /// The queue offset of message `i`.
    pub fn offset_of(&self, i: usize) -> i64 {
        let diff = match &self.queue_offset_diff {
            Some(d) => d.get(i).copied().unwrap_or(i as i32),
            None => i as i32,
        };
        self.start_offset.saturating_add(i64::from(diff))
    }

    /// Which message `queue_offset` is, if this checkpoint covers it (`indexOfAck`).
    pub fn index_of(&self, queue_offset: i64) -> Option<usize> {
        (0..usize::from(self.num)).find(|i| self.offset_of(*i) == queue_offset)
    }

    /// When its unacked messages revive, ms.
    pub fn revive_time(&self) -> i64 {
        self.pop_time.saturating_add(self.invisible_time)
    }

    /// The key an ack finds it by (`PopMessageProcessor.genAckUniqueId`'s merge key).
    pub fn merge_key(&self) -> String {
        merge_key(
            &self.topic,
            &self.cid,
            self.queue_id,
            self.start_offset,
            self.pop_time,
            &self.broker_name,
        )
    }

    /// Its UNIQ_KEY (`genCkUniqueId`).
    pub fn uniq_key(&self) -> String {
        format!(
            "{}@{}@{}@{}@{}@{}@{CK_TAG}",
            self.topic, self.queue_id, self.start_offset, self.cid, self.pop_time, self.broker_name
        )
    }
}

/// The ck ↔ ack merge key: a plain concatenation, as RocketMQ builds it.
pub fn merge_key(
    topic: &str,
    group: &str,
    queue_id: i32,
    start_offset: i64,
    pop_time: i64,
    broker_name: &str,
) -> String {
    format!("{topic}{group}{queue_id}{start_offset}{pop_time}{broker_name}")
}

/// An ack or batch-ack record's body (`AckMsg` / `BatchAckMsg`, short names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AckMsg {
    /// The acked queue offset (-1 in a batch ack).
    #[serde(rename = "ao")]
    pub ack_offset: i64,
    /// Start offset of its checkpoint.
    #[serde(rename = "so")]
    pub start_offset: i64,
    /// Consumer group.
    #[serde(rename = "c")]
    pub consumer_group: String,
    /// Topic read (normal or pop retry).
    #[serde(rename = "t")]
    pub topic: String,
    /// Queue.
    #[serde(rename = "q")]
    pub queue_id: i32,
    /// Pop time of its checkpoint.
    #[serde(rename = "pt")]
    pub pop_time: i64,
    /// Broker that popped.
    #[serde(rename = "bn", default)]
    pub broker_name: String,
    /// Batch ack: the acked offsets.
    #[serde(rename = "aol", default, skip_serializing_if = "Option::is_none")]
    pub ack_offset_list: Option<Vec<i64>>,
}

impl AckMsg {
    /// Parses a stored body (at most 32 offsets in a batch).
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let a: Self = crate::body::from_json(body).map_err(|e| e.to_string())?;
        if a.ack_offset_list
            .as_ref()
            .is_some_and(|l| l.len() > MAX_CK_MESSAGES)
        {
            return Err("batch ack lists more than 32 offsets".into());
        }
        Ok(a)
    }

    /// The ack of the one message at `offset` that receipt handle `extra` names, read by
    /// `group` from `topic`/`queue_id` (ACK_MESSAGE, and the old handle
    /// CHANGE_MESSAGE_INVISIBLETIME replaces).
    pub fn of_handle(
        extra: &ExtraInfo,
        group: String,
        topic: String,
        queue_id: i32,
        offset: i64,
    ) -> Self {
        Self {
            ack_offset: offset,
            start_offset: extra.ck_queue_offset,
            consumer_group: group,
            topic,
            queue_id,
            pop_time: extra.pop_time,
            broker_name: extra.broker_name.clone(),
            ack_offset_list: None,
        }
    }

    /// The offsets it acks.
    pub fn offsets(&self) -> Vec<i64> {
        match &self.ack_offset_list {
            Some(l) => l.clone(),
            None => vec![self.ack_offset],
        }
    }

    /// The merge key of the checkpoint it acks into.
    pub fn merge_key(&self) -> String {
        merge_key(
            &self.topic,
            &self.consumer_group,
            self.queue_id,
            self.start_offset,
            self.pop_time,
            &self.broker_name,
        )
    }

    /// Its UNIQ_KEY (`genAckUniqueId` / `genBatchAckUniqueId`).
    pub fn uniq_key(&self) -> String {
        match &self.ack_offset_list {
            None => format!(
                "{}@{}@{}@{}@{}@{}@{ACK_TAG}",
                self.topic,
                self.queue_id,
                self.ack_offset,
                self.consumer_group,
                self.pop_time,
                self.broker_name
            ),
            Some(l) => format!(
                "{}@{}@{:?}@{}@{}@{BATCH_ACK_TAG}",
                self.topic, self.queue_id, l, self.consumer_group, self.pop_time
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_garbage() {
        let s = "100 1733050000000 60000 3 0 broker-a 2 104";
        let h = ExtraInfo::parse(s).unwrap();
        assert_eq!(h.ck_queue_offset, 100);
        assert_eq!(h.revive_qid, 3);
        assert_eq!(h.offset, Some(104));
        assert_eq!(h.build(), s);
        assert_eq!(h.real_topic("T", "G"), "T");
        let r = ExtraInfo::parse("0 1 2 3 1 b 0").unwrap();
        assert_eq!(r.offset, None);
        // The 5.x proxy's receipt handle: the same, with the commit-log offset after.
        let proxied = ExtraInfo::parse(&format!("{s} 123456")).unwrap();
        assert_eq!(proxied.build(), s);
        assert_eq!(r.real_topic("T", "G"), "%RETRY%G_T");
        for bad in [
            "",
            "1 2 3",
            "x 1 2 3 0 b 0 1",
            "1 2 3 4 7 b 0 1",
            "1 2 3 4 0 b -1 1",
            "1 2 3 99999999999 0 b 0 1",
            "1 2 3 4 0 b 0 1 x",
            "1 2 3 4 0 b 0 1 9 10",
        ] {
            assert!(ExtraInfo::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ExtraInfo::parse(&"1 ".repeat(400)).is_err());
    }

    #[test]
    fn retry_flags_follow_the_topic_name() {
        assert_eq!(retry_flag("T"), RETRY_NORMAL);
        assert_eq!(retry_flag(&pop_retry_topic("T", "G", false)), RETRY_V1);
        assert_eq!(retry_flag(&pop_retry_topic("T", "G", true)), RETRY_V2);
    }

    #[test]
    fn offset_infos_parse_what_is_built() {
        let start = [start_offset_entry(0, 2, 100), start_offset_entry(1, 0, 7)].join(";");
        assert_eq!(start, "0 2 100;1 0 7");
        let m = parse_start_offset_info(&start).unwrap();
        assert_eq!(m[&(1, 0)], 7);
        let msgs = msg_offset_entry(0, 2, &[100, 101, 104]);
        assert_eq!(msgs, "0 2 100,101,104");
        assert_eq!(
            parse_msg_offset_info(&msgs).unwrap()[&(0, 2)],
            vec![100, 101, 104]
        );
        assert!(parse_start_offset_info("0 x 1").is_err());
        assert!(parse_msg_offset_info("0 1").is_err());
    }

    #[test]
    fn checkpoints_and_acks_read_rocketmqs_json() {
        let json = br#"{"so":5,"pt":1000,"it":3000,"bm":0,"n":3,"q":0,"t":"T","c":"G","ro":0,"d":[0,1,3],"bn":"b","reviveTime":4000}"#;
        let ck = PopCheckPoint::parse(json).unwrap();
        assert_eq!(ck.offset_of(2), 8);
        assert_eq!(ck.index_of(8), Some(2));
        assert_eq!(ck.index_of(7), None);
        assert_eq!(ck.revive_time(), 4000);
        let ack =
            AckMsg::parse(br#"{"ao":8,"so":5,"c":"G","t":"T","q":0,"pt":1000,"bn":"b"}"#).unwrap();
        assert_eq!(ack.merge_key(), ck.merge_key());
        assert!(
            PopCheckPoint::parse(br#"{"so":5,"pt":1,"it":1,"n":2,"q":0,"t":"T","c":"G","d":[1]}"#)
                .is_err()
        );
        assert!(
            PopCheckPoint::parse(br#"{"so":5,"pt":1,"it":1,"n":40,"q":0,"t":"T","c":"G"}"#)
                .is_err()
        );
        assert!(PopCheckPoint::parse(b"not json").is_err());
    }
}
