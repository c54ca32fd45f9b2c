//! The configuration of a running broker: what GET_BROKER_CONFIG answers, and the keys
//! UPDATE_BROKER_CONFIG may change while it runs.
//!
//! RocketMQ sets any field by reflection and writes every key back to the `-c` file;
//! many of those fields are read only at start, so the update is accepted and does
//! nothing until a restart. Tern changes only the keys whose readers look at them on
//! every use ([`LIVE_KEYS`]) and refuses the others by name, so an answer of SUCCESS
//! means the broker now behaves so. A change is checked by the very reader the start
//! uses, written into the `-c` file (only the lines of the changed keys; comments and
//! the rest stay), and only then applied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicU32, AtomicU64, Ordering};
use tern_shell::sync::MutexExt;

use tern_shell::IoCause;
use tern_shell::config::{ConfigSource, Origin, load};

use super::BrokerConfig;

/// The keys that take effect at once when changed, and what reads them.
pub const LIVE_KEYS: &[&str] = &[
    // Registration (topic perms ANDed with it) and the pull check.
    "brokerPermission",
    // The group table, on every pull, heartbeat and POP of an unknown group.
    "autoCreateSubscriptionGroup",
    // Retention and the transaction check, on every pass.
    "fileReservedTime",
    "deleteWhen",
    "diskMaxUsedSpaceRatio",
    "diskSpaceCleanForciblyRatio",
    "diskSpaceWarningLevelRatio",
];

/// Keys no update may touch: RocketMQ's black list (`configBlackList`'s default plus
/// the two AdminBrokerProcessor always adds).
const BLACK_LIST: &[&str] = &["brokerConfigPath", "rocketmqHome", "configBlackList"];

/// Why an update was refused. Nothing of a refused update is applied or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateError {
    /// A black-listed key (RocketMQ answers NO_PERMISSION).
    BlackListed(String),
    /// A key Tern reads only at start.
    NotLive(String),
    /// A key Tern does not read at all.
    Unknown(String),
    /// A value the start-up reader refuses (its message names key and value).
    Invalid(String),
    /// The `-c` file could not be rewritten.
    Persist(PersistError),
}

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // RocketMQ's remark.
            Self::BlackListed(_) => f.write_str("Can not update config in black list."),
            Self::NotLive(k) => write!(
                f,
                "the key {k} is read only at start in this broker (Tern): set it in \
                 broker.conf and restart; keys that change at run time: {}",
                LIVE_KEYS.join(", ")
            ),
            Self::Unknown(k) => write!(f, "the key {k} is not a configuration key of this broker"),
            Self::Invalid(e) => write!(f, "{e}"),
            Self::Persist(e) => write!(f, "the change was not applied: {e}"),
        }
    }
}

impl std::error::Error for UpdateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Persist(e) => Some(e),
            Self::BlackListed(_) | Self::NotLive(_) | Self::Unknown(_) | Self::Invalid(_) => None,
        }
    }
}

/// Why the `-c` file was not rewritten: the step, the file and the io error (kept as the
/// source; shared and compared by kind, so [`UpdateError`] stays `Clone` and `Eq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistError {
    /// What failed.
    pub step: PersistStep,
    /// The file it failed on: the `-c` file, or the temporary one written beside it.
    pub path: PathBuf,
    /// The io error.
    pub cause: IoCause,
}

/// The steps of rewriting the `-c` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistStep {
    /// Reading the file as it is.
    Read,
    /// Writing the new text to the temporary file.
    Write,
    /// Renaming the temporary file over the file.
    Replace,
}

impl PersistError {
    fn at(step: PersistStep, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |e| Self {
            step,
            path,
            cause: e.into(),
        }
    }
}

impl std::fmt::Display for PersistError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match self.step {
            PersistStep::Read => "read",
            PersistStep::Write => "write",
            PersistStep::Replace => "replace",
        };
        write!(
            f,
            "cannot {step} {}: {}",
            self.path.display(),
            self.cause.io()
        )
    }
}

impl std::error::Error for PersistError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.cause.io())
    }
}

/// The keys' current values; the rest of [`BrokerConfig`] never changes after start.
#[derive(Debug)]
pub struct LiveConfig {
    /// Every key's effective value, the live ones kept current.
    effective: Mutex<BTreeMap<String, String>>,
    /// Where changes are written (`brokerConfigPath`).
    path: Option<std::path::PathBuf>,
    broker_permission: AtomicI32,
    file_reserved_hours: AtomicU64,
    /// Hours of `deleteWhen` as bits 0..23.
    delete_hours: AtomicU32,
    disk_max_used_ratio: AtomicU8,
    disk_clean_forcibly_ratio: AtomicU8,
    disk_refuse_ratio: AtomicU8,
}

/// `key=value` lines of the keys that have a value, sorted.
pub fn render(effective: &BTreeMap<String, String>) -> String {
    effective
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect()
}

fn hour_mask(hours: &[u8]) -> u32 {
    hours
        .iter()
        .filter(|h| **h < 24)
        .fold(0, |m, h| m | (1 << h))
}

impl LiveConfig {
    /// The values `config` started with.
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            effective: Mutex::new(config.effective.clone()),
            path: config.config_path.clone(),
            broker_permission: AtomicI32::new(config.broker_permission),
            file_reserved_hours: AtomicU64::new(config.file_reserved_hours),
            delete_hours: AtomicU32::new(hour_mask(&config.delete_when)),
            disk_max_used_ratio: AtomicU8::new(config.disk_max_used_ratio),
            disk_clean_forcibly_ratio: AtomicU8::new(config.disk_clean_forcibly_ratio),
            disk_refuse_ratio: AtomicU8::new(config.disk_refuse_ratio),
        }
    }

    /// `brokerPermission` now.
    pub fn broker_permission(&self) -> i32 {
        self.broker_permission.load(Ordering::Relaxed)
    }

    /// `fileReservedTime` now, in hours.
    pub fn file_reserved_hours(&self) -> u64 {
        self.file_reserved_hours.load(Ordering::Relaxed)
    }

    /// True when `deleteWhen` names `hour`.
    pub fn delete_at(&self, hour: u8) -> bool {
        hour < 24 && self.delete_hours.load(Ordering::Relaxed) & (1 << hour) != 0
    }

    /// `diskMaxUsedSpaceRatio` now (percent).
    pub fn disk_max_used_ratio(&self) -> u8 {
        self.disk_max_used_ratio.load(Ordering::Relaxed)
    }

    /// `diskSpaceCleanForciblyRatio` now (percent).
    pub fn disk_clean_forcibly_ratio(&self) -> u8 {
        self.disk_clean_forcibly_ratio.load(Ordering::Relaxed)
    }

    /// `diskSpaceWarningLevelRatio` now (percent).
    pub fn disk_refuse_ratio(&self) -> u8 {
        self.disk_refuse_ratio.load(Ordering::Relaxed)
    }

    /// The effective configuration as `key=value` lines (GET_BROKER_CONFIG's body).
    pub fn render(&self) -> String {
        render(&self.effective.guard())
    }

    /// Applies `body` (Java properties text, as mqadmin sends it). Every key must be
    /// live and every value valid, or nothing changes. On success returns the new
    /// configuration (for the owners of other live values, such as the group table) and
    /// the keys changed.
    pub fn update(&self, body: &str) -> Result<(BrokerConfig, Vec<String>), UpdateError> {
        let asked = ConfigSource::parse_properties(body, "updateBrokerConfig");
        let mut effective = self.effective.guard();
        let mut keys = Vec::new();
        for (key, _) in asked.iter() {
            if BLACK_LIST.contains(&key) {
                return Err(UpdateError::BlackListed(key.to_owned()));
            }
        }
        for (key, _) in asked.iter() {
            if !effective.contains_key(key) {
                return Err(UpdateError::Unknown(key.to_owned()));
            }
            if !LIVE_KEYS.contains(&key) {
                return Err(UpdateError::NotLive(key.to_owned()));
            }
            keys.push(key.to_owned());
        }
        // The running values with the change over them, through the start-up reader: a
        // value it refuses at start is refused here, with the same message.
        let mut source = ConfigSource::new();
        for (k, v) in effective.iter().filter(|(_, v)| !v.is_empty()) {
            source.set(k.clone(), v.clone(), Origin::Program);
        }
        for (k, e) in asked.iter() {
            source.set(
                k,
                e.value.clone(),
                Origin::Flag("updateBrokerConfig".into()),
            );
        }
        let loaded =
            load::<BrokerConfig>(&source).map_err(|e| UpdateError::Invalid(e.to_string()))?;
        let changed: Vec<(String, String)> = keys
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    loaded.effective.get(k).cloned().unwrap_or_default(),
                )
            })
            .collect();
        if let Some(path) = &self.path {
            write_back(path, &changed).map_err(UpdateError::Persist)?;
        }
        let c = &loaded.config;
        self.broker_permission
            .store(c.broker_permission, Ordering::Relaxed);
        self.file_reserved_hours
            .store(c.file_reserved_hours, Ordering::Relaxed);
        self.delete_hours
            .store(hour_mask(&c.delete_when), Ordering::Relaxed);
        self.disk_max_used_ratio
            .store(c.disk_max_used_ratio, Ordering::Relaxed);
        self.disk_clean_forcibly_ratio
            .store(c.disk_clean_forcibly_ratio, Ordering::Relaxed);
        self.disk_refuse_ratio
            .store(c.disk_refuse_ratio, Ordering::Relaxed);
        for (k, v) in changed {
            effective.insert(k, v);
        }
        Ok((loaded.config, keys))
    }

    /// True when changes are written to a file a restart reads.
    pub fn persisted(&self) -> bool {
        self.path.is_some()
    }
}

/// Sets `changed` in the properties file at `path`: the line that sets a key now sets
/// the new value (a continued entry loses its continuation lines), a key the file lacks
/// is appended, every other line is kept. Written to a temporary file, then renamed.
fn write_back(path: &Path, changed: &[(String, String)]) -> Result<(), PersistError> {
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(PersistError::at(PersistStep::Read, path)(e)),
    };
    let current = ConfigSource::parse_properties(&text, "file");
    let mut lines: Vec<Option<String>> = text.lines().map(|l| Some(l.to_owned())).collect();
    let mut appended = String::new();
    for (key, value) in changed {
        let line = format!("{key}={value}");
        match current.get(key).map(|e| &e.origin) {
            Some(Origin::File { line: n, .. }) if *n as usize <= lines.len() => {
                let at = *n as usize - 1;
                // Continuation lines of the old entry go with it.
                let mut i = at;
                while lines[i]
                    .as_deref()
                    .is_some_and(|l| l.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1)
                    && i + 1 < lines.len()
                {
                    i += 1;
                    lines[i] = None;
                }
                lines[at] = Some(line);
            }
            _ => {
                appended.push_str(&line);
                appended.push('\n');
            }
        }
    }
    let mut out: String = lines.into_iter().flatten().map(|l| l + "\n").collect();
    out.push_str(&appended);
    let tmp = path.with_extension("conf.tmp");
    std::fs::write(&tmp, out).map_err(PersistError::at(PersistStep::Write, &tmp))?;
    std::fs::rename(&tmp, path).map_err(PersistError::at(PersistStep::Replace, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(text: &str) -> LiveConfig {
        let src = ConfigSource::parse_properties(text, "broker.conf");
        LiveConfig::new(&load::<BrokerConfig>(&src).unwrap().config)
    }

    #[test]
    fn live_keys_change_and_start_only_keys_are_refused_by_name() {
        let l = live("brokerRole=ASYNC_MASTER\n");
        assert_eq!(l.broker_permission(), 6);
        let (_, keys) = l
            .update("brokerPermission=4\nfileReservedTime=12\ndeleteWhen=03;15\n")
            .unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(l.broker_permission(), 4);
        assert_eq!(l.file_reserved_hours(), 12);
        assert!(l.delete_at(3) && l.delete_at(15) && !l.delete_at(4));
        let shown = l.render();
        assert!(shown.contains("brokerPermission=4\n"), "{shown}");
        assert!(shown.contains("deleteWhen=03;15\n"), "{shown}");
        assert!(shown.contains("brokerRole=ASYNC_MASTER\n"), "{shown}");
        // One bad key refuses the whole update.
        let e = l.update("fileReservedTime=1\nlistenPort=1\n").unwrap_err();
        assert_eq!(e, UpdateError::NotLive("listenPort".into()));
        assert!(e.to_string().contains("listenPort"), "{e}");
        assert_eq!(l.file_reserved_hours(), 12);
        assert_eq!(
            l.update("brokerConfigPath=/x\n").unwrap_err(),
            UpdateError::BlackListed("brokerConfigPath".into())
        );
        assert_eq!(
            l.update("noSuchKey=1\n").unwrap_err(),
            UpdateError::Unknown("noSuchKey".into())
        );
        let e = l.update("brokerPermission=9\n").unwrap_err().to_string();
        assert!(e.contains("brokerPermission") && e.contains('9'), "{e}");
        let e = l
            .update("diskMaxUsedSpaceRatio=abc\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("diskMaxUsedSpaceRatio"), "{e}");
        assert_eq!(l.broker_permission(), 4);
    }

    #[test]
    fn write_back_replaces_the_keys_line_keeps_the_rest_and_appends_new_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("broker.conf");
        std::fs::write(
            &path,
            "# my broker\nbrokerName=b1\nfileReservedTime = 48\ndeleteWhen=01;\\\n  02\nlistenPort=10911\n",
        )
        .unwrap();
        write_back(
            &path,
            &[
                ("fileReservedTime".into(), "6".into()),
                ("deleteWhen".into(), "05".into()),
                ("brokerPermission".into(), "4".into()),
            ],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# my broker\nbrokerName=b1\nfileReservedTime=6\ndeleteWhen=05\nlistenPort=10911\nbrokerPermission=4\n"
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_refuses_the_update_with_its_io_error() {
        use std::error::Error;
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: read fails, and the update with it.
        let path = dir.path().join("broker.conf");
        std::fs::create_dir(&path).unwrap();
        let e = write_back(&path, &[("fileReservedTime".into(), "6".into())]).unwrap_err();
        assert_eq!(e.step, PersistStep::Read);
        let shown = UpdateError::Persist(e.clone()).to_string();
        assert!(
            shown.starts_with(&format!(
                "the change was not applied: cannot read {}: ",
                path.display()
            )),
            "{shown}"
        );
        let io = UpdateError::Persist(e.clone());
        let io = io.source().and_then(|s| s.source());
        assert!(io.is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some()));
        assert_eq!(UpdateError::Persist(e.clone()), UpdateError::Persist(e));
    }
}
