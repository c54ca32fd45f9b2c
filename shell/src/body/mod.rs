//! JSON bodies with RocketMQ's field names and fastjson's quirks (wire-protocol.md §3).
//!
//! Encode with [`to_json`] / [`to_json_with`] (never `serde_json::to_string` directly: the
//! numeric-key and object-key maps rely on our writer), decode with [`from_json`], which
//! accepts fastjson output, standard JSON and the C++ client's variants.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::lenient_json::KeyStyle;
use crate::lenient_json::{self, NUM_KEY, RAW_KEY};

mod admin;
mod client;
mod controller;
mod pop;
mod queue;
mod route;
mod topic;

pub use admin::*;
pub use client::*;
pub use controller::*;
pub use pop::*;
pub use queue::*;
pub use route::*;
pub use topic::*;

/// Why a body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not JSON, even leniently.
    Json(lenient_json::JsonError),
    /// JSON, but not the expected shape.
    Shape(String),
    /// A binary body (compressed register body, batch) is malformed.
    Binary(&'static str),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json(e) => write!(f, "body is not JSON: {e}"),
            Self::Shape(e) => write!(f, "body has the wrong shape: {e}"),
            Self::Binary(e) => write!(f, "bad binary body: {e}"),
        }
    }
}

impl std::error::Error for BodyError {}

/// Encodes a body the way a Java broker does (fastjson default: unquoted numeric keys).
pub fn to_json<T: Serialize>(body: &T) -> Vec<u8> {
    to_json_with(body, KeyStyle::Fastjson)
}

/// Encodes a body with an explicit key style (route data quotes keys for new clients).
pub fn to_json_with<T: Serialize>(body: &T, style: KeyStyle) -> Vec<u8> {
    // Our body types serialize to a Value without failing (string keys, finite numbers).
    let value = serde_json::to_value(body).unwrap_or(Value::Null);
    lenient_json::write(&value, style).into_bytes()
}

/// Decodes a body from Java, Go, C++ or our own output.
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    let value = lenient_json::parse(bytes).map_err(BodyError::Json)?;
    serde_json::from_value(value).map_err(|e| BodyError::Shape(e.to_string()))
}

/// A map with integer keys (broker ids, queue ids, delay levels), written with unquoted
/// keys by fastjson. Accepts quoted or unquoted keys on input.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumKeyMap<V>(pub BTreeMap<i64, V>);

impl<V: Serialize> Serialize for NumKeyMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(&format!("{NUM_KEY}{k}"), v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for NumKeyMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, V>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (k, v) in raw {
            let n = k
                .trim_start_matches(NUM_KEY)
                .trim()
                .parse::<i64>()
                .map_err(|_| de::Error::custom(format!("map key {k:?} is not an integer")))?;
            out.insert(n, v);
        }
        Ok(Self(out))
    }
}

/// A map keyed by [`MessageQueue`], written by fastjson with JSON objects as keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueKeyMap<V>(pub BTreeMap<MessageQueue, V>);

impl<V: Serialize> Serialize for QueueKeyMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            let key = serde_json::to_string(k).map_err(serde::ser::Error::custom)?;
            m.serialize_entry(&format!("{RAW_KEY}{key}"), v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for QueueKeyMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<String, V>::deserialize(d)?;
        let mut out = BTreeMap::new();
        for (k, v) in raw {
            let text = k.trim_start_matches(RAW_KEY);
            let mq = lenient_json::parse(text.as_bytes())
                .ok()
                .and_then(|v| serde_json::from_value::<MessageQueue>(v).ok())
                .ok_or_else(|| de::Error::custom("map key is not a MessageQueue"))?;
            out.insert(mq, v);
        }
        Ok(Self(out))
    }
}

/// Field deserializers that accept what real peers send: numbers as strings and back,
/// booleans as "0"/"1"/"true"/"false", null as the default.
pub mod lenient {
    use super::*;

    fn to_i64(v: &Value) -> Option<i64> {
        match v {
            Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
            Value::String(s) => s.trim().parse().ok(),
            Value::Bool(b) => Some(i64::from(*b)),
            Value::Null => Some(0),
            _ => None,
        }
    }

    /// An i64 from a number, numeric string, bool or null.
    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let v = Value::deserialize(d)?;
        to_i64(&v).ok_or_else(|| de::Error::custom("expected an integer"))
    }

    /// An i32 from a number, numeric string, bool or null.
    pub fn i32<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
        let v = Value::deserialize(d)?;
        to_i64(&v)
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| de::Error::custom("expected a 32-bit integer"))
    }

    /// A bool from true/false, "true"/"false", 0/1 or "0"/"1"; null is false.
    pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match Value::deserialize(d)? {
            Value::Bool(b) => Ok(b),
            Value::Null => Ok(false),
            Value::Number(n) => Ok(n.as_i64() != Some(0)),
            Value::String(s) => {
                crate::headers::ExtValue::parse_ext("bool", &s).map_err(de::Error::custom)
            }
            _ => Err(de::Error::custom("expected a boolean")),
        }
    }

    /// A string; numbers and booleans keep their text; null is empty.
    pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(s),
            Value::Null => Ok(String::new()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            _ => Err(de::Error::custom("expected a string")),
        }
    }

    /// A list where null means empty.
    pub fn vec<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
    }
}

/// Declares a Java enum written by name, read by name or ordinal (C++ sends ordinals).
macro_rules! java_enum {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            /// A name (or ordinal) this version does not know, kept as text.
            Unknown(String),
        }

        impl $name {
            /// Variants in Java ordinal order.
            const ORDERED: &'static [$name] = &[$($name::$variant),*];

            /// The Java enum name.
            pub fn name(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )*
                    Self::Unknown(s) => s,
                }
            }

            /// Parses a Java enum name.
            pub fn from_name(s: &str) -> Self {
                match s {
                    $( $text => Self::$variant, )*
                    other => Self::Unknown(other.to_owned()),
                }
            }

            /// Maps a Java ordinal (what the C++ client sends).
            pub fn from_ordinal(n: i64) -> Self {
                usize::try_from(n)
                    .ok()
                    .and_then(|i| Self::ORDERED.get(i).cloned())
                    .unwrap_or_else(|| Self::Unknown(n.to_string()))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match serde_json::Value::deserialize(d)? {
                    serde_json::Value::String(s) => match s.trim().parse::<i64>() {
                        Ok(n) => Ok(Self::from_ordinal(n)),
                        Err(_) => Ok(Self::from_name(&s)),
                    },
                    serde_json::Value::Number(n) => Ok(Self::from_ordinal(n.as_i64().unwrap_or(-1))),
                    _ => Err(serde::de::Error::custom(concat!("expected a ", stringify!($name)))),
                }
            }
        }
    };
}
pub(crate) use java_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn num_key_map_round_trips_in_both_styles() {
        let m = NumKeyMap(
            [(0i64, "a".to_string()), (1, "b".to_string())]
                .into_iter()
                .collect(),
        );
        assert_eq!(to_json(&m), br#"{0:"a",1:"b"}"#);
        assert_eq!(
            to_json_with(&m, KeyStyle::Standard),
            br#"{"0":"a","1":"b"}"#
        );
        assert_eq!(from_json::<NumKeyMap<String>>(&to_json(&m)).unwrap(), m);
        assert_eq!(
            from_json::<NumKeyMap<String>>(br#"{"0":"a","1":"b"}"#).unwrap(),
            m
        );
    }

    #[test]
    fn non_numeric_key_in_numeric_map_is_an_error() {
        assert!(from_json::<NumKeyMap<i64>>(br#"{"x":1}"#).is_err());
    }
}
