//! Messages as clients see them: properties, batch bodies (§4.5), pulled records (§4.6),
//! message ids (§5), body compression (§4.7).
//!
//! Stored records are decoded by the engine's [`tern_engine::record::RecordView`] only;
//! this module adds the owned, client-facing form on top.

use std::collections::BTreeMap;

mod batch;
mod compress;
mod id;
mod pulled;

pub use batch::{BatchItem, decode_batch, encode_batch};
pub use compress::{
    COMPRESS_OVER_BYTES, Compression, DEFAULT_COMPRESS_LEVEL, MAX_INFLATED_BYTES,
    SYSFLAG_COMPRESSION_LZ4, SYSFLAG_COMPRESSION_TYPE_MASK, SYSFLAG_COMPRESSION_ZLIB,
    SYSFLAG_COMPRESSION_ZSTD, compress_body, inflate_body,
};
pub use id::{
    MessageIdError, OffsetMessageId, UniqIdGenerator, decode_offset_msg_id, offset_msg_id,
};
pub use pulled::{
    MessageExt, PulledError, PulledRecords, Undecodable, decode_pulled, decode_pulled_each,
    pulled_body, pulled_records,
};

pub use tern_engine::properties::key as property;
pub use tern_engine::properties::{has_key, split_keys};
pub use tern_engine::record::{
    SYSFLAG_BORNHOST_V6, SYSFLAG_COMPRESSED, SYSFLAG_MULTI_TAGS, SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK, SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
};

/// A message to send: what a producer fills in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    /// Topic.
    pub topic: String,
    /// User flag, stored as is.
    pub flag: i32,
    /// Properties (TAGS, KEYS, UNIQ_KEY, user properties...).
    pub properties: BTreeMap<String, String>,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Message {
    /// A message with topic and body.
    pub fn new(topic: impl Into<String>, body: impl Into<Vec<u8>>) -> Self {
        Self {
            topic: topic.into(),
            body: body.into(),
            ..Self::default()
        }
    }

    /// Sets a property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The properties string as Java writes it.
    pub fn properties_string(&self) -> String {
        properties_to_string(&self.properties)
    }
}

/// Writes `name␁value␂` pairs; empty names or values are skipped (Java drops them on parse).
pub fn properties_to_string(props: &BTreeMap<String, String>) -> String {
    let mut out = Vec::with_capacity(properties_len(props));
    write_properties(&mut out, props);
    // Only whole UTF-8 strings and ASCII separators were written.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends `props` to `out` as Java writes them: `name␁value␂` for every pair with both
/// parts non-empty.
pub fn write_properties(out: &mut Vec<u8>, props: &BTreeMap<String, String>) {
    for (k, v) in props {
        if k.is_empty() || v.is_empty() {
            continue;
        }
        out.extend_from_slice(k.as_bytes());
        out.push(tern_engine::properties::NAME_VALUE_SEPARATOR);
        out.extend_from_slice(v.as_bytes());
        out.push(tern_engine::properties::PROPERTY_SEPARATOR);
    }
}

/// The length of [`properties_to_string`]'s result, without building it.
pub fn properties_len(props: &BTreeMap<String, String>) -> usize {
    props
        .iter()
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum()
}

/// Parses a properties string with the engine's parser (the one Java-compatible parser).
pub fn string_to_properties(s: &[u8]) -> BTreeMap<String, String> {
    tern_engine::properties::Properties::new(s)
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_and_drop_empty_values() {
        let m = Message::new("t", "b")
            .with_property("TAGS", "a")
            .with_property("KEYS", "k1 k2")
            .with_property("E", "");
        let s = m.properties_string();
        assert_eq!(s, "KEYS\u{1}k1 k2\u{2}TAGS\u{1}a\u{2}");
        let back = string_to_properties(s.as_bytes());
        assert_eq!(back.len(), 2);
        assert_eq!(back["KEYS"], "k1 k2");
    }
}
