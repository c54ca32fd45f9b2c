//! The console's configuration: `tern-console -c FILE` and flags, or the same keys in
//! `broker.conf` under `tern-broker --standalone`.

use std::net::SocketAddr;
use std::time::Duration;

use tern_shell::config::{Config, ConfigError, ConfigReader};

/// Where the console listens unless told otherwise (rocketmq-dashboard's port).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Every key the console reads, so a broker in standalone mode can hand them over.
pub const KEYS: [&str; 7] = [
    "consoleListen",
    "consoleUser",
    "consolePassword",
    "consoleAccessKey",
    "consoleSecretKey",
    "consoleSampleSeconds",
    "consoleEnable",
];

/// What the console needs.
#[derive(Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// `HOST:PORT` to serve on (`consoleListen`; port 0 picks a free one).
    pub listen: String,
    /// Name servers, `host:port;host:port` (`namesrvAddr`).
    pub namesrv_addrs: String,
    /// The login (`consoleUser`, `consolePassword`); `None` serves without one, which
    /// only a loopback address may.
    pub login: Option<(String, String)>,
    /// Credentials for a cluster with ACL (`consoleAccessKey`, `consoleSecretKey`);
    /// without them ACL accounts are shown read-only (what the cluster lets anyone see).
    pub admin_credentials: Option<(String, String)>,
    /// How often the TPS charts are sampled (`consoleSampleSeconds`, 1..60, default 5).
    pub sample_every: Duration,
    /// Whether `tern-broker --standalone` starts the console (`consoleEnable`).
    pub enable: bool,
}

// Never prints the secrets.
impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleConfig")
            .field("listen", &self.listen)
            .field("namesrv_addrs", &self.namesrv_addrs)
            .field("user", &self.login.as_ref().map(|(u, _)| u))
            .field(
                "access_key",
                &self.admin_credentials.as_ref().map(|(a, _)| a),
            )
            .field("sample_every", &self.sample_every)
            .finish()
    }
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.into(),
            namesrv_addrs: "127.0.0.1:9876".into(),
            login: None,
            admin_credentials: None,
            sample_every: Duration::from_secs(5),
            enable: true,
        }
    }
}

fn pair(a: String, b: String) -> Option<(String, String)> {
    (!a.is_empty()).then_some((a, b))
}

impl Config for ConsoleConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let seconds: u64 = r.get("consoleSampleSeconds", 5)?;
        if !(1..=60).contains(&seconds) {
            return Err(ConfigError {
                key: "consoleSampleSeconds".into(),
                origin: None,
                message: format!("{seconds} is outside 1..60"),
            });
        }
        Ok(Self {
            listen: r.get("consoleListen", d.listen)?,
            namesrv_addrs: r.get("namesrvAddr", d.namesrv_addrs)?,
            login: pair(
                r.get("consoleUser", String::new())?,
                r.get("consolePassword", String::new())?,
            ),
            admin_credentials: pair(
                r.get("consoleAccessKey", String::new())?,
                r.get("consoleSecretKey", String::new())?,
            ),
            sample_every: Duration::from_secs(seconds),
            enable: r.get("consoleEnable", d.enable)?,
        })
    }
}

impl ConsoleConfig {
    /// Refuses what must not run: a console reachable from other hosts with no login.
    pub fn check(&self) -> Result<(), String> {
        if self.login.is_none() && !is_loopback(&self.listen) {
            return Err(format!(
                "console: {} is reachable from other hosts; set consoleUser and \
                 consolePassword, or listen on 127.0.0.1",
                self.listen
            ));
        }
        if self.login.as_ref().is_some_and(|(_, p)| p.is_empty()) {
            return Err("console: consoleUser is set but consolePassword is empty".into());
        }
        Ok(())
    }
}

fn is_loopback(listen: &str) -> bool {
    match listen.parse::<SocketAddr>() {
        Ok(a) => a.ip().is_loopback(),
        Err(_) => listen.starts_with("localhost:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_may_run_without_a_login() {
        let mut c = ConsoleConfig::default();
        assert!(c.check().is_ok());
        c.listen = "0.0.0.0:8080".into();
        assert!(c.check().unwrap_err().contains("consolePassword"));
        c.login = Some(("admin".into(), "s3cret".into()));
        assert!(c.check().is_ok());
        assert!(!format!("{c:?}").contains("s3cret"));
        c.login = Some(("admin".into(), String::new()));
        assert!(c.check().is_err());
        c.listen = "[::1]:0".into();
        c.login = None;
        assert!(c.check().is_ok());
    }
}
