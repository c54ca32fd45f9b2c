//! Starts the real `tern-namesrv` binary on an ephemeral port and talks to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tern_shell::body::{DataVersion, RegisterBrokerBody, TopicConfig};
use tern_shell::headers::RegisterBrokerRequestHeader;
use tern_shell::runtime::block_on;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand, RequestCode};

pub const BIN: &str = env!("CARGO_BIN_EXE_tern-namesrv");
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A running name server process, killed on drop.
pub struct Namesrv {
    child: Option<Child>,
    pub addr: String,
    pub stderr_path: PathBuf,
}

impl Namesrv {
    /// Starts on 127.0.0.1:0 with `home` for kvConfig.json, plus `extra` flags.
    pub fn start(home: &Path, extra: &[&str]) -> Self {
        std::fs::create_dir_all(home).unwrap();
        let stderr_path = home.with_extension("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--home"])
            .arg(home)
            .args(extra)
            .env("RUST_LOG", "debug")
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
        let addr = line
            .trim()
            .strip_prefix("tern-namesrv listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "no banner, got {line:?}; stderr: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                )
            })
            .to_owned();
        Self {
            child: Some(child),
            addr,
            stderr_path,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn connect(&self) -> Connection {
        block_on(Connection::connect(
            &self.addr,
            ConnectionConfig::default(),
            TIMEOUT,
        ))
        .unwrap()
    }

    /// Sends `signal` (e.g. "TERM") and waits for the exit.
    pub fn signal_and_wait(mut self, signal: &str) -> ExitStatus {
        let pid = self.pid().to_string();
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(ok.success());
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("name server did not exit after SIG{signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Namesrv {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs the binary to completion with `args` (for -p and config errors).
pub fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub fn call(conn: &Connection, cmd: RemotingCommand) -> RemotingCommand {
    block_on(conn.request(cmd, TIMEOUT)).unwrap()
}

pub fn topic(name: &str, queues: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.into(),
        read_queue_nums: queues,
        write_queue_nums: queues,
        ..Default::default()
    }
}

pub fn body(topics: &[TopicConfig], counter: i64) -> RegisterBrokerBody {
    let mut b = RegisterBrokerBody::default();
    let w = &mut b.topic_config_serialize_wrapper;
    w.data_version = DataVersion {
        state_version: 0,
        timestamp: 1_700_000_000_000,
        counter,
    };
    for t in topics {
        w.topic_config_table.insert(t.topic_name.clone(), t.clone());
    }
    b
}

pub fn register_header(name: &str, addr: &str, id: i64) -> RegisterBrokerRequestHeader {
    RegisterBrokerRequestHeader {
        broker_name: name.into(),
        broker_addr: addr.into(),
        cluster_name: "DefaultCluster".into(),
        ha_server_addr: format!("{}:10912", addr.split(':').next().unwrap_or("")),
        broker_id: id,
        ..Default::default()
    }
}

/// REGISTER_BROKER with a plain JSON body.
pub fn register(
    conn: &Connection,
    name: &str,
    addr: &str,
    id: i64,
    topics: &[TopicConfig],
) -> RemotingCommand {
    let b = tern_shell::body::to_json(&body(topics, 1));
    call(
        conn,
        RemotingCommand::request(
            RequestCode::RegisterBroker,
            &register_header(name, addr, id),
        )
        .with_body(b),
    )
}

/// Masked CRC-32 as RocketMQ's `UtilAll.crc32` computes it.
pub fn crc(bytes: &[u8]) -> i32 {
    (crc32fast::hash(bytes) & 0x7FFF_FFFF) as i32
}

pub fn route_request(topic: &str, version: i32) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(
        RequestCode::GetRouteinfoByTopic,
        &tern_shell::headers::GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: None,
        },
    );
    cmd.version = version;
    cmd
}

/// Polls `f` until it is true or `within` passes.
pub fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
