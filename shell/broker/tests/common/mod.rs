//! Shared harness for the broker's process tests: starts the real `tern-broker` binary on
//! 127.0.0.1 with ephemeral ports and a temp data dir, reads the printed addresses, and
//! talks to it over real sockets with tern-shell's `Connection`, as a Java client would
//! (JSON headers, version ≥ 401).
//!
//! Every child process is owned by a [`BrokerProc`] whose `Drop` kills it, so a failing
//! test never leaks a broker. On failure the broker's stderr tail is printed.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tern_shell::body::{
    ConsumeType, ConsumerData, HeartbeatData, MessageModel, SubscriptionData, to_json,
};
use tern_shell::headers::{
    CreateTopicRequestHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader,
    OffsetResponseHeader, PullMessageRequestHeader, SendMessageRequestHeader,
    SendMessageRequestHeaderV2, SendMessageResponseHeader, TopicQueueRequestHeader, pull_sys_flag,
};
use tern_shell::message::{Message, MessageExt, decode_pulled};
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RequestCode,
    ResponseCode,
};

#[path = "../../../../tests/support/small_store.rs"]
mod small_store;
pub use small_store::GEOMETRY;

/// How long one request may take before the test fails.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs an async test body.
pub fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_shell::runtime::block_on(f)
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
    child: Option<Child>,
    /// The broker's remoting address (`ip:port`, what message ids encode).
    pub addr: String,
    /// The embedded name server's address (standalone only).
    pub namesrv: Option<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_done: Option<thread::JoinHandle<()>>,
}

/// A spawned broker: the child, its stdout lines, its stderr lines so far, and the
/// thread collecting stderr.
type Spawned = (
    Child,
    mpsc::Receiver<String>,
    Arc<Mutex<Vec<String>>>,
    thread::JoinHandle<()>,
);

/// Spawns `tern-broker` with `args`, capturing stdout and stderr line by line.
fn spawn(args: &[OsString]) -> Spawned {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-broker"));
    cmd.args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tern-broker");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                // Nobody listens any more; keep draining so the broker never blocks.
            }
        }
    });
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let done = thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    (child, rx, lines, done)
}

impl BrokerProc {
    /// Starts `tern-broker --standalone` (embedded name server) on ephemeral ports, with
    /// its data under `dir/data` and `conf` passed with `-c`.
    pub fn standalone(dir: &Path, conf: &Path) -> BrokerProc {
        let args: Vec<OsString> = vec![
            "--standalone".into(),
            "--data-dir".into(),
            dir.join("data").into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--namesrv-listen".into(),
            "127.0.0.1:0".into(),
            "-c".into(),
            conf.into(),
        ];
        Self::start(&args)
    }

    /// Starts `tern-broker` with `args` and waits for its `ready` line.
    pub fn start(args: &[OsString]) -> BrokerProc {
        let (child, rx, stderr, done) = spawn(args);
        let mut p = BrokerProc {
            child: Some(child),
            addr: String::new(),
            namesrv: None,
            stderr,
            stderr_done: Some(done),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut ready = false;
        while !ready {
            assert!(
                Instant::now() < deadline,
                "tern-broker not ready within 20 s; stderr:\n{}",
                p.stderr_text()
            );
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
                        p.namesrv = Some(a.trim().to_owned());
                    } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
                        p.addr = a.trim().to_owned();
                    } else if line.starts_with("ready") {
                        ready = true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let status = p.child.as_mut().unwrap().wait().unwrap();
                    p.child = None;
                    panic!(
                        "tern-broker exited during startup ({status}); stderr:\n{}",
                        p.stderr_text()
                    );
                }
            }
        }
        assert!(!p.addr.is_empty(), "no `tern-broker listening on` line");
        // Keep stdout drained.
        thread::spawn(move || for _ in rx {});
        p
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Everything the broker logged so far.
    pub fn stderr_text(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    /// Waits up to `within` for a log line containing every one of `needles`.
    pub fn wait_for_log(&self, needles: &[&str], within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let found = self
                .stderr
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find(|l| needles.iter().all(|n| l.contains(n)))
                .cloned();
            if found.is_some() || Instant::now() >= deadline {
                return found;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then waits (up to 20 s) for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("broker running");
        let ok = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                if let Some(h) = self.stderr_done.take() {
                    let _ = h.join();
                }
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "tern-broker did not exit within 20 s of SIGTERM; stderr:\n{}",
                    self.stderr_text()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP: the process freezes where it is with its sockets open, as a stalled peer
    /// looks from outside. [`Self::resume`] lets it go on.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("broker running").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid} failed");
    }

    /// SIGKILL (`kill -9`), then reaps the process.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("broker running");
        child.kill().unwrap();
        let _ = child.wait();
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            let text = self.stderr_text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- tern-broker stderr (last 60 lines) ---\n{}",
                lines[lines.len().saturating_sub(60)..].join("\n")
            );
        }
    }
}

/// Runs `tern-broker` to completion (for `-p` and startup failures), with a 20 s limit.
pub fn run_to_exit(args: &[OsString]) -> (ExitStatus, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern-broker"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tern-broker");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let t_err = thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tern-broker {args:?} did not exit within 20 s");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, t_out.join().unwrap(), t_err.join().unwrap())
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
        let deadline = Instant::now() + within;
        loop {
            let c = self.count(code);
            if c >= n || Instant::now() >= deadline {
                return c;
            }
            tern_shell::runtime::sleep(Duration::from_millis(20)).await;
        }
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

/// A message to send: topic, body, flag, properties.
pub fn msg(topic: &str, body: &[u8], props: &[(&str, &str)]) -> Message {
    let mut m = Message::new(topic, body.to_vec());
    for (k, v) in props {
        m = m.with_property(*k, *v);
    }
    m
}

/// The long-name send header for `m` to `queue_id`.
pub fn send_header(m: &Message, queue_id: i32, born: i64) -> SendMessageRequestHeader {
    SendMessageRequestHeader {
        producer_group: "PG_TEST".into(),
        topic: m.topic.clone(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: born,
        flag: m.flag,
        properties: Some(m.properties_string()),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: Some(false),
        max_reconsume_times: None,
    }
}

/// The born timestamp every test send carries (checked on pull).
pub const BORN: i64 = 1_700_000_000_123;

/// SEND_MESSAGE (10).
pub fn send_v1(m: &Message, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(RequestCode::SendMessage, &send_header(m, queue_id, BORN))
        .with_body(m.body.clone())
}

/// SEND_MESSAGE_V2 (310).
pub fn send_v2(m: &Message, queue_id: i32) -> RemotingCommand {
    let v2: SendMessageRequestHeaderV2 = send_header(m, queue_id, BORN).into();
    RemotingCommand::request(RequestCode::SendMessageV2, &v2).with_body(m.body.clone())
}

/// SEND_BATCH_MESSAGE (320) of `ms` (all to `ms[0].topic`).
pub fn send_batch(ms: &[Message], queue_id: i32) -> RemotingCommand {
    let mut h = send_header(&ms[0], queue_id, BORN);
    h.properties = None;
    h.batch = Some(true);
    let v2: SendMessageRequestHeaderV2 = h.into();
    let body = tern_shell::message::encode_batch(ms).unwrap();
    RemotingCommand::request(RequestCode::SendBatchMessage, &v2).with_body(body)
}

/// A pull request for up to 32 messages, no flags. `sub` set ⇒ the SUBSCRIPTION flag
/// with that expression.
pub fn pull_req(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    sub: Option<&str>,
) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: if sub.is_some() {
            pull_sys_flag::SUBSCRIPTION
        } else {
            0
        },
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: sub.map(str::to_owned),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request(RequestCode::PullMessage, &h)
}

/// `req` with `maxMsgNums`, extra sysFlag bits and `suspendTimeoutMillis` set.
pub fn pull_with(
    mut req: RemotingCommand,
    max: i32,
    flags: i32,
    suspend_ms: i64,
) -> RemotingCommand {
    let ext = &mut req.ext_fields;
    let old: i32 = ext["sysFlag"].parse().unwrap();
    ext.insert("sysFlag".into(), (old | flags).to_string());
    ext.insert("maxMsgNums".into(), max.to_string());
    ext.insert("suspendTimeoutMillis".into(), suspend_ms.to_string());
    req
}

/// The pull answer's header offsets: (nextBeginOffset, minOffset, maxOffset).
pub fn pull_offsets(resp: &RemotingCommand) -> (i64, i64, i64) {
    let get = |k: &str| -> i64 {
        resp.ext_fields
            .get(k)
            .unwrap_or_else(|| panic!("pull answer lacks {k}: {resp:?}"))
            .parse()
            .unwrap()
    };
    assert!(resp.ext_fields.contains_key("suggestWhichBrokerId"));
    (get("nextBeginOffset"), get("minOffset"), get("maxOffset"))
}

/// Pulls everything from `offset` to the queue's end (SUBSCRIPTION "*"), CRC-checked.
pub async fn pull_all(c: &Client, topic: &str, queue_id: i32, mut offset: i64) -> Vec<MessageExt> {
    let mut out = Vec::new();
    loop {
        let resp = c
            .call(pull_req("PULL_ALL", topic, queue_id, offset, Some("*")))
            .await;
        match resp.response_code() {
            ResponseCode::Success => {
                let got = decode_pulled(&resp.body, true).expect("pulled records decode");
                assert!(!got.is_empty(), "SUCCESS with no records");
                out.extend(got);
                offset = pull_offsets(&resp).0;
            }
            ResponseCode::PullNotFound => return out,
            other => panic!(
                "pull {topic}/{queue_id}@{offset}: {other:?} {:?}",
                resp.remark
            ),
        }
    }
}

/// A HEART_BEAT from `client_id` for one consumer group subscribed to `topic` with `expr`.
/// `code_set` is sent as given (the C++ client sends zeros).
pub fn heartbeat(
    client_id: &str,
    group: &str,
    topic: &str,
    expr: &str,
    code_set: Vec<i32>,
) -> RemotingCommand {
    let tags = SubscriptionData::parse_tags(expr);
    let hb = HeartbeatData {
        client_id: client_id.into(),
        consumer_data_set: vec![ConsumerData {
            group_name: group.into(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![SubscriptionData {
                topic: topic.into(),
                sub_string: expr.into(),
                tags_set: tags,
                code_set,
                sub_version: 1,
                expression_type: "TAG".into(),
                class_filter_mode: false,
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    RemotingCommand::request_code(RequestCode::HeartBeat).with_body(to_json(&hb))
}

/// Properties a stored message should carry: what was sent plus the broker's CLUSTER.
pub fn stored_props(m: &Message) -> BTreeMap<String, String> {
    let mut p = m.properties.clone();
    p.insert("CLUSTER".into(), "DefaultCluster".into());
    p
}

/// Asserts a response code, printing the remark otherwise.
#[track_caller]
pub fn expect_code(resp: &RemotingCommand, code: ResponseCode) {
    assert_eq!(
        resp.response_code(),
        code,
        "code {} remark {:?} ext {:?}",
        resp.code,
        resp.remark,
        resp.ext_fields
    );
}

/// A TCP port with nothing listening on it (bound, then released).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A standalone broker on a fresh temp dir with `extra_conf` added to the conf.
pub fn start(extra_conf: &str) -> (tempfile::TempDir, BrokerProc) {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), extra_conf);
    let b = BrokerProc::standalone(dir.path(), &conf);
    (dir, b)
}

/// GET_ROUTEINFO_BY_TOPIC.
pub fn route_req(topic: &str) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GetRouteinfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: None,
        },
    )
}

/// UPDATE_AND_CREATE_TOPIC with `queues` read and write queues, perm 6.
pub fn create_topic_req(topic: &str, queues: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::UpdateAndCreateTopic,
        &CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            order: false,
            ..Default::default()
        },
    )
}

/// The `offset` of a SUCCESS answer.
#[track_caller]
pub fn offset_of(resp: &RemotingCommand) -> i64 {
    expect_code(resp, ResponseCode::Success);
    resp.decode_header::<OffsetResponseHeader>().unwrap().offset
}

/// A request naming a topic and queue (GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME).
pub fn topic_queue(code: RequestCode, topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        code,
        &TopicQueueRequestHeader {
            topic: topic.into(),
            queue_id,
        },
    )
}

/// GET_MAX_OFFSET.
pub fn max_offset_req(topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GetMaxOffset,
        &GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: None,
        },
    )
}

/// GET_BROKER_RUNTIME_INFO's table.
pub async fn runtime_info(c: &Client) -> BTreeMap<String, String> {
    let resp = c
        .call(RemotingCommand::request_code(
            RequestCode::GetBrokerRuntimeInfo,
        ))
        .await;
    expect_code(&resp, ResponseCode::Success);
    tern_shell::body::from_json::<tern_shell::body::KvTable>(&resp.body)
        .unwrap()
        .table
}

/// Creates `topic` with `queues` queues on the broker `c` is connected to.
pub async fn create_topic(c: &Client, topic: &str, queues: i32) {
    expect_code(
        &c.call(create_topic_req(topic, queues)).await,
        ResponseCode::Success,
    );
}

/// Sends one message; returns the decoded send response header.
pub async fn send_ok(c: &Client, req: RemotingCommand) -> SendMessageResponseHeader {
    let resp = c.call(req).await;
    expect_code(&resp, ResponseCode::Success);
    assert_eq!(
        resp.ext_fields.get("MSG_REGION").map(String::as_str),
        Some("DefaultRegion")
    );
    resp.decode_header().unwrap()
}

/// Checks a pulled record against what was sent.
#[track_caller]
pub fn check_record(got: &MessageExt, sent: &Message, queue_id: i32, b: &BrokerProc, c: &Client) {
    assert_eq!(got.topic, sent.topic);
    assert_eq!(got.queue_id, queue_id);
    assert_eq!(got.body, sent.body);
    assert_eq!(got.flag, sent.flag);
    assert_eq!(got.properties, stored_props(sent));
    assert_eq!(got.born_host, c.conn.local_addr());
    assert_eq!(got.store_host.to_string(), b.addr);
    assert_eq!(got.sys_flag, 0);
    assert_eq!(got.reconsume_times, 0);
    assert_eq!(got.prepared_transaction_offset, 0);
    assert_eq!(got.born_timestamp, BORN);
    let age = now_ms() - got.store_timestamp;
    assert!(
        (0..60_000).contains(&age),
        "store timestamp {}",
        got.store_timestamp
    );
}
