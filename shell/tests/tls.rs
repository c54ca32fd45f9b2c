//! TLS on a remoting server and its clients, over real sockets on 127.0.0.1, with
//! certificates made for each test: every `tls.server.mode`, mutual TLS, untrusted and
//! expired certificates (the error on both sides), and certificate reload.

#[path = "support/certs.rs"]
mod certs;

use std::path::Path;
use std::sync::{Mutex, Once};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use async_std::net::TcpStream;
use certs::{Ca, Issued};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tern_shell::runtime::{block_on, sleep, timeout};
use tern_shell::tls::{
    ClientAuth, ClientTls, ClientTlsSettings, ServerTls, ServerTlsSettings, TlsMode,
};
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RemotingError,
    RequestCode, ResponseCode, Server, ServerConfig,
};

const PING: RequestCode = RequestCode::Other(9001);

struct Pong;

impl Processor for Pong {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(RemotingCommand::response_to(&req, ResponseCode::Success).with_remark("pong"))
    }
}

/// Every log line of this test binary, so a test can look for what the server logged
/// about its own peer (tests run at once: each looks for its own client's port).
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The lines so far (a test that panicked holding them does not stop the others).
fn lines() -> std::sync::MutexGuard<'static, Vec<String>> {
    LINES.guard()
}

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            lines().push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

fn capture_logs() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
}

/// Waits (2 s at most) for a log line containing every one of `parts`.
async fn logged(parts: &[&str]) -> String {
    for _ in 0..100 {
        let found = lines()
            .iter()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .cloned();
        if let Some(l) = found {
            return l;
        }
        sleep(Duration::from_millis(20)).await;
    }
    let all = lines().join("\n");
    panic!("no log line with {parts:?} in:\n{all}");
}

fn server_settings(mode: TlsMode, id: &Issued) -> ServerTlsSettings {
    ServerTlsSettings {
        mode,
        cert_path: Some(id.cert.clone()),
        key_path: Some(id.key.clone()),
        ..ServerTlsSettings::default()
    }
}

/// A server with the identity `id` that asks clients for a certificate (`auth`) from the
/// CA in `trust`.
async fn serve_mutual(mode: TlsMode, id: &Issued, auth: ClientAuth, trust: &Path) -> Server {
    serve(Some(ServerTlsSettings {
        need_client_auth: auth,
        trust_cert_path: Some(trust.to_owned()),
        ..server_settings(mode, id)
    }))
    .await
}

async fn serve(tls: Option<ServerTlsSettings>) -> Server {
    capture_logs();
    let config = ServerConfig {
        tls: tls.and_then(|s| ServerTls::new(&s).unwrap()),
        ..ServerConfig::default()
    };
    Server::bind("127.0.0.1:0", config, std::sync::Arc::new(Pong))
        .await
        .unwrap()
}

fn client(trust: &Path, id: Option<&Issued>) -> ClientTls {
    let s = ClientTlsSettings {
        cert_path: id.map(|i| i.cert.clone()),
        key_path: id.map(|i| i.key.clone()),
        ..ClientTlsSettings::trusting(trust)
    };
    ClientTls::new(&s).unwrap().unwrap()
}

async fn connect(server: &Server, tls: Option<ClientTls>) -> Result<Connection, RemotingError> {
    let config = ConnectionConfig {
        tls,
        ..ConnectionConfig::default()
    };
    Connection::connect(
        &server.local_addr().to_string(),
        config,
        Duration::from_secs(5),
    )
    .await
}

/// [`connect`] as a client that trusts the CA in `trust` and shows `id`.
async fn connect_trusting(
    server: &Server,
    trust: &Path,
    id: Option<&Issued>,
) -> Result<Connection, RemotingError> {
    connect(server, Some(client(trust, id))).await
}

/// Why a client that trusts `trust` and shows `id` is refused: the connect's error, or the
/// first request's when the refusal arrives after the handshake.
async fn refusal(server: &Server, trust: &Path, id: Option<&Issued>) -> RemotingError {
    match connect_trusting(server, trust, id).await {
        Ok(c) => ping(&c).await.unwrap_err(),
        Err(e) => e,
    }
}

async fn ping(conn: &Connection) -> Result<RemotingCommand, RemotingError> {
    conn.request(RemotingCommand::request_code(PING), Duration::from_secs(5))
        .await
}

/// A CA, a server certificate for 127.0.0.1 it issued, and the CA file.
fn pki(dir: &Path) -> (Ca, Issued, std::path::PathBuf) {
    let ca = Ca::new("Tern test CA");
    let server = ca.issue(dir, "server", &["127.0.0.1", "localhost"], false);
    let ca_file = ca.write(dir, "ca.pem");
    (ca, server, ca_file)
}

#[test]
fn permissive_serves_tls_and_plaintext_on_one_port() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_, id, ca) = pki(dir.path());
        let server = serve(Some(server_settings(TlsMode::Permissive, &id))).await;
        let plain = connect(&server, None).await.unwrap();
        assert!(!plain.is_tls());
        assert_eq!(ping(&plain).await.unwrap().remark.as_deref(), Some("pong"));
        let tls = connect_trusting(&server, &ca, None).await.unwrap();
        assert!(tls.is_tls());
        assert_eq!(ping(&tls).await.unwrap().remark.as_deref(), Some("pong"));
        // Both stay usable side by side.
        assert!(ping(&plain).await.is_ok() && ping(&tls).await.is_ok());
    });
}

#[test]
fn enforcing_answers_a_plaintext_request_with_the_reason_and_closes() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_, id, ca) = pki(dir.path());
        let server = serve(Some(server_settings(TlsMode::Enforcing, &id))).await;
        let plain = connect(&server, None).await.unwrap();
        let resp = ping(&plain).await.unwrap();
        assert_eq!(resp.response_code(), ResponseCode::SystemError);
        let remark = resp.remark.unwrap_or_default();
        assert!(
            remark.contains("requires TLS") && remark.contains("tls.enable"),
            "{remark}"
        );
        timeout(Duration::from_secs(5), plain.closed())
            .await
            .unwrap();
        let me = plain.local_addr().to_string();
        logged(&["refusing a plaintext connection from", &me, "enforcing"]).await;
        // TLS on the same port is served.
        let tls = connect_trusting(&server, &ca, None).await.unwrap();
        assert_eq!(ping(&tls).await.unwrap().remark.as_deref(), Some("pong"));
    });
}

#[test]
fn a_plaintext_server_closes_a_tls_client_and_both_say_why() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_, _, ca) = pki(dir.path());
        let server = serve(None).await;
        let e = connect_trusting(&server, &ca, None).await.unwrap_err();
        let RemotingError::Connect { reason: why, .. } = e else {
            panic!("{e:?}")
        };
        assert!(why.contains("does it serve TLS"), "{why}");
        logged(&["started a TLS handshake", "tls.server.mode=disabled"]).await;
    });
}

#[test]
fn an_untrusted_server_certificate_is_refused_on_both_sides() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_, _, ca) = pki(dir.path());
        let rogue = Ca::new("Rogue CA").issue(dir.path(), "rogue", &["127.0.0.1"], false);
        let server = serve(Some(server_settings(TlsMode::Enforcing, &rogue))).await;
        let e = connect_trusting(&server, &ca, None).await.unwrap_err();
        // The handshake's io error is kept, with rustls's refusal inside it.
        let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        let inner = io.and_then(|io| io.get_ref()).map(ToString::to_string);
        assert!(
            inner
                .as_deref()
                .is_some_and(|t| t.contains("UnknownIssuer")),
            "{e:?}"
        );
        let RemotingError::Connect { reason: why, .. } = e else {
            panic!("{e:?}")
        };
        assert!(
            why.contains("UnknownIssuer")
                && why.contains(&format!("tls.client.trustCertPath={}", ca.display())),
            "{why}"
        );
        logged(&[
            "UnknownCA",
            "the client refused this server's certificate",
            "rogue.pem",
        ])
        .await;
    });
}

#[test]
fn an_expired_server_certificate_is_refused_on_both_sides() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, _, ca_file) = pki(dir.path());
        let old = ca.issue(dir.path(), "old", &["127.0.0.1"], true);
        let server = serve(Some(server_settings(TlsMode::Permissive, &old))).await;
        let e = connect_trusting(&server, &ca_file, None).await.unwrap_err();
        let RemotingError::Connect { reason: why, .. } = e else {
            panic!("{e:?}")
        };
        assert!(why.to_lowercase().contains("expired"), "{why}");
        logged(&["CertificateExpired", "old.pem"]).await;
    });
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, _, ca_file) = pki(dir.path());
        let elsewhere = ca.issue(
            dir.path(),
            "elsewhere",
            &["10.9.9.9", "other.example"],
            false,
        );
        let server = serve(Some(server_settings(TlsMode::Enforcing, &elsewhere))).await;
        let e = connect_trusting(&server, &ca_file, None).await.unwrap_err();
        assert!(
            e.to_string().contains("not valid for name \"127.0.0.1\""),
            "{e}"
        );
    });
}

#[test]
fn mutual_tls_require_refuses_clients_without_a_trusted_certificate() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, id, ca_file) = pki(dir.path());
        let server = serve_mutual(TlsMode::Enforcing, &id, ClientAuth::Require, &ca_file).await;
        // Trusted client certificate: served.
        let good = ca.issue(dir.path(), "client", &["tern-client"], false);
        let conn = connect_trusting(&server, &ca_file, Some(&good))
            .await
            .unwrap();
        assert_eq!(ping(&conn).await.unwrap().remark.as_deref(), Some("pong"));

        // No certificate. TLS 1.3 finishes the client's side of the handshake before
        // the server has looked, so the refusal arrives as an alert on the first read.
        let none = refusal(&server, &ca_file, None).await;
        assert!(none.to_string().contains("CertificateRequired"), "{none}");
        logged(&[
            "peer sent no certificates",
            "tls.server.need.client.auth=require",
        ])
        .await;

        // A certificate from a CA the server does not trust.
        let other = Ca::new("Other CA").issue(dir.path(), "stranger", &["x"], false);
        let refused = refusal(&server, &ca_file, Some(&other)).await;
        assert!(refused.to_string().contains("UnknownCA"), "{refused}");
        logged(&["UnknownIssuer", "the client's certificate is refused"]).await;

        // An expired one from the trusted CA.
        let old = ca.issue(dir.path(), "old-client", &["x"], true);
        let expired = refusal(&server, &ca_file, Some(&old)).await;
        assert!(
            expired.to_string().contains("CertificateExpired"),
            "{expired}"
        );
    });
}

#[test]
fn optional_client_auth_takes_clients_with_and_without_certificates() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, id, ca_file) = pki(dir.path());
        let server = serve_mutual(TlsMode::Permissive, &id, ClientAuth::Optional, &ca_file).await;
        let anonymous = connect_trusting(&server, &ca_file, None).await.unwrap();
        assert!(ping(&anonymous).await.is_ok());
        let good = ca.issue(dir.path(), "client", &["tern-client"], false);
        let known = connect_trusting(&server, &ca_file, Some(&good))
            .await
            .unwrap();
        assert!(ping(&known).await.is_ok());
    });
}

#[test]
fn auth_server_false_encrypts_without_verifying_the_server() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let rogue = Ca::new("Rogue CA").issue(dir.path(), "rogue", &["127.0.0.1"], false);
        let server = serve(Some(server_settings(TlsMode::Enforcing, &rogue))).await;
        let s = ClientTlsSettings {
            enable: true,
            auth_server: false,
            ..ClientTlsSettings::default()
        };
        let conn = connect(&server, ClientTls::new(&s).unwrap()).await.unwrap();
        assert!(conn.is_tls());
        assert!(ping(&conn).await.is_ok());
    });
}

/// The server certificate a fresh TLS connection is shown.
async fn presented(server: &Server, tls: &ClientTls) -> Vec<u8> {
    let addr = server.local_addr().to_string();
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let stream = tls.connect(tcp, &addr).await.unwrap();
    stream.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem_file: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(pem_file).unwrap().to_vec()
}

#[test]
fn a_replaced_certificate_is_used_by_new_connections_and_a_bad_one_is_not() {
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (ca, id, ca_file) = pki(dir.path());
        let first = der(&id.cert);
        let server = serve(Some(server_settings(TlsMode::Enforcing, &id))).await;
        let tls = client(&ca_file, None);
        let old_conn = connect(&server, Some(tls.clone())).await.unwrap();
        assert_eq!(presented(&server, &tls).await, first);

        // Replace both files (same names, a new key and certificate).
        let next_dir = tempfile::tempdir().unwrap();
        let next = ca.issue(next_dir.path(), "server", &["127.0.0.1"], false);
        std::fs::copy(&next.key, &id.key).unwrap();
        std::fs::copy(&next.cert, &id.cert).unwrap();
        sleep(Duration::from_millis(1100)).await;
        let second = der(&id.cert);
        assert_ne!(first, second);
        assert_eq!(presented(&server, &tls).await, second);
        logged(&["TLS server certificate reloaded", "server.pem"]).await;
        // The connection made before the change carries on.
        assert!(ping(&old_conn).await.is_ok());

        // A broken file keeps the certificate in force.
        std::fs::write(&id.cert, "not a certificate\n").unwrap();
        sleep(Duration::from_millis(1100)).await;
        assert_eq!(presented(&server, &tls).await, second);
        logged(&["not reloaded, the previous one stays in use", "server.pem"]).await;
    });
}

#[test]
fn start_up_errors_name_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_, id, _) = pki(dir.path());
    let missing = dir.path().join("missing.pem");
    let s = ServerTlsSettings {
        cert_path: Some(missing.clone()),
        ..server_settings(TlsMode::Enforcing, &id)
    };
    let e = ServerTls::new(&s).unwrap_err();
    assert!(
        e.contains("tls.server.certPath=") && e.contains("missing.pem"),
        "{e}"
    );
    // A key that is not the certificate's.
    let other = Ca::new("x").issue(dir.path(), "other", &["127.0.0.1"], false);
    let s = ServerTlsSettings {
        key_path: Some(other.key.clone()),
        ..server_settings(TlsMode::Enforcing, &id)
    };
    let e = ServerTls::new(&s).unwrap_err();
    assert!(
        e.contains("tls.server.keyPath=") && e.contains("other.key"),
        "{e}"
    );
    let s = ClientTlsSettings::trusting(&id.key);
    let e = ClientTls::new(&s).unwrap_err();
    assert!(
        e.contains("tls.client.trustCertPath=") && e.contains("no certificate"),
        "{e}"
    );
}

/// `GET /metrics` over `stream`; the whole answer, or what the server sent before it
/// closed.
async fn http_get(stream: tern_shell::tls::Stream) -> String {
    use smol::io::{AsyncReadExt, AsyncWriteExt};
    let (mut r, mut w, _socket) = stream.split().unwrap();
    if w.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .is_err()
    {
        return String::new();
    }
    let _ = w.flush().await;
    let mut out = Vec::new();
    let _ = timeout(Duration::from_secs(5), r.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_http_endpoint_takes_the_same_modes() {
    block_on(async {
        capture_logs();
        let dir = tempfile::tempdir().unwrap();
        let (_, id, ca) = pki(dir.path());
        let handler: tern_shell::http::Handler = std::sync::Arc::new(|req| {
            (req.path == "/metrics").then(|| tern_shell::http::Response::ok("text/plain", "m 1\n"))
        });
        for mode in [TlsMode::Enforcing, TlsMode::Permissive] {
            let tls = ServerTls::new(&server_settings(mode, &id)).unwrap();
            let http = tern_shell::http::HttpServer::bind("127.0.0.1:0", handler.clone(), tls)
                .await
                .unwrap();
            let addr = http.local_addr().to_string();
            let tcp = TcpStream::connect(&addr).await.unwrap();
            let https = client(&ca, None).connect(tcp, &addr).await.unwrap();
            let answer = http_get(https).await;
            assert!(
                answer.starts_with("HTTP/1.1 200") && answer.ends_with("m 1\n"),
                "{answer}"
            );
            let plain = http_get(TcpStream::connect(&addr).await.unwrap().into()).await;
            match mode {
                TlsMode::Enforcing => assert!(!plain.contains("200"), "{plain}"),
                _ => assert!(plain.starts_with("HTTP/1.1 200"), "{plain}"),
            }
            http.shutdown().await;
        }
    });
}
