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

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use common::{BrokerProc, write_conf};
use grpc_script::binaries::binary_of;
use grpc_script::rocketmq_python_grpc::grpc_python_or_skip;
use grpc_script::{Script, Target, admin, serial};

/// A running `tern-proxy`: its gRPC address and its stderr so far.
struct Proxy {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    /// Starts `tern-proxy -n namesrv --listen 127.0.0.1:0` and waits for its `ready` line.
    fn start(namesrv: &str) -> Proxy {
        let mut child = Command::new(binary_of("tern-proxy", "tern-proxy"))
            .args(["-n", namesrv, "--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tern-proxy");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let err = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.guard().push(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut p = Proxy {
            child,
            addr: String::new(),
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "tern-proxy not ready within 20 s; stderr:\n{}",
                p.stderr_text()
            );
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("tern-proxy gRPC endpoint on ") {
                        p.addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    } else if line == "ready" {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "tern-proxy exited during startup; stderr:\n{}",
                        p.stderr_text()
                    )
                }
            }
        }
        assert!(!p.addr.is_empty(), "no `tern-proxy gRPC endpoint on` line");
        thread::spawn(move || for _ in rx {});
        p
    }

    fn stderr_text(&self) -> String {
        self.stderr.guard().join("\n")
    }

    /// SIGTERM, then the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "tern-proxy ignored SIGTERM for 15 s"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
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
        let deadline = Instant::now() + Duration::from_secs(30);
        while admin_json(&namesrv, &["clusterList"])
            .as_array()
            .map_or(0, Vec::len)
            < 2
        {
            assert!(Instant::now() < deadline, "broker-b never registered");
            thread::sleep(Duration::from_millis(200));
        }
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

    /// Runs one scenario of the script against the proxy and checks its PASS lines.
    fn scenario(&self, py: &Path, prefix: &str, name: &str, expect: &[&str]) {
        let target = Target {
            endpoint: &self.proxy.addr,
            namesrv: &self.namesrv,
        };
        let args = ["--prefix", prefix, "--scenario", name];
        let mut run = Script::spawn(py, &self._dir.path().join("home"), &target, &args);
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
    let _serial = serial();
    let test = "proxy_spreads_5x_sends_over_the_cluster_and_reads_them_back";
    let Some(py) = grpc_python_or_skip(test) else {
        return;
    };
    let c = Cluster::start();
    c.scenario(
        &py,
        "TernProxy",
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
    let _serial = serial();
    let test = "proxy_keeps_fifo_order_and_carries_transaction_check_backs";
    let Some(py) = grpc_python_or_skip(test) else {
        return;
    };
    let c = Cluster::start();
    c.scenario(
        &py,
        "TernProxy",
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
        "TernProxy",
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
