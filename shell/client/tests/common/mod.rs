//! Test harness: runs the real `tern-broker --standalone` on ephemeral ports with the
//! small store geometry, its binary found (or built) by tern-testkit.

#![allow(dead_code)]

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_client::{
    Admin, ClientConfig, ConcurrentListener, ConsumeContext, ConsumeProgress, ConsumeStatus,
    Message, MessageExt, MessageSelector, Producer, ProducerConfig, PushConsumer,
    PushConsumerConfig, SendStatus,
};

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
        cfg: PushConsumerConfig,
        topic: &str,
        listener: impl ConcurrentListener,
    ) -> PushConsumer {
        let c = self.subscribed(cfg, topic, "*", listener);
        c.start().await.unwrap();
        c
    }

    /// A push consumer of `topic` by `selector`, `listener` registered, not started yet
    /// (for tests of what `start` answers).
    pub fn subscribed(
        &self,
        cfg: PushConsumerConfig,
        topic: &str,
        selector: impl Into<MessageSelector>,
        listener: impl ConcurrentListener,
    ) -> PushConsumer {
        let c = PushConsumer::new(cfg, self.client_config()).unwrap();
        c.subscribe(topic, selector).unwrap();
        c.register_concurrent(listener);
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
        let listed = |info: &tern_shell::body::ClusterInfo| {
            info.broker_addr_table
                .values()
                .any(|b| b.broker_addrs.0.values().any(|a| *a == self.addr))
        };
        run(wait_for(
            "the broker registered",
            Duration::from_secs(10),
            async || match admin.cluster_info().await {
                Ok(i) if listed(&i) => Ok(()),
                _ => Err(LogOf(self)),
            },
        ));
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

/// Awaits `check` until it gives `Ok`, looking again every [`EVERY`](tern_testkit::EVERY);
/// at `within` panics naming `what` with the last `Err`.
pub async fn wait_for<T, E: Debug>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let (mut hit, mut miss) = (None, None);
    let got = tern_testkit::poll_until_async(within, async || match check().await {
        Ok(v) => {
            hit = Some(v);
            true
        }
        Err(e) => {
            miss = Some(e);
            false
        }
    })
    .await;
    assert!(got, "not within {within:?}: {what}: {:?}", miss.unwrap());
    hit.unwrap()
}

/// A broker's log, read when shown (in the panic of a [`wait_for`] that failed).
pub struct LogOf<'a>(pub &'a Broker);

impl Debug for LogOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "broker log:\n{}", self.0.log())
    }
}

/// Waits until `done` holds of `group`'s consume progress on `topic`; at `within` panics
/// with the last progress seen.
pub async fn wait_progress(
    admin: &Admin,
    group: &str,
    topic: &str,
    within: Duration,
    done: impl Fn(&ConsumeProgress) -> bool,
) {
    let what = format!("{group}'s progress on {topic}");
    wait_for(&what, within, async || {
        let p = admin.consume_progress(group, Some(topic)).await.unwrap();
        if done(&p) { Ok(()) } else { Err(p) }
    })
    .await
}

/// What a push listener was given, shared with the test.
pub type Sink<T> = Arc<Mutex<Vec<T>>>;

/// A concurrent listener that keeps `each(message, context)` in `sink` and answers
/// success.
pub fn recorder<T: Send + 'static>(
    sink: &Sink<T>,
    each: impl Fn(&MessageExt, &ConsumeContext) -> T + Send + Sync + 'static,
) -> impl ConcurrentListener {
    let sink = sink.clone();
    move |msgs: &[MessageExt], ctx: &mut ConsumeContext| {
        sink.lock()
            .unwrap()
            .extend(msgs.iter().map(|m| each(m, ctx)));
        ConsumeStatus::Success
    }
}

/// Sends `n` messages with bodies `body(i)` to `topic`, one after another; each must be
/// stored (SEND_OK).
pub async fn send_ok(p: &Producer, topic: &str, n: usize, body: impl Fn(usize) -> String) {
    for i in 0..n {
        let r = p.send(Message::new(topic, body(i))).await.unwrap();
        assert_eq!(r.status, SendStatus::SendOk);
    }
}

/// Writes `rules` as the `plain_acl.yml` of `dir`; its path.
pub fn write_acl(dir: &Path, rules: &str) -> PathBuf {
    let file = dir.join("plain_acl.yml");
    std::fs::write(&file, rules).unwrap();
    file
}

/// The config lines of a broker with the plain ACL on, its rules in `file`.
pub fn acl_conf(file: &Path) -> String {
    format!("aclEnable=true\nplainAclFile={}\n", file.display())
}

/// Sends `msgs` with up to 64 sends in flight; each must succeed.
pub async fn send_in_flight(p: &Producer, msgs: impl IntoIterator<Item = Message>) {
    let mut msgs = msgs.into_iter().peekable();
    while msgs.peek().is_some() {
        let futs: Vec<_> = msgs.by_ref().take(64).map(|m| p.send_async(m)).collect();
        for f in futs {
            f.await.unwrap();
        }
    }
}
