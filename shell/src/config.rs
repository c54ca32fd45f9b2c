//! RocketMQ-style configuration shared by the name server and the broker.
//!
//! RocketMQ configures its processes with Java `.properties` files (`broker.conf`,
//! `namesrv.conf`) plus a few command-line flags. Operators carry those files over, so we
//! read the same syntax, warn about keys we do not know (their file may set options Tern
//! lacks) instead of refusing to start, and fail on values we cannot use, naming the key
//! and where it was set: a typo in a port must not start a broker on the default port.
//!
//! Two layers:
//! * [`ConfigSource`]: raw `key → value` with each value's [`Origin`] (file and line, or
//!   flag). Built by [`ConfigSource::parse_properties`] / [`ConfigSource::load_file`] and
//!   overridden by [`ConfigSource::set`] for flags.
//! * [`Config`] + [`ConfigReader`]: a binary declares its keys by reading them with
//!   defaults ([`ConfigReader::get`]); [`load`] then reports unknown keys as warnings and
//!   keeps the effective value of every known key for `-p` ([`Loaded::render`]).
//!
//! The unit test `a_binary_declares_its_keys_by_reading_them` (`config/tests.rs`) is the
//! whole use in a dozen lines: a name server's two keys, a file, the warning, `-p`'s text.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// Largest config file we read; real ones are a few KiB.
const MAX_CONFIG_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Where a value came from, so an error can send the operator to the right line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A properties file (as named on the command line) and its 1-based line.
    File {
        /// The file name as given (not canonicalised: it is what the operator typed).
        name: String,
        /// Line of the key (the first line of a continued entry).
        line: u32,
    },
    /// A command-line flag such as `--listen`.
    Flag(String),
    /// Set by the program itself (e.g. derived from another option).
    Program,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { name, line } => write!(f, "{name}:{line}"),
            Self::Flag(flag) => write!(f, "flag {flag}"),
            Self::Program => f.write_str("program"),
        }
    }
}

/// One raw value and where it was set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value with escapes resolved and surrounding whitespace trimmed.
    pub value: String,
    /// Where it was set.
    pub origin: Origin,
}

/// Raw configuration: key → last value set, with origins. Later settings win, as in Java's
/// `Properties.load` and as flags overriding the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSource {
    entries: BTreeMap<String, Entry>,
    /// Notes gathered while parsing (duplicate keys), reported with the unknown-key warnings.
    notes: Vec<String>,
}

/// A configuration problem: which key, where it was set, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key (empty for file-level errors such as an unreadable file).
    pub key: String,
    /// Where the bad value was set (`None` for file-level errors).
    pub origin: Option<Origin>,
    /// What is wrong, e.g. `invalid port 'abc'`.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigSource {
    /// An empty source (every key takes its default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a properties file; `path` as given is the name used in origins.
    pub fn load_file(path: &Path) -> Result<Self, ConfigError> {
        let text = read_config_file(path)?;
        Ok(Self::parse_properties(&text, &path.display().to_string()))
    }

    /// Reads a JSON file of one object (RocketMQ's proxy reads `rmq-proxy.json`).
    pub fn load_json_file(path: &Path) -> Result<Self, ConfigError> {
        let text = read_config_file(path)?;
        Self::parse_json(&text, &path.display().to_string())
    }

    /// Parses a JSON object of keys: a string is its value as written, a number or a
    /// boolean its JSON text, and an object or array its JSON text too (a key such as
    /// `innerClientAuthenticationCredentials` holds JSON). Each origin is the line where
    /// the key first appears. Unlike properties, text that is not a JSON object fails.
    pub fn parse_json(text: &str, name: &str) -> Result<Self, ConfigError> {
        let fail = |message: String| ConfigError {
            key: String::new(),
            origin: None,
            message: format!("{name}: {message}"),
        };
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?;
        let serde_json::Value::Object(map) = value else {
            return Err(fail("not a JSON object of keys".into()));
        };
        let mut src = Self::new();
        for (key, v) in map {
            let value = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => continue,
                other => other.to_string(),
            };
            let at = text.find(&format!("\"{key}\"")).unwrap_or(0);
            let line = text[..at].matches('\n').count() + 1;
            let origin = Origin::File {
                name: name.to_owned(),
                line: u32::try_from(line).unwrap_or(u32::MAX),
            };
            src.set(key, value, origin);
        }
        Ok(src)
    }

    /// Parses Java properties text: `#`/`!` comments, blank lines, `key=value`,
    /// `key: value` and `key value`, `\` line continuation, `\t \n \r \f \uXXXX` escapes.
    /// Never fails: like Java, a line without a separator is a key with an empty value.
    pub fn parse_properties(text: &str, name: &str) -> Self {
        let mut src = Self::new();
        let mut lines = text.lines().enumerate().peekable();
        while let Some((idx, first)) = lines.next() {
            let line_no = u32::try_from(idx + 1).unwrap_or(u32::MAX);
            let trimmed = first.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
                continue;
            }
            // Join continued lines: an odd number of trailing backslashes continues.
            let mut logical = String::from(trimmed);
            while ends_with_continuation(&logical) {
                logical.pop();
                match lines.next() {
                    Some((_, next)) => logical.push_str(next.trim_start()),
                    None => break,
                }
            }
            let (key, value) = split_key_value(&logical);
            if key.is_empty() {
                continue;
            }
            let origin = Origin::File {
                name: name.to_owned(),
                line: line_no,
            };
            src.set(key, value.trim().to_owned(), origin);
        }
        src
    }

    /// Sets `key`, replacing an earlier value (a flag overriding the file, or a later line).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>, origin: Origin) {
        let key = key.into();
        let entry = Entry {
            value: value.into(),
            origin,
        };
        if let Some(old) = self.entries.insert(key.clone(), entry) {
            let new_origin = &self.entries[&key].origin;
            // A flag overriding the file is intended; two lines of one file are a likely slip.
            if matches!(
                (&old.origin, new_origin),
                (Origin::File { name: a, .. }, Origin::File { name: b, .. }) if a == b
            ) {
                self.notes.push(format!(
                    "{new_origin}: key '{key}' also set at {}; the later value wins",
                    old.origin
                ));
            }
        }
    }

    /// Copies every entry of `other` over this source (later layers win).
    pub fn merge(&mut self, other: ConfigSource) {
        for (k, e) in other.entries {
            self.set(k, e.value, e.origin);
        }
        self.notes.extend(other.notes);
    }

    /// The entry for `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// All entries, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, e)| (k.as_str(), e))
    }

    /// Number of keys set.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no key is set.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn ends_with_continuation(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace (Java's rule), skipping
/// whitespace around the separator, and resolves escapes in both parts.
fn split_key_value(line: &str) -> (String, String) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\u{c}' => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(chars.len());
    let mut v = key_end;
    while v < chars.len() && matches!(chars[v], ' ' | '\t' | '\u{c}') {
        v += 1;
    }
    if v < chars.len() && matches!(chars[v], '=' | ':') {
        v += 1;
        while v < chars.len() && matches!(chars[v], ' ' | '\t' | '\u{c}') {
            v += 1;
        }
    }
    (unescape(&chars[..key_end]), unescape(&chars[v..]))
}

fn unescape(chars: &[char]) -> String {
    let mut out = String::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(&e) = chars.get(i) else { break };
        i += 1;
        match e {
            't' => out.push('\t'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            'f' => out.push('\u{c}'),
            'u' => {
                let hex: String = chars.iter().skip(i).take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) if hex.len() == 4 => {
                        out.push(ch);
                        i += 4;
                    }
                    // Java throws on a malformed \u; we keep the text so the value's own
                    // parser reports it with key and line.
                    _ => out.push_str("\\u"),
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// A value type a config key can have: parsed from the raw string, rendered for `-p`.
pub trait ConfigValue: Sized {
    /// What the value should be, for errors: `invalid {KIND} 'abc'`.
    const KIND: &'static str;
    /// Parses the trimmed raw value; `Err` carries an optional detail ("expected one of ...").
    fn parse_value(raw: &str) -> Result<Self, String>;
    /// The form `-p` prints; must parse back to the same value.
    fn render_value(&self) -> String;
}

macro_rules! int_value {
    ($($t:ty => $kind:literal),*) => {$(
        impl ConfigValue for $t {
            const KIND: &'static str = $kind;
            fn parse_value(raw: &str) -> Result<Self, String> {
                // Java's parsers do not accept '_' or '+'; neither do we, beyond Rust's rules.
                raw.parse().map_err(|_| String::new())
            }
            fn render_value(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

int_value!(u16 => "u16", u32 => "u32", u64 => "u64", i32 => "i32", i64 => "i64", usize => "usize");

impl ConfigValue for bool {
    const KIND: &'static str = "boolean";
    /// `true`/`false` in any case (what RocketMQ files use), and `1`/`0`.
    fn parse_value(raw: &str) -> Result<Self, String> {
        if raw.eq_ignore_ascii_case("true") || raw == "1" {
            Ok(true)
        } else if raw.eq_ignore_ascii_case("false") || raw == "0" {
            Ok(false)
        } else {
            Err("expected true or false".into())
        }
    }
    fn render_value(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for String {
    const KIND: &'static str = "string";
    fn parse_value(raw: &str) -> Result<Self, String> {
        Ok(raw.to_owned())
    }
    fn render_value(&self) -> String {
        self.clone()
    }
}

impl ConfigValue for PathBuf {
    const KIND: &'static str = "path";
    fn parse_value(raw: &str) -> Result<Self, String> {
        if raw.is_empty() {
            return Err("empty path".into());
        }
        Ok(PathBuf::from(raw))
    }
    fn render_value(&self) -> String {
        self.display().to_string()
    }
}

/// A list separated by `;` or `,` (RocketMQ's `namesrvAddr` uses `;`); items are trimmed
/// and empty items dropped. Rendered with `;`.
impl ConfigValue for Vec<String> {
    const KIND: &'static str = "list";
    fn parse_value(raw: &str) -> Result<Self, String> {
        Ok(raw
            .split([';', ','])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect())
    }
    fn render_value(&self) -> String {
        self.join(";")
    }
}

/// Declares an enum config value written by name (case-insensitive on input), e.g.
/// `config_enum! { pub enum FlushDiskType { Async = "ASYNC_FLUSH", Sync = "SYNC_FLUSH" } }`.
#[macro_export]
macro_rules! config_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name { $( $(#[$vmeta])* $variant, )+ }

        impl $crate::config::ConfigValue for $name {
            const KIND: &'static str = stringify!($name);
            fn parse_value(raw: &str) -> Result<Self, String> {
                $( if raw.eq_ignore_ascii_case($text) { return Ok(Self::$variant); } )+
                Err(concat!("expected one of" $(, " ", $text)+).to_string())
            }
            fn render_value(&self) -> String {
                match self { $( Self::$variant => $text.to_string(), )+ }
            }
        }
    };
}

/// A check for an address key (`namesrvAddr`, `haMasterAddress`): `host:port`.
pub fn check_host_port(a: &str) -> Result<(), String> {
    match a.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!("'{a}' is not host:port")),
    }
}

/// A configuration a binary reads: its keys and their defaults, declared in `read`.
pub trait Config: Sized {
    /// Reads every known key through `r` (each call declares the key as known).
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError>;
}

/// A check for [`ConfigReader::get_checked`]: the value lies in `lo..=hi` (the error
/// names the range).
pub fn in_range<T: PartialOrd + fmt::Display>(
    lo: T,
    hi: T,
) -> impl FnOnce(&T) -> Result<(), String> {
    move |v| {
        if *v >= lo && *v <= hi {
            Ok(())
        } else {
            Err(format!("{v} is outside {lo}..{hi}"))
        }
    }
}

/// Reads typed values out of a [`ConfigSource`], remembering which keys are known and
/// their effective values.
#[derive(Debug)]
pub struct ConfigReader<'a> {
    source: &'a ConfigSource,
    effective: BTreeMap<String, String>,
    known: BTreeSet<String>,
}

impl<'a> ConfigReader<'a> {
    /// A reader over `source`.
    pub fn new(source: &'a ConfigSource) -> Self {
        Self {
            source,
            effective: BTreeMap::new(),
            known: BTreeSet::new(),
        }
    }

    /// The value of `key`, or `default` when it is not set.
    pub fn get<T: ConfigValue>(&mut self, key: &str, default: T) -> Result<T, ConfigError> {
        let v = self.read_as(key, T::KIND)?.unwrap_or(default);
        self.record(key, &v);
        Ok(v)
    }

    /// Like [`get`](Self::get) for a TCP port (0 means "any free port", used by tests).
    pub fn port(&mut self, key: &str, default: u16) -> Result<u16, ConfigError> {
        let v = self.read_as(key, "port")?.unwrap_or(default);
        self.record(key, &v);
        Ok(v)
    }

    /// An optional value with no default (`-p` prints `key=` when absent).
    pub fn get_opt<T: ConfigValue>(&mut self, key: &str) -> Result<Option<T>, ConfigError> {
        let v = self.read_as(key, T::KIND)?;
        let shown = v.as_ref().map(T::render_value).unwrap_or_default();
        self.effective.insert(key.to_owned(), shown);
        Ok(v)
    }

    /// Like [`get`](Self::get), then checks `valid`; `Err(why)` becomes an error naming
    /// the key and its origin (e.g. an interval that must be positive).
    pub fn get_checked<T: ConfigValue>(
        &mut self,
        key: &str,
        default: T,
        valid: impl FnOnce(&T) -> Result<(), String>,
    ) -> Result<T, ConfigError> {
        let v = self.get(key, default)?;
        valid(&v).map_err(|message| self.error(key, message))?;
        Ok(v)
    }

    /// An error about `key`'s value, naming where it was set: for checks that span
    /// several keys, made after reading them.
    pub fn error(&self, key: &str, message: String) -> ConfigError {
        ConfigError {
            key: key.to_owned(),
            origin: self.source.get(key).map(|e| e.origin.clone()),
            message,
        }
    }

    /// Declares `key` as known with an effective value the binary computed itself (e.g. a
    /// path derived from `--home`), so `-p` shows it and it is not warned about.
    pub fn record(&mut self, key: &str, value: &impl ConfigValue) {
        self.known.insert(key.to_owned());
        self.effective.insert(key.to_owned(), value.render_value());
    }

    /// The effective value of every key read so far, rendered as `-p` prints it: what a
    /// broker answers GET_BROKER_CONFIG with.
    pub fn effective(&self) -> &BTreeMap<String, String> {
        &self.effective
    }

    /// Declares `key` as known but deliberately ignored (a RocketMQ option that has no
    /// meaning in Tern): no warning, and `-p` does not show it.
    pub fn ignore(&mut self, key: &str) {
        self.known.insert(key.to_owned());
    }

    fn read_as<T: ConfigValue>(&mut self, key: &str, kind: &str) -> Result<Option<T>, ConfigError> {
        self.known.insert(key.to_owned());
        let Some(entry) = self.source.get(key) else {
            return Ok(None);
        };
        T::parse_value(&entry.value).map(Some).map_err(|detail| {
            let mut message = format!("invalid {kind} '{}'", entry.value);
            if !detail.is_empty() {
                message.push_str(": ");
                message.push_str(&detail);
            }
            ConfigError {
                key: key.to_owned(),
                origin: Some(entry.origin.clone()),
                message,
            }
        })
    }

    fn finish(self) -> (BTreeMap<String, String>, Vec<String>) {
        let mut warnings = self.source.notes.clone();
        for (key, entry) in self.source.iter() {
            if !self.known.contains(key) {
                warnings.push(format!("{}: unknown key '{key}' ignored", entry.origin));
            }
        }
        (self.effective, warnings)
    }
}

/// A loaded configuration with what `-p` and the startup log need.
#[derive(Debug, Clone)]
pub struct Loaded<C> {
    /// The typed configuration.
    pub config: C,
    /// Unknown keys and duplicate keys, each naming its origin: log them, do not fail.
    pub warnings: Vec<String>,
    /// Effective `key → value` of every known key, sorted.
    pub effective: BTreeMap<String, String>,
}

impl<C> Loaded<C> {
    /// The effective configuration as sorted `key=value` lines (what `-p` prints).
    pub fn render(&self) -> String {
        self.effective
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }
}

/// Reads `C` from `source`: the first invalid value is an error; unknown keys are warnings.
pub fn load<C: Config>(source: &ConfigSource) -> Result<Loaded<C>, ConfigError> {
    let mut reader = ConfigReader::new(source);
    let config = C::read(&mut reader)?;
    let (effective, warnings) = reader.finish();
    Ok(Loaded {
        config,
        warnings,
        effective,
    })
}

/// A config file's text, bounded in size. Java reads properties as ISO-8859-1; UTF-8
/// files are the common case today, and any byte sequence still yields text rather than a
/// refusal.
fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    let file_error = |message: String| ConfigError {
        key: String::new(),
        origin: None,
        message,
    };
    let meta = std::fs::metadata(path)
        .map_err(|e| file_error(format!("cannot read {}: {e}", path.display())))?;
    if meta.len() > MAX_CONFIG_FILE_BYTES {
        return Err(file_error(format!(
            "{} is larger than {MAX_CONFIG_FILE_BYTES} bytes",
            path.display()
        )));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| file_error(format!("cannot read {}: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;
