//! Starts the real `tern-namesrv` binary on an ephemeral port and talks to it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use tern_shell::body::{
    ClusterInfo, DataVersion, RegisterBrokerBody, TopicConfig, TopicRouteData, from_json,
};
use tern_shell::headers::RegisterBrokerRequestHeader;
use tern_shell::runtime::block_on;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand, RequestCode, ResponseCode};
use tern_testkit::Proc;
pub use tern_testkit::poll_until;

pub const BIN: &str = env!("CARGO_BIN_EXE_tern-namesrv");
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A running name server process, killed on drop.
pub struct Namesrv {
    proc: Proc,
    pub addr: String,
    pub stderr_path: PathBuf,
    /// The temporary folder of [`Namesrv::fresh`], removed after the process is killed.
    _dir: Option<tempfile::TempDir>,
}

impl Namesrv {
    /// Starts on 127.0.0.1:0 with `home` for kvConfig.json, plus `extra` flags.
    pub fn start(home: &Path, extra: &[&str]) -> Self {
        std::fs::create_dir_all(home).unwrap();
        let stderr_path = home.with_extension("stderr.log");
        // Each start's log alone: a restart on the same home begins a new file.
        let _ = std::fs::remove_file(&stderr_path);
        let mut cmd = Command::new(BIN);
        cmd.args(["--listen", "127.0.0.1:0", "--home"])
            .arg(home)
            .args(extra)
            .env("RUST_LOG", "debug");
        let mut proc = Proc::spawn_logging_to("tern-namesrv", &mut cmd, &stderr_path);
        let addr = proc.wait_announced("tern-namesrv listening on ", Duration::from_secs(20));
        Self {
            proc,
            addr,
            stderr_path,
            _dir: None,
        }
    }

    /// Starts with no flags on a home in a temporary folder of its own.
    pub fn fresh() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ns = Self::start(&dir.path().join("home"), &[]);
        Self {
            _dir: Some(dir),
            ..ns
        }
    }

    /// Starts with `dir/home` and `conf` written to `dir/namesrv.conf`.
    pub fn with_conf(dir: &Path, conf: &str) -> Self {
        let path = dir.join("namesrv.conf");
        std::fs::write(&path, conf).unwrap();
        Self::start(&dir.join("home"), &["-c", path.to_str().unwrap()])
    }

    pub fn stderr(&self) -> String {
        self.proc.log()
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid().unwrap()
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
        self.proc.signal_and_wait(signal, Duration::from_secs(15))
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

/// The answer's code to GET_ROUTEINFO_BY_TOPIC for `topic` from a client of `version`.
pub fn route_code(conn: &Connection, topic: &str, version: i32) -> ResponseCode {
    call(conn, route_request(topic, version)).response_code()
}

/// `topic`'s route as a client of version 401 (RocketMQ 4.9) gets it.
pub fn route_of(conn: &Connection, topic: &str) -> TopicRouteData {
    from_json(&call(conn, route_request(topic, 401)).body).unwrap()
}

/// GET_BROKER_CLUSTER_INFO's answer.
pub fn cluster_info(conn: &Connection) -> ClusterInfo {
    from_json(
        &call(
            conn,
            RemotingCommand::request_code(RequestCode::GetBrokerClusterInfo),
        )
        .body,
    )
    .unwrap()
}
