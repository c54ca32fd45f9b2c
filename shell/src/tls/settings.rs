//! The TLS keys, RocketMQ's names (`TlsSystemConfig`'s JVM properties), read from the
//! process's config file like every other key.
//!
//! Defaults differ from RocketMQ's where its default is unsafe or needs a generated
//! certificate: `tls.server.mode` is `disabled` (RocketMQ: `permissive` with a
//! self-signed test certificate, `tls.test.mode.enable=true`), and
//! `tls.client.authServer` is `true` (RocketMQ: `false`, trusting any server).

use std::path::PathBuf;

use crate::config::{ConfigError, ConfigReader};

crate::config_enum! {
    /// What a server does with TLS (`tls.server.mode`).
    pub enum TlsMode {
        /// Plaintext only; a TLS handshake is closed (RocketMQ's `disabled`).
        Disabled = "disabled",
        /// TLS and plaintext on one port, told apart by the first byte.
        Permissive = "permissive",
        /// TLS only; a plaintext connection is answered with an error and closed.
        Enforcing = "enforcing",
    }
}

crate::config_enum! {
    /// Whether a server asks clients for a certificate (`tls.server.need.client.auth`).
    pub enum ClientAuth {
        /// No client certificate is asked for.
        None = "none",
        /// A client may present one; if it does, it must verify.
        Optional = "optional",
        /// Mutual TLS: a client without a certificate that verifies is refused.
        Require = "require",
    }
}

/// `tls.server.mode`.
pub const SERVER_MODE: &str = "tls.server.mode";
/// `tls.server.certPath`: the server's certificate chain, PEM, leaf first.
pub const SERVER_CERT_PATH: &str = "tls.server.certPath";
/// `tls.server.keyPath`: the server's private key, PEM, unencrypted.
pub const SERVER_KEY_PATH: &str = "tls.server.keyPath";
/// `tls.server.trustCertPath`: the CAs client certificates must chain to.
pub const SERVER_TRUST_CERT_PATH: &str = "tls.server.trustCertPath";
/// `tls.server.need.client.auth`.
pub const SERVER_NEED_CLIENT_AUTH: &str = "tls.server.need.client.auth";
/// `tls.enable`: clients (and a broker's own connections) connect with TLS.
pub const ENABLE: &str = "tls.enable";
/// `tls.client.certPath`: the client's certificate chain for mutual TLS.
pub const CLIENT_CERT_PATH: &str = "tls.client.certPath";
/// `tls.client.keyPath`: the client's private key for mutual TLS.
pub const CLIENT_KEY_PATH: &str = "tls.client.keyPath";
/// `tls.client.trustCertPath`: the CAs a server certificate must chain to.
pub const CLIENT_TRUST_CERT_PATH: &str = "tls.client.trustCertPath";
/// `tls.client.authServer`: verify the server's certificate and name.
pub const CLIENT_AUTH_SERVER: &str = "tls.client.authServer";

/// A server's TLS settings (broker, name server, HA port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsSettings {
    /// `tls.server.mode` (`disabled`).
    pub mode: TlsMode,
    /// `tls.server.certPath`; required unless disabled.
    pub cert_path: Option<PathBuf>,
    /// `tls.server.keyPath`; required unless disabled.
    pub key_path: Option<PathBuf>,
    /// `tls.server.trustCertPath`; required when client certificates are asked for.
    pub trust_cert_path: Option<PathBuf>,
    /// `tls.server.need.client.auth` (`none`).
    pub need_client_auth: ClientAuth,
}

impl Default for ServerTlsSettings {
    fn default() -> Self {
        Self {
            mode: TlsMode::Disabled,
            cert_path: None,
            key_path: None,
            trust_cert_path: None,
            need_client_auth: ClientAuth::None,
        }
    }
}

/// A client's TLS settings (Tern's client, a broker's own connections, the edge
/// forwarder, tern-admin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTlsSettings {
    /// `tls.enable` (`false`).
    pub enable: bool,
    /// `tls.client.certPath`: presented when the server asks (mutual TLS).
    pub cert_path: Option<PathBuf>,
    /// `tls.client.keyPath`.
    pub key_path: Option<PathBuf>,
    /// `tls.client.trustCertPath`; required while `authServer` is on.
    pub trust_cert_path: Option<PathBuf>,
    /// `tls.client.authServer` (`true` in Tern; RocketMQ's `false` trusts any server,
    /// which encrypts but lets anyone in the path pose as the server).
    pub auth_server: bool,
}

impl Default for ClientTlsSettings {
    fn default() -> Self {
        Self {
            enable: false,
            cert_path: None,
            key_path: None,
            trust_cert_path: None,
            auth_server: true,
        }
    }
}

/// Both sides, as a broker reads them (it serves, and connects to name servers and its
/// master).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// The `tls.server.*` keys.
    pub server: ServerTlsSettings,
    /// `tls.enable` and the `tls.client.*` keys.
    pub client: ClientTlsSettings,
}

impl TlsSettings {
    /// Reads every TLS key.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            server: ServerTlsSettings::read(r)?,
            client: ClientTlsSettings::read(r)?,
        })
    }
}

/// RocketMQ keys Tern refuses rather than ignore: each would change what is trusted.
fn refuse_unsupported(r: &mut ConfigReader<'_>) -> Result<(), ConfigError> {
    for key in ["tls.server.keyPassword", "tls.client.keyPassword"] {
        let v: String = r.get(key, String::new())?;
        if !v.is_empty() {
            return Err(r.error(
                key,
                "Tern reads unencrypted keys only: decrypt the key (openssl pkey) and leave \
                 this out"
                    .into(),
            ));
        }
    }
    if let Some(file) = r.get_opt::<String>("tls.config.file")? {
        return Err(r.error(
            "tls.config.file",
            format!(
                "Tern reads the tls.* keys from this config file, not from {file}: move \
                 them here"
            ),
        ));
    }
    Ok(())
}

fn path_pair(
    r: &mut ConfigReader<'_>,
    cert_key: &str,
    key_key: &str,
) -> Result<(Option<PathBuf>, Option<PathBuf>), ConfigError> {
    let cert: Option<PathBuf> = r.get_opt(cert_key)?;
    let key: Option<PathBuf> = r.get_opt(key_key)?;
    match (&cert, &key) {
        (Some(_), None) => Err(r.error(cert_key, format!("needs {key_key} beside it"))),
        (None, Some(_)) => Err(r.error(key_key, format!("needs {cert_key} beside it"))),
        _ => Ok((cert, key)),
    }
}

impl ServerTlsSettings {
    /// Reads the `tls.server.*` keys (the name server reads only these).
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        refuse_unsupported(r)?;
        let mode: TlsMode = r.get(SERVER_MODE, TlsMode::Disabled)?;
        let (cert_path, key_path) = path_pair(r, SERVER_CERT_PATH, SERVER_KEY_PATH)?;
        let trust_cert_path: Option<PathBuf> = r.get_opt(SERVER_TRUST_CERT_PATH)?;
        let need_client_auth: ClientAuth = r.get(SERVER_NEED_CLIENT_AUTH, ClientAuth::None)?;
        // RocketMQ skips verifying client certificates unless this is set; Tern always
        // verifies the ones it asks for (an unverified certificate proves nothing).
        let _: bool = r.get("tls.server.authClient", true)?;
        let test_mode: bool = r.get("tls.test.mode.enable", false)?;
        if mode != TlsMode::Disabled {
            if test_mode {
                return Err(r.error(
                    "tls.test.mode.enable",
                    "Tern makes no self-signed test certificate: set it false and give \
                     tls.server.certPath and tls.server.keyPath (docs/tls.md shows how to \
                     make them)"
                        .into(),
                ));
            }
            if cert_path.is_none() {
                return Err(r.error(
                    SERVER_MODE,
                    format!(
                        "{} needs {SERVER_CERT_PATH} and {SERVER_KEY_PATH}",
                        crate::config::ConfigValue::render_value(&mode)
                    ),
                ));
            }
            if need_client_auth != ClientAuth::None && trust_cert_path.is_none() {
                return Err(r.error(
                    SERVER_NEED_CLIENT_AUTH,
                    format!(
                        "client certificates are checked against {SERVER_TRUST_CERT_PATH}: \
                         set it to the CA file that issued them"
                    ),
                ));
            }
        }
        Ok(Self {
            mode,
            cert_path,
            key_path,
            trust_cert_path,
            need_client_auth,
        })
    }
}

impl ClientTlsSettings {
    /// Reads `tls.enable` and the `tls.client.*` keys.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let enable: bool = r.get(ENABLE, false)?;
        let (cert_path, key_path) = path_pair(r, CLIENT_CERT_PATH, CLIENT_KEY_PATH)?;
        let trust_cert_path: Option<PathBuf> = r.get_opt(CLIENT_TRUST_CERT_PATH)?;
        let auth_server: bool = r.get(CLIENT_AUTH_SERVER, true)?;
        if enable && auth_server && trust_cert_path.is_none() {
            return Err(r.error(
                ENABLE,
                format!(
                    "servers are verified ({CLIENT_AUTH_SERVER}=true) against \
                     {CLIENT_TRUST_CERT_PATH}: set it to the CA file that issued the servers' \
                     certificates"
                ),
            ));
        }
        Ok(Self {
            enable,
            cert_path,
            key_path,
            trust_cert_path,
            auth_server,
        })
    }

    /// TLS on, servers verified against the CA file `trust` (tern-admin's `--tls
    /// --tls-trust-cert FILE`).
    pub fn trusting(trust: impl Into<PathBuf>) -> Self {
        Self {
            enable: true,
            trust_cert_path: Some(trust.into()),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigSource, load};

    fn read(text: &str) -> Result<TlsSettings, String> {
        struct T(TlsSettings);
        impl crate::config::Config for T {
            fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
                TlsSettings::read(r).map(T)
            }
        }
        load::<T>(&ConfigSource::parse_properties(text, "broker.conf"))
            .map(|l| l.config.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_off_and_verify_servers() {
        let t = read("").unwrap();
        assert_eq!(t.server.mode, TlsMode::Disabled);
        assert!(!t.client.enable);
        assert!(t.client.auth_server);
    }

    #[test]
    fn rocketmq_keys_are_read_and_checked_by_name() {
        let t = read(
            "tls.server.mode=Enforcing\ntls.server.certPath=/c.pem\ntls.server.keyPath=/k.pem\n\
             tls.server.need.client.auth=require\ntls.server.trustCertPath=/ca.pem\n\
             tls.enable=true\ntls.client.trustCertPath=/ca.pem\ntls.test.mode.enable=false\n",
        )
        .unwrap();
        assert_eq!(t.server.mode, TlsMode::Enforcing);
        assert_eq!(t.server.need_client_auth, ClientAuth::Require);
        assert_eq!(t.client.trust_cert_path, Some(PathBuf::from("/ca.pem")));
        let e = read("tls.server.mode=permissive\n").unwrap_err();
        assert!(
            e.contains("broker.conf:1") && e.contains("tls.server.certPath"),
            "{e}"
        );
        let e = read("tls.server.mode=sometimes\n").unwrap_err();
        assert!(
            e.contains("tls.server.mode") && e.contains("enforcing"),
            "{e}"
        );
        let e = read("tls.enable=true\n").unwrap_err();
        assert!(e.contains("tls.client.trustCertPath"), "{e}");
        let e = read("tls.server.keyPassword=secret\n").unwrap_err();
        assert!(e.contains("unencrypted"), "{e}");
        let e = read("tls.server.mode=enforcing\ntls.server.certPath=/c\ntls.server.keyPath=/k\ntls.server.need.client.auth=optional\n").unwrap_err();
        assert!(e.contains("tls.server.trustCertPath"), "{e}");
        let e = read("tls.client.certPath=/c\n").unwrap_err();
        assert!(e.contains("tls.client.keyPath"), "{e}");
    }
}
