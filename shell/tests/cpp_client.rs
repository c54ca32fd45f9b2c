//! Interop: the real C++ client (PyPI rocketmq==0.4.4) against a tiny name server + broker
//! built from this crate's encoders. It proves the C++ client accepts our route data, send
//! responses, pull responses (engine-encoded records) and group bodies.
//!
//! Needs a venv with rocketmq==0.4.4 (see tern_testkit::python).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_engine::record::{Host, MessageIn, StoreStamp};
use tern_shell::body::{
    BrokerData, GetConsumerListByGroupResponseBody, HeartbeatData, LockBatchRequestBody,
    LockBatchResponseBody, NumKeyMap, QueueData, TopicRouteData, from_json, to_json,
};
use tern_shell::headers::{
    GetRouteInfoRequestHeader, OffsetResponseHeader, PullMessageRequestHeader,
    PullMessageResponseHeader, SendMessageRequestHeader, SendMessageResponseHeader,
};
use tern_shell::message::{decode_batch, offset_msg_id};
use tern_shell::runtime::{block_on, sleep};
use tern_shell::{
    ConnectionCtx, Processor, RemotingCommand, RequestCode, ResponseCode, Server, ServerConfig,
};
use tern_testkit::python::python_or_skip;

const QUEUES: i32 = 2;

/// What the fake broker stores: per queue, the records as the engine encodes them.
#[derive(Default)]
struct FakeCluster {
    addr: Mutex<Option<SocketAddr>>,
    queues: Mutex<BTreeMap<i32, Vec<Vec<u8>>>>,
    clients: Mutex<Vec<String>>,
    commit_log_len: Mutex<i64>,
}

fn host(addr: SocketAddr) -> Host {
    match addr.ip() {
        IpAddr::V4(ip) => Host::V4 {
            ip: ip.octets(),
            port: u32::from(addr.port()),
        },
        IpAddr::V6(ip) => Host::V6 {
            ip: ip.octets(),
            port: u32::from(addr.port()),
        },
    }
}

impl FakeCluster {
    fn store(
        &self,
        conn: &ConnectionCtx,
        h: &SendMessageRequestHeader,
        body: &[u8],
        props: &[u8],
    ) -> (i64, i64) {
        let me = self.addr.lock().unwrap().unwrap();
        let queue_id = h.queue_id.rem_euclid(QUEUES);
        let mut queues = self.queues.lock().unwrap();
        let q = queues.entry(queue_id).or_default();
        let mut phys = self.commit_log_len.lock().unwrap();
        let m = MessageIn {
            topic: &h.topic,
            queue_id,
            flag: h.flag,
            sys_flag: h.sys_flag,
            born_timestamp: h.born_timestamp,
            born_host: host(conn.peer_addr()),
            store_host: host(me),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            properties: props,
        };
        let mut rec = vec![0u8; m.encoded_len().unwrap()];
        let stamp = StoreStamp {
            queue_offset: q.len() as i64,
            physical_offset: *phys,
            store_timestamp: 1,
        };
        m.encode(stamp, &mut rec).unwrap();
        let at = (q.len() as i64, *phys);
        *phys += rec.len() as i64;
        q.push(rec);
        at
    }
}

impl Processor for FakeCluster {
    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        let me = self.addr.lock().unwrap().unwrap();
        let ok = RemotingCommand::response_to(&req, ResponseCode::Success);
        Some(match req.request_code_enum() {
            RequestCode::GetRouteinfoByTopic => {
                let h: GetRouteInfoRequestHeader = req.decode_header().ok()?;
                let route = TopicRouteData {
                    queue_datas: vec![QueueData {
                        broker_name: "tern-a".into(),
                        read_queue_nums: QUEUES,
                        write_queue_nums: QUEUES,
                        perm: 6,
                        topic_sys_flag: 0,
                    }],
                    broker_datas: vec![BrokerData {
                        cluster: "TernCluster".into(),
                        broker_name: "tern-a".into(),
                        broker_addrs: NumKeyMap([(0, me.to_string())].into_iter().collect()),
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                ok.with_body(
                    route.encode_for(req.version, h.accept_standard_json_only.unwrap_or(false)),
                )
            }
            RequestCode::HeartBeat => {
                let hb: HeartbeatData = from_json(&req.body).ok()?;
                if !hb.consumer_data_set.is_empty() {
                    let mut c = self.clients.lock().unwrap();
                    if !c.contains(&hb.client_id) {
                        c.push(hb.client_id);
                    }
                }
                ok
            }
            RequestCode::SendMessage
            | RequestCode::SendMessageV2
            | RequestCode::SendBatchMessage => {
                let h = SendMessageRequestHeader::from_command(&req).ok()?;
                let mut ids = Vec::new();
                let mut first = None;
                if h.is_batch() {
                    for item in decode_batch(&req.body).ok()? {
                        let (qo, phys) = self.store(conn, &h, item.body, item.properties);
                        first.get_or_insert(qo);
                        ids.push(offset_msg_id(me, phys));
                    }
                } else {
                    let props = h.properties.clone().unwrap_or_default();
                    let (qo, phys) = self.store(conn, &h, &req.body, props.as_bytes());
                    first = Some(qo);
                    ids.push(offset_msg_id(me, phys));
                }
                ok.with_header(&SendMessageResponseHeader::new(
                    ids.join(","),
                    h.queue_id.rem_euclid(QUEUES),
                    first?,
                ))
            }
            RequestCode::GetConsumerListByGroup => {
                let body = GetConsumerListByGroupResponseBody {
                    consumer_id_list: self.clients.lock().unwrap().clone(),
                };
                ok.with_body(to_json(&body))
            }
            RequestCode::QueryConsumerOffset
            | RequestCode::GetMaxOffset
            | RequestCode::GetMinOffset => ok.with_header(&OffsetResponseHeader { offset: 0 }),
            RequestCode::PullMessage => {
                let h: PullMessageRequestHeader = req.decode_header().ok()?;
                let found: Vec<u8> = if h.topic.starts_with('%') {
                    Vec::new()
                } else {
                    let queues = self.queues.lock().unwrap();
                    let q = queues.get(&h.queue_id).cloned().unwrap_or_default();
                    q.iter()
                        .skip(usize::try_from(h.queue_offset).unwrap_or(0))
                        .flatten()
                        .copied()
                        .collect()
                };
                let max = self
                    .queues
                    .lock()
                    .unwrap()
                    .get(&h.queue_id)
                    .map_or(0, |q| q.len() as i64);
                if found.is_empty() {
                    sleep(Duration::from_millis(200)).await;
                }
                let code = if found.is_empty() {
                    ResponseCode::PullNotFound
                } else {
                    ResponseCode::Success
                };
                let header = PullMessageResponseHeader {
                    suggest_which_broker_id: 0,
                    next_begin_offset: max.max(h.queue_offset),
                    min_offset: 0,
                    max_offset: max,
                    ..Default::default()
                };
                RemotingCommand::response_to(&req, code)
                    .with_header(&header)
                    .with_body(found)
            }
            RequestCode::LockBatchMq => {
                let body: LockBatchRequestBody = from_json(&req.body).ok()?;
                ok.with_body(to_json(&LockBatchResponseBody {
                    lock_ok_mq_set: body.mq_set,
                }))
            }
            _ => ok,
        })
    }
}

fn run_client(py: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let home = tempfile::tempdir().unwrap();
    let script = format!("{}/tests/capture/client.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(py)
        .arg(script)
        .args(args)
        .env("HOME", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn cpp_client_produces_and_consumes_through_tern_encodings() {
    let Some(py) = python_or_skip("cpp_client_produces_and_consumes_through_tern_encodings") else {
        return;
    };
    let py = py.to_string_lossy().into_owned();
    block_on(async {
        let cluster = Arc::new(FakeCluster::default());
        let server = Server::bind("127.0.0.1:0", ServerConfig::default(), cluster.clone())
            .await
            .unwrap();
        let addr = server.local_addr();
        *cluster.addr.lock().unwrap() = Some(addr);
        let addr_s = addr.to_string();

        let py2 = py.clone();
        let a2 = addr_s.clone();
        let produced =
            async_std::task::spawn_blocking(move || run_client(&py2, &["produce", &a2])).await;
        let by_kind = |k: &str| {
            produced
                .iter()
                .find(|v| v["kind"] == k)
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(by_kind("sync")["status"], 0, "{produced:?}");
        assert_eq!(by_kind("compressed")["status"], 0, "{produced:?}");
        assert_eq!(by_kind("batch")["status"], 0, "{produced:?}");
        let stored: usize = cluster.queues.lock().unwrap().values().map(Vec::len).sum();
        assert!(
            stored >= 4,
            "sync + compressed + 2 batch (+ oneway) stored, got {stored}"
        );

        let consumed =
            async_std::task::spawn_blocking(move || run_client(&py, &["consume", &addr_s, "6"]))
                .await;
        let received: Vec<_> = consumed
            .iter()
            .filter(|v| v["kind"] == "received")
            .collect();
        let bodies: Vec<&str> = received.iter().filter_map(|v| v["body"].as_str()).collect();
        assert!(bodies.contains(&"hello tern"), "{consumed:?}");
        assert!(
            bodies.contains(&"batch-0") && bodies.contains(&"batch-1"),
            "{bodies:?}"
        );
        assert!(
            bodies
                .iter()
                .any(|b| b.len() == 5000 && b.bytes().all(|c| c == b'z')),
            "compressed body inflated"
        );
        let hello = received.iter().find(|v| v["body"] == "hello tern").unwrap();
        assert_eq!(hello["color"], "blue");
        assert_eq!(hello["tags"], "TagA");
        server.shutdown().await;
    });
}
