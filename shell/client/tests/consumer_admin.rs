//! Admin operations that go through a consumer group's clients, against the real
//! `tern-broker --standalone`: offset reset by time of a running and of a stopped group
//! (INVOKE_BROKER_TO_RESET_OFFSET → RESET_CONSUMER_CLIENT_OFFSET), the clients' offsets
//! (INVOKE_BROKER_TO_GET_CONSUMER_STATUS → GET_CONSUMER_STATUS_FROM_CLIENT), running info
//! and consuming one message directly, forwarded to a client by id; through the admin
//! API and `tern-admin`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cli::succeeded;
use common::{Broker, run, wait_progress};
use tern_client::{
    Admin, ClientError, ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder,
    MessageExt, PushConsumer, PushConsumerConfig,
};
use tern_shell::runtime::{now_ms, sleep};
use tern_testkit::wait_until;

type Log = Arc<Mutex<Vec<String>>>;

async fn consumer(b: &Broker, group: &str, topic: &str, log: &Log) -> PushConsumer {
    let mut cfg = PushConsumerConfig::new(group);
    cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    cfg.persist_offset_interval = Duration::from_millis(500);
    let log = log.clone();
    let listener = move |msgs: &[MessageExt], _: &mut ConsumeContext| {
        let mut l = log.lock().unwrap();
        for m in msgs {
            let key = m.properties.get("KEYS").cloned().unwrap_or_default();
            l.push(key.clone());
            if key.starts_with("later") {
                return ConsumeStatus::ReconsumeLater;
            }
        }
        ConsumeStatus::Success
    };
    b.push_consumer(cfg, topic, listener).await
}

/// Sends `prefix0..prefixN`; returns the offset msgIds.
async fn send(b: &Broker, topic: &str, prefix: &str, n: usize) -> Vec<String> {
    let p = b.producer("cadmin-pg");
    let mut ids = Vec::new();
    for i in 0..n {
        let r = p
            .send(Message::new(topic, format!("{prefix}-{i}")).with_keys([format!("{prefix}{i}")]))
            .await
            .unwrap();
        ids.push(r.offset_msg_id);
    }
    p.shutdown().await;
    ids
}

fn count(log: &Log, prefix: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for k in log.lock().unwrap().iter().filter(|k| k.starts_with(prefix)) {
        *m.entry(k.clone()).or_insert(0) += 1;
    }
    m
}

/// Waits until the group's committed offsets reach the end of every queue.
async fn wait_caught_up(admin: &Admin, group: &str, topic: &str) {
    wait_progress(admin, group, topic, Duration::from_secs(20), |p| {
        !p.queues.is_empty() && p.diff_total == 0
    })
    .await
}

/// Sends `old` messages, marks the time, sends `new` ones: what a reset to the mark
/// brings back is exactly the new ones.
async fn two_batches(b: &Broker, topic: &str) -> i64 {
    b.create_topic(topic, 4).await;
    send(b, topic, "old", 40).await;
    sleep(Duration::from_millis(300)).await;
    let mark = now_ms();
    sleep(Duration::from_millis(300)).await;
    send(b, topic, "new", 40).await;
    mark
}

/// A group consuming `topic` after [`two_batches`]: returns the mark, the consumer's log,
/// the running consumer and an admin once `first_pass` holds of the log (20 s at most)
/// and the group's offsets are committed to the end.
async fn past_two_batches(
    b: &Broker,
    group: &str,
    topic: &str,
    first_pass: impl Fn(&Log) -> bool,
) -> (i64, Log, PushConsumer, Admin) {
    let mark = two_batches(b, topic).await;
    let log: Log = Arc::default();
    let c = consumer(b, group, topic, &log).await;
    let admin = Admin::new(b.client_config()).unwrap();
    wait_until("first pass", Duration::from_secs(20), async || {
        first_pass(&log)
    })
    .await;
    wait_caught_up(&admin, group, topic).await;
    (mark, log, c, admin)
}

#[test]
fn a_running_group_reset_to_a_time_consumes_again_from_there() {
    let b = Broker::start("");
    run(async {
        let (mark, log, c, admin) = past_two_batches(&b, "cadm1-cg", "CADM1", |log| {
            count(log, "old").len() == 40 && count(log, "new").len() == 40
        })
        .await;
        let table = admin
            .reset_offset_by_time("CADM1", "cadm1-cg", mark, true)
            .await
            .unwrap();
        assert_eq!(table.len(), 4);
        // The new offsets are where the new batch starts: 40 messages behind the end.
        let progress = admin
            .consume_progress("cadm1-cg", Some("CADM1"))
            .await
            .unwrap();
        let behind: i64 = progress
            .queues
            .iter()
            .map(|q| q.broker_offset - table[&q.queue])
            .sum();
        assert_eq!(behind, 40, "{table:?} {progress:?}");
        wait_until(
            "second pass of the new batch",
            Duration::from_secs(30),
            async || count(&log, "new").values().all(|n| *n == 2) && count(&log, "new").len() == 40,
        )
        .await;
        sleep(Duration::from_secs(1)).await;
        assert!(
            count(&log, "old").values().all(|n| *n == 1),
            "old consumed again"
        );
        assert!(
            count(&log, "new").values().all(|n| *n == 2),
            "new consumed 3 times"
        );
        wait_caught_up(&admin, "cadm1-cg", "CADM1").await;
        c.shutdown().await;
        admin.shutdown().await;
    });
}

#[test]
fn a_stopped_group_is_reset_in_the_broker_and_restarts_there() {
    let b = Broker::start("");
    run(async {
        let (mark, log, c, admin) = past_two_batches(&b, "cadm2-cg", "CADM2", |log| {
            log.lock().unwrap().len() == 80
        })
        .await;
        c.shutdown().await;
        // Without force an offset only moves back: a time past the end changes nothing.
        let ahead = admin
            .reset_offset_by_time("CADM2", "cadm2-cg", now_ms() + 60_000, false)
            .await
            .unwrap();
        let progress = async || {
            admin
                .consume_progress("cadm2-cg", Some("CADM2"))
                .await
                .unwrap()
        };
        let progress_now = progress().await;
        for q in &progress_now.queues {
            assert_eq!(ahead[&q.queue], q.broker_offset);
        }
        let table = admin
            .reset_offset_by_time("CADM2", "cadm2-cg", mark, false)
            .await
            .unwrap();
        let progress = progress().await;
        for q in &progress.queues {
            assert_eq!(
                q.consumer_offset, table[&q.queue],
                "consumerProgress agrees"
            );
        }
        assert_eq!(progress.diff_total, 40);
        log.lock().unwrap().clear();
        let c = consumer(&b, "cadm2-cg", "CADM2", &log).await;
        wait_until("the new batch again", Duration::from_secs(20), async || {
            count(&log, "new").len() == 40
        })
        .await;
        sleep(Duration::from_secs(1)).await;
        assert!(count(&log, "old").is_empty(), "old consumed again");
        c.shutdown().await;
        // Unknown topic and group: RocketMQ 5's codes.
        let e = admin
            .reset_offset_by_time("CADM2", "nobody-cg", mark, true)
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Broker { code: 26, .. }), "{e}");
        admin.shutdown().await;
    });
}

#[test]
fn offsets_and_running_info_come_from_the_clients() {
    let b = Broker::start("");
    run(async {
        b.create_topic("CADM3", 4).await;
        send(&b, "CADM3", "m", 20).await;
        let log: Log = Arc::default();
        let mut cfg_log = Vec::new();
        let c1 = consumer(&b, "cadm3-cg", "CADM3", &log).await;
        let c2 = consumer(&b, "cadm3-cg", "CADM3", &log).await;
        for c in [&c1, &c2] {
            cfg_log.push(c.client().client_id().to_owned());
        }
        wait_until("consumed", Duration::from_secs(20), async || {
            log.lock().unwrap().len() >= 20
        })
        .await;
        wait_until(
            "each owns two queues",
            Duration::from_secs(20),
            async || {
                c1.assignment()
                    .iter()
                    .filter(|q| q.topic == "CADM3")
                    .count()
                    == 2
                    && c2
                        .assignment()
                        .iter()
                        .filter(|q| q.topic == "CADM3")
                        .count()
                        == 2
            },
        )
        .await;
        let admin = Admin::new(b.client_config()).unwrap();
        let status = admin
            .consumer_status("CADM3", "cadm3-cg", None)
            .await
            .unwrap();
        let ids: BTreeSet<&String> = status.keys().collect();
        assert_eq!(ids, cfg_log.iter().collect(), "{status:?}");
        let queues: BTreeSet<i32> = status
            .values()
            .flat_map(|t| t.keys().map(|q| q.queue_id))
            .collect();
        assert_eq!(queues, (0..4).collect());
        let one = admin
            .consumer_status("CADM3", "cadm3-cg", Some(&cfg_log[0]))
            .await
            .unwrap();
        assert_eq!(one.keys().collect::<Vec<_>>(), vec![&cfg_log[0]]);
        let info = admin
            .consumer_running_info("cadm3-cg", &cfg_log[1], false)
            .await
            .unwrap();
        assert_eq!(info["properties"]["PROP_CONSUME_TYPE"], "CONSUME_PASSIVELY");
        let e = admin
            .consumer_running_info("cadm3-cg", "10.0.0.1@nobody", false)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not connected"), "{e}");
        c1.shutdown().await;
        c2.shutdown().await;
        admin.shutdown().await;
    });
}

#[test]
fn a_client_consumes_one_message_directly() {
    let b = Broker::start("");
    run(async {
        b.create_topic("CADM4", 1).await;
        let log: Log = Arc::default();
        let c = consumer(&b, "cadm4-cg", "CADM4", &log).await;
        let ok = send(&b, "CADM4", "ok", 1).await;
        let later = send(&b, "CADM4", "later", 1).await;
        wait_until("consumed", Duration::from_secs(20), async || {
            count(&log, "ok").len() == 1
        })
        .await;
        let admin = Admin::new(b.client_config()).unwrap();
        let cid = c.client().client_id().to_owned();
        let r = admin
            .consume_message_directly("cadm4-cg", &cid, &ok[0], Some("CADM4"))
            .await
            .unwrap();
        assert_eq!(
            (r.consume_result.as_str(), r.order, r.auto_commit),
            ("CR_SUCCESS", false, true)
        );
        assert_eq!(count(&log, "ok")["ok0"], 2, "the listener ran on it");
        let r = admin
            .consume_message_directly("cadm4-cg", &cid, &later[0], Some("CADM4"))
            .await
            .unwrap();
        assert_eq!(r.consume_result, "CR_LATER");
        let e = admin
            .consume_message_directly("cadm4-cg", "10.0.0.1@nobody", &ok[0], None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not online"), "{e}");
        c.shutdown().await;
        admin.shutdown().await;
    });
}

fn tern_admin(ns: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern-admin"))
        .args(args)
        .env("NAMESRV_ADDR", ns)
        .output()
        .expect("run tern-admin")
}

#[test]
fn tern_admin_resets_offsets_and_shows_consumer_status() {
    let b = Broker::start("");
    let ns = b.namesrv.clone();
    run(async {
        let (mark, log, c, admin) = past_two_batches(&b, "cadm5-cg", "CADM5", |log| {
            log.lock().unwrap().len() == 80
        })
        .await;
        let cid = c.client().client_id().to_owned();
        // consumerStatus: the client's running info, as mqadmin prints it.
        let out = succeeded(&tern_admin(
            &ns,
            &["consumerStatus", "-g", "cadm5-cg", "-i", &cid],
        ));
        assert!(
            out.contains("#Consumer Properties#") && out.contains("CONSUME_PASSIVELY"),
            "{out}"
        );
        let out = succeeded(&tern_admin(&ns, &["consumerStatus", "-g", "cadm5-cg"]));
        assert!(out.contains("#ClientId") && out.contains(&cid), "{out}");
        // resetOffsetByTime of the group to `when`, with `more` options: its output.
        let reset = |when: &str, more: &[&str]| {
            let mut args = vec![
                "resetOffsetByTime",
                "-g",
                "cadm5-cg",
                "-t",
                "CADM5",
                "-s",
                when,
            ];
            args.extend_from_slice(more);
            succeeded(&tern_admin(&ns, &args))
        };
        // With mqadmin's date form, then the table it prints.
        let out = reset(&chrono_like(mark), &[]);
        assert!(
            out.contains("#brokerName") && out.contains("#queueId"),
            "{out}"
        );
        assert_eq!(
            out.lines().filter(|l| l.contains("broker-a")).count(),
            4,
            "{out}"
        );
        wait_until("the new batch again", Duration::from_secs(30), async || {
            count(&log, "new").values().all(|n| *n == 2) && count(&log, "new").len() == 40
        })
        .await;
        let json = reset("now", &["--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(4), "{json}");
        // A bad time is a usage error.
        let bad = tern_admin(
            &ns,
            &["resetOffsetByTime", "-g", "g", "-t", "CADM5", "-s", "soon"],
        );
        assert_eq!(bad.status.code(), Some(2));
        c.shutdown().await;
        admin.shutdown().await;
    });
}

/// `ms` as mqadmin's `yyyy-MM-dd#HH:mm:ss:SSS`, in UTC as tern-admin reads it (written by
/// GNU date, so the test does not share tern-admin's calendar code).
fn chrono_like(ms: i64) -> String {
    let out = Command::new("date")
        .args([
            "-u",
            "-d",
            &format!("@{}.{:03}", ms / 1000, ms % 1000),
            "+%Y-%m-%d#%H:%M:%S:%3N",
        ])
        .output()
        .expect("run date");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
