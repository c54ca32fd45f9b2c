//! The properties string stored with every message: `name␁value␂name␁value␂…`.
//!
//! Java appends ␂ after every pair. The parser follows `MessageDecoder.string2messageProperties`:
//! pieces shorter than 3 bytes, or with an empty name or an empty value, are dropped.

/// Separates a name from its value (U+0001).
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Ends a pair (U+0002).
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// Longest properties string a record can hold (Java short length).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Well-known property names (wire-protocol.md §4.4).
pub mod key {
    /// Space-separated business keys; each one is indexed.
    pub const KEYS: &str = "KEYS";
    /// The tag; its Java hash is the consume-queue tag code.
    pub const TAGS: &str = "TAGS";
    /// The client's unique message id.
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    /// Delay level requested by the producer.
    pub const DELAY: &str = "DELAY";
    /// Original topic of a delayed or half message.
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    /// Original queue of a delayed or half message.
    pub const REAL_QID: &str = "REAL_QID";
    /// Original topic of a retried message.
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    /// Cluster the storing broker belongs to.
    pub const CLUSTER: &str = "CLUSTER";
    /// Whether the producer waits for the store result.
    pub const WAIT: &str = "WAIT";
    /// Marks a transaction's half message.
    pub const TRAN_MSG: &str = "TRAN_MSG";
    /// Producer group of a half message (for check-back).
    pub const PGROUP: &str = "PGROUP";
    /// Transaction id the broker copies from UNIQ_KEY into a half message.
    pub const TRANSACTION_ID: &str = "__transactionId__";
    /// Queue offset of the half message a re-stored copy stands for.
    pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    /// How many times the broker asked the producer about a half message.
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// Seconds before the first check-back of a half message, set by the producer.
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    /// Timer message (5.x): due at this wall-clock time, ms (`setDeliverTimeMs`).
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    /// Timer message (5.x): due this many seconds after it is stored (`setDelayTimeSec`).
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    /// Timer message (5.x): due this many ms after it is stored (`setDelayTimeMs`).
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// The slot time a timer message was filed under; on a delivered copy it also marks
    /// the copy as timed already.
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    /// When the timer took the message in, ms (on the delivered copy).
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    /// When the timer delivered the message, ms (on the delivered copy).
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    /// How many times a long delay was put back into the timer for a later window.
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    /// A recall marker: `topic+uniqKey` of the timer message it cancels.
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
}

/// Iterates the `(name, value)` pairs of a properties string, skipping what Java skips.
///
/// Pairs that are not UTF-8 are skipped too: Java would have produced replacement
/// characters, and no name the broker acts on can match them.
#[derive(Clone, Debug)]
pub struct Properties<'a> {
    rest: &'a [u8],
}

impl<'a> Properties<'a> {
    /// Pairs of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
}

impl<'a> Iterator for Properties<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let end = self
                .rest
                .iter()
                .position(|&b| b == PROPERTY_SEPARATOR)
                .unwrap_or(self.rest.len());
            let piece = &self.rest[..end];
            self.rest = self.rest.get(end + 1..).unwrap_or(&[]);
            if piece.len() < 3 {
                continue;
            }
            let Some(split) = piece.iter().position(|&b| b == NAME_VALUE_SEPARATOR) else {
                continue;
            };
            let (name, value) = (&piece[..split], &piece[split + 1..]);
            if name.is_empty() || value.is_empty() {
                continue;
            }
            if let (Ok(name), Ok(value)) = (core::str::from_utf8(name), core::str::from_utf8(value))
            {
                return Some((name, value));
            }
        }
        None
    }
}

/// The keys of a `KEYS` value: separated by spaces (Java's `MessageConst.KEY_SEPARATOR`),
/// empty ones skipped. The index, QUERY_MESSAGE and the admin query all split this way.
pub fn split_keys(keys: &str) -> impl Iterator<Item = &str> + Clone {
    keys.split(' ').filter(|k| !k.is_empty())
}

/// Whether a `KEYS` value holds `key`.
pub fn has_key(keys: &str, key: &str) -> bool {
    split_keys(keys).any(|k| k == key)
}

/// The value of property `name`, if present (the last one wins, as in Java's map).
pub fn get<'a>(properties: &'a [u8], name: &str) -> Option<&'a str> {
    // Compares bytes and validates UTF-8 only for the match: dispatch looks up three
    // names in every stored message, and validating every pair each time showed in
    // profiles.
    if name.is_empty() {
        return None;
    }
    let mut found = None;
    for piece in properties.split(|&b| b == PROPERTY_SEPARATOR) {
        let Some(value) = piece
            .strip_prefix(name.as_bytes())
            .and_then(|rest| rest.strip_prefix(&[NAME_VALUE_SEPARATOR]))
        else {
            continue;
        };
        if let (false, Ok(v)) = (value.is_empty(), core::str::from_utf8(value)) {
            found = Some(v);
        }
    }
    found
}

/// Whether some property's name starts with `prefix` (which holds no separator byte):
/// one pass, for a caller that would otherwise [`get`] several names sharing it. May
/// answer true for a pair `get` drops (an empty value); never false for one it keeps.
pub fn any_name_starts_with(properties: &[u8], prefix: &str) -> bool {
    properties
        .split(|&b| b == PROPERTY_SEPARATOR)
        .any(|piece| piece.starts_with(prefix.as_bytes()))
}

/// Appends `name␁value␂` to `out` at `*len`, as Java writes it. Returns `None` when it
/// does not fit; `out` is then unchanged up to `*len`.
pub fn append(out: &mut [u8], len: &mut usize, name: &str, value: &str) -> Option<()> {
    let need = name.len() + value.len() + 2;
    let dst = out.get_mut(*len..*len + need)?;
    dst[..name.len()].copy_from_slice(name.as_bytes());
    dst[name.len()] = NAME_VALUE_SEPARATOR;
    dst[name.len() + 1..need - 1].copy_from_slice(value.as_bytes());
    dst[need - 1] = PROPERTY_SEPARATOR;
    *len += need;
    Some(())
}

/// The consume-queue tag code of a message: Java hash of its trimmed TAGS, 0 without.
pub fn tag_code(properties: &[u8]) -> i64 {
    match get(properties, key::TAGS) {
        Some(tags) => i64::from(crate::hash::java_string_hash(tags.trim())),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_and_drops_what_java_drops() {
        let raw = b"KEYS\x01k1 k2\x02TAGS\x01TagA\x02\x02E\x01\x02\x01v\x02ab\x02UNIQ_KEY\x01X\x02";
        let mut it = Properties::new(raw);
        assert_eq!(it.next(), Some(("KEYS", "k1 k2")));
        assert_eq!(it.next(), Some(("TAGS", "TagA")));
        assert_eq!(it.next(), Some(("UNIQ_KEY", "X")));
        assert_eq!(it.next(), None);
        assert_eq!(get(raw, "TAGS"), Some("TagA"));
        assert_eq!(get(raw, "NONE"), None);
    }

    #[test]
    fn a_name_prefix_is_found_in_one_pass() {
        let raw = b"KEYS\x01TIMER_x\x02TIMER_DELAY_MS\x015\x02";
        assert!(any_name_starts_with(raw, "TIMER_"));
        // A value that starts with the prefix is not a name.
        assert!(!any_name_starts_with(b"KEYS\x01TIMER_x\x02", "TIMER_"));
        assert!(!any_name_starts_with(b"", "TIMER_"));
    }

    #[test]
    fn parses_without_trailing_separator() {
        assert_eq!(get(b"a\x01b\x02c\x01d", "c"), Some("d"));
    }

    #[test]
    fn append_writes_java_form_and_refuses_overflow() {
        let mut buf = [0u8; 16];
        let mut len = 0;
        append(&mut buf, &mut len, "TAGS", "A").unwrap();
        assert_eq!(&buf[..len], b"TAGS\x01A\x02");
        assert!(append(&mut buf, &mut len, "KEYS", "too long").is_none());
        assert_eq!(len, 7);
    }

    #[test]
    fn tag_code_trims_and_defaults_to_zero() {
        assert_eq!(tag_code(b"TAGS\x01 TagA \x02"), 2_598_919);
        assert_eq!(tag_code(b""), 0);
    }
}
