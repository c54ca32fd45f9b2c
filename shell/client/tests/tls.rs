//! Tern's client and `tern-admin` over TLS to a real `tern-broker --standalone`, whose
//! broker and embedded name server ports both serve TLS (docs/tls.md).

use crate::common;

use crate::certs;

use std::path::Path;
use std::time::Duration;

use certs::{Ca, Issued};
use common::cli::admin;
use common::{Broker, run, send_ok};
use tern_client::{
    ClientConfig, ClientTls, ClientTlsSettings, Message, Producer, ProducerConfig, PullConsumer,
    PullStatus,
};

fn server_conf(mode: &str, id: &Issued) -> String {
    format!(
        "tls.server.mode={mode}\ntls.server.certPath={}\ntls.server.keyPath={}\n",
        id.cert.display(),
        id.key.display()
    )
}

fn trusting(ca: &Path) -> ClientTls {
    ClientTls::new(&ClientTlsSettings::trusting(ca))
        .unwrap()
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tern-admin clusterList` trusting `ca`, which must fail (exit 1); its stderr.
fn refused_trusting(b: &Broker, ca: &Path) -> String {
    let ca = ca.display().to_string();
    let out = admin(&b.namesrv, &["clusterList", "--tls-trust-cert", &ca]);
    assert_eq!(out.status.code(), Some(1));
    stderr(&out)
}

/// Waits (5 s at most) for the broker to log a line holding every one of `parts`.
fn logged(b: &Broker, parts: &[&str]) {
    let found = tern_testkit::poll_until(Duration::from_secs(5), || {
        b.log().lines().any(|l| parts.iter().all(|p| l.contains(p)))
    });
    assert!(found, "no broker log line with {parts:?}:\n{}", b.log());
}

#[test]
fn clients_and_tern_admin_work_over_tls_against_an_enforcing_broker() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Tern test CA");
    let id = ca.issue(dir.path(), "broker", &["127.0.0.1", "localhost"], false);
    let ca_file = ca.write(dir.path(), "ca.pem");
    // The broker registers with its embedded name server over TLS too.
    let conf = format!(
        "{}tls.enable=true\ntls.client.trustCertPath={}\n",
        server_conf("enforcing", &id),
        ca_file.display()
    );
    let b = Broker::start_tls(&conf, trusting(&ca_file));
    run(async {
        b.create_topic("TlsTopic", 2).await;
        let p = b.producer("tls-pg");
        send_ok(&p, "TlsTopic", 10, |i| format!("secret-{i}")).await;
        p.shutdown().await;
        let c = PullConsumer::new("tls-cg", b.client_config()).unwrap();
        let mut bodies = Vec::new();
        for q in c.fetch_queues("TlsTopic").await.unwrap() {
            let r = c.pull(&q, 0, 32).await.unwrap();
            if r.status == PullStatus::Found {
                bodies.extend(r.messages.into_iter().map(|m| m.body));
            }
        }
        bodies.sort();
        assert_eq!(bodies.len(), 10);
        assert_eq!(bodies[0], b"secret-0");
        c.shutdown().await;

        // A plaintext Tern client is answered with the reason.
        let plain = Producer::new(
            ProducerConfig::new("plain-pg"),
            ClientConfig::new(&b.namesrv),
        )
        .unwrap();
        plain.start();
        let e = plain
            .send(Message::new("TlsTopic", "x"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("requires TLS"), "{e}");
        plain.shutdown().await;
    });
    logged(
        &b,
        &[
            "refusing a plaintext connection",
            "tls.server.mode=enforcing",
        ],
    );

    let ca_arg = ca_file.display().to_string();
    let out = admin(&b.namesrv, &["clusterList", "--tls-trust-cert", &ca_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&b.addr),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = admin(
        &b.namesrv,
        &["topicStatus", "-t", "TlsTopic", "--tls-trust-cert", &ca_arg],
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // Without TLS: refused with the reason; --tls alone: told what is missing.
    let out = admin(&b.namesrv, &["clusterList"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("requires TLS"), "{}", stderr(&out));
    let out = admin(&b.namesrv, &["clusterList", "--tls"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--tls-trust-cert"),
        "{}",
        stderr(&out)
    );

    // A CA that did not issue the broker's certificate: refused on both sides.
    let rogue = Ca::new("Rogue CA").write(dir.path(), "rogue-ca.pem");
    let err = refused_trusting(&b, &rogue);
    assert!(
        err.contains("UnknownIssuer") && err.contains("rogue-ca.pem"),
        "{err}"
    );
    logged(
        &b,
        &[
            "UnknownCA",
            "the client refused this server's certificate",
            "broker.pem",
        ],
    );
}

#[test]
fn an_expired_broker_certificate_is_refused_and_both_sides_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Tern test CA");
    let old = ca.issue(dir.path(), "old-broker", &["127.0.0.1"], true);
    let ca_file = ca.write(dir.path(), "ca.pem");
    // Permissive: the broker registers in plaintext; TLS clients meet the old certificate.
    let b = Broker::start(&server_conf("permissive", &old));
    let err = refused_trusting(&b, &ca_file);
    assert!(err.to_lowercase().contains("expired"), "{err}");
    logged(&b, &["CertificateExpired", "old-broker.pem"]);
    // Plaintext still works under permissive.
    let out = admin(&b.namesrv, &["clusterList"]);
    assert!(out.status.success(), "{}", stderr(&out));
}
