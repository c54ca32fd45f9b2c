//! The two header encodings: fastjson text (§1.3) and the ROCKETMQ binary form (§1.4).
//!
//! Decoders are lenient where real peers differ (the C++ client writes some extFields values
//! as JSON numbers, omits `serializeTypeCurrentRPC`, sends `remark: ""`); encoders always
//! write what the strictest reader (Go: string-only extFields; C++: JSON only) accepts.

use serde_json::Value;

use crate::code::LanguageCode;
use crate::frame::{ExtFields, FrameError, RemotingCommand, SerializeType};

/// Writes the JSON header the way Java's fastjson does: keys sorted, nulls omitted.
pub fn encode_json_header(cmd: &RemotingCommand) -> String {
    let mut out = String::with_capacity(128);
    out.push_str("{\"code\":");
    out.push_str(&cmd.code.to_string());
    if !cmd.ext_fields.is_empty() {
        out.push_str(",\"extFields\":{");
        for (i, (k, v)) in cmd.ext_fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_str(&mut out, k);
            out.push(':');
            push_json_str(&mut out, v);
        }
        out.push('}');
    }
    out.push_str(",\"flag\":");
    out.push_str(&cmd.flag.to_string());
    out.push_str(",\"language\":");
    push_json_str(&mut out, cmd.language.name());
    out.push_str(",\"opaque\":");
    out.push_str(&cmd.opaque.to_string());
    if let Some(remark) = &cmd.remark {
        out.push_str(",\"remark\":");
        push_json_str(&mut out, remark);
    }
    out.push_str(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    out.push_str(&cmd.version.to_string());
    out.push('}');
    out
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_json_str(out: &mut String, s: &str) {
    // serde_json's string escaping is exactly JSON's; serializing a &str cannot fail.
    match serde_json::to_string(s) {
        Ok(lit) => out.push_str(&lit),
        Err(_) => out.push_str("\"\""),
    }
}

/// Parses a JSON header. Missing `code`/`opaque`/`flag` default to 0 as fastjson would.
pub fn decode_json_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let value: Value =
        serde_json::from_slice(header).map_err(|e| FrameError::BadJsonHeader(e.to_string()))?;
    let Value::Object(mut obj) = value else {
        return Err(FrameError::BadJsonHeader("header is not an object".into()));
    };
    let int = |obj: &serde_json::Map<String, Value>, key: &str| -> Result<i32, FrameError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => json_i32(v)
                .ok_or_else(|| FrameError::BadJsonHeader(format!("{key} is not a 32-bit integer"))),
        }
    };
    let language = match obj.get("language") {
        Some(Value::String(name)) => LanguageCode::from_name(name),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u8::try_from(n).ok())
            .map(LanguageCode::from_raw)
            // Only named languages: JSON can carry no other (keeps decode∘encode stable).
            .filter(|l| !matches!(l, LanguageCode::Other(_)))
            .unwrap_or(LanguageCode::OtherLanguage),
        _ => LanguageCode::OtherLanguage,
    };
    // Values are moved out of the parsed tree, not copied: this runs for every request.
    let remark = match obj.remove("remark") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    };
    let mut ext_fields = ExtFields::new();
    match obj.remove("extFields") {
        Some(Value::Object(map)) => {
            for (k, v) in map {
                if let Some(s) = json_scalar_into_string(v) {
                    ext_fields.insert(k, s);
                }
            }
        }
        Some(Value::Null) | None => {}
        Some(_) => {
            return Err(FrameError::BadJsonHeader(
                "extFields is not an object".into(),
            ));
        }
    }
    Ok(RemotingCommand {
        code: int(&obj, "code")?,
        language,
        version: int(&obj, "version")?,
        opaque: int(&obj, "opaque")?,
        flag: int(&obj, "flag")?,
        remark,
        ext_fields,
        body: Vec::new(),
        serialize_type: SerializeType::Json,
    })
}

/// Reads a JSON number or numeric string as i32.
fn json_i32(v: &Value) -> Option<i32> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// extFields values as strings: numbers keep their text, booleans become "true"/"false",
/// null means absent (Java's null), nested values keep their JSON text.
fn json_scalar_into_string(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    }
}

/// Size of the binary header's fixed part: code 2, language 1, version 2, opaque 4, flag 4,
/// remark length 4, ext length 4.
const BINARY_FIXED_BYTES: usize = 21;

/// Writes the ROCKETMQ binary header.
pub fn encode_binary_header(cmd: &RemotingCommand) -> Result<Vec<u8>, FrameError> {
    let code = i16::try_from(cmd.code)
        .map_err(|_| FrameError::Unrepresentable("code does not fit in 16 bits"))?;
    let version = i16::try_from(cmd.version)
        .map_err(|_| FrameError::Unrepresentable("version does not fit in 16 bits"))?;
    let mut ext = Vec::new();
    for (k, v) in &cmd.ext_fields {
        let kl = u16::try_from(k.len())
            .map_err(|_| FrameError::Unrepresentable("extFields key longer than 64 KiB"))?;
        let vl = i32::try_from(v.len())
            .map_err(|_| FrameError::Unrepresentable("extFields value too long"))?;
        ext.extend_from_slice(&kl.to_be_bytes());
        ext.extend_from_slice(k.as_bytes());
        ext.extend_from_slice(&vl.to_be_bytes());
        ext.extend_from_slice(v.as_bytes());
    }
    let remark = cmd.remark.as_deref().unwrap_or("").as_bytes();
    let remark_len =
        i32::try_from(remark.len()).map_err(|_| FrameError::Unrepresentable("remark too long"))?;
    let ext_len =
        i32::try_from(ext.len()).map_err(|_| FrameError::Unrepresentable("extFields too long"))?;
    let mut out = Vec::with_capacity(BINARY_FIXED_BYTES + remark.len() + ext.len());
    out.extend_from_slice(&code.to_be_bytes());
    out.push(cmd.language.raw());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&cmd.opaque.to_be_bytes());
    out.extend_from_slice(&cmd.flag.to_be_bytes());
    out.extend_from_slice(&remark_len.to_be_bytes());
    out.extend_from_slice(remark);
    out.extend_from_slice(&ext_len.to_be_bytes());
    out.extend_from_slice(&ext);
    Ok(out)
}

/// A bounds-checked reader over peer bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.buf.len() {
            return Err(FrameError::BadBinaryHeader("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn len_i32(&mut self) -> Result<usize, FrameError> {
        let n = i32::from_be_bytes(self.array()?);
        usize::try_from(n).map_err(|_| FrameError::BadBinaryHeader("negative length"))
    }

    fn utf8(&mut self, n: usize) -> Result<String, FrameError> {
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| FrameError::BadBinaryHeader("string is not UTF-8"))
    }
}

/// Parses a ROCKETMQ binary header. Zero-length strings decode as absent, like Java's null.
pub fn decode_binary_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let mut r = Reader { buf: header };
    let code = i16::from_be_bytes(r.array()?);
    let language = r.array::<1>()?[0];
    let version = i16::from_be_bytes(r.array()?);
    let opaque = i32::from_be_bytes(r.array()?);
    let flag = i32::from_be_bytes(r.array()?);
    let remark_len = r.len_i32()?;
    let remark = if remark_len == 0 {
        None
    } else {
        Some(r.utf8(remark_len)?)
    };
    let ext_len = r.len_i32()?;
    let mut ext = Reader {
        buf: r.take(ext_len)?,
    };
    let mut ext_fields = ExtFields::new();
    while !ext.buf.is_empty() {
        let kl = usize::from(u16::from_be_bytes(ext.array()?));
        let key = ext.utf8(kl)?;
        let vl = ext.len_i32()?;
        let value = ext.utf8(vl)?;
        if !key.is_empty() && !value.is_empty() {
            ext_fields.insert(key, value);
        }
    }
    Ok(RemotingCommand {
        code: i32::from(code),
        language: LanguageCode::from_raw(language),
        version: i32::from(version),
        opaque,
        flag,
        remark,
        ext_fields,
        body: Vec::new(),
        serialize_type: SerializeType::RocketMq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;

    #[test]
    fn json_header_matches_java_layout() {
        let mut cmd = RemotingCommand::request_code(RequestCode::Other(0)).with_ext("queueId", "1");
        cmd.flag = 1;
        cmd.opaque = 42;
        let text = encode_json_header(&cmd);
        assert_eq!(
            text,
            r#"{"code":0,"extFields":{"queueId":"1"},"flag":1,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}"#
        );
    }

    #[test]
    fn cpp_style_numeric_ext_values_become_strings() {
        let header = br#"{"code":10,"extFields":{"queueId":3,"batch":"0","sysFlag":0,"ok":true,"n":null},"flag":0,"language":"CPP","opaque":5,"remark":"","version":63}"#;
        let cmd = decode_json_header(header).unwrap();
        assert_eq!(cmd.ext_fields["queueId"], "3");
        assert_eq!(cmd.ext_fields["ok"], "true");
        assert!(!cmd.ext_fields.contains_key("n"));
        assert_eq!(cmd.language, LanguageCode::Cpp);
        assert_eq!(cmd.remark.as_deref(), Some(""));
    }

    #[test]
    fn binary_header_rejects_truncation_and_negative_lengths() {
        let cmd = RemotingCommand::request_code(RequestCode::HeartBeat).with_ext("k", "v");
        let bytes = encode_binary_header(&cmd).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode_binary_header(&bytes[..cut]).is_err());
        }
        let mut neg = bytes.clone();
        neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode_binary_header(&neg).unwrap_err(),
            FrameError::BadBinaryHeader("negative length")
        );
    }

    #[test]
    fn binary_header_cannot_carry_codes_beyond_i16() {
        let cmd = RemotingCommand::request_code(RequestCode::Other(40000));
        assert!(encode_binary_header(&cmd).is_err());
    }
}
