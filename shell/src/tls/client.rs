//! The client side: `tls.enable` and the `tls.client.*` keys, and a handshake whose
//! error says what to look at.

use std::path::Path;
use std::sync::Arc;

use async_std::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::reload::{Reloading, watched};
use super::settings::{
    CLIENT_CERT_PATH, CLIENT_KEY_PATH, CLIENT_TRUST_CERT_PATH, ClientTlsSettings,
};
use super::{Stream, pem, provider, rustls_error};

/// A client's TLS: what it trusts and presents. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ClientTls {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: ClientTlsSettings,
    config: Reloading<rustls::ClientConfig>,
}

fn path_of(p: &Option<std::path::PathBuf>) -> &Path {
    p.as_deref().unwrap_or(Path::new(""))
}

fn build(s: &ClientTlsSettings) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if s.auth_server {
        let trust = path_of(&s.trust_cert_path);
        builder.with_root_certificates(pem::roots(CLIENT_TRUST_CERT_PATH, trust)?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
    };
    let config = match (&s.cert_path, &s.key_path) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                pem::certs(CLIENT_CERT_PATH, cert)?,
                pem::private_key(CLIENT_KEY_PATH, key)?,
            )
            .map_err(|e| {
                format!(
                    "{CLIENT_CERT_PATH}={} with {CLIENT_KEY_PATH}={}: {e}",
                    cert.display(),
                    key.display()
                )
            })?,
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

impl ClientTls {
    /// The client's TLS, its files read and checked now; none unless `tls.enable`.
    pub fn new(settings: &ClientTlsSettings) -> Result<Option<Self>, String> {
        if !settings.enable {
            return Ok(None);
        }
        let files = watched(
            &settings.cert_path,
            &settings.key_path,
            &settings.trust_cert_path,
            settings.auth_server,
        );
        let s = settings.clone();
        let config = Reloading::new("client certificate", files, move || build(&s))?;
        Ok(Some(Self {
            inner: Arc::new(Inner {
                settings: settings.clone(),
                config,
            }),
        }))
    }

    /// The settings it was made from.
    pub fn settings(&self) -> &ClientTlsSettings {
        &self.inner.settings
    }

    /// Handshakes over `tcp`, connected to `addr` (`host:port`; the host is the name
    /// the server's certificate must carry, an IP address or a DNS name). The caller
    /// bounds the time. The error starts with `addr` and says what to check.
    pub async fn connect(&self, tcp: TcpStream, addr: &str) -> Result<Stream, TlsConnectError> {
        let name = server_name(addr).map_err(|reason| TlsConnectError {
            reason,
            cause: None,
        })?;
        let connector = futures_rustls::TlsConnector::from(self.inner.config.current());
        match connector.connect(name, tcp).await {
            Ok(s) => Ok(Stream::Tls(Box::new(futures_rustls::TlsStream::Client(s)))),
            Err(e) => Err(TlsConnectError {
                reason: format!("{addr}: TLS handshake failed: {}", self.explain(&e)),
                cause: Some(e),
            }),
        }
    }

    fn explain(&self, e: &std::io::Error) -> String {
        let s = &self.inner.settings;
        match rustls_error(e) {
            Some(rustls::Error::InvalidCertificate(_)) => format!(
                "{e} (the server's certificate is checked against {CLIENT_TRUST_CERT_PATH}={})",
                path_of(&s.trust_cert_path).display()
            ),
            Some(rustls::Error::AlertReceived(alert)) if super::is_certificate_alert(*alert) => {
                match &s.cert_path {
                    Some(cert) => format!(
                        "{e}: the server refused this client's certificate \
                         ({CLIENT_CERT_PATH}={})",
                        cert.display()
                    ),
                    None => format!(
                        "{e}: the server wants a client certificate (set {CLIENT_CERT_PATH} \
                         and {CLIENT_KEY_PATH})"
                    ),
                }
            }
            None if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
            ) =>
            {
                format!(
                    "{e}: the server closed the connection during the handshake; does it serve \
                 TLS (tls.server.mode permissive or enforcing)?"
                )
            }
            _ => e.to_string(),
        }
    }
}

/// Why [`ClientTls::connect`] failed: the text starts with the address and says what to
/// check; the handshake's io error (a rustls error inside it, when it was one) is the
/// source. A host that cannot be a certificate's name has none.
#[derive(Debug)]
pub struct TlsConnectError {
    reason: String,
    cause: Option<std::io::Error>,
}

impl TlsConnectError {
    /// The text and the io error, for an error that keeps both its own way.
    pub fn into_parts(self) -> (String, Option<std::io::Error>) {
        (self.reason, self.cause)
    }
}

impl std::fmt::Display for TlsConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for TlsConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|e| e as _)
    }
}

/// The name in `host:port` a certificate is checked against (`[v6]:port` too).
fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{addr}: {host:?} cannot be checked against a certificate: {e}"))
}

/// `tls.client.authServer=false`: any certificate is taken (RocketMQ's default; the
/// link is encrypted, but not to a known server). Handshake signatures are still
/// checked, so the peer holds the key of the certificate it sent.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_host_part() {
        assert!(matches!(
            server_name("127.0.0.1:9876"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]:9876"),
            Ok(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("broker-a.example:10911"),
            Ok(ServerName::DnsName(_))
        ));
        assert!(server_name("bad name:1").is_err());
    }
}
