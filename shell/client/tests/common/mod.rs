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
use tern_shell::sync::MutexExt;

use tern_client::ClientConfig;

pub mod cli;

#[path = "../../../../tests/support/binaries.rs"]
mod binaries;
pub use binaries::{binary, binary_of};

#[path = "../../../../tests/support/small_store.rs"]
mod small_store;
pub use small_store::GEOMETRY;

/// The `tern-broker` binary: in this test's target profile directory, built on demand
/// (`cargo build -p tern-broker` into the same target directory) when absent.
pub fn broker_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| binary("tern-broker")).clone()
}

/// The `tern-namesrv` binary, found or built like [`broker_binary`].
pub fn namesrv_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| binary("tern-namesrv")).clone()
}

/// Spawns `cmd` (stdout piped, stderr dropped) and waits for its stdout line starting
/// with `prefix`; returns the child and the rest of that line (an address).
pub fn spawn_announcing(mut cmd: Command, prefix: &str) -> (Child, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let found = loop {
        let line = lines
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("{cmd:?} ended before printing {prefix:?}"));
        if let Some(rest) = line.strip_prefix(prefix) {
            break rest.trim().to_owned();
        }
    };
    thread::spawn(move || for _ in lines {});
    (child, found)
}

/// A `tern-namesrv` process of its own (brokers in a test can die without it); killed
/// on drop.
#[derive(Debug)]
pub struct NameSrv {
    child: Child,
    /// Its address.
    pub addr: String,
    _home: tempfile::TempDir,
}

impl NameSrv {
    /// Starts `tern-namesrv` on an ephemeral port.
    pub fn start() -> NameSrv {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(namesrv_binary());
        cmd.args(["--listen", "127.0.0.1:0", "--home"])
            .arg(dir.path());
        let (child, addr) = spawn_announcing(cmd, "tern-namesrv listening on ");
        NameSrv {
            child,
            addr,
            _home: dir,
        }
    }
}

impl Drop for NameSrv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a launched broker finds its name server.
#[derive(Clone, Copy, Debug)]
enum NameServer<'a> {
    /// Its own (`--standalone`), listening here.
    Embedded(&'a str),
    /// Another broker's, at this address.
    Join(&'a str),
}

/// Spawns `tern-broker` with `dir/broker.conf` (which names the store under `dir`) and
/// waits for `ready`; returns the child, its broker and name-server addresses, and its
/// stderr lines.
fn launch(dir: &Path, listen: &str, ns: NameServer<'_>) -> Launched {
    let mut cmd = Command::new(broker_binary());
    match ns {
        // The embedded name server keeps its KV file under the data dir: in the temp
        // dir, not in the crate's folder (the default `./data`).
        NameServer::Embedded(at) => cmd
            .args(["--standalone", "--namesrv-listen", at, "--data-dir"])
            .arg(dir.join("data")),
        NameServer::Join(addr) => cmd.args(["-n", addr]),
    };
    let mut child = cmd
        .args(["--listen", listen, "-c"])
        .arg(dir.join("broker.conf"))
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
            sink.guard().push(line);
        }
    });
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut addr = String::new();
    let mut namesrv = match ns {
        NameServer::Join(a) => a.to_owned(),
        NameServer::Embedded(_) => String::new(),
    };
    let mut console = None;
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
        } else if let Some(a) = line.strip_prefix("tern-console on ") {
            console = Some(a.trim().to_owned());
        } else if line.starts_with("ready") {
            break;
        }
    }
    Launched {
        child,
        addr,
        namesrv,
        stderr: lines,
        console,
    }
}

/// A started broker's process and what it printed.
struct Launched {
    child: Child,
    addr: String,
    namesrv: String,
    stderr: Arc<Mutex<Vec<String>>>,
    console: Option<String>,
}

/// A running standalone broker; killed on drop.
#[derive(Debug)]
pub struct Broker {
    child: Child,
    /// The broker's remoting address.
    pub addr: String,
    /// The embedded name server's address.
    pub namesrv: String,
    /// The web console's URL (`http://...`), when the broker started one.
    pub console: Option<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The data dir and config, kept for [`Broker::restart`].
    dir: tempfile::TempDir,
    /// Registered with another broker's name server rather than its own.
    joined: bool,
    /// What clients of this broker connect with (its port enforces TLS).
    tls: Option<tern_client::ClientTls>,
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
        Self::launch_new(extra_conf, NameServer::Embedded("127.0.0.1:0"))
    }

    /// Starts a second broker registering with `cluster`'s name server; `extra_conf`
    /// should name it (`brokerName=broker-b`).
    pub fn join(cluster: &Broker, extra_conf: &str) -> Broker {
        Self::launch_new(extra_conf, NameServer::Join(&cluster.namesrv))
    }

    /// Starts a broker registering with the name server at `namesrv`.
    pub fn with_namesrv(namesrv: &str, extra_conf: &str) -> Broker {
        Self::launch_new(extra_conf, NameServer::Join(namesrv))
    }

    /// Starts `tern-broker --standalone` whose ports take `tls` clients only: the
    /// harness's own clients (registration check, [`Broker::client_config`]) use it.
    pub fn start_tls(extra_conf: &str, tls: tern_client::ClientTls) -> Broker {
        Self::launch(extra_conf, NameServer::Embedded("127.0.0.1:0"), Some(tls))
    }

    fn launch_new(extra_conf: &str, ns: NameServer<'_>) -> Broker {
        Self::launch(extra_conf, ns, None)
    }

    fn launch(extra_conf: &str, ns: NameServer<'_>, tls: Option<tern_client::ClientTls>) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let conf = format!(
            "{GEOMETRY}storePathRootDir={}\n{extra_conf}",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("broker.conf"), conf).unwrap();
        let Launched {
            child,
            addr,
            namesrv,
            stderr,
            console,
        } = launch(dir.path(), "127.0.0.1:0", ns);
        let b = Broker {
            child,
            addr,
            namesrv,
            console,
            stderr,
            dir,
            joined: matches!(ns, NameServer::Join(_)),
            tls,
        };
        b.wait_registered();
        b
    }

    /// Kills the broker with SIGKILL (`kill -9`): no flush, no clean close.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the broker again on the same store, config and ports (clients keep their
    /// name server and broker addresses). Kills it first if it still runs.
    pub fn restart(&mut self) {
        self.kill9();
        let ns = if self.joined {
            NameServer::Join(&self.namesrv)
        } else {
            NameServer::Embedded(&self.namesrv)
        };
        let l = launch(self.dir.path(), &self.addr, ns);
        assert_eq!(l.addr, self.addr, "restarted on another address");
        self.child = l.child;
        self.console = l.console;
        self.namesrv = l.namesrv;
        self.stderr = l.stderr;
        self.wait_registered();
    }

    /// Waits until the name server lists the broker: `ready` is printed before the first
    /// registration has landed (see the report on the broker).
    fn wait_registered(&self) {
        let admin = tern_client::Admin::new(self.client_config()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let listed = |info: &tern_shell::body::ClusterInfo| {
            info.broker_addr_table
                .values()
                .any(|b| b.broker_addrs.0.values().any(|a| *a == self.addr))
        };
        run(async {
            while !admin.cluster_info().await.is_ok_and(|i| listed(&i)) {
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
        let mut c = ClientConfig::new(&self.namesrv);
        c.tls = self.tls.clone();
        c
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
