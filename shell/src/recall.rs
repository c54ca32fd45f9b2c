//! The recall handle of a timer message (RocketMQ 5.3.2's `RecallMessageHandle.HandleV1`),
//! shared by the broker, which writes it into a send's answer and reads it back in
//! RECALL_MESSAGE, and the client, which reads the broker name from it to route the
//! recall.
//!
//! A handle is URL-safe base64 (padded) of
//! `"v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <UNIQ_KEY>"`. The handle comes from a
//! peer: readers return `None` for anything malformed, never panic.

use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};

/// Longest handle the broker accepts (a topic, a broker name, a time and a key, encoded).
pub const MAX_HANDLE_LEN: usize = 1024;

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

/// A handle's four fields as text, after the `v1`: what RocketMQ's client checks before
/// routing (the broker checks more, in [`Handle::decode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The message's topic.
    pub topic: String,
    /// The broker that stored it.
    pub broker_name: String,
    /// The time field, unparsed.
    pub timestamp: String,
    /// Its UNIQ_KEY.
    pub uniq_key: String,
}

impl Fields {
    /// Reads a handle's fields: URL-safe base64 (padding optional), UTF-8, `v1` and at
    /// least four fields after it; `None` for anything else.
    pub fn read(handle: &str) -> Option<Fields> {
        let bytes = URL_SAFE
            .decode(handle)
            .or_else(|_| URL_SAFE_NO_PAD.decode(handle))
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let items: Vec<&str> = text.split(' ').collect();
        match items.as_slice() {
            ["v1", topic, broker_name, timestamp, uniq_key, ..] => Some(Fields {
                topic: (*topic).to_owned(),
                broker_name: (*broker_name).to_owned(),
                timestamp: (*timestamp).to_owned(),
                uniq_key: (*uniq_key).to_owned(),
            }),
            _ => None,
        }
    }
}

impl Handle {
    /// The handle of a timer message stored in `topic` with slot `out_ms`.
    pub fn encode(topic: &str, broker_name: &str, out_ms: i64, uniq_key: &str) -> String {
        let text = format!("v1 {topic} {broker_name} {} {uniq_key}", out_ms + 1);
        URL_SAFE.encode(text)
    }

    /// Reads a handle as the broker does, as strictly as RocketMQ: no longer than
    /// [`MAX_HANDLE_LEN`], the [`Fields`] and a numeric time; `None` for anything else
    /// (RocketMQ gives one reason for all: the handle is invalid).
    pub fn decode(handle: &str) -> Option<Handle> {
        if handle.is_empty() || handle.len() > MAX_HANDLE_LEN {
            return None;
        }
        let f = Fields::read(handle)?;
        Some(Handle {
            timestamp_ms: f.timestamp.parse().ok()?,
            topic: f.topic,
            broker_name: f.broker_name,
            uniq_key: f.uniq_key,
        })
    }
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

    #[test]
    fn the_client_reads_the_fields_without_the_brokers_time_check() {
        let f = Fields::read(&URL_SAFE.encode("v1 a b soon k extra")).unwrap();
        assert_eq!(
            (f.broker_name.as_str(), f.timestamp.as_str()),
            ("b", "soon")
        );
        assert!(Handle::decode(&URL_SAFE.encode("v1 a b soon k")).is_none());
    }
}
