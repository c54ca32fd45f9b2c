//! HA replication between real broker processes: a master (standalone, with the name
//! server) and a slave that finds it through its registration answer.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tern_shell::ResponseCode;
use tern_shell::headers::{
    GetMaxOffsetRequestHeader, OffsetResponseHeader, SendMessageResponseHeader,
};
use tern_shell::message::MessageExt;
use tern_shell::{RemotingCommand, RequestCode};

const TOPIC: &str = "HaTopic";
const QUEUES: i32 = 4;

/// A master (standalone: it embeds the name server) with `role`.
fn master(dir: &Path, role: &str) -> BrokerProc {
    let conf = write_conf(dir, &format!("brokerRole={role}\nhaListenPort=0\n"));
    BrokerProc::standalone(dir, &conf)
}

/// A slave of `broker-a` registering with `namesrv`, its store under `dir`.
fn slave(dir: &Path, namesrv: &str) -> BrokerProc {
    let conf = write_conf(
        dir,
        &format!(
            "brokerRole=SLAVE\nbrokerId=1\nnamesrvAddr={namesrv}\nstorePathRootDir={}\n\
             haSendHeartbeatInterval=500\n",
            dir.join("store").display()
        ),
    );
    let args: Vec<OsString> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "-c".into(),
        conf.into(),
    ];
    BrokerProc::start(&args)
}

async fn max_offset(c: &Client, queue_id: i32) -> i64 {
    let req = RemotingCommand::request(
        RequestCode::GetMaxOffset,
        &GetMaxOffsetRequestHeader {
            topic: TOPIC.into(),
            queue_id,
            committed: None,
        },
    );
    let resp = c.call(req).await;
    expect_code(&resp, ResponseCode::Success);
    resp.decode_header::<OffsetResponseHeader>().unwrap().offset
}

/// Every queue's max offset.
async fn offsets(c: &Client) -> Vec<i64> {
    let mut v = Vec::new();
    for q in 0..QUEUES {
        v.push(max_offset(c, q).await);
    }
    v
}

/// Waits until the slave's queues hold what the master's do.
async fn until_caught_up(master: &Client, slave: &Client) -> Vec<i64> {
    let want = offsets(master).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = offsets(slave).await;
        if got == want {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "slave at {got:?}, master at {want:?}"
        );
        async_std::task::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends message `i` (bodies from 10 B to 100 KiB, so frames split records) and returns
/// the response code and message id.
async fn send(c: &Client, i: usize) -> (ResponseCode, String) {
    let body = vec![b'a' + (i % 26) as u8; 10 + (i * 7919) % (100 * 1024)];
    let m = msg(TOPIC, &body, &[("KEYS", &format!("k{i}"))]);
    let resp = c.call(send_v2(&m, (i % QUEUES as usize) as i32)).await;
    let id = resp
        .decode_header::<SendMessageResponseHeader>()
        .map(|h| h.msg_id)
        .unwrap_or_default();
    (resp.response_code(), id)
}

/// Message id → body, of every message in the topic as `c` serves it.
async fn contents(c: &Client) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    for q in 0..QUEUES {
        let got: Vec<MessageExt> = pull_all(c, TOPIC, q, 0).await;
        for m in got {
            all.insert(m.offset_msg_id.clone(), m.body);
        }
    }
    all
}

#[test]
fn sync_master_answers_once_the_slave_holds_the_message() {
    let (md, sd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let m = master(md.path(), "SYNC_MASTER");
    let ns = m.namesrv.clone().unwrap();
    run(async {
        let mc = Client::connect(&m.addr).await;
        create_topic(&mc, TOPIC, QUEUES).await;
        // Stored, but nobody to replicate to: RocketMQ's SLAVE_NOT_AVAILABLE.
        assert_eq!(send(&mc, 0).await.0, ResponseCode::SlaveNotAvailable);

        let s = slave(sd.path(), &ns);
        let sc = Client::connect(&s.addr).await;
        // Once the slave is connected, every send is acknowledged by it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while send(&mc, 1).await.0 != ResponseCode::Success {
            assert!(Instant::now() < deadline, "slave never acknowledged");
            async_std::task::sleep(Duration::from_millis(100)).await;
        }
        for i in 2..120 {
            let (code, id) = send(&mc, i).await;
            assert_eq!(code, ResponseCode::Success, "message {i} ({id})");
        }
        // Acknowledged means stored on the slave: its queues already hold everything.
        let want = offsets(&mc).await;
        assert_eq!(offsets(&sc).await, want);
        assert!(want.iter().sum::<i64>() >= 120);
        assert_eq!(contents(&sc).await, contents(&mc).await);

        // A slave takes no sends, and says so in a way clients retry elsewhere.
        let resp = sc.call(send_v2(&msg(TOPIC, b"x", &[]), 0)).await;
        assert_eq!(resp.response_code(), ResponseCode::ServiceNotAvailable);
        assert!(resp.remark.unwrap_or_default().contains("slave"));
    });
    drop(m);
}

#[test]
fn a_restarted_slave_resumes_from_its_own_end_and_serves_after_the_master_dies() {
    let (md, sd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut m = master(md.path(), "ASYNC_MASTER");
    let ns = m.namesrv.clone().unwrap();
    run(async {
        let mc = Client::connect(&m.addr).await;
        create_topic(&mc, TOPIC, QUEUES).await;
        let mut s = slave(sd.path(), &ns);
        let sc = Client::connect(&s.addr).await;
        for i in 0..60 {
            assert_eq!(send(&mc, i).await.0, ResponseCode::Success);
        }
        until_caught_up(&mc, &sc).await;
        let before = s.stderr_text();
        assert!(before.contains("replicating from master"), "{before}");

        // The slave dies; the master goes on alone.
        s.kill9();
        for i in 60..150 {
            assert_eq!(send(&mc, i).await.0, ResponseCode::Success);
        }
        let s = slave(sd.path(), &ns);
        let sc = Client::connect(&s.addr).await;
        until_caught_up(&mc, &sc).await;
        // It asked for what it lacked, not for everything again.
        let line = s
            .wait_for_log(
                &["replicating from master", "this log ends at"],
                Duration::ZERO,
            )
            .unwrap();
        let resumed_at: u64 = line.rsplit(' ').next().unwrap().trim().parse().unwrap();
        assert!(resumed_at > 0, "{line}");
        let want = contents(&mc).await;
        assert_eq!(want.len(), 150);

        // The master dies: the slave still serves everything it acknowledged.
        m.kill9();
        assert_eq!(contents(&sc).await, want);
        drop(s);
    });
}
