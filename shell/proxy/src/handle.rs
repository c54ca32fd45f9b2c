//! The ids a 5.x client hands back: receipt handles and transaction ids. Both are
//! stateless, so they survive a broker or endpoint restart.
//!
//! - A receipt handle is the POP checkpoint's `extraInfo` (8 fields) and the message's
//!   commit-log offset as a 9th, as RocketMQ's proxy builds it (`ReceiptHandle.encode`);
//!   the broker's ACK and CHANGE_INVISIBLETIME accept the 9 fields as they are.
//! - A transaction id is the half message's offset msgId and its queue offset
//!   (`{offsetMsgId}-{tranStateTableOffset}`). RocketMQ's proxy keeps an in-memory table
//!   for this, whose entries expire after 30 s and are lost on restart; from the id Tern
//!   finds the broker (the msgId's store host) and the record (its commit-log offset).

use tern_shell::message::decode_offset_msg_id;
use tern_shell::pop::ExtraInfo;

/// A parsed receipt handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptHandle {
    /// The POP checkpoint's part.
    pub extra: ExtraInfo,
    /// The message's commit-log offset; `None` in an 8-field handle (a 4.x-style one).
    pub commit_log_offset: Option<i64>,
}

impl ReceiptHandle {
    /// Parses `s`; `Err` says what is wrong with it.
    pub fn parse(s: &str) -> Result<Self, String> {
        let extra = ExtraInfo::parse(s)?;
        if extra.offset.is_none() {
            return Err("receipt handle has no queue offset".into());
        }
        let fields: Vec<&str> = s.split(' ').collect();
        let commit_log_offset = match fields.len() {
            9 => Some(
                fields[8]
                    .parse::<i64>()
                    .ok()
                    .filter(|o| *o >= 0)
                    .ok_or("receipt handle's commit-log offset is not a number")?,
            ),
            _ => None,
        };
        Ok(Self {
            extra,
            commit_log_offset,
        })
    }

    /// The handle's text.
    pub fn encode(&self) -> String {
        let mut s = self.extra.build();
        if let Some(o) = self.commit_log_offset {
            s.push(' ');
            s.push_str(&o.to_string());
        }
        s
    }

    /// The message's queue offset.
    pub fn offset(&self) -> i64 {
        self.extra.offset.unwrap_or(self.extra.ck_queue_offset)
    }

    /// Whether the message is visible again already (`retrieveTime + invisibleTime <=
    /// now`): its handle no longer acks it.
    pub fn expired(&self, now_ms: i64) -> bool {
        self.extra.pop_time.saturating_add(self.extra.invisible_time) <= now_ms
    }
}

/// A parsed transaction id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionId {
    /// The half message's offset msgId (its broker and commit-log offset).
    pub offset_msg_id: String,
    /// The half message's queue offset.
    pub tran_state_table_offset: i64,
}

impl TransactionId {
    /// The id's text.
    pub fn encode(&self) -> String {
        format!("{}-{}", self.offset_msg_id, self.tran_state_table_offset)
    }

    /// Parses `s`, checking the msgId decodes.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (id, offset) = s
            .rsplit_once('-')
            .ok_or("transaction id is not {offsetMsgId}-{queueOffset}")?;
        let tran_state_table_offset = offset
            .parse::<i64>()
            .ok()
            .filter(|o| *o >= 0)
            .ok_or("transaction id's queue offset is not a number")?;
        decode_offset_msg_id(id).map_err(|e| format!("transaction id: {e}"))?;
        Ok(Self {
            offset_msg_id: id.to_owned(),
            tran_state_table_offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_round_trips_with_its_commit_log_offset() {
        let s = "10 1700000000000 60000 3 0 broker-a 2 12 4096";
        let h = ReceiptHandle::parse(s).unwrap();
        assert_eq!(h.commit_log_offset, Some(4096));
        assert_eq!(h.offset(), 12);
        assert_eq!(h.extra.broker_name, "broker-a");
        assert_eq!(h.encode(), s);
        assert!(!h.expired(1_700_000_000_000));
        assert!(h.expired(1_700_000_060_000));
        let eight = ReceiptHandle::parse("10 1700000000000 60000 3 0 broker-a 2 12").unwrap();
        assert_eq!(eight.commit_log_offset, None);
    }

    #[test]
    fn malformed_handles_are_refused() {
        for s in [
            "",
            "garbage",
            "10 1 2 3 0 b 2",
            "10 1 2 3 0 b 2 12 x",
            "10 1 2 3 0 b 2 12 -5",
            "10 1 2 3 7 b 2 12 4",
        ] {
            assert!(ReceiptHandle::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn a_transaction_id_names_its_half_message() {
        let addr = "127.0.0.1:10911".parse().unwrap();
        let offset_msg_id = tern_shell::message::offset_msg_id(addr, 777);
        let t = TransactionId {
            offset_msg_id: offset_msg_id.clone(),
            tran_state_table_offset: 5,
        };
        assert_eq!(TransactionId::parse(&t.encode()).unwrap(), t);
        assert!(TransactionId::parse("nope").is_err());
        assert!(TransactionId::parse(&format!("{offset_msg_id}-x")).is_err());
        assert!(TransactionId::parse("ZZ-1").is_err());
    }
}
