//! Access control (`aclEnable=true`): RocketMQ 4.x's plain ACL, checked before every
//! request is processed.
//!
//! The order is RocketMQ's: a global white address passes; otherwise the request must
//! name a known account (`AccessKey`); the account's white address passes; otherwise its
//! `Signature` must match (see [`tern_shell::acl`]); then admin requests need an admin
//! account, and each topic and group the request touches needs the permission the
//! request family needs (sends PUB the topic, pulls SUB the topic and the group …), from
//! the account's lists or else its defaults. A refusal answers NO_PERMISSION (16) with
//! a remark worded as RocketMQ's exceptions are (RocketMQ 4.x answers SYSTEM_ERROR).
//!
//! The file is read at start (a bad file stops the broker) and read again when it
//! changes; a bad edit keeps the previous rules and is logged.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tern_shell::RemotingCommand;
use tern_shell::body::{HeartbeatData, from_json};
use tern_shell::code::RequestCode;
use tern_shell::runtime;

pub mod config;
pub mod edit;

use config::{AclConfig, GROUP_PREFIX, perm};

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
}

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

fn load(path: &Path) -> Result<AclConfig, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    AclConfig::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

impl Acl {
    /// Reads the rules from `path`.
    pub fn open(path: &Path) -> Result<Acl, String> {
        let stamped = stamp(path);
        let rules = load(path)?;
        log::info!(
            "ACL on: {} account(s), {} global white address pattern(s) from {}",
            rules.accounts.len(),
            rules.global_white.len(),
            path.display()
        );
        Ok(Acl {
            path: path.to_owned(),
            rules: RwLock::new((Arc::new(rules), stamped)),
            editing: std::sync::Mutex::new(()),
        })
    }

    /// The file the rules come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes one change to the file (an [`edit`] function given the path) and puts the
    /// new rules in force before returning; changes run one at a time.
    pub fn change(&self, f: impl FnOnce(&Path) -> Result<(), String>) -> Result<(), String> {
        let _one = self.editing.lock().unwrap_or_else(|p| p.into_inner());
        f(&self.path)?;
        let rules = load(&self.path)?;
        *self.rules.write().unwrap_or_else(|p| p.into_inner()) =
            (Arc::new(rules), stamp(&self.path));
        log::info!(
            "ACL rules changed by an admin request ({})",
            self.path.display()
        );
        Ok(())
    }

    fn rules(&self) -> Arc<AclConfig> {
        self.rules
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// Reads the file again if it changed since the last read.
    pub fn reload_if_changed(&self) {
        let now = stamp(&self.path);
        if now == self.rules.read().unwrap_or_else(|p| p.into_inner()).1 {
            return;
        }
        let mut w = self.rules.write().unwrap_or_else(|p| p.into_inner());
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

    /// Whether `req` from `peer` may be processed; `Err` is the refusal's remark.
    pub fn check(&self, req: &RemotingCommand, peer: IpAddr) -> Result<(), String> {
        let rules = self.rules();
        if rules.global_white.iter().any(|p| p.admits(peer)) {
            return Ok(());
        }
        let ext = &req.ext_fields;
        let Some(ak) = ext.get(tern_shell::acl::ACCESS_KEY) else {
            return Err("No accessKey is configured".into());
        };
        let Some(account) = rules.accounts.get(ak) else {
            return Err(format!("No acl config for {ak}"));
        };
        if account.white.admits(peer) {
            return Ok(());
        }
        let want = tern_shell::acl::signature(ext, &req.body, &account.secret_key);
        if ext.get(tern_shell::acl::SIGNATURE) != Some(&want) {
            return Err(format!("Check signature failed for accessKey={ak}"));
        }
        let code = req.request_code_enum();
        if needs_admin(code) && !account.admin {
            return Err(format!(
                "Need admin permission for request code={}, but accessKey={ak} is not admin",
                req.code
            ));
        }
        let needed = resources(req)?;
        if account.admin && account.perms.is_empty() {
            return Ok(());
        }
        for (resource, need) in needed {
            let group = resource.starts_with(GROUP_PREFIX);
            let owned = account.perms.get(&resource).copied().unwrap_or(if group {
                account.default_group_perm
            } else {
                account.default_topic_perm
            });
            if !perm::grants(need, owned) {
                let what = match resource.strip_prefix(GROUP_PREFIX) {
                    Some(g) => format!("group {g}"),
                    None => format!("topic {resource}"),
                };
                return Err(format!("No permission for {what} (accessKey={ak})"));
            }
        }
        Ok(())
    }
}

/// RocketMQ's admin-only requests.
fn needs_admin(code: RequestCode) -> bool {
    matches!(
        code,
        RequestCode::UpdateAndCreateTopic
            | RequestCode::UpdateBrokerConfig
            | RequestCode::DeleteTopicInBroker
            | RequestCode::UpdateAndCreateSubscriptionGroup
            | RequestCode::DeleteSubscriptionGroup
            | RequestCode::UpdateAndCreateAclConfig
            | RequestCode::DeleteAclConfig
            | RequestCode::UpdateGlobalWhiteAddrsConfig
            | RequestCode::GetBrokerClusterAclConfig
    )
}

fn group(g: &str) -> String {
    format!("{GROUP_PREFIX}{g}")
}

/// A topic sent to: a retry topic is its group's (SUB), any other is PUB.
fn sent_to(topic: &str) -> (String, u8) {
    if topic.starts_with(GROUP_PREFIX) {
        (topic.to_owned(), perm::SUB)
    } else {
        (topic.to_owned(), perm::PUB)
    }
}

/// The topics and groups a request touches and the permission each needs (RocketMQ's
/// `PlainAccessResource.parse`; batch sends and lite pulls are checked like sends and
/// pulls, which RocketMQ 4.x leaves unchecked).
fn resources(req: &RemotingCommand) -> Result<Vec<(String, u8)>, String> {
    let get = |k: &str| req.ext_fields.get(k).map(String::as_str);
    let mut out = Vec::new();
    match req.request_code_enum() {
        RequestCode::SendMessage => out.extend(get("topic").map(sent_to)),
        RequestCode::SendMessageV2 | RequestCode::SendBatchMessage => {
            out.extend(get("b").or(get("topic")).map(sent_to));
        }
        RequestCode::ConsumerSendMsgBack => {
            out.extend(get("group").map(|g| (group(g), perm::SUB)));
            out.extend(get("originTopic").map(|t| (t.to_owned(), perm::PUB)));
        }
        RequestCode::PullMessage | RequestCode::LitePullMessage => {
            out.extend(get("topic").map(|t| (t.to_owned(), perm::SUB)));
            out.extend(get("consumerGroup").map(|g| (group(g), perm::SUB)));
        }
        RequestCode::QueryMessage => out.extend(get("topic").map(|t| (t.to_owned(), perm::SUB))),
        RequestCode::HeartBeat => {
            let hb: HeartbeatData =
                from_json(&req.body).map_err(|e| format!("heartbeat body: {e}"))?;
            for c in hb.consumer_data_set {
                out.push((group(&c.group_name), perm::SUB));
                for s in c.subscription_data_set {
                    out.push((s.topic, perm::SUB));
                }
            }
        }
        RequestCode::UnregisterClient | RequestCode::GetConsumerListByGroup => {
            out.extend(get("consumerGroup").map(|g| (group(g), perm::SUB)));
        }
        RequestCode::UpdateConsumerOffset => {
            out.extend(get("consumerGroup").map(|g| (group(g), perm::SUB)));
            out.extend(get("topic").map(|t| (t.to_owned(), perm::SUB)));
        }
        _ => {}
    }
    Ok(out)
}
