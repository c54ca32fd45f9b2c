//! Topic attributes (RocketMQ 5): a topic's `message.type` and the like, changed through
//! UPDATE_AND_CREATE_TOPIC's `attributes` field, `+key=value` to set and `-key` to
//! remove, comma-separated (`AttributeParser`), checked against the attributes RocketMQ
//! defines (`TopicAttributes`, `AttributeUtil.alterCurrentAttributes`): unknown keys,
//! values outside a key's set, a key given twice, removal at creation and changes of
//! an unchangeable key are refused with RocketMQ's messages.
//!
//! 5.x clients read `message.type` from routes: a FIFO, delay or transaction message is
//! sent only to a topic of that type (or MIXED).

use std::collections::BTreeMap;

/// The message type attribute.
pub const MESSAGE_TYPE: &str = "message.type";

/// Most modifications in one request (RocketMQ defines three keys).
const MAX_MODIFICATIONS: usize = 16;

/// One attribute RocketMQ defines: its allowed values, whether it may change after the
/// topic is created, and its default.
struct Attribute {
    key: &'static str,
    values: &'static [&'static str],
    /// The values Tern implements (a subset of `values`).
    served: &'static [&'static str],
    changeable: bool,
}

/// The values of `message.type` (RocketMQ's `TopicMessageType`).
const MESSAGE_TYPES: &[&str] = &[
    "UNSPECIFIED",
    "NORMAL",
    "FIFO",
    "DELAY",
    "TRANSACTION",
    "MIXED",
];

/// RocketMQ's `TopicAttributes.ALL`.
const ALL: [Attribute; 3] = [
    Attribute {
        key: MESSAGE_TYPE,
        values: MESSAGE_TYPES,
        // Tern serves every message type.
        served: MESSAGE_TYPES,
        changeable: true,
    },
    Attribute {
        key: "queue.type",
        values: &["BatchCQ", "SimpleCQ"],
        served: &["SimpleCQ"],
        changeable: false,
    },
    Attribute {
        key: "cleanup.policy",
        values: &["DELETE", "COMPACTION"],
        served: &["DELETE"],
        changeable: false,
    },
];

/// A topic's message type: `message.type`, NORMAL when unset (RocketMQ's default).
pub fn message_type(attributes: &BTreeMap<String, String>) -> &str {
    attributes
        .get(MESSAGE_TYPE)
        .map_or("NORMAL", String::as_str)
}

/// The `attributes` text for a map whose keys carry their sign (`+message.type` →
/// `FIFO`, `-key` → anything): `+message.type=FIFO,-key`. A key without a sign is set.
pub fn modification_text(changes: &BTreeMap<String, String>) -> String {
    let one = |(k, v): (&String, &String)| match k.strip_prefix('-') {
        Some(_) => k.clone(),
        None if k.starts_with('+') => format!("{k}={v}"),
        None => format!("+{k}={v}"),
    };
    changes.iter().map(one).collect::<Vec<_>>().join(",")
}

/// The attributes after applying `modification` (the `attributes` field, empty for
/// none) to `current`; `create` when the topic does not exist yet. `Err` is the
/// refusal, worded as RocketMQ's.
pub fn alter(
    create: bool,
    current: &BTreeMap<String, String>,
    modification: &str,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = current.clone();
    let mut seen: Vec<&str> = Vec::new();
    let entries = modification.split(',').filter(|e| !e.trim().is_empty());
    for (i, entry) in entries.enumerate() {
        if i >= MAX_MODIFICATIONS {
            return Err(format!("more than {MAX_MODIFICATIONS} attribute changes"));
        }
        let entry = entry.trim();
        let (signed_key, value) = entry.split_once('=').unwrap_or((entry, ""));
        let (sign, key) = signed_key.split_at(signed_key.len().min(1));
        if key.is_empty() || key.contains(['+', '-']) {
            return Err("kv string format wrong.".into());
        }
        // The sign first, as RocketMQ reads it (its message names the key without the
        // first character, which it took for the sign).
        if sign != "+" && sign != "-" {
            return Err(if create {
                format!("only add attribute is supported while creating topic. key: {key}")
            } else {
                format!("wrong format key: {key}")
            });
        }
        if seen.contains(&key) {
            return Err(format!("alter duplication key. key: {key}"));
        }
        seen.push(key);
        let Some(attr) = ALL.iter().find(|a| a.key == key) else {
            return Err(format!("unsupported key: {key}"));
        };
        match sign {
            "+" => {
                if !create && !attr.changeable {
                    return Err(format!(
                        "attempt to update an unchangeable attribute. key: {key}"
                    ));
                }
                if !attr.values.contains(&value) {
                    return Err(format!("value is not in set: [{}]", attr.values.join(", ")));
                }
                if !attr.served.contains(&value) {
                    return Err(format!(
                        "{key}={value} is not supported by Tern (it serves {})",
                        attr.served.join(", ")
                    ));
                }
                out.insert(key.to_owned(), value.to_owned());
            }
            "-" if create => {
                return Err(format!(
                    "only add attribute is supported while creating topic. key: {key}"
                ));
            }
            // "-", the only sign left.
            _ => {
                if !current.contains_key(key) {
                    return Err(format!("attempt to delete a nonexistent key: {key}"));
                }
                if !attr.changeable {
                    return Err(format!(
                        "attempt to update an unchangeable attribute. key: {key}"
                    ));
                }
                out.remove(key);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn changes_follow_rocketmqs_rules() {
        let fifo = alter(true, &BTreeMap::new(), "+message.type=FIFO").unwrap();
        assert_eq!(message_type(&fifo), "FIFO");
        assert_eq!(message_type(&BTreeMap::new()), "NORMAL");
        // Updating keeps what is not named; removing needs the key to exist.
        let mixed = alter(false, &fifo, "+message.type=MIXED").unwrap();
        assert_eq!(mixed, map(&[("message.type", "MIXED")]));
        assert_eq!(alter(false, &mixed, "").unwrap(), mixed);
        assert!(alter(false, &mixed, "-message.type").unwrap().is_empty());
        for (create, current, text, why) in [
            (true, BTreeMap::new(), "-message.type", "only add attribute"),
            (false, BTreeMap::new(), "-message.type", "nonexistent key"),
            (
                true,
                BTreeMap::new(),
                "+message.type=QUEUE",
                "value is not in set",
            ),
            (
                true,
                BTreeMap::new(),
                "+colour=red",
                "unsupported key: colour",
            ),
            (
                true,
                BTreeMap::new(),
                "message.type=FIFO",
                "only add attribute is supported while creating topic. key: essage.type",
            ),
            (
                true,
                BTreeMap::new(),
                "+message.type=FIFO,+message.type=DELAY",
                "duplication",
            ),
            (true, BTreeMap::new(), "+", "kv string format wrong"),
            (
                false,
                BTreeMap::new(),
                "+queue.type=SimpleCQ",
                "unchangeable",
            ),
            (
                true,
                BTreeMap::new(),
                "+queue.type=BatchCQ",
                "not supported by Tern",
            ),
            (
                false,
                BTreeMap::new(),
                "message.type=FIFO",
                "wrong format key: essage.type",
            ),
        ] {
            let e = alter(create, &current, text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert!(alter(true, &BTreeMap::new(), &"+message.type=FIFO,".repeat(20)).is_err());
    }

    #[test]
    fn the_text_form_round_trips() {
        let changes = map(&[
            ("+message.type", "FIFO"),
            ("-cleanup.policy", ""),
            ("queue.type", "SimpleCQ"),
        ]);
        let text = modification_text(&changes);
        assert_eq!(
            text,
            "+message.type=FIFO,-cleanup.policy,+queue.type=SimpleCQ"
        );
        let current = map(&[("cleanup.policy", "DELETE")]);
        let e = alter(false, &current, &text).unwrap_err();
        assert!(e.contains("unchangeable"), "{e}");
    }
}
