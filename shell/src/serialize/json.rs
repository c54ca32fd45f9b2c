//! The fastjson header (§1.3): `{"code":…,"extFields":{…},"flag":…,…}`.
//!
//! Decoded for every request. The flat headers real clients write are read in one pass
//! (`plain`); any other JSON walks serde_json's parser straight into a [`RemotingCommand`]:
//! no `serde_json::Value` tree in between (that tree cost 12% of the broker's CPU at 16
//! sync senders: a `String` and a `Value` per field, then a copy). What both accept and
//! how they read each field is the tree decoder's, kept in the tests as the reference
//! they are checked against.

use std::fmt::{self, Write};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::code::LanguageCode;
use crate::ext_fields::{CompactString, ToCompactString};
use crate::frame::{ExtFields, FrameError, RemotingCommand, SerializeType};

/// Writes the JSON header the way Java's fastjson does: keys sorted, nulls omitted.
pub fn encode_json_header(cmd: &RemotingCommand) -> String {
    let mut out = String::with_capacity(json_header_size_hint(cmd));
    write_json_header(cmd, &mut out);
    out
}

/// Appends the JSON header of `cmd` to `out` (a frame being built, room for it reserved
/// by the caller with [`json_header_size_hint`]): the header is written where it goes,
/// not into a string of its own and copied (an allocation and a copy of ~300 bytes on
/// every request and every answer).
pub(crate) fn append_json_header(cmd: &RemotingCommand, out: &mut Vec<u8>) {
    write_json_header(cmd, &mut ByteText(out));
}

/// The header's size, about: the fixed members (~110 bytes with their numbers) and the
/// text of the fields and remark, so the buffer does not grow on the way.
pub(crate) fn json_header_size_hint(cmd: &RemotingCommand) -> usize {
    let fields: usize = cmd
        .ext_fields
        .iter()
        .map(|(k, v)| k.len() + v.len() + 6)
        .sum();
    let remark = cmd.remark.as_ref().map_or(0, |r| r.len() + 12);
    128 + fields + remark
}

/// Writes the header's text into `out`.
fn write_json_header(cmd: &RemotingCommand, out: &mut impl Write) {
    // Writing to a `String` or a `Vec` cannot fail. Numbers go through `CompactString`
    // (inline, no allocation): its integer formatting skips `fmt`'s machinery.
    let _ = out.write_str("{\"code\":");
    let _ = out.write_str(&cmd.code.to_compact_string());
    if !cmd.ext_fields.is_empty() {
        let _ = out.write_str(",\"extFields\":{");
        for (i, (k, v)) in cmd.ext_fields.iter().enumerate() {
            if i > 0 {
                let _ = out.write_char(',');
            }
            push_json_str(out, k);
            let _ = out.write_char(':');
            push_json_str(out, v);
        }
        let _ = out.write_char('}');
    }
    let _ = out.write_str(",\"flag\":");
    let _ = out.write_str(&cmd.flag.to_compact_string());
    let _ = out.write_str(",\"language\":");
    push_json_str(out, cmd.language.name());
    let _ = out.write_str(",\"opaque\":");
    let _ = out.write_str(&cmd.opaque.to_compact_string());
    if let Some(remark) = &cmd.remark {
        let _ = out.write_str(",\"remark\":");
        push_json_str(out, remark);
    }
    let _ = out.write_str(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    let _ = out.write_str(&cmd.version.to_compact_string());
    let _ = out.write_char('}');
}

/// Text written onto the end of a byte buffer (a frame whose first bytes are binary).
struct ByteText<'a>(&'a mut Vec<u8>);

impl Write for ByteText<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Appends `s` as a JSON string literal, escaped as serde_json escapes: `"`, `\` and the
/// control characters below U+0020, nothing else (a test holds it to serde_json's text).
pub(crate) fn push_json_str(out: &mut impl Write, s: &str) {
    let _ = out.write_char('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        let _ = out.write_str(&s[plain..i]);
        if escape.is_empty() {
            // RocketMQ's property separators (U+0001, U+0002) are in every message's
            // properties: written by hand, not through the formatter.
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let _ = out.write_str("\\u00");
            let _ = out.write_char(char::from(HEX[usize::from(b >> 4)]));
            let _ = out.write_char(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            let _ = out.write_str(escape);
        }
        plain = i + 1;
    }
    let _ = out.write_str(&s[plain..]);
    let _ = out.write_char('"');
}

/// Parses a JSON header. Missing `code`/`opaque`/`flag` default to 0 as fastjson would.
pub fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    // Checked whole, once: serde_json skips the strings of ignored fields unchecked.
    let text = std::str::from_utf8(header)
        .map_err(|e| FrameError::BadJsonHeader(format!("header is not UTF-8: {e}")))?;
    if let Some(cmd) = plain::decode_plain(text) {
        return Ok(cmd);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let fields = de
        .deserialize_any(HeaderVisitor)
        .and_then(|fields| de.end().map(|()| fields))
        .map_err(|e| FrameError::BadJsonHeader(e.to_string()))?;
    fields.into_command()
}

/// The header's fields as read; a key seen twice keeps its last value (as a JSON object
/// does), so a bad value is an error only if no later one replaced it.
struct Fields {
    code: Option<Result<i32, ()>>,
    version: Option<Result<i32, ()>>,
    opaque: Option<Result<i32, ()>>,
    flag: Option<Result<i32, ()>>,
    language: Option<LanguageCode>,
    remark: Option<String>,
    /// `Err` when `extFields` was neither an object nor null.
    ext_fields: Result<ExtFields, ()>,
}

impl Fields {
    /// No member read yet.
    fn empty() -> Self {
        Self {
            code: None,
            version: None,
            opaque: None,
            flag: None,
            language: None,
            remark: None,
            ext_fields: Ok(ExtFields::new()),
        }
    }

    fn into_command(self) -> Result<RemotingCommand, FrameError> {
        let ext_fields = self
            .ext_fields
            .map_err(|()| FrameError::BadJsonHeader("extFields is not an object".into()))?;
        let int = |v: Option<Result<i32, ()>>, key: &str| {
            v.unwrap_or(Ok(0))
                .map_err(|()| FrameError::BadJsonHeader(format!("{key} is not a 32-bit integer")))
        };
        Ok(RemotingCommand {
            code: int(self.code, "code")?,
            language: self.language.unwrap_or(LanguageCode::OtherLanguage),
            version: int(self.version, "version")?,
            opaque: int(self.opaque, "opaque")?,
            flag: int(self.flag, "flag")?,
            remark: self.remark,
            ext_fields,
            body: Vec::new(),
            serialize_type: SerializeType::Json,
        })
    }
}

/// The header's top-level keys that mean something; the rest are skipped.
enum Key {
    Code,
    Version,
    Opaque,
    Flag,
    Language,
    Remark,
    ExtFields,
    Other,
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a header field name")
            }
            fn visit_str<E: de::Error>(self, k: &str) -> Result<Key, E> {
                Ok(match k {
                    "code" => Key::Code,
                    "version" => Key::Version,
                    "opaque" => Key::Opaque,
                    "flag" => Key::Flag,
                    "language" => Key::Language,
                    "remark" => Key::Remark,
                    "extFields" => Key::ExtFields,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

struct HeaderVisitor;

impl<'de> Visitor<'de> for HeaderVisitor {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a header object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::empty();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Code => fields.code = Some(map.next_value_seed(Int)?),
                Key::Version => fields.version = Some(map.next_value_seed(Int)?),
                Key::Opaque => fields.opaque = Some(map.next_value_seed(Int)?),
                Key::Flag => fields.flag = Some(map.next_value_seed(Int)?),
                Key::Language => fields.language = Some(map.next_value_seed(Language)?),
                // Rare (answers with errors): the tree keeps a non-string remark's JSON text.
                Key::Remark => {
                    fields.remark = match map.next_value::<Value>()? {
                        Value::String(s) => Some(s),
                        Value::Null => None,
                        other => Some(other.to_string()),
                    }
                }
                Key::ExtFields => fields.ext_fields = map.next_value_seed(Ext)?,
                Key::Other => map.next_value_seed(Skip)?,
            }
        }
        Ok(fields)
    }
}

/// An integer field: a JSON number or a numeric string that fits in i32, or null (0).
/// `Err(())` for anything else, decided once the whole header is read.
struct Int;

impl<'de> DeserializeSeed<'de> for Int {
    type Value = Result<i32, ()>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Int {
    type Value = Result<i32, ()>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a 32-bit integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(i32::try_from(v).map_err(|_| ()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(i32::try_from(v).map_err(|_| ()))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.trim().parse().map_err(|_| ()))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(0))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| Err(()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        skip_map(map).map(|()| Err(()))
    }
}

/// `language`: a name, or a number naming a known language; anything else is
/// OTHER (JSON can carry no unnamed language: keeps decode∘encode stable).
struct Language;

impl<'de> DeserializeSeed<'de> for Language {
    type Value = LanguageCode;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Language {
    type Value = LanguageCode;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a language")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<LanguageCode, E> {
        Ok(LanguageCode::from_name(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<LanguageCode, E> {
        Ok(u8::try_from(v)
            .map(LanguageCode::from_raw)
            .ok()
            .filter(|l| !matches!(l, LanguageCode::Other(_)))
            .unwrap_or(LanguageCode::OtherLanguage))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<LanguageCode, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Ok(LanguageCode::OtherLanguage),
        }
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<LanguageCode, E> {
        Ok(LanguageCode::OtherLanguage)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LanguageCode, E> {
        Ok(LanguageCode::OtherLanguage)
    }
    fn visit_unit<E: de::Error>(self) -> Result<LanguageCode, E> {
        Ok(LanguageCode::OtherLanguage)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<LanguageCode, A::Error> {
        skip_seq(seq).map(|()| LanguageCode::OtherLanguage)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LanguageCode, A::Error> {
        skip_map(map).map(|()| LanguageCode::OtherLanguage)
    }
}

/// `extFields`: an object (null: none); `Err(())` for any other value.
struct Ext;

impl<'de> DeserializeSeed<'de> for Ext {
    type Value = Result<ExtFields, ()>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Ext {
    type Value = Result<ExtFields, ()>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an extFields object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Null is Java's absent. As in any JSON object a later value of a key replaces an
        // earlier one, so a later null removes it (`ExtFields::from_wire`).
        let mut read = Vec::with_capacity(16);
        while let Some(k) = map.next_key_seed(Text)? {
            read.push((k, map.next_value_seed(Scalar)?));
        }
        Ok(Ok(ExtFields::from_wire(read)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(ExtFields::new()))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Err(()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_seq(seq).map(|()| Err(()))
    }
}

/// An extFields key: a string, inline when short (serde_json lends it when unescaped).
struct Text;

impl<'de> DeserializeSeed<'de> for Text {
    type Value = CompactString;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Text {
    type Value = CompactString;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(CompactString::from(v))
    }
}

/// An extFields value as a string: numbers keep their JSON text, booleans become
/// "true"/"false", null is absent (Java's null), nested values keep their JSON text.
struct Scalar;

impl<'de> DeserializeSeed<'de> for Scalar {
    type Value = Option<CompactString>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scalar {
    type Value = Option<CompactString>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an extFields value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(CompactString::from(v)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(CompactString::from(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v.to_compact_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.to_compact_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.to_compact_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        // serde_json's float text (ryu), not Rust's Display: `1.0` stays "1.0".
        Ok(serde_json::Number::from_f64(v).map(|n| n.to_compact_string()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let v: Value = de::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Some(v.to_compact_string()))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let v: Value = de::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(v.to_compact_string()))
    }
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element_seed(Skip)?.is_some() {}
    Ok(())
}

fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry_seed(Skip, Skip)?.is_some() {}
    Ok(())
}

/// A value read and dropped, checked as fully as a kept one: `IgnoredAny` would let a
/// number out of range through, which the tree decoder refused.
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skip {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        skip_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        skip_map(map)
    }
}

mod plain;
#[cfg(test)]
mod tests;
