//! Test harness: runs the real `tern-broker --standalone` on ephemeral ports with the
//! small store geometry, and finds (or builds) its binary next to this test's.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use tern_client::ClientConfig;

/// Small store files: fast to create, light on disk.
pub const GEOMETRY: &str = "mapedFileSizeCommitLog=1048576\n\
mapedFileSizeConsumeQueue=6000\n\
maxHashSlotNum=1000\n\
maxIndexNum=4000\n";

/// The `tern-broker` binary: in this test's target profile directory, built on demand
/// (`cargo build -p tern-broker` into the same target directory) when absent.
pub fn broker_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> → target/<profile>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binary lives in target/<profile>/deps")
            .to_path_buf();
        let bin = profile_dir.join(format!("tern-broker{}", std::env::consts::EXE_SUFFIX));
        if !bin.exists() {
            let target_dir = profile_dir.parent().expect("target dir");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "tern-broker", "--target-dir"])
                .arg(target_dir)
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build -p tern-broker");
            assert!(status.success(), "cargo build -p tern-broker failed");
        }
        assert!(bin.exists(), "no tern-broker at {}", bin.display());
        bin
    })
    .clone()
}

/// A running standalone broker; killed on drop.
#[derive(Debug)]
pub struct Broker {
    child: Child,
    /// The broker's remoting address.
    pub addr: String,
    /// The embedded name server's address.
    pub namesrv: String,
    stderr: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Creates `topic` with `queues` read/write queues on every master of the cluster.
    pub async fn create_topic(&self, topic: &str, queues: i32) {
        let admin = tern_client::Admin::new(self.client_config()).unwrap();
        let cfg = tern_shell::body::TopicConfig {
            topic_name: topic.into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            ..tern_shell::body::TopicConfig::default()
        };
        admin
            .create_topic(
                &tern_client::admin::Target::Cluster("DefaultCluster".into()),
                &cfg,
            )
            .await
            .unwrap();
        admin.shutdown().await;
    }

    /// Starts `tern-broker --standalone` with the small geometry plus `extra_conf` lines.
    pub fn start(extra_conf: &str) -> Broker {
        Self::launch(extra_conf, None)
    }

    /// Starts a second broker registering with `cluster`'s name server; `extra_conf`
    /// should name it (`brokerName=broker-b`).
    pub fn join(cluster: &Broker, extra_conf: &str) -> Broker {
        Self::launch(extra_conf, Some(&cluster.namesrv))
    }

    fn launch(extra_conf: &str, namesrv: Option<&str>) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("broker.conf");
        let data = dir.path().join("data");
        std::fs::write(
            &conf,
            format!(
                "{GEOMETRY}storePathRootDir={}\n{extra_conf}",
                data.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(broker_binary());
        match namesrv {
            Some(ns) => cmd.args(["-n", ns]),
            None => cmd.args(["--standalone", "--namesrv-listen", "127.0.0.1:0"]),
        };
        let mut child = cmd
            .args(["--listen", "127.0.0.1:0", "-c"])
            .arg(&conf)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tern-broker");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (mut addr, mut namesrv) = (String::new(), namesrv.unwrap_or_default().to_owned());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "tern-broker not ready; stderr:\n{}",
                    lines.lock().unwrap().join("\n")
                )
            });
            if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
                namesrv = a.trim().to_owned();
            } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
                addr = a.trim().to_owned();
            } else if line.starts_with("ready") {
                break;
            }
        }
        let b = Broker {
            child,
            addr,
            namesrv,
            stderr: lines,
            _dir: dir,
        };
        b.wait_registered();
        b
    }

    /// Kills the broker with SIGKILL and reaps it (a crash).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until the name server lists the broker: `ready` is printed before the first
    /// registration has landed (see the report on the broker).
    fn wait_registered(&self) {
        let admin = tern_client::Admin::new(self.client_config()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        run(async {
            while !admin
                .cluster_masters("DefaultCluster")
                .await
                .is_ok_and(|m| m.iter().any(|(_, a)| *a == self.addr))
            {
                assert!(
                    Instant::now() < deadline,
                    "broker never registered:\n{}",
                    self.log()
                );
                tern_shell::runtime::sleep(Duration::from_millis(20)).await;
            }
        });
    }

    /// A client config pointing at the embedded name server.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(&self.namesrv)
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs an async test body.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_client::block_on(f)
}
