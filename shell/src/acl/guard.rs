//! The rules in force on a server (`aclEnable=true`): read from `plain_acl.yml`, followed
//! when the file changes, and the check every request passes before it is processed.
//!
//! Authentication is RocketMQ's order: a global white address passes; otherwise the
//! request must name a known account (`AccessKey`); the account's white address passes;
//! otherwise its `Signature` must match (compared in constant time) and, with a replay
//! window, its signing time must be recent and its signature new. What passes is an
//! [`Access`]: what the caller may then do is asked of it per resource, by the server
//! that knows which resources a request touches (the broker's and the name server's
//! rules differ).
//!
//! The file is read at start (a bad file stops the server) and read again when it
//! changes; a bad edit keeps the previous rules and is logged.

use crate::sync::{MutexExt, RwLockExt};
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::AclRefusal;
use super::replay::ReplayWindow;
use super::rules::{AclConfig, GROUP_PREFIX, RulesError, perm};
use crate::frame::RemotingCommand;
use crate::runtime;

/// How often the file is looked at for changes.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A file's modification time and length: a change of either means "read it again".
type Stamp = Option<(SystemTime, u64)>;

/// The rules in force and where they come from.
#[derive(Debug)]
pub struct Acl {
    path: PathBuf,
    rules: RwLock<(Arc<AclConfig>, Stamp)>,
    /// Held for the whole of a change of the file, so changes do not interleave.
    editing: std::sync::Mutex<()>,
    /// Signatures seen lately, when signed requests must be fresh and used once.
    replay: Option<ReplayWindow>,
}

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Why the rules file cannot be put in force: at start (the server stops), after an
/// admin's change (the change is answered with it) or on a reload (the previous rules
/// stay, and it is logged).
#[derive(Debug)]
pub enum RulesFileError {
    /// The file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// The file's rules are wrong.
    Rules {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        error: RulesError,
    },
}

impl fmt::Display for RulesFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "reading {}: {error}", path.display()),
            Self::Rules { path, error } => write!(f, "{}: {error}", path.display()),
        }
    }
}

impl std::error::Error for RulesFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            Self::Rules { error, .. } => Some(error),
        }
    }
}

fn load(path: &Path) -> Result<AclConfig, RulesFileError> {
    let text = std::fs::read_to_string(path).map_err(|error| RulesFileError::Read {
        path: path.to_owned(),
        error,
    })?;
    AclConfig::parse(&text).map_err(|error| RulesFileError::Rules {
        path: path.to_owned(),
        error,
    })
}

/// What an authenticated request may do.
#[derive(Debug, Clone)]
pub enum Access {
    /// Everything: a white address (global or the account's), as in RocketMQ.
    Trusted,
    /// What this account's rules grant.
    Account {
        /// The rules it was checked against.
        rules: Arc<AclConfig>,
        /// The account.
        access_key: String,
    },
}

impl Access {
    /// The account, when the request was signed by one.
    pub fn access_key(&self) -> Option<&str> {
        match self {
            Access::Trusted => None,
            Access::Account { access_key, .. } => Some(access_key),
        }
    }

    fn account(&self) -> Option<(&super::rules::Account, &str)> {
        match self {
            Access::Trusted => None,
            Access::Account { rules, access_key } => rules
                .accounts
                .get(access_key)
                .map(|a| (a, access_key.as_str())),
        }
    }

    /// Whether the caller is an admin (or trusted); `Err` says why not.
    pub fn require_admin(&self, code: i32) -> Result<(), AclRefusal> {
        match self.account() {
            None => Ok(()),
            Some((a, _)) if a.admin => Ok(()),
            Some((_, ak)) => Err(AclRefusal::NotAdmin {
                code,
                access_key: ak.to_owned(),
            }),
        }
    }

    /// Whether the caller holds `need` (a [`perm`] bit) on `resource`: a topic, or a
    /// group written `%RETRY%group` (see [`group`]). An admin account with no resource
    /// permissions listed may do everything, as in RocketMQ.
    pub fn require(&self, resource: &str, need: u8) -> Result<(), AclRefusal> {
        let Some((account, ak)) = self.account() else {
            return Ok(());
        };
        if account.admin && account.perms.is_empty() {
            return Ok(());
        }
        let is_group = resource.starts_with(GROUP_PREFIX);
        let owned = account.perms.get(resource).copied().unwrap_or(if is_group {
            account.default_group_perm
        } else {
            account.default_topic_perm
        });
        if perm::grants(need, owned) {
            return Ok(());
        }
        Err(AclRefusal::NoPermission {
            resource: resource.to_owned(),
            access_key: ak.to_owned(),
        })
    }
}

/// A group as the resource [`Access::require`] checks: its retry topic.
pub fn group(g: &str) -> String {
    format!("{GROUP_PREFIX}{g}")
}

impl Acl {
    /// Reads the rules from `path`; `replay_window` (when not zero) makes signed
    /// requests carry a signing time within it of now, each signature used once.
    pub fn open(path: &Path, replay_window: Duration) -> Result<Acl, RulesFileError> {
        let stamped = stamp(path);
        let rules = load(path)?;
        log::info!(
            "ACL on: {} account(s), {} global white address pattern(s) from {}{}",
            rules.accounts.len(),
            rules.global_white.len(),
            path.display(),
            if replay_window.is_zero() {
                String::new()
            } else {
                format!(", replay window {} s", replay_window.as_secs_f64())
            }
        );
        Ok(Acl {
            path: path.to_owned(),
            rules: RwLock::new((Arc::new(rules), stamped)),
            editing: std::sync::Mutex::new(()),
            replay: (!replay_window.is_zero()).then(|| ReplayWindow::new(replay_window)),
        })
    }

    /// The file the rules come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes one change to the file (`f` is given the path) and puts the new rules in
    /// force before returning; changes run one at a time. `Err` is `f`'s error, or why
    /// the changed file cannot be read back.
    pub fn change<E: From<RulesFileError>>(
        &self,
        f: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<(), E> {
        let _one = self.editing.guard();
        f(&self.path)?;
        let rules = load(&self.path)?;
        *self.rules.write_guard() = (Arc::new(rules), stamp(&self.path));
        log::info!(
            "ACL rules changed by an admin request ({})",
            self.path.display()
        );
        Ok(())
    }

    /// The rules now.
    pub fn rules(&self) -> Arc<AclConfig> {
        self.rules.read_guard().0.clone()
    }

    /// Reads the file again if it changed since the last read.
    pub fn reload_if_changed(&self) {
        let now = stamp(&self.path);
        if now == self.rules.read_guard().1 {
            return;
        }
        let mut w = self.rules.write_guard();
        w.1 = now;
        match load(&self.path) {
            Ok(rules) => {
                log::info!("ACL rules reloaded from {}", self.path.display());
                w.0 = Arc::new(rules);
            }
            Err(e) => log::error!("ACL rules not reloaded, the previous ones stay: {e}"),
        }
    }

    /// Follows the file until `shutdown`.
    pub async fn run_reload(self: Arc<Self>, shutdown: runtime::Shutdown) {
        while !shutdown.is_triggered() {
            let _ = runtime::race(runtime::sleep(RELOAD_CHECK), shutdown.wait()).await;
            self.reload_if_changed();
        }
    }

    /// Who sent `req` from `peer`, as far as the rules can tell; `Err` says why it is
    /// refused. Permissions are asked of the answer.
    pub fn authenticate(&self, req: &RemotingCommand, peer: IpAddr) -> Result<Access, AclRefusal> {
        let rules = self.rules();
        if rules.global_white.iter().any(|p| p.admits(peer)) {
            return Ok(Access::Trusted);
        }
        let ext = &req.ext_fields;
        let Some(ak) = ext.get(super::ACCESS_KEY) else {
            return Err(AclRefusal::NoAccessKey);
        };
        let Some(account) = rules.accounts.get(ak) else {
            return Err(AclRefusal::NoAccount(ak.to_owned()));
        };
        if account.white.admits(peer) {
            return Ok(Access::Trusted);
        }
        let sent = ext.get(super::SIGNATURE).unwrap_or("");
        if !super::verify(ext, &req.body, &account.secret_key, sent) {
            return Err(AclRefusal::BadSignature(ak.to_owned()));
        }
        if let Some(window) = &self.replay {
            let ts = ext.get(super::TIMESTAMP);
            window.admit(ts, sent, super::now_ms())?;
        }
        Ok(Access::Account {
            access_key: ak.to_owned(),
            rules,
        })
    }

    /// Who sent a RocketMQ 5.x gRPC call from `peer`: `access_key` (the `Credential` of
    /// its `authorization` metadata, `None` when it sent none) and `sent`, the
    /// HMAC-SHA1 tag of `content` (the `x-mq-date-time` value) under the account's secret
    /// key. The same order as [`Acl::authenticate`]: a global white address, the account,
    /// its white address, then the tag, compared in constant time.
    pub fn authenticate_tag(
        &self,
        access_key: Option<&str>,
        content: &[u8],
        sent: &[u8],
        peer: IpAddr,
    ) -> Result<Access, AclRefusal> {
        let rules = self.rules();
        if rules.global_white.iter().any(|p| p.admits(peer)) {
            return Ok(Access::Trusted);
        }
        let Some(ak) = access_key.filter(|a| !a.is_empty()) else {
            return Err(AclRefusal::NoAccessKey);
        };
        let Some(account) = rules.accounts.get(ak) else {
            return Err(AclRefusal::NoAccount(ak.to_owned()));
        };
        if account.white.admits(peer) {
            return Ok(Access::Trusted);
        }
        if !super::verify_tag(&account.secret_key, &[content], sent) {
            return Err(AclRefusal::BadSignature(ak.to_owned()));
        }
        Ok(Access::Account {
            access_key: ak.to_owned(),
            rules,
        })
    }
}
