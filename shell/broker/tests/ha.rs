//! HA replication between real broker processes: a master (standalone, with the name
//! server) and a slave that finds it through its registration answer.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use tern_shell::ResponseCode;
use tern_shell::headers::{
    GetMaxOffsetRequestHeader, OffsetResponseHeader, SendMessageResponseHeader,
};
use tern_shell::message::MessageExt;
use tern_shell::runtime;
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
    BrokerProc::slave(dir, namesrv, "")
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
    let mut got = Vec::new();
    assert!(
        tern_testkit::poll_until_async(Duration::from_secs(20), async || {
            got = offsets(slave).await;
            got == want
        })
        .await,
        "slave at {got:?}, master at {want:?}"
    );
    got
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
        tern_testkit::wait_until(
            "slave never acknowledged",
            Duration::from_secs(20),
            async || send(&mc, 1).await.0 == ResponseCode::Success,
        )
        .await;
        for i in 2..120 {
            let (code, id) = send(&mc, i).await;
            assert_eq!(code, ResponseCode::Success, "message {i} ({id})");
        }
        // Acknowledged means stored on the slave: its queues already hold everything.
        let want = offsets(&mc).await;
        assert_eq!(offsets(&sc).await, want);
        assert!(want.iter().sum::<i64>() >= 120);
        assert_eq!(contents(&sc).await, contents(&mc).await);

        // Both sides report replication in their runtime info.
        let info = runtime_info(&mc).await;
        assert_eq!(info["haSlaveCount"], "1", "{info:?}");
        let end = info["commitLogMaxOffset"].clone();
        assert_eq!(info["haSlaveAckOffset"], end, "{info:?}");
        assert!(!info.contains_key("haMasterAddr"));
        let mut info = BTreeMap::new();
        // The slave records its report just after sending it: allow a moment.
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(20), async || {
                info = runtime_info(&sc).await;
                assert_eq!(info["haMasterAddr"], m.addr, "{info:?}");
                assert!(info["haMasterHaAddr"].contains(':'), "{info:?}");
                assert!(!info.contains_key("haSlaveCount"));
                info["haReportedOffset"] == end && info["haMasterOffset"] == end
            })
            .await,
            "slave's runtime info {info:?}, master at {end}"
        );

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

/// One send the master answered with SUCCESS.
#[derive(Debug, Clone)]
struct Acked {
    /// `KEYS` of the message: `s<sender>-<seq>`, from which its body is derived.
    key: String,
    queue_id: i32,
    /// The master's offset message id (the slave's copy has the same store host and
    /// log offset, so the same id).
    msg_id: String,
}

/// The body of sender `sender`'s message `seq`: every fifth is larger than a 32 KiB
/// replication frame (`haTransferBatchSize`), so records straddle frames; the rest are
/// small, so frames also carry many records.
fn body_of(sender: usize, seq: usize) -> Vec<u8> {
    let len = if seq % 5 == 0 {
        33 * 1024 + (seq * 7919) % (64 * 1024)
    } else {
        16 + (seq * 131) % 4000
    };
    let mut body = format!("{sender}-{seq}:").into_bytes();
    body.resize(len, b'a' + ((sender * 7 + seq) % 26) as u8);
    body
}

/// The body a pulled message must have, from its `KEYS`.
fn body_for_key(key: &str) -> Vec<u8> {
    let (sender, seq) = key
        .strip_prefix('s')
        .and_then(|k| k.split_once('-'))
        .unwrap_or_else(|| panic!("unexpected key {key}"));
    body_of(sender.parse().unwrap(), seq.parse().unwrap())
}

/// Sends on its own connection until `stop` or a transport error (the master died),
/// recording the sends answered SUCCESS. Other answers (no slave in time) are not
/// acknowledgements and are only counted.
async fn send_until_error(
    addr: String,
    sender: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
) -> usize {
    let conn = tern_shell::Connection::connect(
        &addr,
        tern_shell::ConnectionConfig::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let mut not_acked = 0;
    for seq in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = format!("s{sender}-{seq}");
        let queue_id = ((sender + seq) % QUEUES as usize) as i32;
        let m = msg(TOPIC, &body_of(sender, seq), &[("KEYS", &key)]);
        let Ok(resp) = conn.request(send_v2(&m, queue_id), RPC_TIMEOUT).await else {
            break;
        };
        if resp.response_code() != ResponseCode::Success {
            not_acked += 1;
            continue;
        }
        let h: SendMessageResponseHeader = resp.decode_header().unwrap();
        acked.lock().unwrap().push(Acked {
            key,
            queue_id,
            msg_id: h.msg_id,
        });
    }
    not_acked
}

/// Waits until `c`'s broker has dispatched its whole log (pulls read consume queues,
/// which trail the log a little).
async fn until_dispatched(c: &Client) {
    let mut info = BTreeMap::new();
    assert!(
        tern_testkit::poll_until_async(Duration::from_secs(60), async || {
            info = runtime_info(c).await;
            info["dispatchBehindBytes"] == "0"
        })
        .await,
        "dispatch stuck: {info:?}"
    );
}

/// Checks that the slave serves every acknowledged message intact, and nothing that was
/// never sent.
async fn check_slave_holds(sc: &Client, acked: &[Acked]) {
    until_dispatched(sc).await;
    let mut held: BTreeMap<String, MessageExt> = BTreeMap::new();
    for q in 0..QUEUES {
        for m in pull_all(sc, TOPIC, q, 0).await {
            let key = m.properties.get("KEYS").cloned().unwrap_or_default();
            // The warm-up sends of `send` are not part of the stream.
            if !key.starts_with('k') {
                assert_eq!(m.body, body_for_key(&key), "message {key} on the slave");
            }
            held.insert(m.offset_msg_id.clone(), m);
        }
    }
    let mut missing = Vec::new();
    for a in acked {
        match held.get(&a.msg_id) {
            None => missing.push(a.key.clone()),
            Some(m) => {
                assert_eq!(m.properties.get("KEYS"), Some(&a.key), "{}", a.msg_id);
                assert_eq!(m.queue_id, a.queue_id, "{}", a.key);
                assert_eq!(m.body, body_for_key(&a.key), "{}", a.key);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged messages missing on the slave: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(20)]
    );
}

/// A SYNC_MASTER answers SUCCESS only for what its slave stored: acknowledged sends
/// survive the master's `kill -9` on the slave, and the slave's own crash after that.
///
/// The kill lands while the slave is frozen (SIGSTOP) with sends in flight: a correct
/// master holds those answers, and its stream stops mid-frame on a full socket, so the
/// slave is left with a torn frame and unacknowledged records when it resumes. The
/// freeze makes an early acknowledgement (a master that answers before the slave holds
/// the record) fail every run instead of only when the slave happens to trail.
#[test]
fn kill_9_of_a_sync_master_mid_stream_loses_no_acknowledged_message() {
    const SENDERS: usize = 4;
    const BEFORE_FREEZE: usize = 300;
    // Long enough for answers already on their way when the slave froze to arrive, on a
    // loaded machine.
    const SETTLE: Duration = Duration::from_secs(2);
    const FROZEN: Duration = Duration::from_secs(1);
    let (md, sd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut m = master(md.path(), "SYNC_MASTER");
    let ns = m.namesrv.clone().unwrap();
    let s = slave(sd.path(), &ns);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (settled, frozen_end) = run(async {
        let mc = Client::connect(&m.addr).await;
        create_topic(&mc, TOPIC, QUEUES).await;
        tern_testkit::wait_until(
            "slave never acknowledged",
            Duration::from_secs(60),
            async || send(&mc, 0).await.0 == ResponseCode::Success,
        )
        .await;
        let senders: Vec<_> = (0..SENDERS)
            .map(|i| {
                runtime::spawn(send_until_error(
                    m.addr.clone(),
                    i,
                    stop.clone(),
                    acked.clone(),
                ))
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(120);
        while acked.lock().unwrap().len() < BEFORE_FREEZE {
            assert!(Instant::now() < deadline, "sends too slow");
            runtime::sleep(Duration::from_millis(5)).await;
        }
        s.pause();
        runtime::sleep(SETTLE).await;
        let settled = acked.lock().unwrap().len();
        runtime::sleep(FROZEN).await;
        let frozen_end = acked.lock().unwrap().len();
        m.kill9();
        s.resume();
        stop.store(true, Ordering::Relaxed);
        let mut not_acked = 0;
        for t in senders {
            not_acked += t.await;
        }
        eprintln!(
            "{settled} sends acknowledged when the slave had been frozen {SETTLE:?}, \
             {frozen_end} at the kill, {} in all; {not_acked} answered otherwise",
            acked.lock().unwrap().len()
        );
        (settled, frozen_end)
    });
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= BEFORE_FREEZE);

    run(async {
        let sc = Client::connect(&s.addr).await;
        check_slave_holds(&sc, &acked).await;
    });
    assert_eq!(
        settled, frozen_end,
        "the master answered SUCCESS while its only slave was frozen"
    );
    // The slave's copy is an ordinary log: it recovers from its own crash too (its name
    // server died with the master, so it runs alone).
    let mut s = s;
    s.kill9();
    let s = slave(sd.path(), &ns);
    run(async {
        let sc = Client::connect(&s.addr).await;
        check_slave_holds(&sc, &acked).await;
    });
    drop(s);
}

#[test]
fn a_slave_ahead_of_its_master_is_refused_and_keeps_its_log() {
    let (ad, sd, bd) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let mut a = master(ad.path(), "ASYNC_MASTER");
    let mut s = slave(sd.path(), &a.namesrv.clone().unwrap());
    let (queues, log_end, held) = run(async {
        let ac = Client::connect(&a.addr).await;
        create_topic(&ac, TOPIC, QUEUES).await;
        for i in 0..40 {
            assert_eq!(send(&ac, i).await.0, ResponseCode::Success);
        }
        let sc = Client::connect(&s.addr).await;
        let queues = until_caught_up(&ac, &sc).await;
        until_dispatched(&sc).await;
        let log_end = runtime_info(&sc).await["commitLogMaxOffset"].clone();
        assert_ne!(log_end, "0");
        (queues, log_end, contents(&sc).await)
    });
    assert_eq!(held.len(), 40);
    assert!(s.stop().success());
    assert!(a.stop().success());

    // A master with an empty log under the same broker name: the slave holds records it
    // does not.
    let b = master(bd.path(), "ASYNC_MASTER");
    run(async {
        let bc = Client::connect(&b.addr).await;
        create_topic(&bc, TOPIC, QUEUES).await;
    });
    let s = slave(sd.path(), &b.namesrv.clone().unwrap());
    let refusal = b.wait_for_log(&["past this master's end"], Duration::from_secs(60));
    assert!(refusal.is_some(), "no refusal logged:\n{}", b.stderr_text());
    // Let it dial again and be refused again before looking.
    assert!(
        tern_testkit::poll_until(Duration::from_secs(60), || {
            b.stderr_text().matches("past this master's end").count() >= 2
        }),
        "the slave did not dial again"
    );
    run(async {
        let sc = Client::connect(&s.addr).await;
        assert_eq!(offsets(&sc).await, queues);
        let info = runtime_info(&sc).await;
        assert_eq!(info["commitLogMaxOffset"], log_end, "{info:?}");
        assert_eq!(contents(&sc).await, held);
        // Its report acknowledged nothing on the new master.
        let bc = Client::connect(&b.addr).await;
        assert_eq!(runtime_info(&bc).await["haSlaveAckOffset"], "0");
    });
    drop(s);
    drop(b);
}
