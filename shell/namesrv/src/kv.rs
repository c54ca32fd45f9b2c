//! The KV config store: namespace → key → value, set by admin tools (`updateKvConfig`,
//! order-topic config), persisted in RocketMQ's `kvConfig.json` shape so a Java name
//! server's file can be used as is.
//!
//! Persistence is written here rather than with `engine::meta` because the file is JSON,
//! not postcard: each change writes `kvConfig.json.tmp`, fsyncs it, copies the current file
//! to `kvConfig.json.bak` (Java's `MixAll.string2File` keeps the same backup), renames the
//! temp file over the current one and fsyncs the directory. A change is acknowledged only
//! after that, so an acknowledged PUT survives a crash; load falls back to the `.bak` when
//! the current file is missing or torn.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tern_shell::sync::MutexExt;

use tern_shell::body::{KvConfigSerializeWrapper, KvTable, from_json, to_json};

/// Largest kvConfig.json we load.
const MAX_KV_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why the store could not be loaded or saved.
#[derive(Debug)]
pub enum KvError {
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// Neither the file nor its backup holds a valid table.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, error } => write!(f, "{}: {error}", path.display()),
            Self::Corrupt { path, reason } => {
                write!(f, "{}: not a kvConfig table: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for KvError {}

/// The KV store; one mutex serialises changes and their writes to disk.
#[derive(Debug)]
pub struct KvStore {
    path: PathBuf,
    table: Mutex<BTreeMap<String, BTreeMap<String, String>>>,
}

type Table = BTreeMap<String, BTreeMap<String, String>>;

impl KvStore {
    /// Loads `path` (or its `.bak`); a missing file is an empty store. A file that exists
    /// but cannot be parsed, with no usable backup, is an error: starting empty would
    /// overwrite the operator's data on the next change.
    pub fn open(path: &Path) -> Result<Self, KvError> {
        let table = match read_table(path)? {
            Ok(Some(t)) => t,
            main => {
                let bak = backup_path(path);
                if let Ok(Some(t)) = read_table(&bak)? {
                    log::warn!(
                        "{}: missing or unreadable; loaded {}",
                        path.display(),
                        bak.display()
                    );
                    t
                } else if let Err(reason) = main {
                    return Err(KvError::Corrupt {
                        path: path.to_owned(),
                        reason,
                    });
                } else {
                    Table::new()
                }
            }
        };
        log::info!("kv config {}: {} namespaces", path.display(), table.len());
        Ok(Self {
            path: path.to_owned(),
            table: Mutex::new(table),
        })
    }

    /// The file the store persists to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.guard()
    }

    /// Sets a value and persists; on a write error the change is rolled back.
    pub fn put(&self, namespace: &str, key: &str, value: &str) -> Result<(), KvError> {
        let mut t = self.lock();
        let old = t
            .entry(namespace.to_owned())
            .or_default()
            .insert(key.to_owned(), value.to_owned());
        if let Err(e) = self.persist(&t) {
            let ns = t.entry(namespace.to_owned()).or_default();
            match old {
                Some(v) => {
                    ns.insert(key.to_owned(), v);
                }
                None => {
                    ns.remove(key);
                    if ns.is_empty() {
                        t.remove(namespace);
                    }
                }
            }
            return Err(e);
        }
        log::info!("kv put {namespace} {key}={value}");
        Ok(())
    }

    /// The value of `namespace`/`key`.
    pub fn get(&self, namespace: &str, key: &str) -> Option<String> {
        self.lock().get(namespace)?.get(key).cloned()
    }

    /// Every entry of `namespace`, or `None` if it has none.
    pub fn list(&self, namespace: &str) -> Option<KvTable> {
        let t = self.lock();
        let ns = t.get(namespace).filter(|m| !m.is_empty())?;
        Some(KvTable { table: ns.clone() })
    }

    /// Removes a value and persists (removing an absent key is not an error, as in Java).
    pub fn delete(&self, namespace: &str, key: &str) -> Result<(), KvError> {
        let mut t = self.lock();
        let Some(ns) = t.get_mut(namespace) else {
            return Ok(());
        };
        let Some(old) = ns.remove(key) else {
            return Ok(());
        };
        let emptied = ns.is_empty();
        if emptied {
            t.remove(namespace);
        }
        if let Err(e) = self.persist(&t) {
            t.entry(namespace.to_owned())
                .or_default()
                .insert(key.to_owned(), old);
            return Err(e);
        }
        log::info!("kv delete {namespace} {key}");
        Ok(())
    }

    fn persist(&self, table: &Table) -> Result<(), KvError> {
        let body = KvConfigSerializeWrapper {
            config_table: table.clone(),
        };
        write_atomically(&self.path, &to_json(&body))
    }
}

fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".bak");
    PathBuf::from(s)
}

/// `Ok(Ok(None))` missing, `Ok(Err(_))` present but unparsable, `Err` unreadable.
fn read_table(path: &Path) -> Result<Result<Option<Table>, String>, KvError> {
    let io = |error| KvError::Io {
        path: path.to_owned(),
        error,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ok(None)),
        Err(e) => return Err(io(e)),
    };
    if meta.len() > MAX_KV_FILE_BYTES {
        return Ok(Err(format!("larger than {MAX_KV_FILE_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    Ok(from_json::<KvConfigSerializeWrapper>(&bytes)
        .map(|w| Some(w.config_table))
        .map_err(|e| e.to_string()))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), KvError> {
    let io = |p: &Path| {
        let p = p.to_owned();
        move |error| KvError::Io { path: p, error }
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    if path.exists() {
        let bak = backup_path(path);
        std::fs::copy(path, &bak).map_err(io(&bak))?;
    }
    std::fs::rename(&tmp, path).map_err(io(path))?;
    // Make the rename itself durable. Directories cannot be opened for sync everywhere;
    // where they can't, the rename is as durable as the platform allows.
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_survive_reopen_in_java_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("namesrv/kvConfig.json");
        let kv = KvStore::open(&path).unwrap();
        kv.put("ORDER_TOPIC_CONFIG", "T", "b:4").unwrap();
        kv.put("ns", "k", "v").unwrap();
        kv.delete("ns", "k").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            r#"{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"b:4"}}}"#
        );
        let again = KvStore::open(&path).unwrap();
        assert_eq!(again.get("ORDER_TOPIC_CONFIG", "T").as_deref(), Some("b:4"));
        assert_eq!(again.get("ns", "k"), None);
        assert!(again.list("ns").is_none());
    }

    #[test]
    fn torn_file_falls_back_to_backup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kvConfig.json");
        let kv = KvStore::open(&path).unwrap();
        kv.put("a", "k", "1").unwrap();
        kv.put("a", "k", "2").unwrap();
        std::fs::write(&path, b"{\"configTable\":{\"a\"").unwrap();
        let again = KvStore::open(&path).unwrap();
        assert_eq!(again.get("a", "k").as_deref(), Some("1"));
    }

    #[test]
    fn corrupt_file_without_backup_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kvConfig.json");
        std::fs::write(&path, b"garbage").unwrap();
        assert!(matches!(KvStore::open(&path), Err(KvError::Corrupt { .. })));
    }

    #[test]
    fn failed_write_rolls_back_the_change() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("home");
        let kv = KvStore::open(&sub.join("kvConfig.json")).unwrap();
        // The home turns into a regular file: nothing can be written under it (even as root).
        std::fs::write(&sub, b"x").unwrap();
        assert!(kv.put("a", "k", "v").is_err());
        assert_eq!(kv.get("a", "k"), None);
    }
}
