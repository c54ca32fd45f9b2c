//! Starts real `tern-controller` processes on loopback and talks to them with raw
//! remoting frames (the codes and headers RocketMQ's brokers and mqadmin send).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tern_shell::runtime::block_on;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand};

pub const BIN: &str = env!("CARGO_BIN_EXE_tern-controller");
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// `n` loopback ports free right now (bound together, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A controller group's addresses and the config each node starts with.
#[derive(Debug, Clone)]
pub struct Group {
    pub addrs: Vec<String>,
    pub root: PathBuf,
}

impl Group {
    pub fn new(root: &Path, n: usize) -> Self {
        let addrs = free_ports(n)
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        Self {
            addrs,
            root: root.to_path_buf(),
        }
    }

    pub fn peers(&self) -> String {
        self.addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}-{a}"))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Node `i`'s config file, with fast Raft timing for tests and `extra` lines.
    pub fn conf(&self, i: usize, extra: &str) -> PathBuf {
        let dir = self.root.join(format!("n{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("controller.conf");
        let text = format!(
            "controllerDLegerGroup = tern-test\n\
             controllerDLegerPeers = {}\n\
             controllerDLegerSelfId = n{i}\n\
             controllerStorePath = {}\n\
             controllerRaftHeartbeatMs = 100\n\
             controllerRaftElectionMinMs = 600\n\
             controllerRaftElectionMaxMs = 1200\n\
             scanNotActiveBrokerInterval = 500\n\
             scanInactiveMasterInterval = 1000\n\
             {extra}",
            self.peers(),
            dir.join("store").display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    pub fn start(&self, i: usize, extra: &str) -> Ctl {
        Ctl::start(&self.conf(i, extra), &self.addrs[i])
    }
}

/// A running controller process, killed on drop.
pub struct Ctl {
    child: Option<Child>,
    pub addr: String,
    pub stderr_path: PathBuf,
}

impl Ctl {
    pub fn start(conf: &Path, addr: &str) -> Self {
        let stderr_path = conf.with_extension(format!("{}.stderr", std::process::id()));
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stderr_path)
            .unwrap();
        let mut child = Command::new(BIN)
            .arg("-c")
            .arg(conf)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
        assert!(
            line.contains("listening on"),
            "no banner, got {line:?}; stderr: {}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        Self {
            child: Some(child),
            addr: addr.to_owned(),
            stderr_path,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Ctl {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub fn connect(addr: &str) -> Connection {
    block_on(Connection::connect(
        addr,
        ConnectionConfig::default(),
        TIMEOUT,
    ))
    .unwrap()
}

/// One request on a fresh connection; `None` when the node cannot be reached.
pub fn call(addr: &str, cmd: RemotingCommand) -> Option<RemotingCommand> {
    block_on(async {
        let c = Connection::connect(addr, ConnectionConfig::default(), TIMEOUT)
            .await
            .ok()?;
        let r = c.request(cmd, TIMEOUT).await.ok();
        c.close();
        r
    })
}

#[path = "../../../../tests/support/binaries.rs"]
mod binaries;

/// Runs `tern-admin` (found or built beside this test) with `args`: (success, stdout,
/// stderr).
pub fn admin(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(binaries::binary_of("tern-client", "tern-admin"))
        .args(args)
        .env_remove("NAMESRV_ADDR")
        .output()
        .expect("run tern-admin");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn eventually<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
