//! Cross-check with the real C++ RocketMQ client (PyPI `rocketmq==0.4.4`, driven by
//! `tests/interop/cpp_interop.py`): what it sends, our push consumer receives with every
//! field intact; what our producer sends, its push consumer receives.
//!
//! Skips (printing a SKIP line) only when no python with the C++ client is available:
//! `TERN_RMQ_PYTHON`, or `.venv` at the repo root (`scripts/setup-python.sh`).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Broker, run};
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder, MessageExt,
    PushConsumer, PushConsumerConfig,
};
use tern_testkit::python::{cpp_consume_only_args, python_or_skip, repo_root};

/// Runs the interop script; returns (success, stdout).
fn script(py: &Path, home: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(py)
        .arg(repo_root().join("tests/interop/cpp_interop.py"))
        .args(args)
        .env("HOME", home)
        .stdin(Stdio::null())
        .output()
        .expect("run cpp_interop.py");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprintln!(
            "cpp_interop.py {args:?} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (out.status.success(), stdout)
}

/// The C++ push consumer reads `topic` through `namesrv` until every key in `keys_file`
/// came (`--consume-only`); returns (success, stdout).
fn cpp_consume_keys(
    py: &Path,
    home: &Path,
    namesrv: &str,
    topic: &str,
    keys_file: &Path,
    prefix: &str,
) -> (bool, String) {
    let keys_file = keys_file.to_str().unwrap();
    let mut args = cpp_consume_only_args(namesrv, topic, keys_file, prefix);
    args.extend_from_slice(&[
        "--consume-timeout",
        "40",
        "--grace",
        "0.5",
        "--deadline",
        "60",
    ]);
    script(py, home, &args)
}

#[test]
fn cpp_client_and_our_push_consumer_exchange_messages_intact() {
    let Some(py) = python_or_skip("cpp_client_and_our_push_consumer_exchange_messages_intact")
    else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let b = Broker::start("");
    run(async {
        // 1. The C++ producer sends; our push consumer receives.
        let topic = "CppToRust";
        b.create_topic(topic, 4).await;
        let got: Arc<Mutex<BTreeMap<String, (MessageExt, String)>>> = Arc::default();
        let mut cfg = PushConsumerConfig::new("cross-rust-g");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        cfg.consume_thread_min = 2;
        let c = PushConsumer::new(cfg, b.client_config()).unwrap();
        c.subscribe(topic, "TagR").unwrap();
        let g2 = got.clone();
        c.register_concurrent(move |msgs: &[MessageExt], ctx: &mut ConsumeContext| {
            for m in msgs {
                let key = m.properties.get("KEYS").cloned().unwrap_or_default();
                g2.lock()
                    .unwrap()
                    .insert(key, (m.clone(), ctx.queue.topic.clone()));
            }
            ConsumeStatus::Success
        });
        c.start().await.unwrap();
        let count = 50;
        let (ok, out) = script(
            &py,
            home.path(),
            &[
                "--namesrv",
                &b.namesrv,
                "--send-only",
                "--topic",
                topic,
                "--count",
                &count.to_string(),
                "--prefix",
                "TernCross",
                "--deadline",
                "60",
            ],
        );
        assert!(ok, "C++ producer failed");
        // ACK <key> <msgId> <queueOffset>
        let acks: Vec<(String, String)> = out
            .lines()
            .filter_map(|l| l.strip_prefix("ACK "))
            .map(|rest| {
                let mut it = rest.split_whitespace();
                (
                    it.next().unwrap_or_default().to_owned(),
                    it.next().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(acks.len(), count, "acknowledged sends:\n{out}");
        let t = Instant::now();
        while got.lock().unwrap().len() < count {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "our consumer got {} of {count}",
                got.lock().unwrap().len()
            );
            tern_shell::runtime::sleep(Duration::from_millis(50)).await;
        }
        {
            let got = got.lock().unwrap();
            for (i, (key, msg_id)) in acks.iter().enumerate() {
                let (m, queue_topic) = &got[key];
                assert_eq!(m.topic, topic);
                assert_eq!(queue_topic, topic);
                assert_eq!(m.body, format!("restart {key}").into_bytes(), "{key}");
                assert_eq!(m.tags(), Some("TagR"));
                assert_eq!(m.properties["seq"], i.to_string());
                assert_eq!(m.msg_id(), msg_id, "UNIQ_KEY is the C++ msg id");
                assert_eq!(m.reconsume_times, 0);
                assert!(m.born_timestamp > 0 && m.store_timestamp >= m.born_timestamp - 5_000);
                assert!(m.born_host.ip().is_loopback(), "{:?}", m.born_host);
                assert_eq!(m.offset_msg_id.len(), 32);
            }
        }
        println!("C++ → Rust: {count} messages consumed by the push consumer, fields intact");
        c.shutdown().await;

        // 2. Our producer sends; the C++ push consumer receives.
        let topic = "RustToCpp";
        b.create_topic(topic, 4).await;
        let p = b.producer("cross-rust-pg");
        let keys: Vec<String> = (0..count).map(|i| format!("{topic}-k{i}")).collect();
        for (i, k) in keys.iter().enumerate() {
            let m = Message::new(topic, format!("restart {k}"))
                .with_tags("TagR")
                .with_keys([k.as_str()])
                .with_property("seq", i.to_string());
            p.send(m).await.unwrap();
        }
        p.shutdown().await;
        let file = home.path().join("keys.txt");
        std::fs::write(&file, keys.join("\n") + "\n").unwrap();
        let (ok, out) = cpp_consume_keys(&py, home.path(), &b.namesrv, topic, &file, "TernCross");
        assert!(ok, "C++ consumer did not get every message:\n{out}");
        let consumed = out
            .lines()
            .find(|l| l.starts_with("CONSUMED"))
            .unwrap_or("");
        println!("Rust → C++: {consumed}");
    });
}

#[test]
fn cpp_consumer_pulls_from_the_slave_its_master_suggests() {
    let Some(py) = python_or_skip("cpp_consumer_pulls_from_the_slave_its_master_suggests") else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let topic = "CppSlaveRead";
    let (ns, master, slave, keys) = crate::replication::slave_read_pair(topic, 300);
    let file = home.path().join("keys.txt");
    std::fs::write(&file, keys.join("\n") + "\n").unwrap();
    let admin = tern_client::Admin::new(master.client_config()).unwrap();
    let served = |addr: &str| run(crate::replication::messages_served(&admin, addr));
    let slave_before = served(&slave.addr);
    let (ok, out) = cpp_consume_keys(&py, home.path(), &ns.addr, topic, &file, "TernSlaveRead");
    assert!(ok, "C++ consumer did not get every message:\n{out}");
    let from_slave = served(&slave.addr) - slave_before;
    let from_master = served(&master.addr);
    assert!(
        from_slave >= 100,
        "the C++ consumer read {from_slave} messages from the slave, {from_master} from the master"
    );
    println!("C++ consumer: {from_slave} messages from the slave, {from_master} from the master");
    run(admin.shutdown());
}
