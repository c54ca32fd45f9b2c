//! Controller mode end to end (issue 16): three `tern-controller` processes, a
//! `tern-namesrv`, and three `tern-broker`s of one broker-set with
//! `allAckInSyncStateSet=true`, every process real, on loopback.
//!
//! Four senders send numbered keys to whichever broker the controllers name master and
//! record every SEND_OK. The master is killed with `kill -9` (three times in CI; set
//! TERN_FAILOVER_KILLS for more, e.g. 20): each time a new master must be elected and
//! accept sends within the bound, every acknowledged key must be readable from the new
//! master, and the killed broker, restarted, must rejoin as a slave (cutting any tail it
//! holds past the new master's log) and re-enter the SyncStateSet. Epochs only grow.
//! Round 1, 3, ... freeze both slaves (SIGSTOP) for a second before the kill, so the
//! master holds sends they do not; rounds 2, 5, ... kill the controller leader right
//! after the master, mid-election. Last, a master frozen past the heartbeat timeout is
//! replaced, and woken it acknowledges nothing and steps down. The times from kill to
//! first SEND_OK are printed, sorted, for the issue note.
//!
//! A second test runs Apache's C++ client (PyPI `rocketmq==0.4.4`) through a failover:
//! every message its producer had acknowledged before the kill is consumed by its push
//! consumer from the new master, and a new producer sends to the new master.

#[allow(dead_code)]
#[path = "../../../tests/support/binaries.rs"]
mod binaries;
mod common;
mod interop;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tern_shell::body::{SyncStateSet, from_json};
use tern_shell::headers::{
    GetMetaDataResponseHeader, GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader,
};
use tern_shell::message::MessageExt;
use tern_shell::sync::MutexExt;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand, RequestCode, ResponseCode};

const TOPIC: &str = "FailoverTopic";
const QUEUES: i32 = 2;
const SET: &str = "broker-a";
/// A new master must take sends within this of the kill (the bound; goal 3 s).
const FAILOVER_BOUND: Duration = Duration::from_secs(5);
/// How long the C++ producer is given to send again after a failover (measured: its send
/// timeout, then the retry lands on the new master; its route poll is 30 s).
const CPP_RESUME_LIMIT: Duration = Duration::from_secs(45);

fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A process killed on drop, its stderr in a file.
struct Proc {
    child: Option<Child>,
    log: PathBuf,
}

impl Proc {
    fn spawn(bin: &Path, args: &[&str], log: PathBuf) -> Proc {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        Proc {
            child: Some(child),
            log,
        }
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`resume` = SIGCONT): frozen with its sockets open.
    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let ok = Command::new("kill")
            .args([sig, &pid])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- {} (last 40 lines) ---\n{}",
                self.log.display(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
    }
}

/// Waits for `what` (polled every 100 ms) up to `within`.
fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Cluster {
    root: PathBuf,
    controllers: Vec<String>,
    ctl: Vec<Option<Proc>>,
    ctl_bin: PathBuf,
    namesrv: String,
    _ns: Proc,
    broker_ports: Vec<u16>,
    brokers: Vec<Option<Proc>>,
    /// Configuration lines every broker started from now on gets too.
    extra_conf: String,
}

impl Cluster {
    fn start(root: &Path) -> Cluster {
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
        let ctl_bin = binaries::binary_of("tern-controller", "tern-controller");
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
                    Proc::spawn(
                        &ctl_bin,
                        &["-c", conf.to_str().unwrap()],
                        dir.join("stderr.log"),
                    )
                })
            })
            .collect();
        let namesrv = format!("127.0.0.1:{}", ports[3]);
        let ns = Proc::spawn(
            &binaries::binary_of("tern-namesrv", "tern-namesrv"),
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

    fn start_broker(&mut self, i: usize) {
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
        let p = Proc::spawn(
            Path::new(env!("CARGO_BIN_EXE_tern-broker")),
            &["--listen", &listen, "-c", conf.to_str().unwrap()],
            dir.join("stderr.log"),
        );
        self.brokers[i] = Some(p);
    }

    /// Starts the set: broker 0 alone, so it becomes master of epoch 1, `topic` created
    /// on it, then brokers 1 and 2; returns once all three are in the SyncStateSet.
    fn start_set(&mut self, topic: &str, queues: i32) {
        self.start_broker(0);
        let r = eventually(Duration::from_secs(30), "a first master", || {
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
            Duration::from_secs(30),
            "all three in the SyncStateSet",
            || replica_info(&self.controllers).filter(|r| r.set.len() == 3),
        );
    }

    fn kill9_controller(&mut self, i: usize) {
        if let Some(mut p) = self.ctl[i].take() {
            p.kill9();
        }
    }

    fn restart_controller(&mut self, i: usize) {
        let dir = self.root.join(format!("ctl{i}"));
        let conf = dir.join("controller.conf");
        self.ctl[i] = Some(Proc::spawn(
            &self.ctl_bin,
            &["-c", conf.to_str().unwrap()],
            dir.join("stderr.log"),
        ));
    }

    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.broker_ports[i])
    }

    fn index_of(&self, addr: &str) -> usize {
        (0..3)
            .find(|i| self.addr(*i) == addr)
            .unwrap_or_else(|| panic!("{addr} is none of the brokers"))
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut p) = self.brokers[i].take() {
            p.kill9();
        }
    }

    fn broker_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.root.join(format!("b{i}/stderr.log"))).unwrap_or_default()
    }
}

/// What the controller leader says of the set: master address, master epoch, the
/// SyncStateSet.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Replicas {
    master: Option<String>,
    epoch: i32,
    set: BTreeSet<i64>,
}

fn replica_info(controllers: &[String]) -> Option<Replicas> {
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
fn controller_leader(controllers: &[String]) -> Option<usize> {
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
async fn send_answer(c: &Connection, k: u64) -> Option<RemotingCommand> {
    let key = format!("k{k}");
    let m = msg(TOPIC, key.as_bytes(), &[("KEYS", key.as_str())]);
    c.request(
        send_v2(&m, (k % QUEUES as u64) as i32),
        Duration::from_secs(5),
    )
    .await
    .ok()
}

/// Sends key `k` over `c`; true on SEND_OK.
async fn send(c: &Connection, k: u64) -> bool {
    send_answer(c, k)
        .await
        .is_some_and(|r| r.response_code() == ResponseCode::Success)
}

/// Every key the broker at `addr` holds in the topic.
fn keys_at(addr: &str) -> BTreeSet<u64> {
    key_counts(addr).into_keys().collect()
}

/// How many messages of the topic the broker at `addr` holds under each key.
fn key_counts(addr: &str) -> BTreeMap<u64, usize> {
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

/// Senders of numbered keys (each its own connection, one request at a time, as fast
/// as the master answers) to the master the controllers name, until stopped; records
/// the keys answered SEND_OK and when.
struct Sender {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Concurrent senders: enough that a kill lands with sends in flight.
const SENDERS: u64 = 4;

impl Sender {
    fn start(controllers: Vec<String>) -> Sender {
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

    fn acked(&self) -> Vec<(u64, Instant)> {
        self.acked.guard().clone()
    }

    fn stop(mut self) -> Vec<(u64, Instant)> {
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
struct ClientSender {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Keys of Tern's producer: a range of their own.
const CLIENT_KEYS: u64 = 2_000_000_000;

impl ClientSender {
    fn start(namesrv: &str) -> ClientSender {
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

    fn acked(&self) -> Vec<(u64, Instant)> {
        self.acked.guard().clone()
    }

    fn stop(mut self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.acked()
    }
}

#[test]
fn a_killed_master_is_replaced_within_the_bound_and_no_acknowledged_message_is_lost() {
    // One cluster at a time: six processes each on two cores.
    let _serial = interop::serial();
    let kills: usize = std::env::var("TERN_FAILOVER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path());
    if std::env::var_os("TERN_FAILOVER_KEEP").is_some() {
        eprintln!("keeping {}", dir.keep().display());
    }
    c.start_set(TOPIC, QUEUES);
    let sender = Sender::start(c.controllers.clone());
    let client = ClientSender::start(&c.namesrv);
    let mut epoch = 1;
    let mut failovers = Vec::new();
    let mut client_failovers = Vec::new();
    for round in 0..kills {
        // Let sends flow, then kill the master mid-stream.
        let before = sender.acked().len();
        eventually(Duration::from_secs(20), "sends to the master", || {
            (sender.acked().len() >= before + 500).then_some(())
        });
        let r = replica_info(&c.controllers).unwrap();
        let old = c.index_of(r.master.as_deref().unwrap());
        // Every other round the slaves freeze for a second first: the master then holds
        // sends they do not. With allAckInSyncStateSet those sends are not acknowledged
        // (without it they are, and the new master lacks them: this round fails).
        let frozen: Vec<usize> = if round % 2 == 1 {
            (0..3).filter(|i| *i != old).collect()
        } else {
            Vec::new()
        };
        for i in &frozen {
            c.brokers[*i].as_ref().unwrap().signal("-STOP");
        }
        if !frozen.is_empty() {
            std::thread::sleep(Duration::from_secs(1));
        }
        // Every third round the controller leader dies right after the master, mid-election.
        let leader = (round % 3 == 2)
            .then(|| controller_leader(&c.controllers))
            .flatten();
        c.kill9(old);
        let killed = Instant::now();
        if let Some(l) = leader {
            c.kill9_controller(l);
        }
        for i in &frozen {
            c.brokers[*i].as_ref().unwrap().signal("-CONT");
        }
        let r2 = eventually(Duration::from_secs(20), "a new master", || {
            replica_info(&c.controllers)
                .filter(|n| n.master.is_some() && n.master != r.master && n.epoch > r.epoch)
        });
        assert!(r2.epoch > epoch, "epochs only grow: {epoch} then {r2:?}");
        epoch = r2.epoch;
        let first_ok = eventually(
            Duration::from_secs(20),
            "a send acknowledged after the kill",
            || {
                sender
                    .acked()
                    .into_iter()
                    .find(|(_, t)| *t > killed)
                    .map(|(_, t)| t)
            },
        );
        let took = first_ok - killed;
        // Tern's producer: the name server names the new master once it registered, and
        // the client asks at once after a failed send.
        let client_ok = eventually(
            Duration::from_secs(20),
            "Tern's producer acknowledged after the kill",
            || {
                client
                    .acked()
                    .into_iter()
                    .find(|(_, t)| *t > killed)
                    .map(|(_, t)| t - killed)
            },
        );
        eprintln!("round {round}: Tern's producer: first SEND_OK after {client_ok:?}");
        if leader.is_none() {
            client_failovers.push(client_ok);
        }
        if let Some(l) = leader {
            // Raft elects a new leader first: reported, not held to the master-kill bound.
            eprintln!(
                "round {round}: controller leader n{l} killed too; first SEND_OK after {took:?}"
            );
            c.restart_controller(l);
        } else {
            failovers.push(took);
        }
        eprintln!(
            "round {round}: master {old} killed, new master {:?} epoch {epoch}, first SEND_OK after {took:?}",
            r2.master
        );
        // Every key acknowledged so far is on the new master.
        let acked_now: Vec<u64> = sender
            .acked()
            .iter()
            .chain(client.acked().iter())
            .map(|(k, _)| *k)
            .collect();
        let new_master = r2.master.clone().unwrap();
        let held = keys_at(&new_master);
        let lost: Vec<u64> = acked_now
            .iter()
            .copied()
            .filter(|k| !held.contains(k))
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} acknowledged keys missing on the new master {new_master}: {:?}",
            lost.len(),
            &lost[..lost.len().min(20)]
        );
        // The old master comes back as a slave and rejoins the set.
        c.start_broker(old);
        eventually(
            Duration::from_secs(30),
            "the restarted broker back in the set",
            || replica_info(&c.controllers).filter(|r| r.set.len() == 3 && r.epoch == epoch),
        );
        let log = c.broker_log(old);
        assert!(log.contains("now a slave of"), "broker {old}:\n{log}");
    }
    // A frozen master (SIGSTOP past the controllers' heartbeat timeout) is replaced; woken,
    // it must not acknowledge a send (its SyncStateSet's members follow the new master),
    // and it steps down to a slave.
    let r = replica_info(&c.controllers).unwrap();
    let frozen_addr = r.master.clone().unwrap();
    let frozen = c.index_of(&frozen_addr);
    c.brokers[frozen].as_ref().unwrap().signal("-STOP");
    let r2 = eventually(
        Duration::from_secs(20),
        "a master replacing the frozen one",
        || replica_info(&c.controllers).filter(|n| n.master.is_some() && n.master != r.master),
    );
    assert!(r2.epoch > epoch, "{r2:?}");
    c.brokers[frozen].as_ref().unwrap().signal("-CONT");
    let mut late = Vec::new();
    run(async {
        if let Ok(conn) = Connection::connect(
            &frozen_addr,
            ConnectionConfig::default(),
            Duration::from_secs(2),
        )
        .await
        {
            for k in 0..20u64 {
                // Keys of their own range, never sent by the senders.
                let k = 1_000_000_000 + k;
                if send(&conn, k).await {
                    late.push((k, Instant::now()));
                }
            }
        }
    });
    eventually(
        Duration::from_secs(10),
        "the woken master steps down",
        || {
            c.broker_log(frozen)
                .contains(&format!("now a slave of {SET} (epoch {}", r2.epoch))
                .then_some(())
        },
    );
    let mut acked = sender.stop();
    let by_client = client.stop();
    let client_acked = by_client.len();
    acked.extend(by_client);
    eprintln!(
        "frozen master: {} of 20 sends to it after the election acknowledged",
        late.len()
    );
    acked.extend(late);
    let r = replica_info(&c.controllers).unwrap();
    let held = keys_at(r.master.as_deref().unwrap());
    let lost: Vec<u64> = acked
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| !held.contains(k))
        .collect();
    assert!(lost.is_empty(), "acknowledged keys lost: {lost:?}");
    failovers.sort();
    client_failovers.sort();
    eprintln!(
        "failover (kill -9 to first SEND_OK), {} kills, sorted: {:?}; Tern's producer: {:?}; \
         {} keys acknowledged ({client_acked} by Tern's producer)",
        failovers.len(),
        failovers,
        client_failovers,
        acked.len()
    );
    for (i, t) in failovers.iter().enumerate() {
        assert!(*t < FAILOVER_BOUND, "kill {i}: first SEND_OK after {t:?}");
    }
    for (i, t) in client_failovers.iter().enumerate() {
        assert!(
            *t < FAILOVER_BOUND,
            "kill {i}: Tern's producer's first SEND_OK after {t:?}"
        );
    }
}

#[test]
fn cpp_client_messages_acknowledged_before_a_failover_are_consumed_from_the_new_master() {
    let _serial = interop::serial();
    let Some(py) = interop::python_or_skip(
        "cpp_client_messages_acknowledged_before_a_failover_are_consumed_from_the_new_master",
    ) else {
        return;
    };
    let scratch = interop::Scratch::new("failover");
    let mut c = Cluster::start(&scratch.path("cluster"));
    let topic = "TernFailoverCpp";
    c.start_set(topic, 4);
    // The C++ producer sends, and goes on after failures as an application would; the
    // master is killed once 150 are acknowledged.
    let (namesrv, controllers) = (c.namesrv.clone(), c.controllers.clone());
    let r = replica_info(&controllers).unwrap();
    let old = c.index_of(r.master.as_deref().unwrap());
    let through = interop::send_through_crash(
        &py,
        &scratch,
        (&namesrv, topic),
        (400, 150),
        &mut || c.kill9(old),
        CPP_RESUME_LIMIT,
    );
    let r2 = eventually(Duration::from_secs(20), "a new master", || {
        replica_info(&c.controllers).filter(|n| n.master.is_some() && n.master != r.master)
    });
    // The send in flight at the kill waits out its timeout (3 s; the C++ client does not
    // fail it when the connection closes), and its retry finds the new master.
    let resumed = through
        .resumed_after
        .expect("the C++ producer acknowledged nothing after the failover");
    eprintln!(
        "C++ producer: {} acknowledged in all; first SEND_OK {resumed:?} after the kill; new \
         master {:?} (epoch {})",
        through.acked.len(),
        r2.master,
        r2.epoch
    );
    let mut acked = through.acked;
    // A producer started now finds the new master through the name server at once.
    let after = interop::send_acked(&py, &scratch, &c.namesrv, topic, 50, None, &[]);
    assert_eq!(after.len(), 50);
    acked.extend(after);
    interop::consume_acked(&py, &scratch, &c.namesrv, topic, &acked, &[]);
}

#[test]
fn sends_are_refused_while_the_sync_state_set_is_smaller_than_min_in_sync_replicas() {
    let _serial = interop::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path());
    c.extra_conf = "minInSyncReplicas=2\nhaMaxTimeSlaveNotCatchup=2000\n".into();
    c.start_set(TOPIC, QUEUES);
    let master = replica_info(&c.controllers).unwrap().master.unwrap();
    let m = c.index_of(&master);
    let answer = |k: u64| {
        run(async {
            let conn =
                Connection::connect(&master, ConnectionConfig::default(), Duration::from_secs(2))
                    .await
                    .unwrap();
            send_answer(&conn, k).await.expect("an answer")
        })
    };
    assert_eq!(answer(1).response_code(), ResponseCode::Success);
    // Both slaves die: the master drops them from the set, leaving itself alone.
    let slaves: Vec<usize> = (0..3).filter(|i| *i != m).collect();
    for i in &slaves {
        c.kill9(*i);
    }
    eventually(
        Duration::from_secs(30),
        "a SyncStateSet of the master alone",
        || replica_info(&c.controllers).filter(|r| r.set.len() == 1),
    );
    let refused = answer(2);
    assert_eq!(refused.response_code(), ResponseCode::SystemError);
    assert_eq!(
        refused.remark.as_deref(),
        Some("in-sync replicas not enough")
    );
    assert!(
        !keys_at(&master).contains(&2),
        "a refused send is not stored"
    );
    // One slave back and caught up: two in sync, sends are taken again.
    c.start_broker(slaves[0]);
    eventually(Duration::from_secs(30), "the slave back in the set", || {
        replica_info(&c.controllers).filter(|r| r.set.len() == 2)
    });
    let taken = eventually(Duration::from_secs(10), "a send taken again", || {
        let r = answer(3);
        (r.response_code() == ResponseCode::Success).then_some(r)
    });
    assert_eq!(taken.response_code(), ResponseCode::Success);
}

/// Sends timer message `k` (due `delay_ms` from now) to the master at `addr`; true on
/// SEND_OK.
fn send_timer(addr: &str, k: u64, delay_ms: u64) -> bool {
    run(async {
        let conn = Connection::connect(addr, ConnectionConfig::default(), Duration::from_secs(2))
            .await
            .unwrap();
        let key = format!("k{k}");
        let delay = delay_ms.to_string();
        let m = msg(
            TOPIC,
            key.as_bytes(),
            &[("KEYS", key.as_str()), ("TIMER_DELAY_MS", delay.as_str())],
        );
        conn.request(
            send_v2(&m, (k % QUEUES as u64) as i32),
            Duration::from_secs(5),
        )
        .await
        .is_ok_and(|r| r.response_code() == ResponseCode::Success)
    })
}

#[test]
fn a_promoted_replica_delivers_each_timer_message_once() {
    let _serial = interop::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path());
    c.start_set(TOPIC, QUEUES);
    let master = replica_info(&c.controllers).unwrap().master.unwrap();
    // Due before the kill: the old master delivers them; the new one must not again.
    let early: Vec<u64> = (0..20).map(|i| 5_000_000_000 + i).collect();
    for k in &early {
        assert!(
            send_timer(&master, *k, 1_000),
            "timer message {k} acknowledged"
        );
    }
    eventually(
        Duration::from_secs(20),
        "the early timer messages delivered",
        || {
            let held = key_counts(&master);
            early.iter().all(|k| held.contains_key(k)).then_some(())
        },
    );
    // The old master checkpoints its timer (every second) and the slaves copy that
    // checkpoint on their next metadata sync (every 10 s).
    std::thread::sleep(Duration::from_secs(12));
    // Due after the kill: the new master must deliver them.
    let late: Vec<u64> = (0..10).map(|i| 6_000_000_000 + i).collect();
    for k in &late {
        assert!(
            send_timer(&master, *k, 4_000),
            "timer message {k} acknowledged"
        );
    }
    let old = c.index_of(&master);
    c.kill9(old);
    let r2 = eventually(Duration::from_secs(20), "a new master", || {
        replica_info(&c.controllers)
            .filter(|r| r.master.is_some() && r.master.as_deref() != Some(&master))
    });
    let new_master = r2.master.unwrap();
    let counts = eventually(
        Duration::from_secs(30),
        "the late timer messages delivered",
        || {
            let held = key_counts(&new_master);
            late.iter().all(|k| held.contains_key(k)).then_some(held)
        },
    );
    // A second past the late ones' due time: a redelivery would have shown.
    std::thread::sleep(Duration::from_secs(2));
    let counts = {
        let _ = counts;
        key_counts(&new_master)
    };
    let twice: Vec<(u64, usize)> = early
        .iter()
        .chain(late.iter())
        .map(|k| (*k, counts.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .collect();
    let log = c.broker_log(c.index_of(&new_master));
    assert!(
        twice.is_empty(),
        "timer messages not delivered exactly once on the new master: {twice:?}\n{}",
        log.lines()
            .filter(|l| l.contains("timer"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn a_replica_whose_log_was_cut_delivers_each_acknowledged_timer_message_once_when_promoted() {
    let _serial = interop::serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path());
    if std::env::var_os("TERN_FAILOVER_KEEP").is_some() {
        eprintln!("keeping {}", dir.keep().display());
    }
    c.start_set(TOPIC, QUEUES);
    let a_addr = replica_info(&c.controllers).unwrap().master.unwrap();
    let a = c.index_of(&a_addr);
    let others: Vec<usize> = (0..3).filter(|i| *i != a).collect();
    // 1. The slaves frozen, messages sent to A are stored there but never acknowledged
    //    (sent oneway: nobody waits for the slaves' timeout). A frozen slave's socket
    //    still takes what fits in its buffers, so 24 MiB of filler go first: the timer
    //    messages after them stay in A's tail alone, filed by A's timer.
    for i in &others {
        c.brokers[*i].as_ref().unwrap().signal("-STOP");
    }
    run(async {
        let conn =
            Connection::connect(&a_addr, ConnectionConfig::default(), Duration::from_secs(2))
                .await
                .unwrap();
        let filler = vec![b'f'; 256 << 10];
        for i in 0..96u64 {
            let m = msg(TOPIC, &filler, &[("KEYS", "filler")]);
            conn.oneway(send_v2(&m, (i % QUEUES as u64) as i32))
                .await
                .unwrap();
        }
        for i in 0..40u64 {
            let key = format!("k{}", 7_000_000_000 + i);
            let m = msg(
                TOPIC,
                key.as_bytes(),
                &[("KEYS", key.as_str()), ("TIMER_DELAY_MS", "40000")],
            );
            conn.oneway(send_v2(&m, (i % QUEUES as u64) as i32))
                .await
                .unwrap();
        }
    });
    // Flushed (ASYNC_FLUSH, 500 ms) and filed by A's timer.
    std::thread::sleep(Duration::from_millis(2_000));
    // 2. A dies; the slaves wake and one of them, B, is elected.
    c.kill9(a);
    for i in &others {
        c.brokers[*i].as_ref().unwrap().signal("-CONT");
    }
    let b_addr = eventually(Duration::from_secs(20), "a new master", || {
        replica_info(&c.controllers)
            .and_then(|r| r.master)
            .filter(|m| *m != a_addr)
    });
    // 3. Timer messages B acknowledges take the timer-queue offsets of A's cut tail (once
    //    B takes sends: its new set must hold them first).
    eventually(Duration::from_secs(20), "B acknowledging sends", || {
        run(async {
            let conn =
                Connection::connect(&b_addr, ConnectionConfig::default(), Duration::from_secs(2))
                    .await
                    .ok()?;
            send(&conn, 9_000_000_000).await.then_some(())
        })
    });
    let acked: Vec<u64> = (0..20).map(|i| 8_000_000_000 + i).collect();
    for k in &acked {
        assert!(
            send_timer(&b_addr, *k, 40_000),
            "timer message {k} acknowledged"
        );
    }
    // 4. A restarts, cuts its tail (marking its timer for a rebuild) and rejoins; it copies
    //    B's timer checkpoint on its next metadata sync (10 s).
    c.start_broker(a);
    eventually(Duration::from_secs(30), "A back in the set", || {
        replica_info(&c.controllers).filter(|r| r.set.len() == 3)
    });
    assert!(
        c.broker_log(a).contains("cutting this replica's log"),
        "A cut no tail:\n{}",
        c.broker_log(a)
    );
    std::thread::sleep(Duration::from_secs(12));
    // 5. B and the third broker die: A, the member left, is elected.
    for i in others {
        c.kill9(i);
    }
    eventually(Duration::from_secs(30), "A master again", || {
        replica_info(&c.controllers).filter(|r| r.master.as_deref() == Some(a_addr.as_str()))
    });
    // 6. Each timer message B acknowledged is delivered once, by A.
    eventually(
        Duration::from_secs(60),
        "B's timer messages delivered by A",
        || {
            let held = key_counts(&a_addr);
            acked.iter().all(|k| held.contains_key(k)).then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let counts = key_counts(&a_addr);
    let wrong: Vec<(u64, usize)> = acked
        .iter()
        .map(|k| (*k, counts.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(
        wrong.is_empty(),
        "acknowledged timer messages not delivered exactly once: {wrong:?}\n{}",
        c.broker_log(a)
            .lines()
            .filter(|l| l.contains("timer") || l.contains("cutting"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
