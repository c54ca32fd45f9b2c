//! extFields: a command's "custom header", string → string.
//!
//! Every request and response carries one, so it is built and read on every message, on
//! both sides of a connection. A `BTreeMap<String, String>` made about 30 allocations per
//! send on each side (every key, every value, the tree's nodes). Here the entries live in
//! one `Vec`, sorted by key, and keys and values are [`CompactString`]s, which hold up to
//! 24 bytes inline: every key RocketMQ defines and most values (numbers, topic and group
//! names) allocate nothing. A header we build has at most a few dozen entries, so a
//! binary search and an insertion that shifts the tail cost less than a tree's node walk;
//! what a peer sends, of any size, is sorted once ([`ExtFields::from_wire`]).
//!
//! The order is the map's: sorted by key, a key present once (a later insert replaces
//! the value). So the JSON header keeps fastjson's sorted keys, and the ACL signature,
//! which RocketMQ computes over the fields in key order, sees them in that order.

use std::fmt;
use std::ops::Index;

pub use compact_str::{CompactString, ToCompactString};

/// The custom header of a [`crate::RemotingCommand`]: keys unique, kept sorted.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExtFields {
    entries: Vec<(CompactString, CompactString)>,
}

impl ExtFields {
    /// No fields.
    pub const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// The fields a decoder read, in wire order: a key may come more than once (the last
    /// one counts, as in a JSON object) and `None` is Java's null (the key is absent).
    /// Sorted once, stably, so peer input costs n log n: inserting each field in place
    /// would shift the tail every time, and a header of 1 MiB with its keys in reverse
    /// order would move hundreds of gigabytes.
    pub(crate) fn from_wire(mut read: Vec<(CompactString, Option<CompactString>)>) -> Self {
        // Keys often come in order with no nulls (jsoncpp's and Go's maps are sorted, we
        // sort ours, and a Java HashMap gives SEND_MESSAGE_V2's one-letter keys in order):
        // taken as they are, without the sort's and the dedup's moves. Checked in one
        // pass: every value is there and every key comes after the one before it.
        let plain = read.first().is_none_or(|(_, v)| v.is_some())
            && read.windows(2).all(|w| {
                w[1].1.is_some() && short_cmp(w[0].0.as_bytes(), w[1].0.as_bytes()).is_lt()
            });
        if plain {
            let entries = read
                .into_iter()
                .filter_map(|(k, v)| Some((k, v?)))
                .collect();
            return Self { entries };
        }
        read.sort_by(|a, b| short_cmp(a.0.as_bytes(), b.0.as_bytes()));
        let mut entries = Vec::with_capacity(read.len());
        let mut fields = read.into_iter().peekable();
        while let Some((key, value)) = fields.next() {
            if fields.peek().is_some_and(|(next, _)| *next == key) {
                continue;
            }
            if let Some(value) = value {
                entries.push((key, value));
            }
        }
        Self { entries }
    }

    /// Makes room for `additional` more fields (a header writes all of its own at once).
    pub fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// Where `key` is, or where it would go.
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(k, _)| short_cmp(k.as_bytes(), key.as_bytes()))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).ok().map(|i| self.entries[i].1.as_str())
    }

    /// A reader of several keys, cheapest when asked in key order (a header's fields).
    pub fn lookup(&self) -> Lookup<'_> {
        Lookup {
            fields: self,
            next: 0,
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(
        &mut self,
        key: impl Into<CompactString>,
        value: impl Into<CompactString>,
    ) -> Option<CompactString> {
        let key = key.into();
        let value = value.into();
        // Fields often come in key order (SEND_MESSAGE_V2's `a`…`n`): append without a search.
        if self
            .entries
            .last()
            .is_none_or(|(last, _)| short_cmp(last.as_bytes(), key.as_bytes()).is_lt())
        {
            self.entries.push((key, value));
            return None;
        }
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<CompactString> {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// The fields in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no fields.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Reads keys of one [`ExtFields`] one after another: a key that is the entry after the
/// last one found (or the first) costs one compare, any other a binary search. A header
/// declared in key order (SEND_MESSAGE_V2's `a`…`n`) reads its fields in a single walk
/// instead of a search each (14 searches were 2% of the broker's CPU at 16 sync senders).
#[derive(Debug)]
pub struct Lookup<'a> {
    fields: &'a ExtFields,
    /// The entry after the last key asked for (found, or where it would have been).
    next: usize,
}

impl<'a> Lookup<'a> {
    /// The value of `key`.
    pub fn get(&mut self, key: &str) -> Option<&'a str> {
        let entries = &self.fields.entries;
        let at = match entries.get(self.next) {
            Some((k, _)) if k == key => Ok(self.next),
            _ => self.fields.find(key),
        };
        match at {
            Ok(i) => {
                self.next = i + 1;
                Some(entries[i].1.as_str())
            }
            Err(i) => {
                self.next = i;
                None
            }
        }
    }
}

/// `a.cmp(b)` for the short keys of a header, a byte at a time: `str`'s `cmp` calls
/// libc's `memcmp`, and a send's header decode makes ~60 such calls (a binary search per
/// field) for keys of one to twenty bytes, where the call costs more than the compare
/// (`memcmp` was 5.7% of the broker's samples at 16 async senders). Longer keys (only a
/// peer's odd header has them) still go to `memcmp`, whose vector loop a hostile header
/// of long look-alike keys would otherwise make the sort run byte by byte.
#[inline]
fn short_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    const SHORT: usize = 32;
    if a.len() > SHORT || b.len() > SHORT {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

impl fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// `fields["key"]`: the value, panicking when absent (as a map's index does).
impl Index<&str> for ExtFields {
    type Output = CompactString;
    fn index(&self, key: &str) -> &CompactString {
        match self.find(key) {
            Ok(i) => &self.entries[i].1,
            Err(_) => panic!("extFields has no {key:?}"),
        }
    }
}

impl<K: Into<CompactString>, V: Into<CompactString>> Extend<(K, V)> for ExtFields {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Into<CompactString>, V: Into<CompactString>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = Self::new();
        fields.extend(iter);
        fields
    }
}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (CompactString, CompactString)>,
        fn(&'a (CompactString, CompactString)) -> (&'a str, &'a str),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The model's pairs in its order, as [`ExtFields::iter`] yields them: what both
    /// properties compare against.
    fn pairs(map: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
        map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    proptest! {
        /// Any sequence of inserts and removes leaves what a `BTreeMap` would hold, in
        /// its order, and answers each lookup as it would.
        #[test]
        fn behaves_as_a_sorted_map(
            ops in proptest::collection::vec((any::<bool>(), "[a-e]{0,2}", "[x-z]{0,30}"), 0..64),
        ) {
            let mut fields = ExtFields::new();
            let mut map = BTreeMap::new();
            for (insert, k, v) in ops {
                if insert {
                    prop_assert_eq!(
                        fields.insert(k.as_str(), v.as_str()).map(String::from),
                        map.insert(k.clone(), v.clone())
                    );
                } else {
                    prop_assert_eq!(fields.remove(&k).map(String::from), map.remove(&k));
                }
                prop_assert_eq!(fields.get(&k), map.get(&k).map(String::as_str));
                prop_assert_eq!(fields.contains_key(&k), map.contains_key(&k));
            }
            prop_assert_eq!(fields.len(), map.len());
            let ours: Vec<(&str, &str)> = fields.iter().collect();
            prop_assert_eq!(ours, pairs(&map));
        }
    }

    proptest! {
        /// What a decoder reads, in any order with repeats and nulls, comes out as the
        /// map that inserting each in turn (a null removing) would leave.
        #[test]
        fn wire_fields_keep_the_last_value_of_each_key(
            read in proptest::collection::vec(("[a-e]{0,2}", proptest::option::of("[x-z]{0,30}")), 0..64),
        ) {
            let mut map = BTreeMap::new();
            for (k, v) in &read {
                match v {
                    Some(v) => map.insert(k.clone(), v.clone()),
                    None => map.remove(k),
                };
            }
            let wire = read
                .into_iter()
                .map(|(k, v)| (CompactString::from(k), v.map(CompactString::from)))
                .collect();
            let fields = ExtFields::from_wire(wire);
            let ours: Vec<(&str, &str)> = fields.iter().collect();
            prop_assert_eq!(ours, pairs(&map));
        }
    }

    proptest! {
        /// The key order is `str`'s, on either side of the short-key cut-over.
        #[test]
        fn keys_compare_as_strs_do(a in "[a-c]{0,40}", b in "[a-c]{0,40}") {
            prop_assert_eq!(short_cmp(a.as_bytes(), b.as_bytes()), a.as_str().cmp(b.as_str()));
        }
    }

    proptest! {
        /// A lookup answers any sequence of keys as `get` does.
        #[test]
        fn lookups_answer_as_get_does(
            fields in proptest::collection::btree_map("[a-e]{0,2}", "[x-z]{0,3}", 0..12),
            keys in proptest::collection::vec("[a-e]{0,2}", 0..24),
        ) {
            let fields: ExtFields = fields.into_iter().collect();
            let mut lookup = fields.lookup();
            for key in &keys {
                prop_assert_eq!(lookup.get(key), fields.get(key));
            }
        }
    }

    #[test]
    fn equal_whatever_the_insertion_order() {
        let a: ExtFields = [("b", "2"), ("a", "1")].into_iter().collect();
        let b: ExtFields = [("a", "1"), ("b", "2")].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(format!("{a:?}"), r#"{"a": "1", "b": "2"}"#);
        assert_eq!(a["b"], "2");
    }
}
