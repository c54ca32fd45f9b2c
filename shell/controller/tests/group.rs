//! A group of three controllers: leader election, the broker-side requests with
//! RocketMQ's codes, a master replaced when its connection closes, and the state kept
//! across kill -9 of the leader and of every node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_shell::body::{
    BrokerReplicasInfo, ElectMasterResponseBody, SyncStateSet, from_json, to_json,
};
use tern_shell::headers::{
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader, GetNextBrokerIdRequestHeader, GetReplicaInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader, RegisterBrokerToControllerRequestHeader,
};
use tern_shell::runtime::{self, Shutdown, block_on};
use tern_shell::sync::MutexExt;
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RequestCode,
    ResponseCode, Server, ServerConfig,
};

use crate::common::{Ctl, Group, TIMEOUT, admin, call, poll};

const NAME: &str = "broker-a";
const CLUSTER: &str = "DefaultCluster";
/// Reads confirmed with a quorum, so the test goes through openraft's read index.
const READS: &str = "processReadEvent = true\n";

/// What 1005 says on node `addr`: (leader id, leader address, is leader).
fn metadata(addr: &str) -> Option<(Option<String>, Option<String>, bool, RemotingCommand)> {
    let r = call(
        addr,
        RemotingCommand::request_code(RequestCode::ControllerGetMetadataInfo),
    )?;
    let e = &r.ext_fields;
    Some((
        e.get("controllerLeaderId").map(str::to_owned),
        e.get("controllerLeaderAddress").map(str::to_owned),
        e.get("isLeader") == Some("true"),
        r,
    ))
}

/// Waits until every reachable node in `among` names the same leader, which says it is
/// the leader; its index.
fn wait_leader(g: &Group, among: &[usize]) -> usize {
    poll(Duration::from_secs(15), || {
        let views: Vec<_> = among.iter().map(|&i| (i, metadata(&g.addrs[i]))).collect();
        let first = views.first()?.1.as_ref()?.0.clone()?;
        let mut leaders = 0;
        for (i, v) in &views {
            let (id, addr, is_leader, _) = v.as_ref()?;
            if id.as_deref() != Some(first.as_str()) {
                return None;
            }
            if *is_leader {
                leaders += 1;
                assert_eq!(addr.as_deref(), Some(g.addrs[*i].as_str()));
            }
        }
        let k: usize = first.strip_prefix('n')?.parse().ok()?;
        (leaders == 1 && among.contains(&k)).then_some(k)
    })
    .unwrap_or_else(|| panic!("no agreed leader among {among:?}"))
}

/// NOTIFY_BROKER_ROLE_CHANGED as a broker received it: (master id, master epoch).
type Notes = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

#[derive(Clone)]
struct Recorder(Notes);

impl Processor for Recorder {
    async fn process(&self, _c: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        if req.request_code_enum() == RequestCode::NotifyBrokerRoleChanged {
            let h: NotifyBrokerRoleChangedRequestHeader = req.decode_header().unwrap();
            self.0.guard().push((
                h.master_broker_id.map(|v| v.to_string()),
                h.master_epoch.map(|v| v.to_string()),
            ));
        }
        (!req.is_oneway()).then(|| RemotingCommand::response_to(&req, ResponseCode::Success))
    }
}

/// A stand-in for a broker: a port that records notifications, and heartbeats to every
/// controller every 300 ms over connections it keeps (so closing them is a kill -9).
struct FakeBroker {
    id: i64,
    addr: String,
    notes: Notes,
    server: Option<Server>,
    stop: Shutdown,
    conns: Arc<Mutex<Vec<Connection>>>,
}

impl FakeBroker {
    fn start(id: i64, controllers: &[String]) -> Self {
        let notes: Notes = Arc::default();
        let server = block_on(Server::bind(
            "127.0.0.1:0",
            ServerConfig::default(),
            Arc::new(Recorder(notes.clone())),
        ))
        .unwrap();
        let addr = server.local_addr().to_string();
        let stop = Shutdown::new();
        let conns: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let (controllers, me, s, cs) = (
            controllers.to_vec(),
            addr.clone(),
            stop.clone(),
            conns.clone(),
        );
        drop(runtime::spawn(async move {
            let mut held: Vec<Option<Connection>> = vec![None; controllers.len()];
            while !s.is_triggered() {
                for (i, c) in controllers.iter().enumerate() {
                    if held[i].as_ref().is_none_or(|c| c.is_closed()) {
                        held[i] = Connection::connect(c, ConnectionConfig::default(), TIMEOUT)
                            .await
                            .ok();
                        if let Some(conn) = &held[i] {
                            cs.guard().push(conn.clone());
                        }
                    }
                    let Some(conn) = &held[i] else { continue };
                    let h = BrokerHeartbeatRequestHeader {
                        cluster_name: CLUSTER.into(),
                        broker_addr: me.clone(),
                        broker_name: NAME.into(),
                        broker_id: Some(id),
                        epoch: Some(1),
                        max_offset: Some(1000 + id),
                        heartbeat_timeout_mills: Some(3000),
                        ..Default::default()
                    };
                    let _ = conn
                        .oneway(RemotingCommand::request(RequestCode::BrokerHeartbeat, &h))
                        .await;
                }
                runtime::sleep(Duration::from_millis(300)).await;
            }
        }));
        Self {
            id,
            addr,
            notes,
            server: Some(server),
            stop,
            conns,
        }
    }

    /// Stops heartbeating and closes every connection, as a killed process would.
    fn kill(&mut self) {
        self.stop.trigger();
        std::thread::sleep(Duration::from_millis(350));
        for c in self.conns.guard().drain(..) {
            c.close();
        }
        if let Some(s) = self.server.take() {
            block_on(s.shutdown());
        }
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn code(r: &RemotingCommand) -> ResponseCode {
    r.response_code()
}

fn ext<'a>(r: &'a RemotingCommand, k: &str) -> Option<&'a str> {
    r.ext_fields.get(k)
}

fn replica_info(addr: &str) -> Option<RemotingCommand> {
    let h = GetReplicaInfoRequestHeader {
        broker_name: NAME.into(),
    };
    call(
        addr,
        RemotingCommand::request(RequestCode::ControllerGetReplicaInfo, &h),
    )
    .filter(|r| code(r) == ResponseCode::Success)
}

#[test]
fn a_group_serves_broker_flows_replaces_a_dead_master_and_keeps_its_state_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let g = Group::new(dir.path(), 3);
    let mut nodes: Vec<Ctl> = (0..3).map(|i| g.start(i, READS)).collect();
    let leader = wait_leader(&g, &[0, 1, 2]);
    let la = g.addrs[leader].clone();
    let (_, _, _, meta) = metadata(&la).unwrap();
    assert_eq!(ext(&meta, "group"), Some("tern-test"));
    let peers: String = g
        .addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("n{i}:{a};"))
        .collect();
    assert_eq!(ext(&meta, "peers"), Some(peers.as_str()));

    // Followers refuse leader requests with 2007 and no address, as RocketMQ's.
    let next = |addr: &str| {
        let h = GetNextBrokerIdRequestHeader {
            cluster_name: Some(CLUSTER.into()),
            broker_name: NAME.into(),
        };
        call(
            addr,
            RemotingCommand::request(RequestCode::ControllerGetNextBrokerId, &h),
        )
        .unwrap()
    };
    let follower = (leader + 1) % 3;
    let r = next(&g.addrs[follower]);
    assert_eq!(code(&r), ResponseCode::ControllerNotLeader);
    assert_eq!(
        r.remark.as_deref(),
        Some("The controller is not in leader state")
    );

    // Ids: next id, apply it; a taken id is refused 2014.
    let apply = |id: i64, check: &str| {
        let h = ApplyBrokerIdRequestHeader {
            cluster_name: Some(CLUSTER.into()),
            broker_name: NAME.into(),
            applied_broker_id: id,
            register_check_code: check.into(),
        };
        call(
            &la,
            RemotingCommand::request(RequestCode::ControllerApplyBrokerId, &h),
        )
        .unwrap()
    };
    assert_eq!(
        code(&apply(3, "x;1")),
        ResponseCode::ControllerBrokerIdInvalid,
        "a new set starts at 1"
    );
    let mut brokers = Vec::new();
    for id in 1..=3 {
        let r = next(&la);
        assert_eq!(ext(&r, "nextBrokerId"), Some(id.to_string().as_str()));
        let b = FakeBroker::start(id, &g.addrs);
        let check = format!("{};{}", b.addr, 1000 + id);
        assert_eq!(code(&apply(id, &check)), ResponseCode::Success);
        assert_eq!(
            code(&apply(id, &check)),
            ResponseCode::Success,
            "the same broker retrying"
        );
        brokers.push(b);
    }
    assert_eq!(
        code(&apply(2, "other;1")),
        ResponseCode::ControllerBrokerIdInvalid
    );

    // Register: no master yet, so no master fields.
    for b in &brokers {
        let h = RegisterBrokerToControllerRequestHeader {
            cluster_name: Some(CLUSTER.into()),
            broker_name: NAME.into(),
            broker_id: b.id,
            broker_address: b.addr.clone(),
            invoke_time: None,
        };
        let r = call(
            &la,
            RemotingCommand::request(RequestCode::ControllerRegisterBroker, &h),
        )
        .unwrap();
        assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
        assert_eq!(ext(&r, "masterBrokerId"), None);
        let sss: SyncStateSet = from_json(&r.body).unwrap();
        assert_eq!(sss, SyncStateSet::default());
    }

    // The first broker to ask becomes master; the next is told 2011 with the master.
    let elect = |id: i64| {
        let h = ElectMasterRequestHeader {
            cluster_name: Some(CLUSTER.into()),
            broker_name: NAME.into(),
            broker_id: Some(id),
            designate_elect: Some(false),
            invoke_time: None,
        };
        call(
            &la,
            RemotingCommand::request(RequestCode::ControllerElectMaster, &h),
        )
        .unwrap()
    };
    // Heartbeats must have arrived for the set's members to count as alive.
    std::thread::sleep(Duration::from_millis(700));
    let r = elect(1);
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    assert_eq!(ext(&r, "masterBrokerId"), Some("1"));
    assert_eq!(ext(&r, "masterEpoch"), Some("1"));
    assert_eq!(ext(&r, "syncStateSetEpoch"), Some("1"));
    let body: ElectMasterResponseBody = from_json(&r.body).unwrap();
    assert_eq!(body.broker_member_group.unwrap().broker_addrs.0.len(), 3);
    assert_eq!(body.sync_state_set, vec![1]);
    let r = elect(2);
    assert_eq!(code(&r), ResponseCode::ControllerMasterStillExist);
    assert_eq!(ext(&r, "masterBrokerId"), Some("1"));

    // The master grows its SyncStateSet; stale epochs are fenced.
    let alter = |members: &[i64], master_epoch: i32, sss_epoch: i32| {
        let h = AlterSyncStateSetRequestHeader {
            broker_name: NAME.into(),
            master_broker_id: 1,
            master_epoch,
            invoke_time: None,
        };
        let body = SyncStateSet {
            sync_state_set: members.to_vec(),
            sync_state_set_epoch: sss_epoch,
        };
        call(
            &la,
            RemotingCommand::request(RequestCode::ControllerAlterSyncStateSet, &h)
                .with_body(to_json(&body)),
        )
        .unwrap()
    };
    assert_eq!(
        code(&alter(&[1, 2, 3], 0, 1)),
        ResponseCode::ControllerFencedMasterEpoch
    );
    let r = alter(&[1, 2, 3], 1, 1);
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    assert_eq!(ext(&r, "newSyncStateSetEpoch"), Some("2"));
    assert_eq!(
        code(&alter(&[1, 2], 1, 1)),
        ResponseCode::ControllerFencedSyncStateSetEpoch
    );

    let r = call(
        &la,
        RemotingCommand::request_code(RequestCode::ControllerGetSyncStateData)
            .with_body(to_json(&vec![NAME.to_string(), "nope".to_string()])),
    )
    .unwrap();
    assert_eq!(code(&r), ResponseCode::Success);
    let info: BrokerReplicasInfo = from_json(&r.body).unwrap();
    assert_eq!(info.replicas_info_table.len(), 1);
    let a = &info.replicas_info_table[NAME];
    assert_eq!(
        (a.in_sync_replicas.len(), a.not_in_sync_replicas.len()),
        (3, 0)
    );
    assert!(a.in_sync_replicas.iter().all(|r| r.alive));

    // mqadmin's commands, through any node: the leader is looked up with 1005.
    let fa = g.addrs[follower].clone();
    let (ok, out, err) = admin(&["getControllerMetaData", "-a", &fa]);
    assert!(ok, "{err}");
    assert!(out.contains("#ControllerGroup\ttern-test"), "{out}");
    assert!(
        out.contains(&format!("#ControllerLeaderAddress\t{la}")),
        "{out}"
    );
    assert_eq!(out.matches("#Peer:").count(), 3, "{out}");
    let (ok, out, err) = admin(&["getSyncStateSet", "-a", &fa, "-b", NAME]);
    assert!(ok, "{err}");
    assert!(
        out.contains("#MasterEpoch\t1") && out.contains("#SyncStateSetNums\t3"),
        "{out}"
    );
    assert_eq!(out.matches("alive=true").count(), 3, "{out}");
    // An operator moves the master to broker 2; it grows its set again.
    let (ok, out, err) = admin(&[
        "electMaster",
        "-a",
        &fa,
        "-b",
        "2",
        "-bn",
        NAME,
        "-c",
        CLUSTER,
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("#BrokerMasterAddr\t{}", brokers[1].addr)),
        "{out}"
    );
    assert!(out.contains("#MasterEpoch\t2"), "{out}");
    assert_eq!(out.matches("#Broker\t").count(), 3, "{out}");
    let h = AlterSyncStateSetRequestHeader {
        broker_name: NAME.into(),
        master_broker_id: 2,
        master_epoch: 2,
        invoke_time: None,
    };
    let body = SyncStateSet {
        sync_state_set: vec![1, 2, 3],
        sync_state_set_epoch: 3,
    };
    let r = call(
        &la,
        RemotingCommand::request(RequestCode::ControllerAlterSyncStateSet, &h)
            .with_body(to_json(&body)),
    )
    .unwrap();
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    let (ok, _, err) = admin(&[
        "electMaster",
        "-a",
        &fa,
        "-b",
        "9",
        "-bn",
        NAME,
        "-c",
        CLUSTER,
    ]);
    assert!(
        !ok && err.contains("2012"),
        "a designated broker that is no replica: {err}"
    );

    // The master's process dies: its connections close, a member of the set takes over
    // at once and every live replica is told.
    brokers[1].kill();
    let killed = std::time::Instant::now();
    let r = poll(Duration::from_secs(5), || {
        replica_info(&la).filter(|r| ext(r, "masterEpoch") == Some("3"))
    })
    .expect("a new master within 5 s of the master's connections closing");
    eprintln!(
        "new master {:?} after the master's connections closed",
        killed.elapsed()
    );
    let new_master: i64 = ext(&r, "masterBrokerId").unwrap().parse().unwrap();
    assert!(new_master == 1 || new_master == 3, "master {new_master}");
    let sss: SyncStateSet = from_json(&r.body).unwrap();
    assert_eq!(
        (sss.sync_state_set.clone(), sss.sync_state_set_epoch),
        (vec![new_master], 5)
    );
    for b in [&brokers[0], &brokers[2]] {
        let told = poll(Duration::from_secs(5), || {
            b.notes
                .guard()
                .contains(&(Some(new_master.to_string()), Some("3".into())))
                .then_some(())
        });
        assert!(
            told.is_some(),
            "broker {} was not notified: {:?}",
            b.id,
            b.notes.guard()
        );
    }
    // cleanBrokerMetadata of the replicas `ids` of broker-a.
    let clean = |ids| {
        admin(&[
            "cleanBrokerMetadata",
            "-a",
            &fa,
            "-bn",
            NAME,
            "-b",
            ids,
            "-c",
            CLUSTER,
        ])
    };
    // The dead replica is forgotten; a live one cannot be.
    let (ok, _, err) = clean("1;3");
    assert!(!ok && err.contains("still alive"), "{err}");
    let (ok, out, err) = clean("2");
    assert!(
        ok && out.contains("clear broker broker-a metadata from controller success"),
        "{out} {err}"
    );
    let (_, out, _) = admin(&["getSyncStateSet", "-a", &fa, "-b", NAME]);
    assert!(!out.contains("brokerId=2,"), "{out}");

    // The controller leader is killed: the others elect a leader that has the state.
    nodes[leader].kill9();
    let killed = std::time::Instant::now();
    let rest: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let leader2 = wait_leader(&g, &rest);
    eprintln!(
        "new controller leader {:?} after kill -9 of the leader",
        killed.elapsed()
    );
    let r = replica_info(&g.addrs[leader2]).unwrap();
    assert_eq!(
        ext(&r, "masterBrokerId"),
        Some(new_master.to_string().as_str())
    );
    assert_eq!(ext(&r, "masterEpoch"), Some("3"));

    // It rejoins, and then every node is killed and restarted: the log and snapshot
    // give back the same state.
    nodes[leader] = g.start(leader, READS);
    wait_leader(&g, &[0, 1, 2]);
    for n in &mut nodes {
        n.kill9();
    }
    let nodes: Vec<Ctl> = (0..3).map(|i| g.start(i, READS)).collect();
    let leader3 = wait_leader(&g, &[0, 1, 2]);
    let la3 = &g.addrs[leader3];
    let r = poll(Duration::from_secs(5), || replica_info(la3)).unwrap();
    assert_eq!(
        ext(&r, "masterBrokerId"),
        Some(new_master.to_string().as_str())
    );
    assert_eq!(ext(&r, "masterEpoch"), Some("3"));
    assert_eq!(ext(&next(la3), "nextBrokerId"), Some("4"));

    // A leader cut off from its quorum answers a write with an error in bounded time
    // instead of holding every later request behind it.
    let mut nodes = nodes;
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != leader3 {
            n.kill9();
        }
    }
    let h = ApplyBrokerIdRequestHeader {
        cluster_name: Some(CLUSTER.into()),
        broker_name: "broker-b".into(),
        applied_broker_id: 1,
        register_check_code: "x;1".into(),
    };
    let asked = std::time::Instant::now();
    let r = block_on(async {
        let c = Connection::connect(la3, ConnectionConfig::default(), TIMEOUT)
            .await
            .unwrap();
        c.request(
            RemotingCommand::request(RequestCode::ControllerApplyBrokerId, &h),
            Duration::from_secs(15),
        )
        .await
        .unwrap()
    });
    assert!(
        matches!(
            code(&r),
            ResponseCode::SystemError | ResponseCode::ControllerNotLeader
        ),
        "{:?} {:?}",
        code(&r),
        r.remark
    );
    assert!(
        asked.elapsed() < Duration::from_secs(12),
        "answered after {:?}",
        asked.elapsed()
    );
    drop(nodes);
}
