//! TLS on the HA port: a SYNC_MASTER whose every port enforces TLS replicates to a slave
//! with `tls.enable=true` (each send is acknowledged only once the slave holds it, so the
//! log went over TLS), and a plaintext peer on the HA port is closed without a byte of the
//! log.

use crate::common;

use crate::certs;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use tern_shell::tls::{ClientTls, ClientTlsSettings};
use tern_shell::{Connection, ConnectionConfig, ResponseCode};

const TOPIC: &str = "HaTls";

#[test]
fn a_sync_master_replicates_over_tls_and_closes_plaintext_ha_peers() {
    let (md, sd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ca = certs::Ca::new("Tern HA CA");
    let id = ca.issue(md.path(), "master", &["127.0.0.1"], false);
    let ca_file = ca.write(md.path(), "ca.pem");
    let client_tls = format!(
        "tls.enable=true\ntls.client.trustCertPath={}\n",
        ca_file.display()
    );
    let conf = write_conf(
        md.path(),
        &format!(
            "brokerRole=SYNC_MASTER\nhaListenPort=0\ntls.server.mode=enforcing\n\
             tls.server.certPath={}\ntls.server.keyPath={}\n{client_tls}",
            id.cert.display(),
            id.key.display()
        ),
    );
    let m = BrokerProc::standalone(md.path(), &conf);
    let ns = m.namesrv.clone().unwrap();
    let slave_conf = write_conf(
        sd.path(),
        &format!(
            "brokerRole=SLAVE\nbrokerId=1\nnamesrvAddr={ns}\nstorePathRootDir={}\n\
             haSendHeartbeatInterval=500\n{client_tls}",
            sd.path().join("store").display()
        ),
    );
    let args: Vec<OsString> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "-c".into(),
        slave_conf.into(),
    ];
    let s = BrokerProc::start(&args);
    let tls = ClientTls::new(&ClientTlsSettings::trusting(&ca_file)).unwrap();
    let ha = run(async {
        let config = ConnectionConfig {
            tls,
            ..ConnectionConfig::default()
        };
        let conn = Connection::connect(&m.addr, config, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(conn.is_tls());
        let mc = Client { conn };
        create_topic(&mc, TOPIC, 2).await;
        let mut resp = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(20), async || {
                let r = mc.call(send_v2(&msg(TOPIC, b"first", &[]), 0)).await;
                let acked = r.response_code() == ResponseCode::Success;
                resp = Some(r);
                acked
            })
            .await,
            "the slave never acknowledged: {:?}\nmaster:\n{}\nslave:\n{}",
            resp.unwrap(),
            m.stderr_text(),
            s.stderr_text()
        );
        for i in 0..50 {
            let resp = mc
                .call(send_v2(&msg(TOPIC, format!("m{i}").as_bytes(), &[]), i % 2))
                .await;
            assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");
        }
        // The slave's remoting port is plaintext (its own tls.server.mode is disabled).
        let sc = Client::connect(&s.addr).await;
        let info = runtime_info(&sc).await;
        let ha = info["haMasterHaAddr"].clone();
        assert!(ha.starts_with("127.0.0.1:"), "{info:?}");

        // A plaintext peer sending a report gets nothing, and the master says why.
        let mut rogue = std::net::TcpStream::connect(&ha).unwrap();
        rogue
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        rogue.write_all(&0i64.to_be_bytes()).unwrap();
        let mut buf = [0u8; 64];
        let got = rogue.read(&mut buf).unwrap_or(0);
        assert_eq!(got, 0, "a plaintext HA peer was sent {got} bytes");
        ha
    });
    let to_ha = format!("to {ha}: tls.server.mode=enforcing");
    assert!(
        m.wait_for_log(
            &["refusing a plaintext connection", &to_ha],
            Duration::from_secs(10)
        )
        .is_some(),
        "{}",
        m.stderr_text()
    );
    drop(s);
    drop(m);
}
