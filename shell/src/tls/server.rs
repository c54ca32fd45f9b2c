//! The server side: `tls.server.mode`, the handshake, and why a connection was refused.

use crate::sync::MutexExt;
use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_std::net::TcpStream;
use rustls::server::WebPkiClientVerifier;

use super::reload::{Reloading, watched};
use super::settings::{
    ClientAuth, SERVER_CERT_PATH, SERVER_KEY_PATH, SERVER_NEED_CLIENT_AUTH, SERVER_TRUST_CERT_PATH,
    ServerTlsSettings, TlsMode,
};
use super::{HANDSHAKE_RECORD, Stream, pem, provider, rustls_error};
use crate::runtime;

/// Longest a peer may take from connecting to a finished handshake (its first byte
/// included): a connection slot is held meanwhile.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Peers whose refusal was logged; past this many the set starts afresh.
const MAX_LOGGED_PEERS: usize = 4096;

/// A server's TLS: its mode and its current certificate. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServerTls {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: ServerTlsSettings,
    config: Reloading<rustls::ServerConfig>,
    /// (peer address, reason) pairs already logged at WARN: a client retrying every
    /// second with the same wrong settings gets one line, not one per attempt; a new
    /// reason from it is logged again.
    logged: Mutex<HashSet<(IpAddr, String)>>,
}

/// Why [`ServerTls::accept`] gave no stream. It has logged why already.
#[derive(Debug)]
pub enum Refused {
    /// Plaintext under `enforcing`: the socket, so the caller can say so in its own
    /// protocol before closing (the remoting server answers the first request).
    Plaintext(TcpStream),
    /// The handshake failed, timed out, or the peer left.
    Failed,
}

fn path_of(p: &Option<std::path::PathBuf>) -> &Path {
    p.as_deref().unwrap_or(Path::new(""))
}

fn build(s: &ServerTlsSettings, alpn: &[Vec<u8>]) -> Result<Arc<rustls::ServerConfig>, String> {
    let (cert_path, key_path) = (path_of(&s.cert_path), path_of(&s.key_path));
    let certs = pem::certs(SERVER_CERT_PATH, cert_path)?;
    let key = pem::private_key(SERVER_KEY_PATH, key_path)?;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match s.need_client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Optional | ClientAuth::Require => {
            let trust = path_of(&s.trust_cert_path);
            let roots = Arc::new(pem::roots(SERVER_TRUST_CERT_PATH, trust)?);
            let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            if s.need_client_auth == ClientAuth::Optional {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| format!("{SERVER_TRUST_CERT_PATH}={}: {e}", trust.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "{SERVER_CERT_PATH}={} with {SERVER_KEY_PATH}={}: {e}",
            cert_path.display(),
            key_path.display()
        )
    })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(Arc::new(config))
}

impl ServerTls {
    /// The server's TLS, its files read and checked now; none when the mode is
    /// `disabled`. An error names the key and file at fault.
    pub fn new(settings: &ServerTlsSettings) -> Result<Option<Self>, String> {
        Self::with_alpn(settings, &[])
    }

    /// [`ServerTls::new`] offering `alpn` protocols in the handshake: the gRPC endpoint
    /// offers `h2`, which gRPC clients insist on.
    pub fn with_alpn(settings: &ServerTlsSettings, alpn: &[&[u8]]) -> Result<Option<Self>, String> {
        if settings.mode == TlsMode::Disabled {
            return Ok(None);
        }
        let files = watched(
            &settings.cert_path,
            &settings.key_path,
            &settings.trust_cert_path,
            settings.need_client_auth != ClientAuth::None,
        );
        let s = settings.clone();
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let config = Reloading::new("server certificate", files, move || build(&s, &alpn))?;
        Ok(Some(Self {
            inner: Arc::new(Inner {
                settings: settings.clone(),
                config,
                logged: Mutex::default(),
            }),
        }))
    }

    /// `tls.server.mode` (never `disabled`: that has no `ServerTls`).
    pub fn mode(&self) -> TlsMode {
        self.inner.settings.mode
    }

    /// The settings it was made from.
    pub fn settings(&self) -> &ServerTlsSettings {
        &self.inner.settings
    }

    /// Takes one accepted socket through the mode: TLS is handshaken (with the current
    /// certificate), plaintext passes under `permissive` and is refused under
    /// `enforcing`. Bounded by [`HANDSHAKE_TIMEOUT`].
    pub async fn accept(&self, tcp: TcpStream) -> Result<Stream, Refused> {
        let peer = tcp
            .peer_addr()
            .map_or_else(|_| "an unknown peer".to_owned(), |a| a.to_string());
        let ip = tcp.peer_addr().map(|a| a.ip()).ok();
        let local = tcp
            .local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string());
        match runtime::timeout(HANDSHAKE_TIMEOUT, self.handshake(tcp)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(Failure::Plaintext(tcp))) => {
                self.log_once(
                    ip,
                    "plaintext",
                    format_args!(
                        "refusing a plaintext connection from {peer} to {local}: \
                         tls.server.mode=enforcing serves TLS only (the client needs \
                         tls.enable=true)"
                    ),
                );
                Err(Refused::Plaintext(tcp))
            }
            Ok(Err(Failure::Left)) => Err(Refused::Failed),
            Ok(Err(Failure::Handshake(e))) => {
                let why = self.explain(&e);
                self.log_once(
                    ip,
                    &why,
                    format_args!("TLS handshake with {peer} (to {local}) failed: {why}"),
                );
                Err(Refused::Failed)
            }
            Err(_) => {
                log::debug!("TLS handshake with {peer} timed out after {HANDSHAKE_TIMEOUT:?}");
                Err(Refused::Failed)
            }
        }
    }

    /// [`ServerTls::accept`] for a socket accepted outside Tern's runtime (the gRPC
    /// endpoint's tokio listener): the same sniffing, mode and logging.
    pub async fn accept_std(&self, tcp: std::net::TcpStream) -> Result<Stream, Refused> {
        match tcp.set_nonblocking(true) {
            Ok(()) => self.accept(TcpStream::from(tcp)).await,
            Err(e) => {
                log::debug!("TLS accept: {e}");
                Err(Refused::Failed)
            }
        }
    }

    async fn handshake(&self, tcp: TcpStream) -> Result<Stream, Failure> {
        // Peeked, not read: a plaintext connection under `permissive` is served from
        // its first byte.
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(0) | Err(_) => return Err(Failure::Left),
            Ok(_) => {}
        }
        if first[0] != HANDSHAKE_RECORD {
            return match self.mode() {
                TlsMode::Enforcing => Err(Failure::Plaintext(tcp)),
                _ => Ok(Stream::Plain(tcp)),
            };
        }
        let acceptor = futures_rustls::TlsAcceptor::from(self.inner.config.current());
        match acceptor.accept(tcp).await {
            Ok(s) => Ok(Stream::Tls(Box::new(futures_rustls::TlsStream::Server(s)))),
            Err(e) => Err(Failure::Handshake(e)),
        }
    }

    /// rustls' reason, and what on this side it points at.
    fn explain(&self, e: &std::io::Error) -> String {
        let s = &self.inner.settings;
        match rustls_error(e) {
            Some(rustls::Error::AlertReceived(alert)) if super::is_certificate_alert(*alert) => {
                format!(
                    "{e}: the client refused this server's certificate ({SERVER_CERT_PATH}={})",
                    path_of(&s.cert_path).display()
                )
            }
            Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
                let auth = crate::config::ConfigValue::render_value(&s.need_client_auth);
                format!(
                    "{e}: the client's certificate is refused ({SERVER_NEED_CLIENT_AUTH}={auth}; \
                     checked against {SERVER_TRUST_CERT_PATH}={})",
                    path_of(&s.trust_cert_path).display()
                )
            }
            _ => e.to_string(),
        }
    }

    fn log_once(&self, ip: Option<IpAddr>, reason: &str, line: std::fmt::Arguments<'_>) {
        let first = ip.is_none_or(|ip| {
            let mut logged = self.inner.logged.guard();
            if logged.len() >= MAX_LOGGED_PEERS {
                logged.clear();
            }
            logged.insert((ip, reason.to_owned()))
        });
        if first {
            log::warn!("{line}");
        } else {
            log::debug!("{line}");
        }
    }
}

enum Failure {
    Plaintext(TcpStream),
    Left,
    Handshake(std::io::Error),
}
