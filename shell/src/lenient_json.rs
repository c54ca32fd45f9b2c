//! A JSON reader as lenient as fastjson, and a writer that produces fastjson's forms.
//!
//! Java peers and RocketMQ's config files contain JSON that standard parsers reject:
//! unquoted numeric map keys (`{0:"10.0.0.1:10911"}`) and object map keys
//! (`{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}`) (wire-protocol.md §3.1).
//! The reader turns such keys into strings: an unquoted key keeps its text, an object or
//! array key becomes its compact JSON text. The writer does the reverse for keys that the
//! body types mark with [`NUM_KEY`] or [`RAW_KEY`].

use serde_json::{Map, Number, Value};

/// Deepest nesting accepted; deeper input is an error, not a stack overflow.
pub const MAX_DEPTH: usize = 128;

/// Prefix of a map key holding an integer that fastjson writes unquoted.
pub const NUM_KEY: char = '\u{0}';
/// Prefix of a map key holding compact JSON that fastjson writes as is (object keys).
pub const RAW_KEY: char = '\u{1}';

/// Why lenient parsing failed, with the byte position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset in the input.
    pub at: usize,
    /// What was wrong.
    pub what: &'static str,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for JsonError {}

/// Parses one JSON value (with fastjson's extensions) from `input`; trailing whitespace only.
pub fn parse(input: &[u8]) -> Result<Value, JsonError> {
    let mut p = Parser { s: input, i: 0 };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> JsonError {
        JsonError { at: self.i, what }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, b: u8, what: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(q @ (b'"' | b'\'')) => self.string(q).map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => self.word(),
            None => Err(self.err("unexpected end")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.i += 1;
        let mut map = Map::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.ws();
            let key = self.key(depth)?;
            self.ws();
            self.expect(b':', "expected ':'")?;
            self.ws();
            let v = self.value(depth + 1)?;
            map.insert(key, v);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    /// A map key: quoted string, bare word/number (fastjson), or an object/array key.
    fn key(&mut self, depth: usize) -> Result<String, JsonError> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string(q),
            Some(b'{' | b'[') => {
                let v = self.value(depth + 1)?;
                Ok(v.to_string())
            }
            Some(_) => {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'-' | b'.' | b'+'))
                {
                    self.i += 1;
                }
                if start == self.i {
                    return Err(self.err("expected a key"));
                }
                let text = self.s.get(start..self.i).unwrap_or_default();
                Ok(String::from_utf8_lossy(text).into_owned())
            }
            None => Err(self.err("unexpected end")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn string(&mut self, quote: u8) -> Result<String, JsonError> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                c if c == quote => break,
                b'\\' => {
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'\'' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let ch = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("string is not UTF-8"))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .s
            .get(self.i..self.i + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let text = std::str::from_utf8(digits).map_err(|_| self.err("bad \\u escape"))?;
        let n = u32::from_str_radix(text, 16).map_err(|_| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(n)
    }

    /// Decodes `\uXXXX`, pairing surrogates; a lone surrogate becomes U+FFFD like Java would print.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) && self.s.get(self.i..self.i + 2) == Some(b"\\u") {
            let save = self.i;
            self.i += 2;
            let lo = self.hex4()?;
            if (0xDC00..0xE000).contains(&lo) {
                let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                return Ok(char::from_u32(c).unwrap_or('\u{FFFD}'));
            }
            self.i = save;
        }
        Ok(char::from_u32(hi).unwrap_or('\u{FFFD}'))
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.i;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.i += 1;
        }
        // fastjson may suffix longs/floats with L/F/D; tolerate it.
        if matches!(self.peek(), Some(b'L' | b'F' | b'D')) {
            self.i += 1;
        }
        let text = self.s.get(start..self.i).unwrap_or_default();
        let text = std::str::from_utf8(text).map_err(|_| self.err("bad number"))?;
        let text = text.trim_end_matches(['L', 'F', 'D']);
        if let Ok(n) = text.parse::<i64>() {
            return Ok(Value::Number(n.into()));
        }
        if let Ok(n) = text.parse::<u64>() {
            return Ok(Value::Number(n.into()));
        }
        text.parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or(JsonError {
                at: start,
                what: "bad number",
            })
    }

    fn word(&mut self) -> Result<Value, JsonError> {
        for (w, v) in [
            ("true", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("null", Value::Null),
        ] {
            if self.s.get(self.i..self.i + w.len()) == Some(w.as_bytes()) {
                self.i += w.len();
                return Ok(v);
            }
        }
        Err(self.err("unexpected character"))
    }
}

/// Key style of numeric-keyed maps in output (§3.1, §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyStyle {
    /// fastjson default: `{0:"a"}`. What Java brokers and old name servers send.
    #[default]
    Fastjson,
    /// Standard JSON: `{"0":"a"}`. Name servers use it for clients with version ≥ 401.
    Standard,
}

/// Writes `v` as compact JSON, honouring [`NUM_KEY`]/[`RAW_KEY`] markers and dropping
/// null object members (fastjson omits nulls).
pub fn write(v: &Value, style: KeyStyle) -> String {
    let mut out = String::new();
    write_into(&mut out, v, style);
    out
}

fn write_into(out: &mut String, v: &Value, style: KeyStyle) {
    match v {
        Value::Object(map) => {
            out.push('{');
            let mut first = true;
            for (k, v) in map {
                if v.is_null() {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                write_key(out, k, style);
                out.push(':');
                write_into(out, v, style);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_into(out, item, style);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_key(out: &mut String, key: &str, style: KeyStyle) {
    if let Some(num) = key.strip_prefix(NUM_KEY) {
        if num.parse::<i64>().is_ok() {
            match style {
                KeyStyle::Fastjson => out.push_str(num),
                KeyStyle::Standard => crate::serialize::push_json_str(out, num),
            }
            return;
        }
    }
    if let Some(raw) = key.strip_prefix(RAW_KEY) {
        // Only re-emit raw text that is a JSON object we can read back: never inject peer text.
        if let Ok(v @ Value::Object(_)) = parse(raw.as_bytes()) {
            write_into(out, &v, style);
            return;
        }
    }
    crate::serialize::push_json_str(out, key);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_unquoted_numeric_keys() {
        let v = parse(br#"{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}"#).unwrap();
        assert_eq!(v["brokerAddrs"]["1"], "10.0.0.2:10911");
    }

    #[test]
    fn reads_object_keys_as_their_json_text() {
        let v = parse(
            br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"brokerOffset":5}}}"#,
        )
        .unwrap();
        let (k, val) = v["offsetTable"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(k, r#"{"brokerName":"b","queueId":0,"topic":"t"}"#);
        assert_eq!(val["brokerOffset"], 5);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = "[".repeat(100_000);
        assert_eq!(parse(deep.as_bytes()).unwrap_err().what, "nesting too deep");
    }

    #[test]
    fn standard_json_parses_like_serde_json() {
        let text =
            br#"{"a":[1,-2.5,"x\u00e9\ud83d\ude00",true,null],"b":{"c":18446744073709551615}}"#;
        assert_eq!(
            parse(text).unwrap(),
            serde_json::from_slice::<Value>(text).unwrap()
        );
    }

    #[test]
    fn writer_emits_fastjson_keys_or_standard_keys() {
        let mut m = Map::new();
        m.insert(format!("{NUM_KEY}0"), Value::from("a"));
        m.insert(format!("{RAW_KEY}{{\"queueId\":1}}"), Value::from(2));
        m.insert("n".into(), Value::Null);
        let v = Value::Object(m);
        assert_eq!(write(&v, KeyStyle::Fastjson), r#"{0:"a",{"queueId":1}:2}"#);
        assert_eq!(
            write(&v, KeyStyle::Standard),
            r#"{"0":"a",{"queueId":1}:2}"#
        );
    }

    #[test]
    fn writer_refuses_to_inject_bad_raw_keys() {
        let mut m = Map::new();
        m.insert(format!("{RAW_KEY}}}]"), Value::from(1));
        m.insert(format!("{NUM_KEY}x"), Value::from(1));
        let text = write(&Value::Object(m), KeyStyle::Fastjson);
        assert!(serde_json::from_str::<Value>(&text).is_ok(), "{text}");
    }
}
