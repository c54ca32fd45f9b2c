//! The headers real clients send, read in one pass without serde.
//!
//! Java's fastjson, the C++ client's jsoncpp and Go's encoder all write a flat object:
//! integer `code`/`flag`/`opaque`/`version`, a string `language`, a string or null
//! `remark`, `serializeTypeCurrentRPC`, and `extFields` whose values are strings (the C++
//! client writes a few as integers or booleans). Read through serde's visitors such a
//! header cost ~7% of the broker's CPU at 16 sync senders: a dynamic dispatch a token,
//! and the properties string (escaped: its separators are control characters) decoded
//! through serde_json's general string path. This reader takes that shape and nothing
//! else; anything outside it (a float, a nested value, a numeric string where an integer
//! goes, an unknown member, a surrogate escape, bad JSON) answers `None` and the caller
//! decodes the header with the full decoder, which also words every error. So on what it
//! accepts it must answer exactly as the full decoder does: `tests.rs` holds it to the
//! same reference, on every header its property tests generate.

use std::borrow::Cow;

use super::Fields;
use crate::code::LanguageCode;
use crate::ext_fields::CompactString;
use crate::frame::{ExtFields, RemotingCommand};

/// Decodes `text` when it has the plain shape; `None` sends it to the full decoder.
pub(super) fn decode_plain(text: &str) -> Option<RemotingCommand> {
    let mut r = Reader { text, at: 0 };
    let mut cmd = Fields::empty();
    r.members(|r| {
        let key = r.string()?;
        r.colon()?;
        match &*key {
            "code" => cmd.code = Some(Ok(r.int_or_null()?)),
            "version" => cmd.version = Some(Ok(r.int_or_null()?)),
            "opaque" => cmd.opaque = Some(Ok(r.int_or_null()?)),
            "flag" => cmd.flag = Some(Ok(r.int_or_null()?)),
            "language" => cmd.language = Some(LanguageCode::from_name(&r.string()?)),
            "remark" => cmd.remark = r.string_or_null()?.map(Cow::into_owned),
            "extFields" => cmd.ext_fields = Ok(r.ext_fields()?),
            "serializeTypeCurrentRPC" => {
                r.string()?;
            }
            _ => return None,
        }
        Some(())
    })?;
    r.ws();
    // Every value read is one the full decoder accepts too, so this cannot fail.
    (r.at == text.len()).then(|| cmd.into_command().ok())?
}

/// A cursor over the header's bytes; it keeps the `str` they came from, so a slice between
/// two ASCII delimiters is a `str` without a second UTF-8 check.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    /// The header's bytes, which the cursor indexes.
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes().get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.at).copied()
    }

    /// Consumes `open`, which must come next.
    fn open(&mut self, open: u8) -> Option<()> {
        (self.peek()? == open).then(|| self.at += 1)
    }

    /// An object, `member` reading each of its members (key, colon and value).
    fn members(&mut self, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.open(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            member(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn colon(&mut self) -> Option<()> {
        self.open(b':')
    }

    /// Consumes `w` when it comes at the cursor.
    fn word(&mut self, w: &[u8]) -> bool {
        let found = self.bytes()[self.at..].starts_with(w);
        if found {
            self.at += w.len();
        }
        found
    }

    /// `null`, consumed, when it comes next. Anything else starting with `n` is bad JSON,
    /// which the value read in its place then refuses.
    fn null(&mut self) -> bool {
        self.ws();
        self.word(b"null")
    }

    /// A string literal, borrowed unless it holds an escape.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.open(b'"')?;
        let start = self.at;
        loop {
            match *self.bytes().get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(Cow::Borrowed(&self.text[start..self.at - 1]));
                }
                b'\\' => break,
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
        let mut out = String::with_capacity(self.at - start + 16);
        let mut plain = start;
        loop {
            match *self.bytes().get(self.at)? {
                b'"' => {
                    out.push_str(&self.text[plain..self.at]);
                    self.at += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    out.push_str(&self.text[plain..self.at]);
                    out.push(self.escape()?);
                    plain = self.at;
                }
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    /// The escape at the cursor (its backslash included), as the character it stands for.
    /// A surrogate (`\ud83d`…, half of a pair or alone) is left to the full decoder.
    fn escape(&mut self) -> Option<char> {
        let c = match *self.bytes().get(self.at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hex = self.bytes().get(self.at + 2..self.at + 6)?;
                let mut code = 0u32;
                for &h in hex {
                    code = code * 16 + char::from(h).to_digit(16)?;
                }
                self.at += 4;
                char::from_u32(code)?
            }
            _ => return None,
        };
        self.at += 2;
        Some(c)
    }

    fn string_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null() {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// An integer literal that fits in an `i64`, as its text (which is then the text
    /// `i64`'s `Display` writes: JSON allows no leading zeros, and `-0`, which serde_json
    /// reads as the float -0.0, is left to the full decoder).
    fn integer(&mut self) -> Option<(&'a str, i64)> {
        self.ws();
        let start = self.at;
        if self.bytes().get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        let digits = self.at;
        while self.bytes().get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        let n = self.at - digits;
        // A leading zero is `0` alone; a fraction or an exponent makes it a float; past
        // `i64` (serde_json's `u64` or float) the full decoder words it.
        if n == 0 || n > 19 || (self.bytes()[digits] == b'0' && n > 1) {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.bytes().get(self.at) {
            return None;
        }
        let text = &self.text[start..self.at];
        if text == "-0" {
            return None;
        }
        text.parse().ok().map(|v| (text, v))
    }

    /// `code`, `flag`, `opaque`, `version`: an integer that fits in an `i32`, or null (0).
    fn int_or_null(&mut self) -> Option<i32> {
        if self.null() {
            return Some(0);
        }
        i32::try_from(self.integer()?.1).ok()
    }

    /// `extFields`: an object of strings (integers and booleans kept as their text, null
    /// absent), or null.
    fn ext_fields(&mut self) -> Option<ExtFields> {
        if self.null() {
            return Some(ExtFields::new());
        }
        let mut read = Vec::with_capacity(16);
        self.members(|r| {
            let key = CompactString::from(r.string()?);
            r.colon()?;
            let value = match r.peek()? {
                b'"' => Some(CompactString::from(r.string()?)),
                // Null is absent (Java's null).
                b'n' if r.word(b"null") => None,
                b't' if r.word(b"true") => Some(CompactString::const_new("true")),
                b'f' if r.word(b"false") => Some(CompactString::const_new("false")),
                // An integer, or bad JSON (`n` that is not `null`…) it refuses.
                _ => Some(CompactString::from(r.integer()?.0)),
            };
            read.push((key, value));
            Some(())
        })?;
        Some(ExtFields::from_wire(read))
    }
}
