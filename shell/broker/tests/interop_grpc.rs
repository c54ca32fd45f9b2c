//! Interop with the REAL RocketMQ 5.x client (PyPI `rocketmq-python-client==5.1.2`, Apache's
//! pure-Python gRPC client) against the real `tern-broker --standalone` process and its gRPC
//! endpoint (apache.rocketmq.v2 MessagingService, `grpcServerPort=0`, the bound address read
//! from the broker's `tern-broker gRPC endpoint on` line). Each test starts its own broker in
//! a temp dir on ephemeral ports and runs one scenario of `tests/interop/grpc_interop.py`
//! (normal, fifo, delay, transaction with a check-back, simple, push retry and DLQ, errors,
//! cross with Apache's 4.x C++ client, restart across SIGTERM and kill -9); the script makes
//! its topics and groups with `tern-admin` and checks what the client observes: ids, bodies,
//! tags, keys, properties, counts, order, timings. A test asserts the script's exit status,
//! its verdict and the scenario's key PASS lines; on failure the broker's stderr is printed.
//!
//! Needs `.venv-grpc` (`scripts/setup-python-grpc.sh`; the cross test also `.venv`,
//! `scripts/setup-python.sh`). Without them each test prints a SKIP line and passes, unless
//! TERN_REQUIRE_INTEROP is set (test.sh sets it).

mod common;

mod grpc_script;

#[path = "../../tests/support/certs.rs"]
mod certs;

use std::ffi::OsString;
use std::time::Duration;

use common::{BrokerProc, write_conf};
use grpc_script::{GrpcScript, Target, grpc_test, parse_verdict, script, script_with_env};
use tern_testkit::python::python_or_skip;

/// A standalone broker with `extra` conf lines; the gRPC endpoint is on an ephemeral port
/// (`grpcServerPort=0` is in the harness's GEOMETRY).
fn grpc_broker(extra: &str) -> (tempfile::TempDir, BrokerProc) {
    let (dir, b) = common::start(extra);
    assert!(
        b.grpc.is_some(),
        "no `tern-broker gRPC endpoint on` line; stderr:\n{}",
        b.stderr_text()
    );
    (dir, b)
}

/// Runs one scenario against a fresh broker and checks its key PASS lines.
fn scenario(test: &str, name: &str, extra_conf: &str, extra_args: &[&str], expect: &[&str]) {
    scenario_in(test, name, None, extra_conf, extra_args, &[], expect);
}

/// [`scenario`] with the broker's files in `dir` (its conf may name files there) and
/// `env` given to the script.
fn scenario_in(
    test: &str,
    name: &str,
    dir: Option<tempfile::TempDir>,
    extra_conf: &str,
    extra_args: &[&str],
    env: &[(&str, &str)],
    expect: &[&str],
) {
    let Some((_serial, py)) = grpc_test(test) else {
        return;
    };
    let (dir, mut broker) = match dir {
        Some(d) => {
            let conf = common::write_conf(d.path(), extra_conf);
            let b = BrokerProc::standalone(d.path(), &conf);
            assert!(
                b.grpc.is_some(),
                "no gRPC endpoint; stderr:\n{}",
                b.stderr_text()
            );
            (d, b)
        }
        None => grpc_broker(extra_conf),
    };
    let prefix = format!("TernGrpc-{name}").replace('_', "-");
    let mut args = vec!["--prefix", &prefix, "--scenario", name];
    args.extend_from_slice(extra_args);
    let target = Target::of(&broker);
    let mut run = script_with_env(&py, &dir.path().join("home"), &target, &args, env);
    run.assert_passed(name, expect, || broker.stderr_text());
    let status = broker.stop();
    assert!(
        status.success(),
        "tern-broker exited with {status} after SIGTERM"
    );
}

#[test]
fn grpc_normal_send_and_simple_consumer_receive_intact() {
    scenario(
        "grpc_normal_send_and_simple_consumer_receive_intact",
        "normal",
        "",
        &[],
        &[
            "normal: 200 sends answered with a message id each",
            "normal: every sent message id received",
            "normal: bodies, tags, keys and properties intact",
            "normal: each message delivered once",
            "normal: delivery_attempt is 1",
            "normal: acked messages never come again",
            "normal: tag filter TagA receives only TagA",
            "normal (TagA): every sent message id received",
        ],
    );
}

#[test]
fn grpc_fifo_message_groups_are_consumed_in_order() {
    scenario(
        "grpc_fifo_message_groups_are_consumed_in_order",
        "fifo",
        "",
        &[],
        &[
            "fifo: the PushConsumer took fifo from the server's settings",
            "fifo: every message consumed",
            "fifo: group A consumed in send order",
            "fifo: group B consumed in send order",
            "fifo: group C consumed in send order",
            "fifo: a message_group send to a NORMAL topic is refused by the client",
        ],
    );
}

#[test]
fn grpc_delay_messages_arrive_when_due() {
    scenario(
        "grpc_delay_messages_arrive_when_due",
        "delay",
        // RECALL_MESSAGE is off by default, as in RocketMQ.
        "recallMessageEnable=true\n",
        &[],
        &[
            "delay: every delayed message received",
            "delay: none received before due - 1 s",
            "delay: each delivered once",
            "delay: recall_message answers the recalled message id",
            "delay: the recalled message never arrives",
        ],
    );
}

#[test]
fn grpc_transaction_commit_rollback_and_check_back() {
    // Half messages older than 2 s are checked back every second.
    scenario(
        "grpc_transaction_commit_rollback_and_check_back",
        "transaction",
        "transactionCheckInterval=1000\ntransactionTimeOut=2000\n",
        &[],
        &[
            "transaction: commit answered OK",
            "transaction: rollback answered OK",
            "transaction: the committed message delivered once",
            "transaction: the rolled-back message never delivered",
            "transaction: the broker's check-back reached the checker",
            "transaction: the unresolved one, committed by the checker, delivered once",
        ],
    );
}

#[test]
fn grpc_simple_consumer_ack_invisible_duration_and_bad_handle() {
    scenario(
        "grpc_simple_consumer_ack_invisible_duration_and_bad_handle",
        "simple",
        "",
        &[],
        &[
            "simple: the acked message never came back",
            "simple: the unacked message came back with its message id, delivery_attempt 2",
            "simple: ... no earlier than its invisible duration",
            "simple: the one changed to 2 s came back sooner",
            "simple: a receive with invisible duration 5 s (< 10 s) raises BadRequestException",
            "simple: an ack with a garbage receipt handle raises BadRequestException",
        ],
    );
}

#[test]
fn grpc_push_consumer_retries_then_dead_letters() {
    scenario(
        "grpc_push_consumer_retries_then_dead_letters",
        "push_retry_dlq",
        "",
        &[],
        &[
            "push_retry_dlq: X redelivered with delivery_attempt 1, 2, 3",
            "push_retry_dlq: X is in %DLQ%",
            "push_retry_dlq: %DLQ%",
            "push_retry_dlq: the other messages consumed once each",
        ],
    );
}

#[test]
fn grpc_errors_are_the_client_exceptions() {
    scenario(
        "grpc_errors_are_the_client_exceptions",
        "errors",
        "",
        &[],
        &[
            "errors: QueryRoute of an unknown topic raises NotFoundException",
            "errors: tag 'a|b' sent anyway raises BadRequestException",
            "errors: a 64-byte message_group raises BadRequestException",
        ],
    );
}

const ACL_RULES: &str = "\
accounts:
  - accessKey: ACL_WRITER
    secretKey: writer_secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TernGrpc-acl-acl=PUB|SUB
  - accessKey: ACL_READER
    secretKey: reader_secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TernGrpc-acl-acl=SUB
  - accessKey: tern_admin
    secretKey: admin_secret_1
    admin: true
";

#[test]
fn grpc_acl_checks_the_5x_clients_own_signature() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("plain_acl.yml");
    std::fs::write(&rules, ACL_RULES).unwrap();
    let conf = format!(
        "aclEnable=true\nplainAclFile={}\n\
         innerClientAuthenticationCredentials={{\"accessKey\":\"tern_admin\",\"secretKey\":\"admin_secret_1\"}}\n",
        rules.display()
    );
    scenario_in(
        "grpc_acl_checks_the_5x_clients_own_signature",
        "acl",
        Some(dir),
        &conf,
        &[
            "--access-key",
            "ACL_WRITER",
            "--secret-key",
            "writer_secret",
        ],
        &[
            ("TERN_ACCESS_KEY", "tern_admin"),
            ("TERN_SECRET_KEY", "admin_secret_1"),
        ],
        &[
            "acl: the right account receives what it sent",
            "acl: a wrong secret key is refused (UnauthorizedException)",
            "acl: no credentials are refused (UnauthorizedException)",
            "acl: an account with only SUB on the topic cannot send",
            "acl: the SUB-only account receives",
        ],
    );
}

#[test]
fn grpc_clients_send_and_receive_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = certs::Ca::new("Tern gRPC interop CA");
    let id = ca.issue(dir.path(), "broker", &["127.0.0.1"], false);
    let roots = ca.write(dir.path(), "ca.pem");
    let conf = format!(
        "tls.server.mode=permissive\ntls.server.certPath={}\ntls.server.keyPath={}\n",
        id.cert.display(),
        id.key.display()
    );
    let roots = roots.display().to_string();
    scenario_in(
        "grpc_clients_send_and_receive_over_tls",
        "tls",
        Some(dir),
        &conf,
        &[],
        &[("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", &roots)],
        &[
            "tls: 5 sends over TLS answered",
            "tls: all 5 received over TLS, intact",
        ],
    );
}

#[test]
fn grpc_and_cpp_clients_read_each_others_messages() {
    let test = "grpc_and_cpp_clients_read_each_others_messages";
    let Some(cpp) = python_or_skip(test) else {
        return;
    };
    let cpp = cpp.to_string_lossy().into_owned();
    scenario(
        test,
        "cross",
        "",
        &["--cpp-python", &cpp],
        &[
            "cross: the C++ consumer got every 5.x message",
            "cross: body, tag, keys, user property and UNIQ_KEY == the 5.x message id",
            "cross (C++ -> 5.x): every sent message id received",
            "cross (C++ -> 5.x): bodies, tags, keys and properties intact",
            "cross: a > 4 KiB body (compressed by the C++ client) arrived inflated",
        ],
    );
}

/// The restart scenario: the broker on fixed ports (the clients reconnect to the same
/// endpoint), stopped with SIGTERM or `kill -9` when the script says `RESTART-NOW` and
/// started again on the same data; the script goes on with the same client objects.
fn restart(test: &str, kill9: bool) {
    let Some((_serial, py)) = grpc_test(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let [remoting, namesrv, grpc] = <[u16; 3]>::try_from(tern_testkit::free_ports(3)).unwrap();
    // No metrics listeners: on port 0 they took an ephemeral port, which could be one of
    // these three just released (a CI run saw the gRPC port taken so).
    let conf = write_conf(
        dir.path(),
        &format!("grpcServerPort={grpc}\nflushDiskType=SYNC_FLUSH\nmetricsExporterType=DISABLE\n"),
    );
    let args: Vec<OsString> = vec![
        "--standalone".into(),
        "--data-dir".into(),
        dir.path().join("data").into(),
        "--listen".into(),
        format!("127.0.0.1:{remoting}").into(),
        "--namesrv-listen".into(),
        format!("127.0.0.1:{namesrv}").into(),
        "-c".into(),
        conf.into(),
    ];
    let mut broker = BrokerProc::start(&args);
    let kind = if kill9 { "kill" } else { "term" };
    let mut run = script(
        &py,
        &dir.path().join("home"),
        &Target::of(&broker),
        &[
            "--prefix",
            &format!("TernGrpc-restart-{kind}"),
            "--scenario",
            "restart",
            "--restart-kind",
            kind,
        ],
    );
    assert!(
        run.wait_line("RESTART-NOW", Duration::from_secs(120)),
        "the script never asked for the restart: {:#?}",
        run.lines
    );
    if kill9 {
        broker.kill9();
    } else {
        let status = broker.stop();
        assert!(
            status.success(),
            "tern-broker exited with {status} after SIGTERM"
        );
    }
    let mut broker = BrokerProc::start(&args);
    assert_eq!(
        broker.grpc.as_deref(),
        Some(format!("127.0.0.1:{grpc}").as_str())
    );
    run.tell("restarted");
    let mut expect = vec![
        "restart: 100 sends answered",
        "restart: the same Producer sends after the restart",
        "restart: the same SimpleConsumer receives again within",
        "restart: everything not acked was received after the restart",
        "restart: the 25 unacked came back",
    ];
    if !kill9 {
        expect.extend([
            "restart: no acked message came back",
            "restart: ... with delivery_attempt >= 2",
        ]);
    }
    run.assert_passed(&format!("restart ({kind})"), &expect, || {
        broker.stderr_text()
    });
    let status = broker.stop();
    assert!(
        status.success(),
        "tern-broker exited with {status} after SIGTERM"
    );
}

#[test]
fn grpc_clients_ride_out_a_clean_broker_restart() {
    restart("grpc_clients_ride_out_a_clean_broker_restart", false);
}

#[test]
fn grpc_nothing_acknowledged_is_lost_across_kill9() {
    restart("grpc_nothing_acknowledged_is_lost_across_kill9", true);
}

#[test]
fn verdict_line_parses() {
    assert_eq!(parse_verdict("12 passed, 0 failed"), Some((12, 0)));
    assert_eq!(parse_verdict("3 passed, 2 failed\n"), Some((3, 2)));
    assert_eq!(parse_verdict("passed"), None);
}
