//! Shared harness for the broker's process tests: starts the real `tern-broker` binary on
//! 127.0.0.1 with ephemeral ports and a temp data dir, reads the printed addresses, and
//! talks to it over real sockets with tern-shell's `Connection`, as a Java client would
//! (JSON headers, version ≥ 401).
//!
//! Every child process is owned by a [`BrokerProc`] whose `Drop` kills it, so a failing
//! test never leaks a broker. On failure the broker's stderr tail is printed.

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RequestCode,
    ResponseCode,
};

pub use tern_shell::runtime::now_ms;
pub use tern_testkit::GEOMETRY;
use tern_testkit::Proc;

mod requests;
pub use requests::*;

mod pop_frames;
// Only the POP tests use these.
#[allow(unused_imports)]
pub use pop_frames::*;

/// How long one request may take before the test fails.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs an async test body.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_shell::runtime::block_on(f)
}

/// Writes `broker.conf` (the geometry plus `extra` lines) into `dir`; returns its path.
pub fn write_conf(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("broker.conf");
    std::fs::write(&path, format!("{GEOMETRY}{extra}")).unwrap();
    path
}

/// A running `tern-broker` process.
#[derive(Debug)]
pub struct BrokerProc {
    proc: Proc,
    /// The broker's remoting address (`ip:port`, what message ids encode).
    pub addr: String,
    /// The embedded name server's address (standalone only).
    pub namesrv: Option<String>,
    /// The metrics endpoint's address, when it serves one.
    pub metrics: Option<String>,
    /// The embedded name server's metrics endpoint (standalone), when it serves one.
    pub namesrv_metrics: Option<String>,
    /// The gRPC endpoint's address (`ip:port`, RocketMQ 5.x clients), when it serves one.
    pub grpc: Option<String>,
}

impl BrokerProc {
    /// Starts `tern-broker --standalone` (embedded name server) on ephemeral ports, with
    /// its data under `dir/data` and `conf` passed with `-c`.
    pub fn standalone(dir: &Path, conf: &Path) -> BrokerProc {
        Self::start(&Self::standalone_args(dir, conf))
    }

    /// [`BrokerProc::standalone`] again on the folder of an earlier [`start`] (its data and
    /// its `broker.conf`): the same broker after a restart.
    pub fn again(dir: &Path) -> BrokerProc {
        Self::standalone(dir, &dir.join("broker.conf"))
    }

    /// The arguments of [`BrokerProc::standalone`].
    pub fn standalone_args(dir: &Path, conf: &Path) -> Vec<OsString> {
        vec![
            "--standalone".into(),
            "--data-dir".into(),
            dir.join("data").into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--namesrv-listen".into(),
            "127.0.0.1:0".into(),
            "-c".into(),
            conf.into(),
        ]
    }

    /// Starts `tern-broker` (no name server of its own) on a free port with `conf`.
    pub fn with_conf(conf: &Path) -> BrokerProc {
        let args: Vec<OsString> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "-c".into(),
            conf.into(),
        ];
        Self::start(&args)
    }

    /// A slave of `broker-a` registering with `namesrv`, its store under `dir`, with
    /// `extra` conf lines.
    pub fn slave(dir: &Path, namesrv: &str, extra: &str) -> BrokerProc {
        let conf = write_conf(
            dir,
            &format!(
                "brokerRole=SLAVE\nbrokerId=1\nnamesrvAddr={namesrv}\nstorePathRootDir={}\n\
                 haSendHeartbeatInterval=500\n{extra}",
                dir.join("store").display()
            ),
        );
        Self::with_conf(&conf)
    }

    /// Starts `tern-broker` with `args` and waits for its `ready` line.
    pub fn start(args: &[OsString]) -> BrokerProc {
        Self::start_with_env(args, &[])
    }

    /// Starts `tern-broker` with `args` and `env` added to its environment (fault
    /// injection) and waits for its `ready` line.
    pub fn start_with_env(args: &[OsString], env: &[(&str, &str)]) -> BrokerProc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-broker"));
        cmd.args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn("tern-broker", &mut cmd);
        let announced = proc.wait_ready(Duration::from_secs(20));
        let mut p = BrokerProc {
            proc,
            addr: String::new(),
            namesrv: None,
            metrics: None,
            namesrv_metrics: None,
            grpc: None,
        };
        for line in announced {
            if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
                p.namesrv = Some(a.trim().to_owned());
            } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
                p.addr = a.trim().to_owned();
            } else if let Some(a) = line.strip_prefix("tern-broker metrics on http://") {
                p.metrics = Some(a.trim().trim_end_matches("/metrics").to_owned());
            } else if let Some(a) = line.strip_prefix("tern-namesrv metrics on http://") {
                p.namesrv_metrics = Some(a.trim().trim_end_matches("/metrics").to_owned());
            } else if let Some(a) = line.strip_prefix("tern-broker gRPC endpoint on ") {
                p.grpc = Some(a.trim().to_owned());
            }
        }
        assert!(!p.addr.is_empty(), "no `tern-broker listening on` line");
        p
    }

    /// Runs `f` with a fresh client of this broker.
    pub fn with_client<R>(&self, f: impl AsyncFnOnce(&Client) -> R) -> R {
        run(async {
            let c = Client::connect(&self.addr).await;
            f(&c).await
        })
    }

    /// The process id (0 once it is stopped or killed).
    pub fn pid(&self) -> u32 {
        self.proc.pid().unwrap_or(0)
    }

    /// Everything the broker logged so far.
    pub fn stderr_text(&self) -> String {
        self.proc.log()
    }

    /// Waits up to `within` for a log line containing every one of `needles`.
    pub fn wait_for_log(&self, needles: &[&str], within: Duration) -> Option<String> {
        self.proc.wait_for_log(needles, within)
    }

    /// SIGTERM, then waits (up to 20 s) for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.proc.signal_and_wait("TERM", Duration::from_secs(20))
    }

    /// SIGSTOP: the process freezes where it is with its sockets open, as a stalled peer
    /// looks from outside. [`Self::resume`] lets it go on.
    pub fn pause(&self) {
        self.proc.signal("STOP");
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.proc.signal("CONT");
    }

    /// SIGKILL (`kill -9`), then reaps the process.
    pub fn kill9(&mut self) {
        assert!(self.proc.pid().is_some(), "broker running");
        self.proc.kill9();
    }
}

/// Runs `tern-broker` to completion (for `-p` and startup failures), with a 20 s limit to
/// exit; its stdout comes back as lines joined by `\n`.
pub fn run_to_exit(args: &[OsString]) -> (ExitStatus, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-broker"));
    cmd.args(args);
    let mut p = Proc::spawn("tern-broker", &mut cmd);
    // On the panic, dropping `p` kills the broker and shows its log.
    let status = p
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("tern-broker {args:?} did not exit within 20 s"));
    let out = p.stdout_to_end(Duration::from_secs(5)).join("\n");
    (status, out, p.log())
}

/// A processor that records every request the broker sends to a client.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Requests received, in order.
    pub requests: Mutex<Vec<RemotingCommand>>,
}

impl Recorder {
    /// How many requests with `code` arrived.
    pub fn count(&self, code: RequestCode) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.code == code.raw())
            .count()
    }

    /// Waits up to `within` for at least `n` requests with `code`.
    pub async fn wait_for(&self, code: RequestCode, n: usize, within: Duration) -> usize {
        let mut c = 0;
        let _ = tern_testkit::poll_until_async(within, async || {
            c = self.count(code);
            c >= n
        })
        .await;
        c
    }
}

impl Processor for Recorder {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        let oneway = req.is_oneway();
        let resp = RemotingCommand::response_to(&req, ResponseCode::Success);
        self.requests.lock().unwrap().push(req);
        (!oneway).then_some(resp)
    }
}

/// A client connection, Java-style.
#[derive(Debug, Clone)]
pub struct Client {
    /// The connection.
    pub conn: Connection,
}

impl Client {
    /// Connects to `addr`.
    pub async fn connect(addr: &str) -> Client {
        let conn = Connection::connect(addr, ConnectionConfig::default(), Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Client { conn }
    }

    /// Connects to `addr`, handing requests from the broker to `p`.
    pub async fn connect_with(addr: &str, p: Arc<Recorder>) -> Client {
        let conn =
            Connection::connect_with(addr, ConnectionConfig::default(), Duration::from_secs(5), p)
                .await
                .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        Client { conn }
    }

    /// Sends a request and returns the response (panics on transport errors).
    pub async fn call(&self, cmd: RemotingCommand) -> RemotingCommand {
        let code = cmd.code;
        self.conn
            .request(cmd, RPC_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("request {code}: {e}"))
    }
}

/// A standalone broker on a fresh temp dir with `extra_conf` added to the conf.
pub fn start(extra_conf: &str) -> (tempfile::TempDir, BrokerProc) {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), extra_conf);
    let b = BrokerProc::standalone(dir.path(), &conf);
    (dir, b)
}

/// Runs `f` with a client of a fresh [`start`]ed broker: the usual opening of a test that
/// needs neither the broker process nor its folder afterwards. The client goes first,
/// then the broker, then its folder.
pub fn with_client<R>(extra_conf: &str, f: impl AsyncFnOnce(&Client) -> R) -> R {
    with_broker(extra_conf, async |_, c| f(c).await)
}

/// [`with_client`] for a test that also looks at the broker process (its address, its
/// log): `f` gets the broker and the client.
pub fn with_broker<R>(extra_conf: &str, f: impl AsyncFnOnce(&BrokerProc, &Client) -> R) -> R {
    let (_dir, b) = start(extra_conf);
    b.with_client(async |c| f(&b, c).await)
}
