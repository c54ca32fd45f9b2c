//! Test harness: runs the real `tern-broker --standalone` on ephemeral ports with the
//! small store geometry, its binary found (or built) by tern-testkit.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tern_client::{ClientConfig, Producer, ProducerConfig};

pub mod cli;

use tern_testkit::{GEOMETRY, Proc, binary};

/// How long a started process may take to say where it listens.
const START: Duration = Duration::from_secs(20);

/// A `tern-namesrv` process of its own (brokers in a test can die without it); killed
/// on drop.
#[derive(Debug)]
pub struct NameSrv {
    _proc: Proc,
    /// Its address.
    pub addr: String,
    _home: tempfile::TempDir,
}

impl NameSrv {
    /// Starts `tern-namesrv` on an ephemeral port.
    pub fn start() -> NameSrv {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(binary("tern-namesrv"));
        cmd.args(["--listen", "127.0.0.1:0", "--home"])
            .arg(dir.path());
        let mut proc = Proc::spawn("tern-namesrv", &mut cmd);
        let addr = proc.wait_announced("tern-namesrv listening on ", START);
        NameSrv {
            _proc: proc,
            addr,
            _home: dir,
        }
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
/// waits for `ready`; returns the process and its broker and name-server addresses.
fn launch(dir: &Path, listen: &str, ns: NameServer<'_>) -> Launched {
    let mut cmd = Command::new(binary("tern-broker"));
    match ns {
        // The embedded name server keeps its KV file under the data dir: in the temp
        // dir, not in the crate's folder (the default `./data`).
        NameServer::Embedded(at) => cmd
            .args(["--standalone", "--namesrv-listen", at, "--data-dir"])
            .arg(dir.join("data")),
        NameServer::Join(addr) => cmd.args(["-n", addr]),
    };
    cmd.args(["--listen", listen, "-c"])
        .arg(dir.join("broker.conf"))
        .env("RUST_LOG", "info");
    let mut proc = Proc::spawn("tern-broker", &mut cmd);
    let mut addr = String::new();
    let mut namesrv = match ns {
        NameServer::Join(a) => a.to_owned(),
        NameServer::Embedded(_) => String::new(),
    };
    let mut console = None;
    for line in proc.wait_ready(START) {
        if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
            namesrv = a.trim().to_owned();
        } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
            addr = a.trim().to_owned();
        } else if let Some(a) = line.strip_prefix("tern-console on ") {
            console = Some(a.trim().to_owned());
        }
    }
    Launched {
        proc,
        addr,
        namesrv,
        console,
    }
}

/// A started broker's process and what it printed.
struct Launched {
    proc: Proc,
    addr: String,
    namesrv: String,
    console: Option<String>,
}

/// A running standalone broker; killed on drop.
#[derive(Debug)]
pub struct Broker {
    proc: Proc,
    /// The broker's remoting address.
    pub addr: String,
    /// The embedded name server's address.
    pub namesrv: String,
    /// The web console's URL (`http://...`), when the broker started one.
    pub console: Option<String>,
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

    /// A started push consumer of every tag of `topic`, `listener` its concurrent
    /// listener.
    pub async fn push_consumer(
        &self,
        cfg: tern_client::PushConsumerConfig,
        topic: &str,
        listener: impl tern_client::ConcurrentListener,
    ) -> tern_client::PushConsumer {
        let c = tern_client::PushConsumer::new(cfg, self.client_config()).unwrap();
        c.subscribe(topic, "*").unwrap();
        c.register_concurrent(listener);
        c.start().await.unwrap();
        c
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
            proc,
            addr,
            namesrv,
            console,
        } = launch(dir.path(), "127.0.0.1:0", ns);
        let b = Broker {
            proc,
            addr,
            namesrv,
            console,
            dir,
            joined: matches!(ns, NameServer::Join(_)),
            tls,
        };
        b.wait_registered();
        b
    }

    /// Kills the broker with SIGKILL (`kill -9`): no flush, no clean close.
    pub fn kill9(&mut self) {
        self.proc.kill9();
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
        self.proc = l.proc;
        self.console = l.console;
        self.namesrv = l.namesrv;
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

    /// A started producer of `group` on this broker's cluster.
    pub fn producer(&self, group: &str) -> Producer {
        let p = Producer::new(ProducerConfig::new(group), self.client_config()).unwrap();
        p.start();
        p
    }

    /// A client config pointing at the embedded name server.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.namesrv);
        c.tls = self.tls.clone();
        c
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        self.proc.log()
    }
}

/// Runs an async test body.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_client::block_on(f)
}
