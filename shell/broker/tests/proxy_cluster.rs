//! The `tern-proxy` binary (CLUSTER mode, RocketMQ's `mqproxy -pm cluster`) in front of two
//! brokers of one cluster, driven by the REAL RocketMQ 5.x client (PyPI
//! `rocketmq-python-client==5.1.2`, `tests/interop/grpc_interop.py`): every process real,
//! on ephemeral ports. Neither broker serves gRPC itself (`enableProxy=false`), so every
//! call goes through the proxy: routes name the proxy, sends spread over both brokers'
//! queues, receives and acks go to the broker a message came from, a FIFO group's order
//! comes from the group's configuration on the brokers (GET_SUBSCRIPTIONGROUP_CONFIG), and
//! a transaction's check-back travels broker → proxy → Telemetry → client.
//!
//! Needs `.venv-grpc` (`scripts/setup-python-grpc.sh`); without it each test prints a SKIP
//! line and passes, unless TERN_REQUIRE_INTEROP is set (test.sh sets it).

mod common;
mod grpc_script;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{BrokerProc, write_conf};
use grpc_script::{GrpcScript, Target, admin, grpc_test, script};
use tern_testkit::{Proc, binary_of, eventually};

/// A running `tern-proxy`: its gRPC address and its stderr so far.
struct Proxy {
    proc: Proc,
    addr: String,
}

impl Proxy {
    /// Starts `tern-proxy -n namesrv --listen 127.0.0.1:0` and waits for its `ready` line.
    fn start(namesrv: &str) -> Proxy {
        let mut cmd = Command::new(binary_of("tern-proxy", "tern-proxy"));
        cmd.args(["-n", namesrv, "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn("tern-proxy", &mut cmd);
        let addr = proc
            .wait_ready(Duration::from_secs(20))
            .iter()
            .find_map(|l| l.strip_prefix("tern-proxy gRPC endpoint on "))
            .map(|rest| rest.split_whitespace().next().unwrap_or("").to_owned())
            .unwrap_or_default();
        assert!(!addr.is_empty(), "no `tern-proxy gRPC endpoint on` line");
        Proxy { proc, addr }
    }

    fn stderr_text(&self) -> String {
        self.proc.log()
    }

    /// SIGTERM, then the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        self.proc.signal_and_wait("TERM", Duration::from_secs(15))
    }
}

/// `tern-admin ARGS -n namesrv --json`, parsed.
fn admin_json(namesrv: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(admin())
        .args(args)
        .args(["-n", namesrv, "--json"])
        .output()
        .expect("run tern-admin");
    assert!(
        out.status.success(),
        "tern-admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tern-admin --json prints JSON")
}

/// Two brokers of DefaultCluster (broker-a hosts the name server), neither serving gRPC,
/// and a proxy in front of them.
struct Cluster {
    _dir: tempfile::TempDir,
    a: BrokerProc,
    b: BrokerProc,
    proxy: Proxy,
    namesrv: String,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let dir_a = dir.path().join("a");
        let dir_b = dir.path().join("b");
        std::fs::create_dir_all(&dir_a).unwrap();
        std::fs::create_dir_all(&dir_b).unwrap();
        // Check-backs within seconds (the transaction scenario's).
        let shared = "enableProxy=false\ntransactionCheckInterval=1000\ntransactionTimeOut=2000\n";
        let conf_a = write_conf(&dir_a, &format!("brokerName=broker-a\n{shared}"));
        let a = BrokerProc::standalone(&dir_a, &conf_a);
        let namesrv = a.namesrv.clone().expect("standalone name server");
        let conf_b = write_conf(
            &dir_b,
            &format!(
                "brokerName=broker-b\n{shared}namesrvAddr={namesrv}\n\
                 storePathRootDir={}\n",
                dir_b.join("store").display()
            ),
        );
        let b = BrokerProc::with_conf(&conf_b);
        assert!(a.grpc.is_none() && b.grpc.is_none(), "enableProxy=false");
        // `updateTopic -c DefaultCluster` must find both brokers.
        eventually("broker-b registered", Duration::from_secs(30), || {
            let brokers = admin_json(&namesrv, &["clusterList"])
                .as_array()
                .map_or(0, Vec::len);
            (brokers >= 2).then_some(())
        });
        let proxy = Proxy::start(&namesrv);
        Cluster {
            _dir: dir,
            a,
            b,
            proxy,
            namesrv,
        }
    }

    fn stderr(&self) -> String {
        format!(
            "--- tern-proxy ---\n{}\n--- broker-a ---\n{}\n--- broker-b ---\n{}",
            self.proxy.stderr_text(),
            self.a.stderr_text(),
            self.b.stderr_text()
        )
    }

    /// [`grpc_test`]'s turn and python, and a started cluster; `None` when the test
    /// should skip.
    fn for_test(test: &str) -> Option<(std::sync::MutexGuard<'static, ()>, PathBuf, Cluster)> {
        let (serial, py) = grpc_test(test)?;
        Some((serial, py, Cluster::start()))
    }

    /// Runs one scenario of the script against the proxy (on `TernProxy-` topics) and
    /// checks its PASS lines.
    fn scenario(&self, py: &Path, name: &str, expect: &[&str]) {
        let target = Target {
            endpoint: &self.proxy.addr,
            namesrv: &self.namesrv,
        };
        let args = ["--prefix", "TernProxy", "--scenario", name];
        let mut run = script(py, &self._dir.path().join("home"), &target, &args);
        run.assert_passed(name, expect, || self.stderr());
    }

    /// Messages each broker holds in `topic` (the sum of its queues' max offsets).
    fn held(&self, topic: &str) -> (i64, i64) {
        let stats = admin_json(&self.namesrv, &["topicStatus", "-t", topic]);
        let mut by = (0, 0);
        for q in stats.as_array().expect("topicStatus --json is an array") {
            let n = q["maxOffset"].as_i64().unwrap_or(0);
            match q["queue"]["brokerName"].as_str() {
                Some("broker-a") => by.0 += n,
                Some("broker-b") => by.1 += n,
                other => panic!("a queue of {other:?} in {stats}"),
            }
        }
        by
    }

    fn stop(mut self) {
        let s = self.proxy.stop();
        assert!(s.success(), "tern-proxy exited with {s} after SIGTERM");
        for b in [&mut self.b, &mut self.a] {
            let s = b.stop();
            assert!(s.success(), "tern-broker exited with {s} after SIGTERM");
        }
    }
}

#[test]
fn proxy_spreads_5x_sends_over_the_cluster_and_reads_them_back() {
    let Some((_serial, py, c)) =
        Cluster::for_test("proxy_spreads_5x_sends_over_the_cluster_and_reads_them_back")
    else {
        return;
    };
    c.scenario(
        &py,
        "normal",
        &[
            "normal: 200 sends answered with a message id each",
            "normal: every sent message id received",
            "normal: bodies, tags, keys and properties intact",
            "normal: each message delivered once",
            "normal: acked messages never come again",
            "normal (TagA): every sent message id received",
        ],
    );
    let (a, b) = c.held("TernProxy-normal");
    assert_eq!(a + b, 200, "broker-a {a}, broker-b {b}");
    // In turn over 16 queues of two brokers: each holds about half.
    assert!(
        a >= 50 && b >= 50,
        "sends not spread: broker-a {a}, broker-b {b}"
    );
    c.stop();
}

#[test]
fn proxy_keeps_fifo_order_and_carries_transaction_check_backs() {
    let Some((_serial, py, c)) =
        Cluster::for_test("proxy_keeps_fifo_order_and_carries_transaction_check_backs")
    else {
        return;
    };
    c.scenario(
        &py,
        "fifo",
        &[
            // The group's consumeMessageOrderly, read from a broker by the proxy.
            "fifo: the PushConsumer took fifo from the server's settings",
            "fifo: every message consumed",
            "fifo: group A consumed in send order",
            "fifo: group B consumed in send order",
        ],
    );
    c.scenario(
        &py,
        "transaction",
        &[
            "transaction: commit answered OK",
            "transaction: the committed message delivered once",
            "transaction: the rolled-back message never delivered",
            "transaction: the broker's check-back reached the checker",
            "transaction: the unresolved one, committed by the checker, delivered once",
        ],
    );
    c.stop();
}
