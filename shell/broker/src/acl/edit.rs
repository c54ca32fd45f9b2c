//! Changes to `plain_acl.yml` asked over the wire (RocketMQ 4.x's
//! `PlainPermissionManager.updateAccessConfig`, `deleteAccessConfig`,
//! `updateGlobalWhiteAddrsConfig`): the file is read, changed as a YAML document (keys
//! the broker does not know are kept), checked by parsing it back with the same rules
//! as at start, bumped in its `dataVersion`, and replaced atomically; the rules in force
//! are then read again. Comments do not survive, as in RocketMQ (snakeyaml drops them).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use tern_engine_fs::MetaError;
use yaml_rust2::yaml::Hash;
use yaml_rust2::{EmitError, ScanError, Yaml, YamlEmitter, YamlLoader};

use tern_shell::acl::AccessConfig;
use tern_shell::acl::guard::{Acl, RulesFileError};
use tern_shell::acl::rules::{AclConfig, RulesError};
use tern_shell::{Refusal, ResponseCode};

/// Why a change to the file was not made, or the file not read. The text is the remark
/// the admin client gets.
#[derive(Debug)]
pub enum AclEditError {
    /// Reading the file failed (other than its absence).
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// Replacing the file failed.
    Write(MetaError),
    /// The file is not YAML.
    Yaml(ScanError),
    /// The file is YAML but not a mapping.
    NotMapping(PathBuf),
    /// The file's `accounts` is not a list.
    AccountsNotList,
    /// The changed document could not be written as YAML.
    Emit(EmitError),
    /// The changed file would not load with the rules used at start.
    Rules(RulesError),
    /// No account has this access key.
    NoAccount(String),
    /// The changed file was written but the rules could not be read back from it.
    Reload(RulesFileError),
}

impl fmt::Display for AclEditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "reading {}: {error}", path.display()),
            Self::Write(e) => write!(f, "{e}"),
            Self::Yaml(e) => write!(f, "{e}"),
            Self::NotMapping(path) => write!(f, "{} is not a YAML mapping", path.display()),
            Self::AccountsNotList => f.write_str("accounts must be a list"),
            Self::Emit(e) => write!(f, "writing YAML: {e}"),
            Self::Rules(e) => write!(f, "{e}"),
            Self::NoAccount(key) => write!(f, "No acl config for {key}"),
            Self::Reload(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AclEditError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            Self::Write(e) => Some(e),
            Self::Yaml(e) => Some(e),
            Self::Emit(e) => Some(e),
            Self::Rules(e) => Some(e),
            Self::Reload(e) => Some(e),
            Self::NotMapping(_) | Self::AccountsNotList | Self::NoAccount(_) => None,
        }
    }
}

impl From<ScanError> for AclEditError {
    fn from(e: ScanError) -> Self {
        Self::Yaml(e)
    }
}

impl From<EmitError> for AclEditError {
    fn from(e: EmitError) -> Self {
        Self::Emit(e)
    }
}

impl From<RulesFileError> for AclEditError {
    fn from(e: RulesFileError) -> Self {
        Self::Reload(e)
    }
}

/// An admin request that could not change or read the file: SYSTEM_ERROR with the
/// error's text as the remark.
impl From<AclEditError> for Refusal {
    fn from(e: AclEditError) -> Self {
        Refusal::new(ResponseCode::SystemError, e.to_string())
    }
}

impl From<MetaError> for AclEditError {
    fn from(e: MetaError) -> Self {
        Self::Write(e)
    }
}

/// Runs `edit` on the file of `acl` and reads the rules again (`Acl::change`).
pub fn change(
    acl: &Acl,
    edit: impl FnOnce(&Path) -> Result<(), AclEditError>,
) -> Result<(), AclEditError> {
    acl.change(edit)
}

/// The file's version as RocketMQ keeps it in the file (`dataVersion: [{counter,
/// timestamp}]`): `(counter, timestamp)`, zeros when absent.
pub fn data_version(doc: &Yaml) -> (i64, i64) {
    let v = &doc["dataVersion"][0];
    (
        v["counter"].as_i64().unwrap_or(0),
        v["timestamp"].as_i64().unwrap_or(0),
    )
}

fn key(s: &str) -> Yaml {
    Yaml::String(s.to_owned())
}

fn strings(v: &[String]) -> Yaml {
    Yaml::Array(v.iter().map(|s| key(s)).collect())
}

/// Reads the file as a YAML mapping (an empty or missing file is an empty mapping).
pub fn read(path: &Path) -> Result<Hash, AclEditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(error) => {
            return Err(AclEditError::Read {
                path: path.to_owned(),
                error,
            });
        }
    };
    let docs = YamlLoader::load_from_str(&text)?;
    match docs.into_iter().next() {
        None | Some(Yaml::Null) => Ok(Hash::new()),
        Some(Yaml::Hash(h)) => Ok(h),
        Some(_) => Err(AclEditError::NotMapping(path.to_owned())),
    }
}

/// Checks `doc`, bumps its version and writes it over `path`.
fn write(path: &Path, mut doc: Hash, now_ms: i64) -> Result<(), AclEditError> {
    let (counter, _) = data_version(&Yaml::Hash(doc.clone()));
    let mut version = Hash::new();
    version.insert(key("counter"), Yaml::Integer(counter + 1));
    version.insert(key("timestamp"), Yaml::Integer(now_ms));
    doc.insert(key("dataVersion"), Yaml::Array(vec![Yaml::Hash(version)]));
    let doc = Yaml::Hash(doc);
    let mut text = String::new();
    YamlEmitter::new(&mut text).dump(&doc)?;
    text.push('\n');
    // The same rules as at start: a change the broker could not load is refused here.
    AclConfig::parse(&text).map_err(AclEditError::Rules)?;
    Ok(tern_engine_fs::replace_file(path, text.as_bytes())?)
}

fn accounts(doc: &mut Hash) -> Result<&mut Vec<Yaml>, AclEditError> {
    let entry = doc
        .entry(key("accounts"))
        .or_insert_with(|| Yaml::Array(Vec::new()));
    if matches!(entry, Yaml::Null | Yaml::BadValue) {
        *entry = Yaml::Array(Vec::new());
    }
    match entry {
        Yaml::Array(a) => Ok(a),
        _ => Err(AclEditError::AccountsNotList),
    }
}

fn access_key_of(a: &Yaml) -> Option<String> {
    match &a["accessKey"] {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Creates the account or updates the fields given.
pub fn update_account(path: &Path, u: &AccessConfig, now_ms: i64) -> Result<(), AclEditError> {
    let mut doc = read(path)?;
    let list = accounts(&mut doc)?;
    let existing = list
        .iter()
        .position(|a| access_key_of(a).as_deref() == Some(u.access_key.as_str()));
    let mut account = match existing {
        Some(i) => match list.remove(i) {
            Yaml::Hash(h) => h,
            _ => Hash::new(),
        },
        None => Hash::new(),
    };
    account.insert(key("accessKey"), key(&u.access_key));
    let fields = [
        ("secretKey", &u.secret_key),
        ("whiteRemoteAddress", &u.white_remote_address),
        ("defaultTopicPerm", &u.default_topic_perm),
        ("defaultGroupPerm", &u.default_group_perm),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            account.insert(key(name), key(v));
        }
    }
    account.insert(key("admin"), Yaml::Boolean(u.admin));
    for (name, value) in [
        ("topicPerms", &u.topic_perms),
        ("groupPerms", &u.group_perms),
    ] {
        if let Some(v) = value {
            account.insert(key(name), strings(v));
        }
    }
    list.push(Yaml::Hash(account));
    write(path, doc, now_ms)
}

/// Deletes the account; `Err` when there is none.
pub fn delete_account(path: &Path, access_key: &str, now_ms: i64) -> Result<(), AclEditError> {
    let mut doc = read(path)?;
    let list = accounts(&mut doc)?;
    let before = list.len();
    list.retain(|a| access_key_of(a).as_deref() != Some(access_key));
    if list.len() == before {
        return Err(AclEditError::NoAccount(access_key.to_owned()));
    }
    write(path, doc, now_ms)
}

/// Replaces the global white addresses.
pub fn set_global_white(path: &Path, addrs: &[String], now_ms: i64) -> Result<(), AclEditError> {
    let mut doc = read(path)?;
    doc.insert(key("globalWhiteRemoteAddresses"), strings(addrs));
    write(path, doc, now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_keep_unknown_keys_and_bump_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain_acl.yml");
        std::fs::write(
            &path,
            "globalWhiteRemoteAddresses:\n  - 10.0.0.*\nmine: kept\naccounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n    admin: false\n",
        )
        .unwrap();
        let u = AccessConfig {
            access_key: "newuser1".into(),
            secret_key: Some("secret99".into()),
            topic_perms: Some(vec!["T1=PUB".into()]),
            ..AccessConfig::default()
        };
        update_account(&path, &u, 5).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg = AclConfig::parse(&text).unwrap();
        assert_eq!(cfg.accounts.len(), 2);
        assert!(text.contains("mine: kept"), "{text}");
        let doc = YamlLoader::load_from_str(&text).unwrap().remove(0);
        assert_eq!(data_version(&doc), (1, 5));
        // An update changes only what it names.
        let u = AccessConfig {
            access_key: "RocketMQ".into(),
            admin: true,
            ..AccessConfig::default()
        };
        update_account(&path, &u, 6).unwrap();
        let cfg = AclConfig::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(cfg.accounts["RocketMQ"].admin);
        assert_eq!(cfg.accounts["RocketMQ"].secret_key, "12345678");
        // What the broker could not load is refused and the file is left as it was.
        let bad = AccessConfig {
            access_key: "short".into(),
            secret_key: Some("x".into()),
            ..AccessConfig::default()
        };
        assert!(update_account(&path, &bad, 7).is_err());
        delete_account(&path, "newuser1", 8).unwrap();
        assert!(delete_account(&path, "newuser1", 9).is_err());
        set_global_white(&path, &["192.168.*".into()], 10).unwrap();
        let cfg = AclConfig::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!((cfg.accounts.len(), cfg.global_white.len()), (1, 1));
    }
}
