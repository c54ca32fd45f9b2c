//! The controller-mode cluster the failover tests run: three `tern-controller`s, a
//! `tern-namesrv` and three `tern-broker`s of one broker-set on loopback, each a real
//! process with its stderr in a file; and the senders that record what was acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::common::*;
use tern_shell::body::{SyncStateSet, from_json};
use tern_shell::headers::{
    GetMetaDataResponseHeader, GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader,
};
use tern_shell::message::MessageExt;
use tern_shell::sync::MutexExt;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand, RequestCode, ResponseCode};
pub use tern_testkit::eventually;
use tern_testkit::{Proc, free_ports};

pub const TOPIC: &str = "FailoverTopic";
pub const QUEUES: i32 = 2;
pub const SET: &str = "broker-a";

/// Starts `bin` with `args` (the log at info), its stderr appended to `log`.
fn spawn(bin: &Path, args: &[&str], log: PathBuf) -> Proc {
    let mut cmd = Command::new(bin);
    cmd.args(args).env("RUST_LOG", "info");
    let name = bin.file_name().map_or("", |n| n.to_str().unwrap_or(""));
    Proc::spawn_logging_to(name, &mut cmd, &log)
}

pub struct Cluster {
    pub root: PathBuf,
    pub controllers: Vec<String>,
    pub ctl: Vec<Option<Proc>>,
    pub ctl_bin: PathBuf,
    pub namesrv: String,
    pub _ns: Proc,
    pub broker_ports: Vec<u16>,
    pub brokers: Vec<Option<Proc>>,
    /// Configuration lines every broker started from now on gets too.
    pub extra_conf: String,
}

impl Cluster {
    pub fn start(root: &Path) -> Cluster {
        let ports = free_ports(7);
        let controllers: Vec<String> = ports[..3]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let peers = controllers
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}-{a}"))
            .collect::<Vec<_>>()
            .join(";");
        let ctl_bin = tern_testkit::binary_of("tern-controller", "tern-controller");
        let ctl = (0..3)
            .map(|i| {
                Some({
                    let dir = root.join(format!("ctl{i}"));
                    std::fs::create_dir_all(&dir).unwrap();
                    let conf = dir.join("controller.conf");
                    std::fs::write(
                        &conf,
                        format!(
                            "controllerDLegerGroup=tern-failover\ncontrollerDLegerPeers={peers}\n\
                         controllerDLegerSelfId=n{i}\ncontrollerStorePath={}\n\
                         controllerRaftHeartbeatMs=100\ncontrollerRaftElectionMinMs=600\n\
                         controllerRaftElectionMaxMs=1200\nscanNotActiveBrokerInterval=500\n\
                         scanInactiveMasterInterval=1000\n",
                            dir.join("store").display()
                        ),
                    )
                    .unwrap();
                    spawn(
                        &ctl_bin,
                        &["-c", conf.to_str().unwrap()],
                        dir.join("stderr.log"),
                    )
                })
            })
            .collect();
        let namesrv = format!("127.0.0.1:{}", ports[3]);
        let ns = spawn(
            &tern_testkit::binary_of("tern-namesrv", "tern-namesrv"),
            &["--listen", &namesrv],
            root.join("namesrv.log"),
        );
        Cluster {
            root: root.to_path_buf(),
            controllers,
            ctl,
            ctl_bin,
            namesrv,
            _ns: ns,
            broker_ports: ports[4..].to_vec(),
            brokers: vec![None, None, None],
            extra_conf: String::new(),
        }
    }

    pub fn start_broker(&mut self, i: usize) {
        let dir = self.root.join(format!("b{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = write_conf(
            &dir,
            &format!(
                "brokerName={SET}\nnamesrvAddr={}\nstorePathRootDir={}\nhaListenPort=0\n\
                 enableControllerMode=true\ncontrollerAddr={}\nallAckInSyncStateSet=true\n\
                 syncBrokerMetadataPeriod=1000\ncheckSyncStateSetPeriod=500\n\
                 brokerHeartbeatInterval=300\ncontrollerHeartBeatTimeoutMills=3000\n\
                 haSendHeartbeatInterval=200\nenableProxy=false\n{}",
                self.namesrv,
                dir.join("store").display(),
                self.controllers.join(";"),
                self.extra_conf,
            ),
        );
        let listen = format!("127.0.0.1:{}", self.broker_ports[i]);
        let p = spawn(
            Path::new(env!("CARGO_BIN_EXE_tern-broker")),
            &["--listen", &listen, "-c", conf.to_str().unwrap()],
            dir.join("stderr.log"),
        );
        self.brokers[i] = Some(p);
    }

    /// Starts the set: broker 0 alone, so it becomes master of epoch 1, `topic` created
    /// on it, then brokers 1 and 2; returns once all three are in the SyncStateSet.
    pub fn start_set(&mut self, topic: &str, queues: i32) {
        self.start_broker(0);
        let r = eventually("a first master", Duration::from_secs(30), || {
            replica_info(&self.controllers).filter(|r| r.master.is_some())
        });
        assert_eq!(r.master.as_deref(), Some(self.addr(0).as_str()), "{r:?}");
        assert_eq!(r.epoch, 1);
        let first = self.addr(0);
        run(async {
            let cl = Client::connect(&first).await;
            create_topic(&cl, topic, queues).await;
        });
        self.start_broker(1);
        self.start_broker(2);
        eventually(
            "all three in the SyncStateSet",
            Duration::from_secs(30),
            || replica_info(&self.controllers).filter(|r| r.set.len() == 3),
        );
    }

    pub fn kill9_controller(&mut self, i: usize) {
        if let Some(mut p) = self.ctl[i].take() {
            p.kill9();
        }
    }

    pub fn restart_controller(&mut self, i: usize) {
        let dir = self.root.join(format!("ctl{i}"));
        let conf = dir.join("controller.conf");
        self.ctl[i] = Some(spawn(
            &self.ctl_bin,
            &["-c", conf.to_str().unwrap()],
            dir.join("stderr.log"),
        ));
    }

    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.broker_ports[i])
    }

    pub fn index_of(&self, addr: &str) -> usize {
        (0..3)
            .find(|i| self.addr(*i) == addr)
            .unwrap_or_else(|| panic!("{addr} is none of the brokers"))
    }

    pub fn kill9(&mut self, i: usize) {
        if let Some(mut p) = self.brokers[i].take() {
            p.kill9();
        }
    }

    pub fn broker_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.root.join(format!("b{i}/stderr.log"))).unwrap_or_default()
    }
}

/// What the controller leader says of the set: master address, master epoch, the
/// SyncStateSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicas {
    pub master: Option<String>,
    pub epoch: i32,
    pub set: BTreeSet<i64>,
}

pub fn replica_info(controllers: &[String]) -> Option<Replicas> {
    run(async {
        for a in controllers {
            let Ok(c) =
                Connection::connect(a, ConnectionConfig::default(), Duration::from_secs(1)).await
            else {
                continue;
            };
            let req = RemotingCommand::request(
                RequestCode::ControllerGetReplicaInfo,
                &GetReplicaInfoRequestHeader {
                    broker_name: SET.into(),
                },
            );
            let Ok(r) = c.request(req, Duration::from_secs(2)).await else {
                continue;
            };
            if r.response_code() != ResponseCode::Success {
                continue;
            }
            let h = r.decode_header::<GetReplicaInfoResponseHeader>().ok()?;
            let s: SyncStateSet = from_json(&r.body).ok()?;
            return Some(Replicas {
                master: h.master_address.filter(|a| !a.is_empty()),
                epoch: h.master_epoch.unwrap_or(0),
                set: s.sync_state_set.into_iter().collect(),
            });
        }
        None
    })
}

/// The controller that says it leads (CONTROLLER_GET_METADATA_INFO).
pub fn controller_leader(controllers: &[String]) -> Option<usize> {
    run(async {
        for (i, a) in controllers.iter().enumerate() {
            let Ok(c) =
                Connection::connect(a, ConnectionConfig::default(), Duration::from_secs(1)).await
            else {
                continue;
            };
            let req = RemotingCommand::request_code(RequestCode::ControllerGetMetadataInfo);
            let Ok(r) = c.request(req, Duration::from_secs(2)).await else {
                continue;
            };
            if r.decode_header::<GetMetaDataResponseHeader>()
                .is_ok_and(|h| h.is_leader == Some(true))
            {
                return Some(i);
            }
        }
        None
    })
}

/// Sends key `k` over `c`; the answer, if one came.
pub async fn send_answer(c: &Connection, k: u64) -> Option<RemotingCommand> {
    let key = format!("k{k}");
    let m = msg(TOPIC, key.as_bytes(), &[("KEYS", key.as_str())]);
    c.request(
        send_v2(&m, (k % QUEUES as u64) as i32),
        Duration::from_secs(5),
    )
    .await
    .ok()
}

/// Sends `keys` in turn over one new connection to `addr`; their answers.
pub fn answers_from(addr: &str, keys: std::ops::Range<u64>) -> Vec<RemotingCommand> {
    run(async {
        let conn = Connection::connect(addr, ConnectionConfig::default(), Duration::from_secs(2))
            .await
            .unwrap();
        let mut answers = Vec::new();
        for k in keys {
            answers.push(send_answer(&conn, k).await.expect("an answer"));
        }
        answers
    })
}

/// Sends key `k` over `c`; true on SEND_OK.
pub async fn send(c: &Connection, k: u64) -> bool {
    send_answer(c, k)
        .await
        .is_some_and(|r| r.response_code() == ResponseCode::Success)
}

/// Every key the broker at `addr` holds in the topic.
pub fn keys_at(addr: &str) -> BTreeSet<u64> {
    key_counts(addr).into_keys().collect()
}

/// How many messages of the topic the broker at `addr` holds under each key.
pub fn key_counts(addr: &str) -> BTreeMap<u64, usize> {
    run(async {
        let c = Client::connect(addr).await;
        let mut keys = BTreeMap::new();
        for q in 0..QUEUES {
            for m in pull_all(&c, TOPIC, q, 0).await {
                let m: MessageExt = m;
                if let Some(k) = m
                    .properties
                    .get("KEYS")
                    .and_then(|k| k.strip_prefix('k'))
                    .and_then(|k| k.parse().ok())
                {
                    *keys.entry(k).or_insert(0) += 1;
                }
            }
        }
        keys
    })
}

/// The messages the broker at `addr` shows in the topic's consume queues: the sum of
/// their max offsets.
pub fn queued_at(addr: &str) -> i64 {
    run(async {
        let c = Client::connect(addr).await;
        let mut n = 0;
        for q in 0..QUEUES {
            n += offset_of(&c.call(max_offset_req(TOPIC, q)).await);
        }
        n
    })
}

/// Senders of numbered keys (each its own connection, one request at a time, as fast
/// as the master answers) to the master the controllers name, until stopped; records
/// the keys answered SEND_OK and when.
pub struct Sender {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Concurrent senders: enough that a kill lands with sends in flight.
pub const SENDERS: u64 = 4;

impl Sender {
    pub fn start(controllers: Vec<String>) -> Sender {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..SENDERS)
            .map(|t| {
                let (s, a, controllers) = (stop.clone(), acked.clone(), controllers.clone());
                std::thread::spawn(move || {
                    run(async move {
                        let mut k = t;
                        let mut conn: Option<Connection> = None;
                        while !s.load(Ordering::Acquire) {
                            let Some(c) = conn.clone() else {
                                let master = replica_info(&controllers).and_then(|r| r.master);
                                conn = match master {
                                    Some(m) => Connection::connect(
                                        &m,
                                        ConnectionConfig::default(),
                                        Duration::from_millis(500),
                                    )
                                    .await
                                    .ok(),
                                    None => None,
                                };
                                if conn.is_none() {
                                    tern_shell::runtime::sleep(Duration::from_millis(20)).await;
                                }
                                continue;
                            };
                            if send(&c, k).await {
                                a.guard().push((k, Instant::now()));
                            } else {
                                // The master may have moved: ask again before the next key.
                                conn = None;
                            }
                            k += SENDERS;
                        }
                    })
                })
            })
            .collect();
        Sender {
            stop,
            acked,
            threads,
        }
    }

    pub fn acked(&self) -> Vec<(u64, Instant)> {
        self.acked.guard().clone()
    }

    pub fn stop(mut self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
        self.acked()
    }
}

/// Tern's producer, finding the master through the name server, sending numbered keys
/// (from [`CLIENT_KEYS`]) one at a time until stopped; records those answered SEND_OK
/// and when. A failed send is the application's to repeat (with the next key).
pub struct ClientSender {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Keys of Tern's producer: a range of their own.
pub const CLIENT_KEYS: u64 = 2_000_000_000;

impl ClientSender {
    pub fn start(namesrv: &str) -> ClientSender {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), acked.clone());
        let config = tern_client::ClientConfig::new(namesrv);
        let thread = std::thread::spawn(move || {
            run(async move {
                let mut pc = tern_client::ProducerConfig::new("failover-pg");
                pc.send_timeout = Duration::from_secs(1);
                let p = tern_client::Producer::new(pc, config).unwrap();
                p.start();
                let mut k = CLIENT_KEYS;
                while !s.load(Ordering::Acquire) {
                    use tern_client::MessageBuilder;
                    let m = tern_client::Message::new(TOPIC, format!("client {k}"))
                        .with_keys([format!("k{k}")]);
                    match p.send(m).await {
                        Ok(r) if r.status == tern_client::SendStatus::SendOk => {
                            a.guard().push((k, Instant::now()));
                        }
                        // Not acknowledged: nothing is claimed of it.
                        Ok(_) | Err(_) => {
                            tern_shell::runtime::sleep(Duration::from_millis(10)).await
                        }
                    }
                    k += 1;
                }
                p.shutdown().await;
            })
        });
        ClientSender {
            stop,
            acked,
            thread: Some(thread),
        }
    }

    pub fn acked(&self) -> Vec<(u64, Instant)> {
        self.acked.guard().clone()
    }

    pub fn stop(mut self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.acked()
    }
}
