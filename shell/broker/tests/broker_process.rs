//! The `tern-broker` process as an operator meets it: durability across `kill -9` and a
//! clean stop, the config file (`-p`, unknown keys, bad values), and a name server that is
//! down.

use crate::common;

use std::ffi::OsString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use tern_shell::headers::CreateTopicRequestHeader;
use tern_shell::headers::SendMessageResponseHeader;
use tern_shell::message::{Message, decode_offset_msg_id, decode_pulled};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

/// One acknowledged send: what was sent and where the broker said it went.
#[derive(Debug, Clone)]
struct Acked {
    msg: Message,
    queue_offset: i64,
    commit_log_offset: i64,
}

fn durable_msg(i: usize) -> Message {
    let mut m = msg(
        "Durable",
        format!("durable-{i:05}-{}", "d".repeat(i % 300)).as_bytes(),
        &[
            ("TAGS", "D"),
            ("KEYS", &format!("dk{i}")),
            ("seq", &i.to_string()),
        ],
    );
    m.flag = i as i32;
    m
}

/// Sends `durable_msg(from..)` one by one (single and batch sends) until `stop` is set or
/// a send fails; records every acknowledged message.
async fn send_until(
    addr: String,
    from: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<std::sync::Mutex<Vec<Acked>>>,
) {
    let Ok(conn) = tern_shell::Connection::connect(
        &addr,
        tern_shell::ConnectionConfig::default(),
        Duration::from_secs(5),
    )
    .await
    else {
        return;
    };
    let mut i = from;
    while !stop.load(Ordering::Relaxed) {
        let batch = i % 7 == 3;
        let msgs: Vec<Message> = if batch {
            (i..i + 3).map(durable_msg).collect()
        } else {
            vec![durable_msg(i)]
        };
        let req = if batch {
            send_batch(&msgs, 0)
        } else if i % 2 == 0 {
            send_v1(&msgs[0], 0)
        } else {
            send_v2(&msgs[0], 0)
        };
        let Ok(resp) = conn.request(req, RPC_TIMEOUT).await else {
            return;
        };
        if resp.response_code() != ResponseCode::Success {
            return;
        }
        let h: SendMessageResponseHeader = resp.decode_header().unwrap();
        let mut a = acked.lock().unwrap();
        for (k, (m, id)) in msgs.iter().zip(h.msg_id.split(',')).enumerate() {
            a.push(Acked {
                msg: m.clone(),
                queue_offset: h.queue_offset + k as i64,
                commit_log_offset: decode_offset_msg_id(id).unwrap().commit_log_offset,
            });
        }
        i += msgs.len();
    }
}

/// Pulls the whole queue back and checks every acknowledged message is there, intact, in
/// order; anything after the last acknowledged one must be the next messages in sequence.
async fn verify_durable(b: &BrokerProc, acked: &[Acked]) -> usize {
    let c = Client::connect(&b.addr).await;
    let got = pull_all(&c, "Durable", 0, 0).await;
    assert!(
        got.len() >= acked.len(),
        "{} acknowledged, {} recovered",
        acked.len(),
        got.len()
    );
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.queue_offset, i as i64);
        // Message i of the sequence went to queue offset i.
        let expect = durable_msg(i);
        assert_eq!(g.body, expect.body, "message {i}");
        assert_eq!(g.flag, expect.flag);
        assert_eq!(g.properties, stored_props(&expect));
        if let Some(a) = acked.get(i) {
            assert_eq!(a.msg, expect);
            assert_eq!(g.queue_offset, a.queue_offset);
            assert_eq!(g.commit_log_offset, a.commit_log_offset);
        }
    }
    got.len()
}

#[test]
fn sync_flush_acknowledged_messages_survive_kill_9_and_a_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "flushDiskType=SYNC_FLUSH\n");
    let abort = dir.path().join("data/store/abort");
    let mut b = BrokerProc::standalone(dir.path(), &conf);
    assert!(abort.exists(), "abort marker while running");
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    run(async {
        let sender = runtime::spawn(send_until(b.addr.clone(), 0, stop.clone(), acked.clone()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while acked.lock().unwrap().len() < 150 {
            assert!(Instant::now() < deadline, "sends too slow");
            runtime::sleep(Duration::from_millis(5)).await;
        }
        // Killed mid-stream: the sender is still going.
        b.kill9();
        sender.await;
    });
    let acked = acked.lock().unwrap().clone();
    eprintln!("{} messages acknowledged before kill -9", acked.len());
    assert!(abort.exists(), "kill -9 leaves the abort marker");

    let mut b = BrokerProc::standalone(dir.path(), &conf);
    assert!(
        b.wait_for_log(&["recovered after a crash"], Duration::from_secs(1))
            .is_some(),
        "the restart after kill -9 is a crash recovery"
    );
    let recovered = run(verify_durable(&b, &acked));
    eprintln!("{recovered} messages recovered");
    // Then more sends and a clean stop.
    let more = Arc::new(std::sync::Mutex::new(Vec::new()));
    run(async {
        let stop = Arc::new(AtomicBool::new(false));
        let s = runtime::spawn(send_until(
            b.addr.clone(),
            recovered,
            stop.clone(),
            more.clone(),
        ));
        while more.lock().unwrap().len() < 20 {
            runtime::sleep(Duration::from_millis(5)).await;
        }
        stop.store(true, Ordering::Relaxed);
        s.await;
    });
    let status = b.stop();
    assert!(status.success(), "SIGTERM exit status {status}");
    assert!(!abort.exists(), "a clean stop removes the abort marker");

    let mut all: Vec<Acked> = acked.clone();
    let c_len = recovered;
    // Messages recovered beyond the acknowledged ones are part of the sequence too.
    for i in all.len()..c_len {
        all.push(Acked {
            msg: durable_msg(i),
            queue_offset: i as i64,
            commit_log_offset: -1,
        });
    }
    all.extend(more.lock().unwrap().iter().cloned());
    let mut b = BrokerProc::standalone(dir.path(), &conf);
    let n = b.with_client(async |c| {
        let got = pull_all(c, "Durable", 0, 0).await;
        assert_eq!(
            got.len(),
            all.len(),
            "exactly what was stored before the stop"
        );
        for (g, a) in got.iter().zip(&all) {
            assert_eq!(g.body, a.msg.body);
            assert_eq!(g.queue_offset, a.queue_offset);
            if a.commit_log_offset >= 0 {
                assert_eq!(g.commit_log_offset, a.commit_log_offset);
            }
        }
        got.len()
    });
    assert!(n > 170);
    assert!(b.stop().success());
}

fn conf_args(conf: &std::path::Path, extra: &[&str]) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["-c".into(), conf.into()];
    v.extend(extra.iter().map(OsString::from));
    v
}

#[test]
fn print_config_shows_effective_values_including_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(
        dir.path(),
        "brokerName=broker-p\nbrokerClusterName=ClusterP\nflushDiskType=SYNC_FLUSH\n",
    );
    let (status, out, err) = run_to_exit(&conf_args(&conf, &["-p", "-n", "10.1.2.3:9876"]));
    assert!(status.success(), "{status}: {err}");
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "brokerName=broker-p",
        "brokerClusterName=ClusterP",
        "flushDiskType=SYNC_FLUSH",
        "mapedFileSizeCommitLog=1048576",
        "mapedFileSizeConsumeQueue=6000",
        "maxHashSlotNum=1000",
        "maxIndexNum=4000",
        "namesrvAddr=10.1.2.3:9876",
        "listenPort=10911",
    ] {
        assert!(lines.contains(&want), "missing {want} in:\n{out}");
    }
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "sorted key=value lines");
    assert!(lines.iter().all(|l| l.contains('=')), "{out}");
}

#[test]
fn unknown_config_key_starts_with_a_warning_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "someJavaOnlyOption=42\n");
    let b = BrokerProc::standalone(dir.path(), &conf);
    let line = b.wait_for_log(&["someJavaOnlyOption"], Duration::from_secs(3));
    let line = line.unwrap_or_else(|| panic!("no warning; stderr:\n{}", b.stderr_text()));
    let at = format!("broker.conf:{}", GEOMETRY.lines().count() + 1);
    assert!(line.contains(&at), "{line}");
    assert!(line.to_ascii_lowercase().contains("warn"), "{line}");
    b.with_client(async |c| {
        let resp = c.call(send_v1(&msg("Warned", b"ok", &[]), 0)).await;
        expect_code(&resp, ResponseCode::Success);
    });
}

#[test]
fn bad_config_values_exit_non_zero_naming_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    for (bad, key) in [
        ("listenPort=abc\n", "listenPort"),
        ("flushDiskType=SOMETIMES\n", "flushDiskType"),
        (
            "mapedFileSizeConsumeQueue=1234\n",
            "mapedFileSizeConsumeQueue",
        ),
    ] {
        // After the geometry lines, the store path and the listen address.
        let at = format!("broker.conf:{}", GEOMETRY.lines().count() + 3);
        let conf = write_conf(
            dir.path(),
            &format!(
                "storePathRootDir={}\nlistenAddr=127.0.0.1\n{bad}",
                store.display()
            ),
        );
        let (status, out, err) = run_to_exit(&conf_args(&conf, &[]));
        assert!(!status.success(), "{bad}: started anyway; {out}");
        assert!(err.contains(key), "{bad}: {err}");
        assert!(err.contains(&at), "{bad}: no file:line in {err}");
        let (status, _, err) = run_to_exit(&conf_args(&conf, &["-p"]));
        assert!(!status.success(), "-p with {bad}");
        assert!(err.contains(key) && err.contains(&at), "{err}");
    }
    assert!(!store.join("commitlog").exists(), "nothing was created");
    let missing = dir.path().join("no-such.conf");
    let (status, _, err) = run_to_exit(&conf_args(&missing, &[]));
    assert!(!status.success());
    assert!(err.contains("no-such.conf"), "{err}");
}

#[test]
fn a_taken_port_exits_non_zero_naming_the_listener_and_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let store = dir.path().join("store");
    for (conf, listen, said) in [
        (
            format!("listenPort={port}\n"),
            None,
            format!("tern-broker: binding 127.0.0.1:{port}: "),
        ),
        (
            format!("haListenPort={port}\n"),
            Some("127.0.0.1:0"),
            format!("tern-broker: binding the HA port 127.0.0.1:{port} (haListenPort): "),
        ),
    ] {
        let conf = write_conf(
            dir.path(),
            &format!(
                "storePathRootDir={}\nlistenAddr=127.0.0.1\n{conf}",
                store.display()
            ),
        );
        let extra: Vec<&str> = listen.map(|l| vec!["--listen", l]).unwrap_or_default();
        let (status, out, err) = run_to_exit(&conf_args(&conf, &extra));
        assert!(!status.success(), "started on a taken port; {out}");
        assert!(err.contains(&said), "expected {said:?} in:\n{err}");
    }
}

#[test]
fn broker_with_name_server_down_still_serves_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let port = tern_testkit::free_port();
    let conf = write_conf(
        dir.path(),
        &format!("storePathRootDir={}\n", dir.path().join("store").display()),
    );
    let ns = format!("127.0.0.1:{port}");
    let t0 = Instant::now();
    let b = BrokerProc::start(&conf_args(&conf, &["-n", &ns, "--listen", "127.0.0.1:0"]));
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "start took {:?}",
        t0.elapsed()
    );
    assert!(b.namesrv.is_none());
    b.with_client(async |c| {
        let m = msg("NoNamesrv", b"still works", &[("TAGS", "x")]);
        let t0 = Instant::now();
        let resp = c.call(send_v1(&m, 0)).await;
        expect_code(&resp, ResponseCode::Success);
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "send not delayed by the name server"
        );
        let got = pull_all(c, "NoNamesrv", 0, 0).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, m.body);
        let resp = c.call(pull_req("G", "NoNamesrv", 0, 0, Some("*"))).await;
        let _ = decode_pulled(&resp.body, true).unwrap();
        // Creating a topic (which re-registers at once) is not held up either.
        let create = RemotingCommand::request(
            RequestCode::UpdateAndCreateTopic,
            &CreateTopicRequestHeader {
                topic: "NoNamesrvCreated".into(),
                default_topic: "TBW102".into(),
                read_queue_nums: 2,
                write_queue_nums: 2,
                perm: 6,
                topic_filter_type: "SINGLE_TAG".into(),
                ..Default::default()
            },
        );
        let t0 = Instant::now();
        expect_code(&c.call(create).await, ResponseCode::Success);
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        let resp = c
            .call(send_v1(&msg("NoNamesrvCreated", b"q1", &[]), 1))
            .await;
        expect_code(&resp, ResponseCode::Success);
    });
    let line = b.wait_for_log(&["name server", &ns], Duration::from_secs(8));
    let line =
        line.unwrap_or_else(|| panic!("no registration warning; stderr:\n{}", b.stderr_text()));
    assert!(line.to_ascii_lowercase().contains("warn"), "{line}");
    let mut b = b;
    let t0 = Instant::now();
    assert!(b.stop().success());
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "stop took {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_broker_whose_stdout_closes_keeps_serving() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern-broker"))
        .args(BrokerProc::standalone_args(dir.path(), &conf))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read the name server's line only, then close the pipe: the broker's own address
    // lines, printed after, go nowhere.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("tern-namesrv listening on "), "{first}");
    drop(out);
    let ns = first.trim().rsplit(' ').next().unwrap().to_owned();
    let route = run(async {
        let c = Client::connect(&ns).await;
        let mut resp = None;
        tern_testkit::wait_until("never registered", Duration::from_secs(20), async || {
            let r = c.call(route_req("TBW102")).await;
            let routed = r.response_code() == ResponseCode::Success;
            resp = Some(r);
            routed
        })
        .await;
        resp.unwrap()
    });
    let route: tern_shell::body::TopicRouteData = tern_shell::body::from_json(&route.body).unwrap();
    let broker = route.broker_datas[0].broker_addrs.0[&0].clone();
    run(async {
        let c = Client::connect(&broker).await;
        send_ok(&c, send_v1(&msg("StdoutClosed", b"still here", &[]), 0)).await;
    });
    assert!(child.try_wait().unwrap().is_none(), "the broker exited");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_topic_or_group_acknowledged_survives_a_kill_9_right_after_the_answer() {
    // The tables are written on a blocking thread; the answer must wait for the write,
    // or a crash just after it (here: at once) loses what the operator was told exists.
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "");
    for round in 0..6 {
        let mut b = BrokerProc::standalone(dir.path(), &conf);
        b.with_client(async |c| {
            let topics = c
                .call(RemotingCommand::request_code(
                    RequestCode::GetAllTopicConfig,
                ))
                .await;
            expect_code(&topics, ResponseCode::Success);
            let groups = c
                .call(RemotingCommand::request_code(
                    RequestCode::GetAllSubscriptionGroupConfig,
                ))
                .await;
            expect_code(&groups, ResponseCode::Success);
            let (topics, groups) = (
                String::from_utf8_lossy(&topics.body),
                String::from_utf8_lossy(&groups.body),
            );
            for earlier in 0..round {
                let (t, g) = (format!("Kept{earlier}"), format!("KeptGroup{earlier}"));
                assert!(topics.contains(&t), "{t} lost to kill -9: {topics}");
                assert!(groups.contains(&g), "{g} lost to kill -9: {groups}");
            }
            create_topic(c, &format!("Kept{round}"), 2).await;
            let group = tern_shell::body::SubscriptionGroupConfig {
                group_name: format!("KeptGroup{round}"),
                ..Default::default()
            };
            create_group(c, &group).await;
        });
        b.kill9();
    }
}
