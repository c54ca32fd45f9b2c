//! A tiny `log` backend writing one line per record to stderr, so the binaries need no
//! logging framework: `<unix-seconds.millis> <LEVEL> <target>: <message>`.
//!
//! The level comes from `--log-level`, else `RUST_LOG` (a bare level such as `debug`;
//! `module=level` filters are not supported and fall back to `info`).

use std::io::Write;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLogger {
    level: LevelFilter,
}

/// Libraries whose info records are step-by-step traces (openraft logs every vote and
/// replication change at info): shown from `debug` on.
const CHATTY_TARGETS: [&str; 1] = ["openraft"];

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        let level = match metadata.level() {
            Level::Info
                if CHATTY_TARGETS
                    .iter()
                    .any(|t| metadata.target().starts_with(t)) =>
            {
                Level::Debug
            }
            l => l,
        };
        level <= self.level
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // One write per line so concurrent records do not interleave mid-line.
        let line = format!(
            "{}.{:03} {:<5} {}: {}\n",
            now.as_secs(),
            now.subsec_millis(),
            record.level(),
            record.target(),
            record.args()
        );
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// Parses a level name (`error`, `warn`, `info`, `debug`, `trace`, `off`), any case.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    LevelFilter::from_str(s.trim()).ok()
}

/// The level from `RUST_LOG` when it is a bare level, else `info`.
pub fn level_from_env() -> LevelFilter {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| parse_level(&v))
        .unwrap_or(LevelFilter::Info)
}

/// Installs the stderr logger; a second call (another logger already set) is ignored.
pub fn init(level: LevelFilter) {
    // Leaked once per process: the logger must live as long as the program.
    let logger: &'static StderrLogger = Box::leak(Box::new(StderrLogger { level }));
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

/// Installs the logger at the level `--log-level` names, else from `RUST_LOG`; an unknown
/// name is an error for the caller to report as a usage error.
pub fn init_from_flag(flag: Option<&str>) -> Result<(), String> {
    let level = match flag {
        Some(l) => parse_level(l).ok_or_else(|| format!("--log-level: unknown level '{l}'"))?,
        None => level_from_env(),
    };
    init(level);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_names_parse_in_any_case() {
        assert_eq!(parse_level("DEBUG"), Some(LevelFilter::Debug));
        assert_eq!(parse_level(" warn "), Some(LevelFilter::Warn));
        assert_eq!(parse_level("tern=debug"), None);
    }
}
