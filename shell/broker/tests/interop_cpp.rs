//! Interop with the REAL C++ RocketMQ client (PyPI `rocketmq==0.4.4`, Apache's
//! rocketmq-client-cpp 1.2.x) against the real `tern-broker --standalone` process: the
//! scenarios of `tests/interop/cpp_interop.py` on auto-created and precreated topics (RocketMQ
//! 5 timer messages set through the C++ client's user properties among them), and
//! a restart test that sends with the C++ producer, `kill -9`s the broker mid-stream
//! (SYNC_FLUSH), restarts it on the same data dir and consumes with the C++ push consumer:
//! every acknowledged message must come back; then the same across a clean SIGTERM stop.
//! With `duplicateCheckWindowSeconds` on, a message the C++ producer sent, sent again with
//! its UNIQ_KEY, is answered with the first copy's offset and stored once (the C++ client
//! replaces a UNIQ_KEY property with its own id, so the resend is a plain remoting send).
//! A running C++ push consumer's group reset to a time (INVOKE_BROKER_TO_RESET_OFFSET)
//! consumes again from there: the broker tells it in the list form its parser reads.
//! The harness is `interop/mod.rs`.

use crate::interop;

use crate::certs;

use std::fs;
use std::time::Duration;

use interop::*;

#[test]
fn cpp_client_scenarios_against_standalone_broker() {
    let Some((_serial, py, scratch)) = cpp_test(
        "cpp_client_scenarios_against_standalone_broker",
        "scenarios",
    ) else {
        return;
    };
    // Short delay levels keep the delay scenario to seconds: level 2 (its sends) is 2 s,
    // level 3 (a first retry) 1 s.
    let levels = "1s 2s 1s";
    let mut broker = Broker::start_in(&scratch, Some(&format!("messageDelayLevel={levels}\n")));
    assert_scenarios_pass(
        &py,
        &scratch,
        &broker.namesrv,
        "TernCpp",
        &["--delay-levels", levels],
        "C++ client scenarios (auto-created topics)",
    );
    broker.stop_cleanly();
}

#[test]
fn a_running_cpp_consumer_reset_to_a_time_consumes_again_from_there() {
    let Some((_serial, py, scratch)) = cpp_test(
        "a_running_cpp_consumer_reset_to_a_time_consumes_again_from_there",
        "reset",
    ) else {
        return;
    };
    let mut broker = Broker::start_in(&scratch, None);
    assert_scenarios_pass(
        &py,
        &scratch,
        &broker.namesrv,
        "TernReset",
        &["--scenarios", "reset"],
        "a running C++ consumer reset to a time",
    );
    broker.stop_cleanly();
}

#[test]
fn cpp_client_uses_topic_precreated_with_update_and_create_topic() {
    let Some((_serial, py, scratch)) = cpp_test(
        "cpp_client_uses_topic_precreated_with_update_and_create_topic",
        "precreated",
    ) else {
        return;
    };
    let mut broker = Broker::start_in(&scratch, None);
    create_topic(&broker.addr, "TernPre-sync", 8);
    assert_scenarios_pass(
        &py,
        &scratch,
        &broker.namesrv,
        "TernPre",
        &[
            "--precreated",
            "--expect-queues",
            "8",
            "--scenarios",
            "sync",
            "--count",
            "120",
        ],
        "C++ client on a precreated topic",
    );
    broker.stop_cleanly();
}

#[test]
fn a_cpp_message_sent_again_with_its_uniq_key_is_stored_once() {
    let Some((_serial, py, scratch)) = cpp_test(
        "a_cpp_message_sent_again_with_its_uniq_key_is_stored_once",
        "dedup",
    ) else {
        return;
    };
    let mut broker = Broker::start_in(&scratch, Some("duplicateCheckWindowSeconds=60\n"));
    assert_scenarios_pass(
        &py,
        &scratch,
        &broker.namesrv,
        "TernDedup",
        &["--scenarios", "dedup"],
        "C++ messages sent again with their UNIQ_KEY",
    );
    broker.stop_cleanly();
}

#[test]
fn cpp_acknowledged_messages_survive_kill9_and_clean_restart() {
    let Some((_serial, py, scratch)) = cpp_test(
        "cpp_acknowledged_messages_survive_kill9_and_clean_restart",
        "restart",
    ) else {
        return;
    };
    let conf = scratch.path("broker.conf");
    fs::write(
        &conf,
        "brokerClusterName=TernCluster\nbrokerName=tern-interop\nbrokerId=0\n\
         flushDiskType=SYNC_FLUSH\nautoCreateTopicEnable=true\n",
    )
    .unwrap();
    let data = scratch.path("data");

    // 1. kill -9 while the C++ producer is sending.
    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-1.log"));
    let crashed = send_acked(
        &py,
        &scratch,
        &broker.namesrv.clone(),
        "TernCrash",
        400,
        Some((150, &mut || broker.crash())),
        &[],
    );
    assert!(crashed.len() >= 150, "{} acknowledged", crashed.len());
    drop(broker);

    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-2.log"));
    consume_acked(&py, &scratch, &broker.namesrv, "TernCrash", &crashed, &[]);

    // 2. A clean stop (SIGTERM) between sending and consuming.
    let clean = send_acked(&py, &scratch, &broker.namesrv, "TernClean", 200, None, &[]);
    broker.stop_cleanly();
    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-3.log"));
    consume_acked(&py, &scratch, &broker.namesrv, "TernClean", &clean, &[]);
    broker.stop_cleanly();
}

#[test]
fn verdict_line_parses() {
    assert_eq!(parse_verdict("12 passed, 0 failed"), Some((12, 0)));
    assert_eq!(parse_verdict("3 passed, 2 failed\n"), Some((3, 2)));
    assert_eq!(parse_verdict("passed"), None);
}

/// `tls.server.mode=permissive`: the C++ client (plaintext only) runs its sync and
/// oneway scenarios against a broker and name server that serve TLS on the same ports,
/// and a TLS client is served beside it.
#[test]
fn cpp_client_works_against_a_permissive_tls_broker() {
    let Some((_serial, py, scratch)) =
        cpp_test("cpp_client_works_against_a_permissive_tls_broker", "tls")
    else {
        return;
    };
    let ca = certs::Ca::new("Tern interop CA");
    let id = ca.issue(&scratch.path(""), "broker", &["127.0.0.1"], false);
    let ca_file = ca.write(&scratch.path(""), "ca.pem");
    let mut broker = Broker::start_in(
        &scratch,
        Some(&format!(
            "tls.server.mode=permissive\ntls.server.certPath={}\ntls.server.keyPath={}\n",
            id.cert.display(),
            id.key.display()
        )),
    );
    assert_scenarios_pass(
        &py,
        &scratch,
        &broker.namesrv,
        "TernTls",
        &["--scenarios", "sync,oneway", "--count", "200"],
        "C++ client against a permissive TLS broker",
    );
    // The same ports serve TLS: the name server and the broker, each over a handshake.
    let tls =
        tern_shell::tls::ClientTls::new(&tern_shell::tls::ClientTlsSettings::trusting(&ca_file))
            .unwrap();
    tern_shell::runtime::block_on(async {
        for addr in [&broker.namesrv, &broker.addr] {
            let config = tern_shell::ConnectionConfig {
                tls: tls.clone(),
                ..tern_shell::ConnectionConfig::default()
            };
            let conn = tern_shell::Connection::connect(addr, config, Duration::from_secs(5))
                .await
                .unwrap();
            assert!(conn.is_tls());
            let resp = conn
                .request(
                    tern_shell::RemotingCommand::request_code(
                        tern_shell::RequestCode::GetBrokerClusterInfo,
                    ),
                    Duration::from_secs(5),
                )
                .await
                .unwrap();
            // The name server answers the cluster table; the broker does not serve the
            // code, and says so: either way an answer came back over TLS.
            assert!(
                resp.response_code() == tern_shell::ResponseCode::Success
                    || resp.response_code() == tern_shell::ResponseCode::RequestCodeNotSupported,
                "{addr}: {resp:?}"
            );
        }
    });
    broker.stop_cleanly();
}
