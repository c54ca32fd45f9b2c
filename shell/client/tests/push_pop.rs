//! The push consumer letting the broker divide queues (`client_rebalance = false`)
//! against the real `tern-broker --standalone`: POP mode set for the group with
//! SET_MESSAGE_REQUEST_MODE, members sharing one queue, acks, reconsume-later delays,
//! a stopped member's unacked messages going to another, switching PULL ↔ POP live.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Broker, run, wait_for};
use tern_client::admin::RequestMode;
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder, MessageExt,
    PushConsumer, PushConsumerConfig,
};
use tern_shell::runtime::sleep;
use tern_testkit::wait_until;

/// One delivery as a listener saw it: (consumer, key, reconsume times, when).
type Log = Arc<Mutex<Vec<(usize, String, i32, Instant)>>>;

fn config(group: &str) -> PushConsumerConfig {
    let mut c = PushConsumerConfig::new(group);
    c.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    c.client_rebalance = false;
    c.consume_thread_min = 4;
    c.consume_thread_max = 4;
    c.pop_invisible_time = Duration::from_secs(5);
    c.rebalance_interval = Duration::from_secs(1);
    c
}

/// The group's mode, set as an operator does: `tern-admin setConsumeMode` (mqadmin's).
async fn set_mode(b: &Broker, topic: &str, group: &str, mode: RequestMode) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tern-admin"))
        .args([
            "setConsumeMode",
            "-n",
            &b.namesrv,
            "-b",
            &b.addr,
            "-t",
            topic,
            "-g",
            group,
        ])
        .args(["-m", mode.name(), "-q", "0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("set consume mode to {} success.", mode.name()))
            && stdout.contains(&format!(
                "topic[{topic}] group[{group}] consume mode[{}]",
                mode.name()
            )),
        "{stdout}"
    );
}

/// A consumer that logs every delivery and answers `status(key, reconsume times)`.
async fn consumer(
    b: &Broker,
    cfg: PushConsumerConfig,
    topic: &str,
    id: usize,
    log: &Log,
    status: impl Fn(&str, i32) -> ConsumeStatus + Send + Sync + 'static,
) -> PushConsumer {
    let log = log.clone();
    let subscribed = topic.to_owned();
    let listener = move |msgs: &[MessageExt], _: &mut ConsumeContext| {
        let mut out = ConsumeStatus::Success;
        for m in msgs {
            let key = m.properties.get("KEYS").cloned().unwrap_or_default();
            // A redelivery from the POP retry topic shows the topic subscribed.
            assert_eq!(m.topic, subscribed);
            log.lock()
                .unwrap()
                .push((id, key.clone(), m.reconsume_times, Instant::now()));
            if status(&key, m.reconsume_times) == ConsumeStatus::ReconsumeLater {
                out = ConsumeStatus::ReconsumeLater;
            }
        }
        out
    };
    b.push_consumer(cfg, topic, listener).await
}

async fn send(b: &Broker, topic: &str, range: std::ops::Range<usize>) {
    let p = b.producer("ppop-pg");
    for i in range {
        p.send(Message::new(topic, format!("body-{i}")).with_keys([format!("k{i}")]))
            .await
            .unwrap();
    }
    p.shutdown().await;
}

/// Deliveries per key.
fn counts(log: &Log) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (_, k, _, _) in log.lock().unwrap().iter() {
        *m.entry(k.clone()).or_insert(0) += 1;
    }
    m
}

/// Waits until `n` distinct keys were delivered.
async fn wait_keys(log: &Log, n: usize, within: Duration, what: &str) {
    wait_for(what, within, async || match counts(log).len() {
        got if got >= n => Ok(()),
        got => Err(format!("{got} of {n} keys delivered")),
    })
    .await
}

/// A [`consumer`] of `group` with the [`config`] that consumes everything.
async fn acking(b: &Broker, group: &str, topic: &str, id: usize, log: &Log) -> PushConsumer {
    consumer(b, config(group), topic, id, log, |_, _| {
        ConsumeStatus::Success
    })
    .await
}

/// Creates `topic` with `queues` queues and sets `group` to POP it.
async fn pop_topic(b: &Broker, topic: &str, queues: i32, group: &str) {
    b.create_topic(topic, queues).await;
    set_mode(b, topic, group, RequestMode::Pop).await;
}

fn pops(c: &PushConsumer) -> bool {
    let a = c.assignment();
    !a.is_empty()
        && a.iter()
            .all(|q| q.queue_id == -1 || q.topic.starts_with("%RETRY%"))
}

#[test]
fn pop_members_share_one_queue_and_every_message_is_acked_once() {
    let b = Broker::start("");
    run(async {
        // One queue: pulled, only one member could consume it.
        pop_topic(&b, "PPOP1", 1, "ppop1-cg").await;
        let log: Log = Arc::default();
        let c1 = acking(&b, "ppop1-cg", "PPOP1", 1, &log).await;
        let c2 = acking(&b, "ppop1-cg", "PPOP1", 2, &log).await;
        wait_until("both members POP", Duration::from_secs(10), async || {
            pops(&c1) && pops(&c2)
        })
        .await;
        for round in 0..4 {
            send(&b, "PPOP1", round * 50..(round + 1) * 50).await;
            sleep(Duration::from_millis(300)).await;
        }
        wait_keys(&log, 200, Duration::from_secs(30), "POP consumption").await;
        // Past the invisible time (5 s) and a revive scan: an unacked message would be back.
        sleep(Duration::from_secs(9)).await;
        let c = counts(&log);
        let repeated: Vec<_> = c.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            repeated.is_empty(),
            "delivered more than once: {repeated:?}"
        );
        let by: Vec<usize> = [1, 2]
            .iter()
            .map(|id| log.lock().unwrap().iter().filter(|e| e.0 == *id).count())
            .collect();
        assert!(by.iter().all(|n| *n > 0), "one member got nothing: {by:?}");
        c1.shutdown().await;
        c2.shutdown().await;
    });
}

#[test]
fn a_message_to_reconsume_later_is_hidden_for_the_pop_delay_level() {
    let b = Broker::start("");
    run(async {
        pop_topic(&b, "PPOP2", 2, "ppop2-cg").await;
        let log: Log = Arc::default();
        let c = consumer(&b, config("ppop2-cg"), "PPOP2", 1, &log, |k, times| {
            if k == "k3" && times == 0 {
                ConsumeStatus::ReconsumeLater
            } else {
                ConsumeStatus::Success
            }
        })
        .await;
        wait_until("the member POPs", Duration::from_secs(10), async || {
            pops(&c)
        })
        .await;
        send(&b, "PPOP2", 0..10).await;
        wait_keys(&log, 10, Duration::from_secs(20), "first deliveries").await;
        wait_until("k3 again", Duration::from_secs(30), async || {
            counts(&log)["k3"] == 2
        })
        .await;
        let l = log.lock().unwrap().clone();
        let k3: Vec<_> = l.iter().filter(|e| e.1 == "k3").collect();
        assert_eq!((k3[0].2, k3[1].2), (0, 1), "reconsume times");
        let hidden = k3[1].3 - k3[0].3;
        // popDelayLevel[0] = 10 s, revived within a second or two of it.
        assert!(
            hidden >= Duration::from_millis(9_500) && hidden < Duration::from_secs(20),
            "k3 hidden {hidden:?}"
        );
        assert!(
            l.iter().filter(|e| e.1 != "k3").count() == 9,
            "others once: {l:?}"
        );
        c.shutdown().await;
    });
}

#[test]
fn messages_a_stopped_member_never_acked_go_to_another() {
    let b = Broker::start("");
    run(async {
        pop_topic(&b, "PPOP3", 2, "ppop3-cg").await;
        let log: Log = Arc::default();
        let release = Arc::new(AtomicBool::new(false));
        let mut cfg = config("ppop3-cg");
        cfg.await_termination = Duration::from_millis(100);
        let r = release.clone();
        // The first member holds every message in its listener until it is stopped.
        let c1 = consumer(&b, cfg, "PPOP3", 1, &log, move |_, _| {
            while !r.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
            }
            ConsumeStatus::Success
        })
        .await;
        wait_until("the member POPs", Duration::from_secs(10), async || {
            pops(&c1)
        })
        .await;
        send(&b, "PPOP3", 0..20).await;
        wait_until("c1 holds messages", Duration::from_secs(20), async || {
            !log.lock().unwrap().is_empty()
        })
        .await;
        let stopped = Instant::now();
        c1.shutdown().await;
        release.store(true, Ordering::Release);
        let c2 = acking(&b, "ppop3-cg", "PPOP3", 2, &log).await;
        let got_by_2 = || {
            log.lock()
                .unwrap()
                .iter()
                .filter(|e| e.0 == 2)
                .map(|e| e.1.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        wait_until("c2 gets all 20", Duration::from_secs(40), async || {
            got_by_2().len() == 20
        })
        .await;
        let held: Vec<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == 1)
            .map(|e| e.1.clone())
            .collect();
        assert!(!held.is_empty());
        // What c1 held came back only once its invisible time (5 s) was over.
        let first_redelivery = log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.0 == 2 && held.contains(&e.1))
            .map(|e| e.3)
            .min()
            .unwrap();
        assert!(
            first_redelivery - stopped >= Duration::from_secs(3),
            "too early"
        );
        c2.shutdown().await;
    });
}

#[test]
fn a_group_switches_between_pull_and_pop_while_consuming() {
    let b = Broker::start("");
    run(async {
        b.create_topic("PPOP4", 4).await;
        let log: Log = Arc::default();
        let c = acking(&b, "ppop4-cg", "PPOP4", 1, &log).await;
        // No mode set: the broker divides and says PULL.
        let pulls = |c: &PushConsumer| {
            let a = c.assignment();
            a.iter()
                .filter(|q| q.topic == "PPOP4" && q.queue_id >= 0)
                .count()
                == 4
        };
        wait_until("PULL assignment", Duration::from_secs(10), async || {
            pulls(&c)
        })
        .await;
        send(&b, "PPOP4", 0..50).await;
        wait_keys(&log, 50, Duration::from_secs(20), "pulled").await;
        set_mode(&b, "PPOP4", "ppop4-cg", RequestMode::Pop).await;
        wait_until("POP assignment", Duration::from_secs(10), async || pops(&c)).await;
        send(&b, "PPOP4", 50..100).await;
        wait_keys(&log, 100, Duration::from_secs(20), "POPed").await;
        set_mode(&b, "PPOP4", "ppop4-cg", RequestMode::Pull).await;
        wait_until("PULL again", Duration::from_secs(10), async || pulls(&c)).await;
        send(&b, "PPOP4", 100..150).await;
        wait_keys(&log, 150, Duration::from_secs(20), "pulled again").await;
        c.shutdown().await;
    });
}
