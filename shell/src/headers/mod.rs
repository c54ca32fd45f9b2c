//! Typed request/response headers, decoded from and encoded to extFields.
//!
//! Field names are the Java ones, exactly (including SEND_MESSAGE_V2's one-letter names).
//! Decoding is lenient about *representation* because real clients differ (the C++ client
//! sends numbers and `"0"`/`"1"` booleans), strict about *presence*: a missing required
//! field is an error naming it. Encoding always writes strings (Go reads `map[string]string`).

use std::fmt;

use crate::ext_fields::{CompactString, Lookup, ToCompactString};
use crate::frame::ExtFields;

mod acl;
mod admin;
mod client;
mod consume;
mod controller;
mod namesrv;
mod pop;
mod produce;

pub use acl::*;
pub use admin::*;
pub use client::*;
pub use consume::*;
pub use controller::*;
pub use namesrv::*;
pub use pop::*;
pub use produce::*;

/// A header decoded from extFields.
pub trait FromExtFields: Sized {
    /// Reads the header; fails on a missing required field or an unparsable value.
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError>;
}

/// A header encoded into extFields.
pub trait ToExtFields {
    /// Writes every present field as a string; absent optional fields are not written.
    fn to_ext_fields(&self, ext: &mut ExtFields);
}

/// Why a header could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// A required field is absent.
    Missing(&'static str),
    /// A field is present but not of the expected type.
    Malformed {
        /// The extFields key.
        field: &'static str,
        /// The start of the offending value (peer data, so truncated).
        value: String,
        /// What was expected ("int32", "int64", "bool").
        expected: &'static str,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(field) => write!(f, "the custom field <{field}> is null"),
            Self::Malformed {
                field,
                value,
                expected,
            } => {
                write!(
                    f,
                    "the custom field <{field}> = {value:?} is not a valid {expected}"
                )
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// A scalar that travels as an extFields string.
pub trait ExtValue: Sized {
    /// Parses the string form; `field` names the key for the error.
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError>;
    /// The string form we send (inline up to 24 bytes: no allocation for a number).
    fn render_ext(&self) -> CompactString;
}

/// Builds a `Malformed` error, keeping at most 64 characters of the peer's value.
fn malformed(field: &'static str, raw: &str, expected: &'static str) -> HeaderError {
    HeaderError::Malformed {
        field,
        value: raw.chars().take(64).collect(),
        expected,
    }
}

impl ExtValue for String {
    fn parse_ext(_: &'static str, raw: &str) -> Result<Self, HeaderError> {
        Ok(raw.to_owned())
    }
    fn render_ext(&self) -> CompactString {
        CompactString::from(self.as_str())
    }
}

/// A value kept as it came, inline up to 24 bytes: for the short texts a header carries
/// on every message (a region's name, a flag), read and written with no allocation.
impl ExtValue for CompactString {
    fn parse_ext(_: &'static str, raw: &str) -> Result<Self, HeaderError> {
        Ok(CompactString::from(raw))
    }
    fn render_ext(&self) -> CompactString {
        self.clone()
    }
}

impl ExtValue for i32 {
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError> {
        raw.trim()
            .parse()
            .map_err(|_| malformed(field, raw, "int32"))
    }
    fn render_ext(&self) -> CompactString {
        self.to_compact_string()
    }
}

impl ExtValue for i64 {
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError> {
        raw.trim()
            .parse()
            .map_err(|_| malformed(field, raw, "int64"))
    }
    fn render_ext(&self) -> CompactString {
        self.to_compact_string()
    }
}

impl ExtValue for bool {
    /// Accepts "true"/"false" (any case) and the C++ client's "1"/"0".
    fn parse_ext(field: &'static str, raw: &str) -> Result<Self, HeaderError> {
        let t = raw.trim();
        if t.eq_ignore_ascii_case("true") || t == "1" {
            Ok(true)
        } else if t.eq_ignore_ascii_case("false") || t == "0" {
            Ok(false)
        } else {
            Err(malformed(field, raw, "bool"))
        }
    }
    fn render_ext(&self) -> CompactString {
        self.to_compact_string()
    }
}

/// A header field: a required `T` or an optional `Option<T>`.
pub trait ExtField: Sized {
    /// Reads the field named `key` (a header reads its fields through one lookup).
    fn read(ext: &mut Lookup<'_>, key: &'static str) -> Result<Self, HeaderError>;
    /// Writes the field named `key` (nothing for `None`).
    fn write(&self, ext: &mut ExtFields, key: &'static str);
}

impl<T: ExtValue> ExtField for T {
    fn read(ext: &mut Lookup<'_>, key: &'static str) -> Result<Self, HeaderError> {
        let raw = ext.get(key).ok_or(HeaderError::Missing(key))?;
        T::parse_ext(key, raw)
    }
    fn write(&self, ext: &mut ExtFields, key: &'static str) {
        ext.insert(key, self.render_ext());
    }
}

impl<T: ExtValue> ExtField for Option<T> {
    /// Absent or empty (the binary encoding's null) is `None`.
    fn read(ext: &mut Lookup<'_>, key: &'static str) -> Result<Self, HeaderError> {
        match ext.get(key) {
            None => Ok(None),
            Some(raw) if raw.is_empty() => Ok(T::parse_ext(key, raw).ok()),
            Some(raw) => T::parse_ext(key, raw).map(Some),
        }
    }
    fn write(&self, ext: &mut ExtFields, key: &'static str) {
        if let Some(v) = self {
            ext.insert(key, v.render_ext());
        }
    }
}

/// Declares a header struct whose fields map to extFields keys, with both trait impls.
macro_rules! ext_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty = $key:literal ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// The extFields keys of this header, in declaration order.
            pub const FIELD_NAMES: &'static [&'static str] = &[$($key),*];
        }

        impl $crate::headers::FromExtFields for $name {
            #[allow(unused_variables, unused_mut)]
            fn from_ext_fields(ext: &$crate::frame::ExtFields) -> Result<Self, $crate::headers::HeaderError> {
                let mut lookup = ext.lookup();
                Ok(Self {
                    $( $field: $crate::headers::ExtField::read(&mut lookup, $key)?, )*
                })
            }
        }

        impl $crate::headers::ToExtFields for $name {
            #[allow(unused_variables)]
            fn to_ext_fields(&self, ext: &mut $crate::frame::ExtFields) {
                ext.reserve(Self::FIELD_NAMES.len());
                $( $crate::headers::ExtField::write(&self.$field, ext, $key); )*
            }
        }
    };
}
pub(crate) use ext_header;

ext_header! {
    /// For requests and responses that carry no header fields (HEART_BEAT, LOCK_BATCH_MQ...).
    pub struct EmptyHeader {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(pairs: &[(&str, &str)]) -> ExtFields {
        pairs.iter().copied().collect()
    }

    #[test]
    fn booleans_accept_cpp_digits_and_java_words() {
        assert_eq!(bool::parse_ext("b", "1"), Ok(true));
        assert_eq!(bool::parse_ext("b", "0"), Ok(false));
        assert_eq!(bool::parse_ext("b", "TRUE"), Ok(true));
        assert!(bool::parse_ext("b", "yes").is_err());
    }

    #[test]
    fn missing_required_field_is_named_in_the_error() {
        let err = GetMaxOffsetRequestHeader::from_ext_fields(&ext(&[("topic", "t")])).unwrap_err();
        assert_eq!(err, HeaderError::Missing("queueId"));
        assert_eq!(err.to_string(), "the custom field <queueId> is null");
    }

    #[test]
    fn malformed_number_is_reported_with_its_field() {
        let err =
            GetMaxOffsetRequestHeader::from_ext_fields(&ext(&[("topic", "t"), ("queueId", "x")]))
                .unwrap_err();
        assert!(matches!(
            err,
            HeaderError::Malformed {
                field: "queueId",
                expected: "int32",
                ..
            }
        ));
    }

    #[test]
    fn empty_optional_value_reads_as_absent() {
        let h = GetMaxOffsetRequestHeader::from_ext_fields(&ext(&[
            ("topic", "t"),
            ("queueId", "1"),
            ("committed", ""),
        ]))
        .unwrap();
        assert_eq!(h.committed, None);
    }
}
