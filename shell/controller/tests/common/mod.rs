//! Starts real `tern-controller` processes on loopback and talks to them with raw
//! remoting frames (the codes and headers RocketMQ's brokers and mqadmin send).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tern_shell::runtime::block_on;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand};
use tern_testkit::Proc;
use tern_testkit::free_ports;
pub use tern_testkit::poll;

pub const BIN: &str = env!("CARGO_BIN_EXE_tern-controller");
pub const TIMEOUT: Duration = Duration::from_secs(5);

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
    proc: Proc,
    pub addr: String,
    pub stderr_path: PathBuf,
}

impl Ctl {
    pub fn start(conf: &Path, addr: &str) -> Self {
        let stderr_path = conf.with_extension(format!("{}.stderr", std::process::id()));
        let mut cmd = Command::new(BIN);
        cmd.arg("-c").arg(conf).env("RUST_LOG", "info");
        let mut proc = Proc::spawn_logging_to("tern-controller", &mut cmd, &stderr_path);
        proc.wait_stdout("its banner", Duration::from_secs(20), |line| {
            line.contains("listening on").then_some(())
        });
        Self {
            proc,
            addr: addr.to_owned(),
            stderr_path,
        }
    }

    pub fn stderr(&self) -> String {
        self.proc.log()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(&mut self) {
        self.proc.kill9();
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

/// Runs `tern-admin` (found or built beside this test) with `args`: (success, stdout,
/// stderr).
pub fn admin(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(tern_testkit::binary_of("tern-client", "tern-admin"))
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
