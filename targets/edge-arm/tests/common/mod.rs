//! Harness for the gateway's process tests: a central Tern (`tern-broker --standalone`
//! on fixed ports, so it can go down and come back at the same address) and the
//! `tern-edge` binary — native, or a cross-built one under qemu-user when
//! `TERN_EDGE_BIN` (the binary) and `TERN_EDGE_RUNNER` (e.g. `qemu-aarch64 -L
//! /usr/aarch64-linux-gnu`) are set, as `test.sh` does for aarch64 and armv7;
//! `TERN_EDGE_ARCH` (`aarch64`, `arm`) makes each start check the gateway's own report
//! of the architecture it was built for.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tern_client::{ClientConfig, MessageExt, PullConsumer};

#[path = "../../../../tests/support/binaries.rs"]
mod binaries;

#[path = "../../../../tests/support/small_store.rs"]
mod small_store;
pub use small_store::GEOMETRY;

/// A free TCP port for a process that must come back at the same address after a
/// restart, so it cannot simply bind port 0.
///
/// Taken from below the kernel's ephemeral range: a port released there is never
/// handed out again by a `bind(0)` or an outgoing connection's source port, so the only
/// other takers are tests choosing the same way, and each test process starts its walk
/// at its own pid-derived offset. (A port from the ephemeral range raced: another test's
/// connection took it between our check and the broker's bind.) Ports come in blocks of
/// eight because a broker on port P also binds P - 2 (the VIP channel) and P + 1 (HA).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const BLOCK: u32 = 8;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low().clamp(12_000, 65_535);
    let base = 10_000_u32;
    let blocks = (low - base) / BLOCK;
    let start = std::process::id().wrapping_mul(7919) % blocks;
    let free = |p: u32| TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
    // Bounded: a whole walk of the range finds nothing only if every block is taken.
    for _ in 0..blocks {
        let block = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % blocks;
        let port = base + block * BLOCK + 4;
        if free(port - 2) && free(port) && free(port + 1) {
            return port as u16;
        }
    }
    panic!("no free port below the ephemeral range ({low})");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A child process whose stdout announces its addresses and whose stderr is kept.
#[derive(Debug)]
struct Proc {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// Spawns `cmd` and waits for a stdout line starting with `ready`; returns the
    /// process and every stdout line before it.
    fn spawn(mut cmd: Command, what: &str) -> (Proc, Vec<String>) {
        let mut child = cmd
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(l);
            }
        });
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut seen = Vec::new();
        // qemu-user runs the gateway several times slower: a generous start budget.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l.starts_with("ready") => break,
                Ok(l) => seen.push(l),
                Err(_) => panic!(
                    "{what} not ready; stderr:\n{}",
                    lines.lock().unwrap().join("\n")
                ),
            }
        }
        thread::spawn(move || for _ in rx {});
        (
            Proc {
                child,
                stderr: lines,
            },
            seen,
        )
    }

    fn log(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no exit after SIGTERM:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            let text = self.log();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- stderr (last 40 lines) ---\n{}",
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
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
            namesrv: format!("127.0.0.1:{}", free_port()),
            broker_port: free_port(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Starts it now.
    pub fn started() -> Central {
        let mut c = Central::reserved();
        c.start();
        c
    }

    /// Starts (or restarts) it on its ports and store.
    pub fn start(&mut self) {
        let conf = self.dir.path().join("broker.conf");
        std::fs::write(&conf, format!("{GEOMETRY}{}", self.extra_conf)).unwrap();
        let mut cmd = Command::new(binaries::binary("tern-broker"));
        cmd.arg("--standalone")
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{}", self.broker_port)])
            .args(["--namesrv-listen", &self.namesrv])
            .arg("-c")
            .arg(conf);
        self.proc = Some(Proc::spawn(cmd, "central tern-broker").0);
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
            port: free_port(),
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
                free_port()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(binaries::binary("tern-broker"));
        cmd.arg("-c")
            .arg(conf)
            .args(["-n", &self.namesrv])
            .args(["--listen", &format!("127.0.0.1:{}", self.port)]);
        self.proc = Some(Proc::spawn(cmd, "central tern-broker (second)").0);
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

/// A GET of `/metrics` from `addr`: the body.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: edge\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned()
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
            namesrv: format!("127.0.0.1:{}", free_port()),
            upstream: upstream.to_owned(),
            dir: dir.to_owned(),
            extra: extra.to_owned(),
            broker: String::new(),
            metrics: None,
        };
        e.launch();
        e
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
        let (proc, lines) = Proc::spawn(cmd, "tern-edge");
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
            let status = p.stop();
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

    /// The id of its process (under qemu-user, qemu's, which runs the gateway's threads
    /// as its own), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.child.id())
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

/// Polls `check` every 100 ms until it holds or `within` passes.
pub async fn eventually(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        tern_shell::runtime::sleep(Duration::from_millis(100)).await;
    }
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
