//! TLS on the remoting ports, with RocketMQ's keys and modes (`TlsSystemConfig`,
//! `TlsHelper`, `NettyRemotingServer`'s `TlsModeHandler`).
//!
//! rustls with the ring provider. A server's [`ServerTls`] takes each accepted socket
//! through `tls.server.mode`: `permissive` peeks at the first byte, a TLS handshake
//! record (0x16) gets a handshake and anything else is served as plaintext, so the C++
//! and older clients keep working beside TLS ones on one port; `enforcing` refuses
//! plaintext. A client's [`ClientTls`] handshakes after the TCP connect, verifying the
//! server's certificate and name unless told not to. Both read their files again when
//! they change (by modification time, at most once a second). The result is a [`Stream`], plain or TLS, which the
//! connection splits into its reader's and writers' halves.
//!
//! Docs: docs/tls.md (keys, modes, what is protected, making certificates).

use std::sync::Arc;

use rustls::AlertDescription;
use rustls::crypto::CryptoProvider;

mod client;
mod halves;
mod pem;
mod reload;
mod server;
mod settings;
mod stream;

pub use client::{ClientTls, TlsConnectError};
pub use halves::{ReadHalf, Socket, WriteHalf};
pub use server::{HANDSHAKE_TIMEOUT, Refused, ServerTls};
pub use settings::{
    CLIENT_AUTH_SERVER, CLIENT_CERT_PATH, CLIENT_KEY_PATH, CLIENT_TRUST_CERT_PATH, ClientAuth,
    ClientTlsSettings, ENABLE, SERVER_CERT_PATH, SERVER_KEY_PATH, SERVER_MODE,
    SERVER_NEED_CLIENT_AUTH, SERVER_TRUST_CERT_PATH, ServerTlsSettings, TlsMode, TlsSettings,
};
pub use stream::{SharedStream, Stream, TlsStream};

/// The first byte of a TLS handshake record (RocketMQ's `HANDSHAKE_MAGIC_CODE`). A
/// remoting frame starts with its length, whose first byte is 0x16 only for frames of
/// 352 MiB and more, far past any frame limit.
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// The one crypto provider: ring (aws-lc-rs would need cmake and a C toolchain per
/// device target).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls error inside a handshake's I/O error, when there is one.
fn rustls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// Alerts a peer sends when it refuses the certificate it was shown.
fn is_certificate_alert(a: AlertDescription) -> bool {
    matches!(
        a,
        AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::AccessDenied
    )
}
