//! Harness for the gateway's process tests: a central Tern (`tern-broker --standalone`
//! on fixed ports, so it can go down and come back at the same address) and the
//! `tern-edge` binary — native, or a cross-built one under qemu-user when
//! `TERN_EDGE_BIN` (the binary) and `TERN_EDGE_RUNNER` (e.g. `qemu-aarch64 -L
//! /usr/aarch64-linux-gnu`) are set, as `test.sh` does for aarch64 and armv7;
//! `TERN_EDGE_ARCH` (`aarch64`, `arm`) makes each start check the gateway's own report
//! of the architecture it was built for.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_client::{ClientConfig, MessageExt, Producer, ProducerConfig, PullConsumer};

use tern_testkit::{GEOMETRY, Proc, binary, restartable_port};

/// How long a started process may take to print `ready`: qemu-user runs the gateway
/// several times slower, so a generous budget.
const START: Duration = Duration::from_secs(60);

/// How long the gateway may take to exit after SIGTERM.
const STOP: Duration = Duration::from_secs(60);

/// Spawns `cmd` (its log at info) and waits for its `ready` line; returns the process
/// and every stdout line before it.
fn spawn(mut cmd: Command, what: &str) -> (Proc, Vec<String>) {
    let mut proc = Proc::spawn(what, cmd.env("RUST_LOG", "info"));
    let lines = proc.wait_ready(START);
    (proc, lines)
}

/// The central cluster: a standalone Tern on fixed ports under its own dir.
#[derive(Debug)]
pub struct Central {
    proc: Option<Proc>,
    /// Extra `broker.conf` lines.
    pub extra_conf: String,
    /// The account the tests' own clients sign with (a central broker with ACL).
    pub credentials: Option<tern_client::SessionCredentials>,
    /// The CA file the tests' own clients trust (a central cluster serving TLS).
    pub trust: Option<PathBuf>,
    /// Its name server, what the gateway forwards to.
    pub namesrv: String,
    broker_port: u16,
    dir: tempfile::TempDir,
}

impl Central {
    /// Picks its ports without starting it (an uplink that is down from the start).
    pub fn reserved() -> Central {
        Central {
            proc: None,
            extra_conf: String::new(),
            credentials: None,
            trust: None,
            namesrv: format!("127.0.0.1:{}", restartable_port()),
            broker_port: restartable_port(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts it now.
    pub fn started() -> Central {
        Central::started_with("")
    }

    /// Starts it now with `extra_conf` lines in its `broker.conf`.
    pub fn started_with(extra_conf: &str) -> Central {
        let mut c = Central::reserved();
        c.extra_conf = extra_conf.to_owned();
        c.start();
        c
    }

    /// Starts (or restarts) it on its ports and store.
    pub fn start(&mut self) {
        let conf = self.dir.path().join("broker.conf");
        std::fs::write(&conf, format!("{GEOMETRY}{}", self.extra_conf)).unwrap();
        let mut cmd = Command::new(binary("tern-broker"));
        cmd.arg("--standalone")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{}", self.broker_port)])
            .args(["--namesrv-listen", &self.namesrv])
            .arg("-c")
            .arg(conf);
        self.proc = Some(spawn(cmd, "central tern-broker").0);
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill9();
        }
    }

    /// Its broker's address.
    pub fn broker_addr(&self) -> String {
        format!("127.0.0.1:{}", self.broker_port)
    }

    /// A client config for the central name server (signed with `credentials`, over
    /// TLS trusting `trust`).
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.namesrv);
        c.credentials = self.credentials.clone();
        c.tls = self.trust.as_ref().map(|ca| {
            tern_client::ClientTls::new(&tern_client::ClientTlsSettings::trusting(ca))
                .unwrap()
                .unwrap()
        });
        c
    }

    /// Every message of `topic` stored centrally, by message id (UNIQ_KEY); duplicates
    /// (at-least-once) collapse, and their count is returned too.
    pub async fn messages(&self, topic: &str) -> (BTreeMap<String, MessageExt>, usize) {
        let c = PullConsumer::new("edge-check", self.client_config()).unwrap();
        c.start().await;
        let mut out = BTreeMap::new();
        let mut total = 0;
        if let Ok(queues) = c.fetch_queues(topic).await {
            for q in queues {
                let mut offset = c.min_offset(&q).await.unwrap_or(0);
                let max = c.max_offset(&q).await.unwrap_or(0);
                while offset < max {
                    let r = c.pull(&q, offset, 32).await.unwrap();
                    if r.messages.is_empty() {
                        break;
                    }
                    for m in r.messages {
                        total += 1;
                        out.insert(m.msg_id().to_owned(), m);
                    }
                    offset = r.next_begin_offset;
                }
            }
        }
        c.shutdown().await;
        (out, total)
    }
}

/// Another broker of the central cluster, registered with [`Central`]'s name server.
#[derive(Debug)]
pub struct CentralBroker {
    proc: Option<Proc>,
    name: String,
    namesrv: String,
    port: u16,
    dir: tempfile::TempDir,
}

impl CentralBroker {
    /// Starts broker `name` of `central`'s cluster.
    pub fn started(central: &Central, name: &str) -> CentralBroker {
        let mut b = CentralBroker {
            proc: None,
            name: name.to_owned(),
            namesrv: central.namesrv.clone(),
            port: restartable_port(),
            dir: tempfile::tempdir().unwrap(),
        };
        b.start();
        b
    }

    /// Starts (or restarts) it on its port and store.
    pub fn start(&mut self) {
        let conf = self.dir.path().join("broker.conf");
        std::fs::write(
            &conf,
            format!(
                "{GEOMETRY}brokerName={}\nstorePathRootDir={}\nhaListenPort={}\n",
                self.name,
                self.dir.path().join("store").display(),
                restartable_port()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(binary("tern-broker"));
        cmd.arg("-c")
            .arg(conf)
            .args(["-n", &self.namesrv])
            .args(["--listen", &format!("127.0.0.1:{}", self.port)]);
        self.proc = Some(spawn(cmd, "central tern-broker (second)").0);
    }

    /// Its address.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill9();
        }
    }
}

/// The gateway under test.
#[derive(Debug)]
pub struct Edge {
    proc: Option<Proc>,
    /// Its name server (what local producers use).
    pub namesrv: String,
    upstream: String,
    dir: PathBuf,
    extra: String,
    /// The local broker's address, as the gateway printed it at its last start.
    pub broker: String,
    /// Its metrics endpoint (`host:port`), when `metricsExporterType=PROM`.
    pub metrics: Option<String>,
}

/// The command that runs `tern-edge`: native, or `TERN_EDGE_RUNNER TERN_EDGE_BIN`.
fn edge_command() -> Command {
    match std::env::var("TERN_EDGE_BIN") {
        Ok(bin) => match std::env::var("TERN_EDGE_RUNNER") {
            Ok(runner) if !runner.trim().is_empty() => {
                let mut parts = runner.split_whitespace();
                let mut cmd = Command::new(parts.next().unwrap());
                cmd.args(parts).arg(bin);
                cmd
            }
            _ => Command::new(bin),
        },
        Err(_) => Command::new(env!("CARGO_BIN_EXE_tern-edge")),
    }
}

impl Edge {
    /// Starts a gateway on `dir` forwarding to `upstream`, with `extra` config lines.
    pub fn start(dir: &Path, upstream: &str, extra: &str) -> Edge {
        let mut e = Edge {
            proc: None,
            namesrv: format!("127.0.0.1:{}", restartable_port()),
            upstream: upstream.to_owned(),
            dir: dir.to_owned(),
            extra: extra.to_owned(),
            broker: String::new(),
            metrics: None,
        };
        e.launch();
        e
    }

    /// [`Edge::start`] on a fresh temporary folder, returned with it: the folder must
    /// outlive the gateway, so bind it first (`let (_dir, mut edge) = ...`).
    pub fn start_in_temp(upstream: &str, extra: &str) -> (tempfile::TempDir, Edge) {
        let dir = tempfile::tempdir().unwrap();
        let edge = Edge::start(dir.path(), upstream, extra);
        (dir, edge)
    }

    fn launch(&mut self) {
        let conf = self.dir.join("edge.conf");
        std::fs::write(&conf, format!("{GEOMETRY}{}", self.extra)).unwrap();
        let mut cmd = edge_command();
        cmd.args(["--upstream", &self.upstream])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen", "127.0.0.1:0", "--namesrv-listen", &self.namesrv])
            .arg("-c")
            .arg(conf);
        let (proc, lines) = spawn(cmd, "tern-edge");
        if let Some(addr) = lines
            .iter()
            .find_map(|l| l.strip_prefix("tern-edge broker on "))
        {
            self.broker = addr.to_owned();
        }
        self.metrics = lines.iter().find_map(|l| {
            l.strip_prefix("tern-edge metrics on http://")
                .map(|a| a.trim_end_matches("/metrics").to_owned())
        });
        // Under qemu-user the gateway must really be the cross-built one.
        if let Ok(arch) = std::env::var("TERN_EDGE_ARCH") {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("tern-edge ") && l.ends_with(&format!(" on {arch}"))),
                "expected a tern-edge built for {arch}; it printed {lines:?}"
            );
        }
        self.proc = Some(proc);
    }

    /// `kill -9`, then a start on the same store and name-server address.
    pub fn crash_and_restart(&mut self) {
        self.kill9();
        self.launch();
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill9();
        }
    }

    /// SIGTERM; the exit must be clean.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let status = p.signal_and_wait("TERM", STOP);
            assert!(
                status.success(),
                "tern-edge exited with {status}:\n{}",
                p.log()
            );
        }
    }

    /// A client config for the gateway's name server (a local producer's).
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig::new(&self.namesrv)
    }

    /// A started producer of `group` sending through the gateway.
    pub fn producer(&self, group: &str) -> Producer {
        let p = Producer::new(ProducerConfig::new(group), self.client_config()).unwrap();
        p.start();
        p
    }

    /// The id of its process (under qemu-user, qemu's, which runs the gateway's threads
    /// as its own), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(Proc::pid)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.proc.as_ref().map(Proc::log).unwrap_or_default()
    }

    /// Runs `tern-edge dead-letters ARGS` on this gateway's store and configuration;
    /// returns whether it succeeded, and its stdout and stderr.
    pub fn dead_letters_cmd(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = edge_command();
        cmd.arg("dead-letters")
            .args(args)
            .args(["--upstream", &self.upstream])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("-c")
            .arg(self.dir.join("edge.conf"))
            .env("RUST_LOG", "warn");
        let out = cmd.output().expect("run tern-edge dead-letters");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Where it keeps messages the cluster refused for good.
    pub fn dead_letters(&self) -> Vec<PathBuf> {
        let dir = self.dir.join("data").join("store").join("dead-letter");
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        // Each record file has a `.reason` beside it.
        v.retain(|p| p.extension().is_some_and(|e| e == "record"));
        v.sort();
        v
    }
}

/// A connection to `addr` (5 s to connect), for the raw requests the clients do not make.
pub async fn connect(addr: &str) -> tern_shell::Connection {
    tern_shell::Connection::connect(
        addr,
        tern_shell::ConnectionConfig::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap()
}

/// Sends `req` on `conn`; the answer, whatever its code, within `within`.
pub async fn call(
    conn: &tern_shell::Connection,
    req: tern_shell::RemotingCommand,
    within: Duration,
) -> tern_shell::RemotingCommand {
    conn.request(req, within).await.unwrap()
}

/// Sends `message(dev, i)` for each `i` of `range`, device `i % devices`'s under the
/// sharding key `device-{dev}` so that each device's stay in order in one queue; `check`
/// sees each send's result. Returns message id → (device, i).
pub async fn send_by_device(
    p: &Producer,
    range: std::ops::Range<usize>,
    devices: usize,
    message: impl Fn(usize, usize) -> tern_client::Message,
    check: impl Fn(&tern_client::SendResult),
) -> BTreeMap<String, (usize, usize)> {
    let mut sent = BTreeMap::new();
    for i in range {
        let dev = i % devices;
        let r = p
            .send_ordered(message(dev, i), &format!("device-{dev}"))
            .await
            .unwrap_or_else(|e| panic!("message {i} of device {dev}: {e}"));
        check(&r);
        sent.insert(r.msg_id, (dev, i));
    }
    sent
}

/// Runs an async test body.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_client::block_on(f)
}

/// Runs `f` against a started central cluster and a gateway forwarding to it (with
/// `extra` config lines, on a temporary folder); the gateway must then stop cleanly.
pub fn with_gateway<R>(extra: &str, f: impl AsyncFnOnce(&Central, &Edge) -> R) -> R {
    let central = Central::started();
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, extra);
    let r = run(f(&central, &edge));
    edge.stop();
    r
}

/// Sends `mib` MiB of 10 KiB messages to `topic` through the gateway, in batches: other
/// traffic that rolls the gateway's 1 MiB segments.
pub async fn filler(p: &tern_client::Producer, topic: &str, mib: usize) {
    let body = vec![b'f'; 10 * 1024];
    for batch in 0..mib * 5 {
        let msgs = (0..20)
            .map(|i| {
                tern_client::Message::new(topic, body.clone())
                    .with_property("n", (batch * 20 + i).to_string())
            })
            .collect();
        p.send_batch(msgs)
            .await
            .unwrap_or_else(|e| panic!("filler batch {batch}: {e}"));
    }
}
