//! The REAL C++ RocketMQ client (PyPI `rocketmq==0.4.4`) against Tern brokers working
//! together or guarded: a SYNC_MASTER and its slave (HA), and a broker with ACL on. The
//! harness is `interop/mod.rs`.

use crate::interop;

use std::fs;
use std::time::Duration;

use interop::*;
use tern_testkit::poll_until;

/// HA replication under the real client: the C++ producer's sends to a SYNC_MASTER are
/// acknowledged (SEND_OK) only once the slave holds them; the master is killed with
/// `kill -9`, and the C++ push consumer reads every acknowledged message from the slave,
/// finding it through the name server's route as it would a Java slave.
#[test]
fn cpp_client_reads_from_the_slave_after_the_master_is_killed() {
    let Some((_serial, py, scratch)) = cpp_test(
        "cpp_client_reads_from_the_slave_after_the_master_is_killed",
        "ha",
    ) else {
        return;
    };
    // The name server lives in a broker of its own, so killing the master leaves it up.
    let ns_host = Broker::start(&scratch.path("ns"), None, scratch.path("broker-ns.log"));
    let conf = |name: &str, extra: &str| {
        let path = scratch.path(&format!("{name}.conf"));
        fs::write(
            &path,
            format!(
                "brokerClusterName=TernCluster\nbrokerName=tern-ha\nstorePathRootDir={}\n\
                 haSendHeartbeatInterval=500\n{extra}",
                scratch.path(name).display()
            ),
        )
        .unwrap();
        path
    };
    let master_conf = conf("master", "brokerRole=SYNC_MASTER\nhaListenPort=0\n");
    let slave_conf = conf("slave", "brokerRole=SLAVE\nbrokerId=1\n");
    let mut master = Broker::start_joined(
        &ns_host.namesrv,
        &master_conf,
        scratch.path("broker-master.log"),
    );
    let slave = Broker::start_joined(
        &ns_host.namesrv,
        &slave_conf,
        scratch.path("broker-slave.log"),
    );
    create_topic(&master.addr, "TernHa", 4);
    // Sends before the slave is streaming would answer SLAVE_NOT_AVAILABLE.
    assert!(
        poll_until(Duration::from_secs(30), || {
            fs::read_to_string(&master.log)
                .unwrap_or_default()
                .contains("streaming the log to the slave")
        }),
        "the slave never connected"
    );
    let acked = send_acked(&py, &scratch, &ns_host.namesrv, "TernHa", 200, None, &[]);
    master.crash();
    consume_acked(&py, &scratch, &ns_host.namesrv, "TernHa", &acked, &[]);
    drop(slave);
    drop(ns_host);
}

/// ACL under the real client: the C++ producer and push consumer sign their requests
/// with `set_session_credentials` (adding their own `OnsChannel` field, which the
/// signature covers), and a broker with `aclEnable=true` serves them; the same producer
/// with a wrong secret gets nothing acknowledged.
#[test]
fn cpp_client_signs_its_requests_for_an_acl_broker() {
    let Some((_serial, py, scratch)) =
        cpp_test("cpp_client_signs_its_requests_for_an_acl_broker", "acl")
    else {
        return;
    };
    let rules = scratch.path("plain_acl.yml");
    fs::write(
        &rules,
        "accounts:\n  - accessKey: cpp_user\n    secretKey: cpp_secret\n    \
         defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n    topicPerms:\n      \
         - TernAcl=PUB|SUB\n      - TBW102=PUB|SUB\n",
    )
    .unwrap();
    let mut broker = Broker::start_in(
        &scratch,
        Some(&format!(
            "aclEnable=true\nplainAclFile={}\n",
            rules.display()
        )),
    );
    let signed = ["--access-key", "cpp_user", "--secret-key", "cpp_secret"];
    let acked = send_acked(
        &py,
        &scratch,
        &broker.namesrv,
        "TernAcl",
        100,
        None,
        &signed,
    );
    consume_acked(&py, &scratch, &broker.namesrv, "TernAcl", &acked, &signed);

    let mut run = Script::start(
        &py,
        &scratch,
        &[
            "--namesrv",
            &broker.namesrv,
            "--send-only",
            "--topic",
            "TernAcl",
            "--count",
            "3",
            "--access-key",
            "cpp_user",
            "--secret-key",
            "wrong_secret",
        ],
    );
    let status = run.finish(SCRIPT_LIMIT);
    assert!(!status.success(), "a wrong secret was accepted");
    assert!(
        !run.lines.iter().any(|l| l.starts_with("ACK ")),
        "{:?}",
        run.lines
    );
    let log = fs::read_to_string(&broker.log).unwrap_or_default();
    assert!(
        log.contains("Check signature failed for accessKey=cpp_user"),
        "the broker did not log the refusal"
    );
    broker.stop_cleanly();
}
