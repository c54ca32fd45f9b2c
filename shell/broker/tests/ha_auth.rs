//! With `aclEnable=true` a master streams its log only to slaves that sign in with an
//! admin account (`innerClientAuthenticationCredentials`): a plain TCP peer that sends
//! 8 bytes, a slave without credentials and a slave of a non-admin account are closed
//! and logged, and get no byte of the log. A broker also registers, signed, with a name
//! server that checks access.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use common::*;
use tern_shell::acl::SessionCredentials;
use tern_shell::acl::settings::AclSettings;
use tern_shell::headers::SendMessageResponseHeader;
use tern_shell::{RemotingCommand, ResponseCode};

const TOPIC: &str = "HaAuth";

const RULES: &str = "\
accounts:
  - accessKey: slave_admin
    secretKey: slave_secret
    admin: true
  - accessKey: tern_user
    secretKey: user_secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
";

fn admin() -> SessionCredentials {
    SessionCredentials::new("slave_admin", "slave_secret")
}

fn creds_line(ak: &str, sk: &str) -> String {
    format!(
        "innerClientAuthenticationCredentials={{\"accessKey\":\"{ak}\",\"secretKey\":\"{sk}\"}}\n"
    )
}

fn rules_file(dir: &Path) -> std::path::PathBuf {
    let rules = dir.join("plain_acl.yml");
    std::fs::write(&rules, RULES).unwrap();
    rules
}

fn as_admin(req: RemotingCommand) -> RemotingCommand {
    signed(req, &admin())
}

#[track_caller]
fn master_logs(m: &BrokerProc, needle: &str) {
    assert!(
        m.wait_for_log(&[needle], Duration::from_secs(20)).is_some(),
        "master never logged {needle:?}: {}",
        m.stderr_text()
    );
}

#[test]
fn only_slaves_signed_in_as_admins_are_streamed_the_log() {
    let (md, dirs) = (
        tempfile::tempdir().unwrap(),
        [(); 3].map(|_| tempfile::tempdir().unwrap()),
    );
    let ha_port = tern_testkit::free_port();
    let conf = write_conf(
        md.path(),
        &format!(
            "brokerRole=SYNC_MASTER\nhaListenPort={ha_port}\naclEnable=true\nplainAclFile={}\n",
            rules_file(md.path()).display()
        ),
    );
    let m = BrokerProc::standalone(md.path(), &conf);
    let ns = m.namesrv.clone().unwrap();
    run(async {
        let mc = Client::connect(&m.addr).await;
        expect_code(
            &mc.call(as_admin(create_topic_req(TOPIC, 1))).await,
            ResponseCode::Success,
        );

        // A plain peer asking for the log from offset 0: closed, nothing sent.
        let mut rogue = std::net::TcpStream::connect(("127.0.0.1", ha_port)).unwrap();
        rogue.write_all(&0i64.to_be_bytes()).unwrap();
        rogue
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let _ = rogue.read_to_end(&mut got);
        assert!(
            got.is_empty(),
            "the rogue peer was sent {} bytes",
            got.len()
        );
        master_logs(&m, "the slave sent no HELLO");

        // A slave without credentials, then one of a non-admin account: refused.
        let plain = BrokerProc::slave(dirs[0].path(), &ns, "");
        master_logs(&m, "aclEnable is on and the slave sent no HELLO");
        drop(plain);
        let user = BrokerProc::slave(dirs[1].path(), &ns, &creds_line("tern_user", "user_secret"));
        master_logs(&m, "accessKey=tern_user is not admin");
        drop(user);
        // Nobody holds the log: a SYNC_MASTER send has no slave.
        let resp = mc.call(as_admin(send_v2(&msg(TOPIC, b"x", &[]), 0))).await;
        assert_eq!(resp.response_code(), ResponseCode::SlaveNotAvailable);

        // The admin slave signs in and acknowledges sends.
        let s = BrokerProc::slave(
            dirs[2].path(),
            &ns,
            &creds_line("slave_admin", "slave_secret"),
        );
        master_logs(&m, "slave signed in as slave_admin");
        tern_testkit::wait_until(
            "the signed slave never acknowledged",
            Duration::from_secs(20),
            async || {
                let resp = mc.call(as_admin(send_v2(&msg(TOPIC, b"y", &[]), 0))).await;
                if resp.response_code() != ResponseCode::Success {
                    return false;
                }
                let h: SendMessageResponseHeader = resp.decode_header().unwrap();
                assert!(!h.msg_id.is_empty());
                true
            },
        )
        .await;
        // Its topic sync (admin-only reads of the master) went through signed too.
        let sc = Client::connect(&s.addr).await;
        tern_testkit::wait_until(
            "the slave never synced the topics",
            Duration::from_secs(20),
            async || all_topics(&sc).await.contains(TOPIC),
        )
        .await;
    });
}

async fn all_topics(c: &Client) -> String {
    let resp = c
        .call(as_admin(RemotingCommand::request_code(
            tern_shell::RequestCode::GetAllTopicConfig,
        )))
        .await;
    String::from_utf8_lossy(&resp.body).into_owned()
}

#[test]
fn a_broker_registers_signed_with_a_name_server_that_checks_access() {
    let dir = tempfile::tempdir().unwrap();
    let ns_config = tern_namesrv::config::NamesrvConfig {
        bind_address: "127.0.0.1".into(),
        listen_port: 0,
        kv_config_path: dir.path().join("kv.json"),
        acl: AclSettings {
            enable: true,
            file: rules_file(dir.path()),
            replay_window: Duration::ZERO,
        },
        ..Default::default()
    };
    run(async {
        let ns = tern_namesrv::NameServer::start(ns_config).await.unwrap();
        let ns_addr = ns.local_addr().to_string();
        let broker_dir = tempfile::tempdir().unwrap();
        let conf = write_conf(
            broker_dir.path(),
            &format!(
                "namesrvAddr={ns_addr}\nstorePathRootDir={}\n{}",
                broker_dir.path().join("store").display(),
                creds_line("slave_admin", "slave_secret")
            ),
        );
        let b = BrokerProc::with_conf(&conf);
        let nc = Client::connect(&ns_addr).await;
        // The broker's own topics are routed once its signed registration is taken.
        let mut resp = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(20), async || {
                let r = nc.call(as_admin(route_req("TBW102"))).await;
                let routed = r.response_code() == ResponseCode::Success;
                resp = Some(r);
                routed
            })
            .await,
            "never registered: {:?}\n{}",
            resp.unwrap(),
            b.stderr_text()
        );
        assert!(String::from_utf8_lossy(&resp.unwrap().body).contains(&b.addr));
        drop(b);
        ns.shutdown().await;
    });
}
