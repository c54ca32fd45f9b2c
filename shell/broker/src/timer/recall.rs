//! Recall (RocketMQ 5.3.2): a producer cancels a timer message before it is due with the
//! handle its send was answered with.
//!
//! The handle is RocketMQ's `RecallMessageHandle.HandleV1`: URL-safe base64 (padded) of
//! `"v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <UNIQ_KEY>"`. RECALL_MESSAGE puts a marker,
//! itself a timer message due in the same slot, carrying `TIMER_DEL_UNIQKEY` =
//! `topic+uniqKey`; the timer task reads a slot's markers before its messages and drops
//! the messages they name. A marker that arrives after its slot was read cancels nothing,
//! as in RocketMQ.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use tern_engine::properties::key;
use tern_engine::record::MessageIn;
use tern_shell::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::processor::send::host;
use crate::schedule::message::with_properties;

/// Longest handle accepted (a topic, a broker name, a time and a key, encoded).
const MAX_HANDLE_LEN: usize = 1024;
/// The marker's tag (RocketMQ's `_RECALL_TAG_`).
const RECALL_TAG: &str = "_RECALL_TAG_";

/// A decoded recall handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handle {
    /// The message's topic.
    pub topic: String,
    /// The broker that stored it.
    pub broker_name: String,
    /// Its slot time + 1, ms (RocketMQ's "consider of floor").
    pub timestamp_ms: i64,
    /// Its UNIQ_KEY.
    pub uniq_key: String,
}

impl Handle {
    /// The handle of a timer message stored in `topic` with slot `out_ms`.
    pub fn encode(topic: &str, broker_name: &str, out_ms: i64, uniq_key: &str) -> String {
        let text = format!("v1 {topic} {broker_name} {} {uniq_key}", out_ms + 1);
        URL_SAFE.encode(text)
    }

    /// Reads a handle, as strictly as RocketMQ: URL-safe base64 (padding optional),
    /// UTF-8, `v1` and at least four fields after it; `None` for anything else (RocketMQ
    /// gives one reason for all: the handle is invalid).
    pub fn decode(handle: &str) -> Option<Handle> {
        if handle.is_empty() || handle.len() > MAX_HANDLE_LEN {
            return None;
        }
        let bytes = URL_SAFE
            .decode(handle)
            .or_else(|_| URL_SAFE_NO_PAD.decode(handle))
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let items: Vec<&str> = text.split(' ').collect();
        if items.len() < 5 || items[0] != "v1" {
            return None;
        }
        Some(Handle {
            topic: items[1].to_owned(),
            broker_name: items[2].to_owned(),
            timestamp_ms: items[3].parse().ok()?,
            uniq_key: items[4].to_owned(),
        })
    }
}

/// RECALL_MESSAGE: RocketMQ's checks in its order, then the marker.
pub async fn recall(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h: RecallMessageRequestHeader = req.decode_header()?;
    let refuse = |code, remark: &str| Err(Refusal::new(code, remark.to_owned()));
    if !ctx.timer.settings().recall_enabled {
        return refuse(
            ResponseCode::NoPermission,
            "recall failed, operation is forbidden",
        );
    }
    if ctx.role.get() == BrokerRole::Slave {
        return refuse(
            ResponseCode::SlaveNotAvailable,
            "recall failed, broker service not available",
        );
    }
    if ctx.topics.get(&h.topic).is_none() {
        return refuse(
            ResponseCode::TopicNotExist,
            &format!("recall failed, the topic[{}] not exist", h.topic),
        );
    }
    let Some(handle) = Handle::decode(&h.recall_handle) else {
        return refuse(ResponseCode::IllegalOperation, "recall handle is invalid");
    };
    if handle.topic != h.topic {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, topic not match",
        );
    }
    if handle.broker_name != ctx.config.broker_name {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, broker service not available",
        );
    }
    let left = handle.timestamp_ms - tern_shell::runtime::now_ms();
    if left <= 0 || left >= ctx.timer.settings().max_delay_sec.saturating_mul(1000) {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, timestamp invalid",
        );
    }
    let delete_key = super::message::delete_key(&handle.topic, &handle.uniq_key);
    let (deliver, born) = (
        handle.timestamp_ms.to_string(),
        tern_shell::runtime::now_ms(),
    );
    let props = with_properties(
        b"",
        &[
            (key::TAGS, RECALL_TAG),
            (key::TIMER_DEL_UNIQKEY, delete_key.as_str()),
            (key::UNIQ_KEY, handle.uniq_key.as_str()),
            (key::TIMER_DELIVER_MS, deliver.as_str()),
            ("PGROUP", h.producer_group.as_deref().unwrap_or("")),
        ],
    );
    let marker = MessageIn {
        topic: &handle.topic,
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: born,
        born_host: host(conn.peer_addr()),
        store_host: host(ctx.store_host),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: b"0",
        properties: &props,
    };
    let put = match ctx.put(&marker) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("recall of {delete_key}: {e}");
            return refuse(ResponseCode::SystemError, "recall failed, execute error");
        }
    };
    // RocketMQ answers SUCCESS for a flush or slave timeout too: the marker is stored.
    let _ = ctx.await_stored(put.end()).await;
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &RecallMessageResponseHeader {
                msg_id: handle.uniq_key,
            },
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_reads_back_as_rocketmq_writes_it() {
        let h = Handle::encode("Orders", "broker-a", 1_700_000_002_000, "U1");
        assert_eq!(
            URL_SAFE.decode(&h).unwrap(),
            b"v1 Orders broker-a 1700000002001 U1"
        );
        let d = Handle::decode(&h).unwrap();
        assert_eq!(
            d,
            Handle {
                topic: "Orders".into(),
                broker_name: "broker-a".into(),
                timestamp_ms: 1_700_000_002_001,
                uniq_key: "U1".into(),
            }
        );
        assert_eq!(
            Handle::decode(h.trim_end_matches('=')).unwrap(),
            d,
            "padding optional"
        );
    }

    #[test]
    fn bad_handles_are_refused() {
        for h in [
            String::new(),
            "!!!".into(),
            URL_SAFE.encode("v2 a b 1 k"),
            URL_SAFE.encode("v1 a b 1"),
            URL_SAFE.encode("v1 a b soon k"),
            URL_SAFE.encode([0xff, 0xfe]),
            "A".repeat(MAX_HANDLE_LEN + 1),
        ] {
            assert!(Handle::decode(&h).is_none(), "{h}");
        }
    }
}
