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

#[path = "../../../tests/support/rocketmq_python.rs"]
mod rocketmq_python;

#[path = "../../../tests/support/rocketmq_python_grpc.rs"]
mod rocketmq_python_grpc;

// Only `binary_of` is used here (tern-admin belongs to tern-client).
#[allow(dead_code)]
#[path = "../../../tests/support/binaries.rs"]
mod binaries;

#[path = "../../tests/support/certs.rs"]
mod certs;

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use common::{BrokerProc, write_conf};
use rocketmq_python::{python_or_skip, repo_root};
use rocketmq_python_grpc::grpc_python_or_skip;

/// How long one script run may take (its own `--deadline` is shorter).
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

/// The client and the broker are heavy on 2 cores: one scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn admin() -> PathBuf {
    binaries::binary_of("tern-client", "tern-admin")
}

fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `tests/interop/grpc_interop.py` as a child: HOME in the test's temp dir (the client's
/// logs), stdin piped (the restart scenario waits on it), stdout collected and streamed.
struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    lines: Vec<String>,
}

impl Script {
    fn spawn(py: &Path, home: &Path, broker: &BrokerProc, args: &[&str]) -> Script {
        Self::spawn_with_env(py, home, broker, args, &[])
    }

    /// [`Script::spawn`] with `env` added (ACL keys for tern-admin, TLS roots).
    fn spawn_with_env(
        py: &Path,
        home: &Path,
        broker: &BrokerProc,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Script {
        let grpc = broker
            .grpc
            .clone()
            .expect("no `tern-broker gRPC endpoint on` line: grpcServerPort is set");
        let namesrv = broker.namesrv.clone().expect("standalone name server");
        let admin = admin();
        let script = repo_root().join("tests/interop/grpc_interop.py");
        let mut full: Vec<OsString> = vec![
            script.into(),
            "--endpoint".into(),
            grpc.into(),
            "--namesrv".into(),
            namesrv.into(),
            "--admin".into(),
            admin.into(),
        ];
        full.extend(args.iter().map(OsString::from));
        eprintln!("$ {} {:?}", py.display(), full);
        std::fs::create_dir_all(home).unwrap();
        let mut child = Command::new(py)
            .args(&full)
            .env("HOME", home)
            .env("PYTHONUNBUFFERED", "1")
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python");
        let err = lines_of(child.stderr.take().unwrap());
        thread::spawn(move || {
            for line in err {
                eprintln!("  py| {line}");
            }
        });
        let stdout = lines_of(child.stdout.take().unwrap());
        Script {
            stdin: child.stdin.take(),
            child,
            stdout,
            lines: Vec::new(),
        }
    }

    /// Reads stdout until the line `want` (true), or its end or `limit` (false).
    fn wait_line(&mut self, want: &str, limit: Duration) -> bool {
        self.read_until(Some(want), limit)
    }

    /// Collects stdout lines until one equals `want` (true), or until the end of stdout or
    /// `limit` (false).
    fn read_until(&mut self, want: Option<&str>, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            match self.stdout.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    eprintln!("  py> {line}");
                    let hit = want == Some(line.as_str());
                    self.lines.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }

    /// Writes a line to the script's stdin.
    fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin piped");
        writeln!(stdin, "{line}").expect("write to the script's stdin");
        stdin.flush().unwrap();
    }

    /// Reads the rest of stdout and waits for the exit (killed past `limit`).
    fn finish(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.read_until(None, limit);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts exit 0, the `N passed, 0 failed` verdict and a PASS line starting with each
    /// of `expect`; prints the broker's stderr tail before panicking.
    fn assert_passed(&mut self, what: &str, broker: &BrokerProc, expect: &[&str]) {
        let status = self.finish(SCRIPT_LIMIT);
        let verdict = self.lines.iter().rev().find_map(|l| parse_verdict(l));
        let fails: Vec<&String> = self
            .lines
            .iter()
            .filter(|l| l.starts_with("FAIL"))
            .collect();
        let absent: Vec<&&str> = expect
            .iter()
            .filter(|e| {
                !self
                    .lines
                    .iter()
                    .any(|l| l.strip_prefix("PASS ").is_some_and(|p| p.starts_with(**e)))
            })
            .collect();
        let ok = status.is_some_and(|s| s.success())
            && verdict.is_some_and(|(p, f)| p > 0 && f == 0)
            && absent.is_empty();
        if !ok {
            let text = broker.stderr_text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- tern-broker stderr (last 150 lines) ---\n{}",
                lines[lines.len().saturating_sub(150)..].join("\n")
            );
        }
        assert!(
            ok,
            "{what}: exit {status:?}, verdict {verdict:?}; FAIL lines: {fails:#?}; \
             expected PASS lines missing: {absent:?}"
        );
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `N passed, M failed` → (N, M).
fn parse_verdict(line: &str) -> Option<(u32, u32)> {
    let (p, f) = line.trim().split_once(" passed, ")?;
    Some((p.parse().ok()?, f.strip_suffix(" failed")?.parse().ok()?))
}

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
    let _serial = serial();
    let Some(py) = grpc_python_or_skip(test) else {
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
    let mut run = Script::spawn_with_env(&py, &dir.path().join("home"), &broker, &args, env);
    run.assert_passed(name, &broker, expect);
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

/// `N` distinct free ports (all bound at once, then released).
fn free_ports<const N: usize>() -> [u16; N] {
    let ls: Vec<std::net::TcpListener> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| ls[i].local_addr().unwrap().port())
}

/// The restart scenario: the broker on fixed ports (the clients reconnect to the same
/// endpoint), stopped with SIGTERM or `kill -9` when the script says `RESTART-NOW` and
/// started again on the same data; the script goes on with the same client objects.
fn restart(test: &str, kill9: bool) {
    let _serial = serial();
    let Some(py) = grpc_python_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let [remoting, namesrv, grpc] = free_ports::<3>();
    let conf = write_conf(
        dir.path(),
        &format!("grpcServerPort={grpc}\nflushDiskType=SYNC_FLUSH\n"),
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
    let mut run = Script::spawn(
        &py,
        &dir.path().join("home"),
        &broker,
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
    run.assert_passed(&format!("restart ({kind})"), &broker, &expect);
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
