//! The keys that turn access control on, the same on the broker and the name server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::guard::Acl;
use crate::config::{ConfigError, ConfigReader, in_range};

/// Access control settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclSettings {
    /// Check every request against the plain ACL rules (`aclEnable`).
    pub enable: bool,
    /// The rules: `plain_acl.yml` (`plainAclFile`, Tern's key; RocketMQ reads
    /// `$ROCKETMQ_HOME/conf/plain_acl.yml`, the default here too).
    pub file: PathBuf,
    /// Signed requests must carry a signing time this close to now, and each signature
    /// is accepted once (`aclReplayWindowSeconds`, Tern's key; 0, the default, is off:
    /// RocketMQ's clients sign no time).
    pub replay_window: Duration,
}

impl Default for AclSettings {
    /// Off, with RocketMQ's file.
    fn default() -> Self {
        let home = std::env::var_os("ROCKETMQ_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        Self {
            enable: false,
            file: home.join("conf").join("plain_acl.yml"),
            replay_window: Duration::ZERO,
        }
    }
}

impl AclSettings {
    /// Reads the keys.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            enable: r.get("aclEnable", d.enable)?,
            file: r.get("plainAclFile", d.file)?,
            replay_window: Duration::from_secs(r.get_checked(
                "aclReplayWindowSeconds",
                0u64,
                in_range(0, 86_400),
            )?),
        })
    }

    /// The rules in force, when access control is on; `Err` says why the file cannot be
    /// used (the server must not start without the rules it was told to enforce).
    pub fn open(&self) -> Result<Option<Arc<Acl>>, String> {
        if !self.enable {
            return Ok(None);
        }
        Acl::open(&self.file, self.replay_window)
            .map(|a| Some(Arc::new(a)))
            .map_err(|e| format!("aclEnable=true but the ACL rules cannot be used: {e}"))
    }
}

/// `innerClientAuthenticationCredentials`: the JSON `{"accessKey":…,"secretKey":…}`;
/// how a broker (and a proxy) signs its own requests to other servers. Shown by `-p` and
/// GET_BROKER_CONFIG with the secret masked.
pub fn inner_credentials(
    r: &mut ConfigReader<'_>,
) -> Result<Option<super::SessionCredentials>, ConfigError> {
    const KEY: &str = "innerClientAuthenticationCredentials";
    let Some(text) = r.get_opt::<String>(KEY)? else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        r.error(
            KEY,
            format!("not JSON ({e}): expected {{\"accessKey\":…,\"secretKey\":…}}"),
        )
    })?;
    let field = |k: &str| v.get(k).and_then(|x| x.as_str()).filter(|s| !s.is_empty());
    let (Some(ak), Some(sk)) = (field("accessKey"), field("secretKey")) else {
        return Err(r.error(KEY, "needs a non-empty accessKey and secretKey".into()));
    };
    let creds = super::SessionCredentials::new(ak, sk);
    r.record(
        KEY,
        &format!("{{\"accessKey\":\"{ak}\",\"secretKey\":\"***\"}}"),
    );
    Ok(Some(creds))
}
