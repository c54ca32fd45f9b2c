//! Push consumer against the real `tern-broker --standalone`: rebalance while messages
//! flow, orderly across a restart, broadcasting, retry, start positions, resumption.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Broker, Sink, recorder, run, send_in_flight};
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder, MessageExt,
    MessageModel, MessageQueue, OrderlyStatus, Producer, PushConsumer, PushConsumerConfig,
};
use tern_shell::runtime::sleep;
use tern_testkit::wait_until;

/// One delivery as a listener saw it.
#[derive(Debug, Clone)]
struct Seen {
    consumer: usize,
    key: String,
    queue: MessageQueue,
    seq: i64,
    topic: String,
    reconsume_times: i32,
}

type Log = Sink<Seen>;

fn seen(consumer: usize, m: &MessageExt, ctx: &ConsumeContext) -> Seen {
    Seen {
        consumer,
        key: m.properties.get("KEYS").cloned().unwrap_or_default(),
        queue: ctx.queue.clone(),
        seq: m
            .properties
            .get("seq")
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1),
        topic: m.topic.clone(),
        reconsume_times: m.reconsume_times,
    }
}

fn config(group: &str) -> PushConsumerConfig {
    let mut c = PushConsumerConfig::new(group);
    c.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    c.consume_thread_min = 4;
    c.consume_thread_max = 8;
    c
}

async fn concurrent(
    b: &Broker,
    cfg: PushConsumerConfig,
    topic: &str,
    id: usize,
    log: &Log,
) -> PushConsumer {
    let listener = recorder(log, move |m, ctx| seen(id, m, ctx));
    b.push_consumer(cfg, topic, listener).await
}

fn msg(topic: &str, i: usize) -> Message {
    Message::new(topic, format!("body-{i}"))
        .with_tags(if i % 2 == 0 { "even" } else { "odd" })
        .with_keys([format!("k{i}")])
        .with_property("seq", i.to_string())
}

/// Sends `range` with up to 64 sends in flight.
async fn send_range(p: &Producer, topic: &str, range: std::ops::Range<usize>) {
    send_in_flight(p, range.map(|i| msg(topic, i))).await;
}

fn distinct_keys(log: &Log) -> BTreeSet<String> {
    log.lock().unwrap().iter().map(|s| s.key.clone()).collect()
}

#[test]
fn members_join_and_leave_while_10000_messages_flow() {
    let b = Broker::start("");
    run(async {
        let topic = "Rebal";
        b.create_topic(topic, 8).await;
        let log: Log = Log::default();
        let p = b.producer("rebal-pg");
        let mut members = Vec::new();
        for id in 0..3 {
            members.push(Some(
                concurrent(&b, config("rebal-g"), topic, id, &log).await,
            ));
        }
        send_range(&p, topic, 0..3000).await;
        // One leaves mid-stream...
        let leaving = members[1].take().unwrap();
        leaving.shutdown().await;
        send_range(&p, topic, 3000..6000).await;
        // ...and one joins.
        members.push(Some(
            concurrent(&b, config("rebal-g"), topic, 3, &log).await,
        ));
        send_range(&p, topic, 6000..10_000).await;
        wait_until(
            "10,000 distinct messages",
            Duration::from_secs(60),
            async || distinct_keys(&log).len() == 10_000,
        )
        .await;

        // Assignment settles: every queue of the topic has exactly one owner.
        let live: Vec<&PushConsumer> = members.iter().flatten().collect();
        let all: BTreeSet<i32> = (0..8).collect();
        let mut owners = BTreeMap::new();
        wait_until("one owner per queue", Duration::from_secs(30), async || {
            owners = BTreeMap::new();
            let mut count = 0;
            for (i, c) in live.iter().enumerate() {
                for q in c.assignment().into_iter().filter(|q| q.topic == topic) {
                    owners.insert(q.queue_id, i);
                    count += 1;
                }
            }
            count == 8 && owners.keys().copied().collect::<BTreeSet<_>>() == all
        })
        .await;
        eprintln!("settled owners (queue → member): {owners:?}");

        let l = log.lock().unwrap().clone();
        let duplicates = l.len() - 10_000;
        let per_member: BTreeMap<usize, usize> = l.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(s.consumer).or_default() += 1;
            m
        });
        println!(
            "rebalance test: {} deliveries of 10000 messages, {duplicates} duplicates; per member {per_member:?}",
            l.len()
        );
        // Duplicates come only from queues changing hands (the uncommitted tail of a
        // moved queue), never from a queue that kept its owner.
        assert!(duplicates < 3000, "{duplicates} duplicates");
        let mut consumers_of: BTreeMap<i32, BTreeSet<usize>> = BTreeMap::new();
        let mut times: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &l {
            consumers_of
                .entry(s.queue.queue_id)
                .or_default()
                .insert(s.consumer);
            *times.entry(&s.key).or_default() += 1;
        }
        for s in l.iter().filter(|s| times[s.key.as_str()] > 1) {
            assert!(
                consumers_of[&s.queue.queue_id].len() > 1,
                "{} duplicated on queue {} that never moved",
                s.key,
                s.queue.queue_id
            );
        }
        let moved = consumers_of.values().filter(|c| c.len() > 1).count();
        println!("rebalance test: {moved} of 8 queues changed hands");
        for c in live {
            c.shutdown().await;
        }
        p.shutdown().await;
    });
}

#[test]
fn orderly_consumption_keeps_queue_order_across_a_restart() {
    let b = Broker::start("");
    run(async {
        let topic = "Orderly";
        b.create_topic(topic, 4).await;
        let p = b.producer("ord-pg");
        let per_queue = 100;
        for i in 0..per_queue {
            for q in 0..4 {
                let mq = MessageQueue {
                    topic: topic.into(),
                    broker_name: "broker-a".into(),
                    queue_id: q,
                };
                let m = Message::new(topic, format!("q{q}-{i}"))
                    .with_keys([format!("q{q}-{i}")])
                    .with_property("seq", i.to_string());
                p.send_to_queue(m, &mq).await.unwrap();
            }
        }
        let log: Log = Log::default();
        let start = |id: usize, log: Log| {
            let mut cfg = config("ord-g");
            cfg.lock_renew_interval = Duration::from_millis(200); // exercise renewals
            let c = PushConsumer::new(cfg, b.client_config()).unwrap();
            c.subscribe(topic, "*").unwrap();
            let suspended = Arc::new(Mutex::new(false));
            c.register_orderly(move |msgs: &[MessageExt], ctx: &mut ConsumeContext| {
                let m = &msgs[0];
                // q2-10 fails once: the queue pauses and the same message comes again.
                if m.properties["KEYS"] == "q2-10" && !*suspended.lock().unwrap() {
                    *suspended.lock().unwrap() = true;
                    ctx.suspend_ms = Some(100);
                    return OrderlyStatus::SuspendCurrentQueueAMoment;
                }
                std::thread::sleep(Duration::from_millis(2));
                log.lock().unwrap().push(seen(id, m, ctx));
                OrderlyStatus::Success
            });
            c
        };
        let a = start(0, log.clone());
        a.start().await.unwrap();
        wait_until("half the messages", Duration::from_secs(30), async || {
            log.lock().unwrap().len() >= 200
        })
        .await;
        a.shutdown().await;
        let after_a = log.lock().unwrap().len();
        let b2 = start(1, log.clone());
        b2.start().await.unwrap();
        wait_until("every message", Duration::from_secs(30), async || {
            distinct_keys(&log).len() == 400
        })
        .await;
        b2.shutdown().await;
        let l = log.lock().unwrap().clone();
        println!(
            "orderly test: first consumer {after_a}, second {}, duplicates {}",
            l.len() - after_a,
            l.len() - 400
        );
        for q in 0..4 {
            let seqs = |who: usize| -> Vec<i64> {
                l.iter()
                    .filter(|s| s.consumer == who && s.queue.queue_id == q)
                    .map(|s| s.seq)
                    .collect()
            };
            let (a_seqs, b_seqs) = (seqs(0), seqs(1));
            for s in [&a_seqs, &b_seqs] {
                assert!(
                    s.windows(2).all(|w| w[0] < w[1]),
                    "queue {q} out of order: {s:?}"
                );
            }
            // The second consumer continues where the first committed: no gap, and any
            // repeat is only the tail the first one had not committed.
            let resume = b_seqs.first().copied().unwrap_or(per_queue as i64);
            let last_a = a_seqs.last().copied().unwrap_or(-1);
            assert!(
                resume <= last_a + 1,
                "queue {q}: gap between {last_a} and {resume}"
            );
            let mut all: Vec<i64> = a_seqs.iter().chain(&b_seqs).copied().collect();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all, (0..per_queue as i64).collect::<Vec<_>>(), "queue {q}");
        }
        let retried: Vec<&Seen> = l.iter().filter(|s| s.key == "q2-10").collect();
        assert!(
            retried.iter().any(|s| s.reconsume_times == 1),
            "{retried:?}"
        );
        p.shutdown().await;
    });
}

#[test]
fn broadcasting_delivers_every_message_to_every_consumer() {
    let b = Broker::start("");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    run(async {
        let topic = "Bcast";
        b.create_topic(topic, 4).await;
        let p = b.producer("bc-pg");
        send_range(&p, topic, 0..300).await;
        let log: Log = Log::default();
        let mut cs = Vec::new();
        for (id, dir) in dirs.iter().enumerate() {
            let mut cfg = config("bc-g");
            cfg.message_model = MessageModel::Broadcasting;
            cfg.offset_store_dir = Some(dir.path().to_path_buf());
            cs.push(concurrent(&b, cfg, topic, id, &log).await);
        }
        send_range(&p, topic, 300..500).await;
        wait_until(
            "500 messages at each consumer",
            Duration::from_secs(30),
            async || {
                let l = log.lock().unwrap();
                (0..2).all(|id| {
                    l.iter()
                        .filter(|s| s.consumer == id)
                        .map(|s| &s.key)
                        .collect::<BTreeSet<_>>()
                        .len()
                        == 500
                })
            },
        )
        .await;
        for (c, dir) in cs.iter().zip(&dirs) {
            assert_eq!(c.assignment().len(), 4, "broadcasting owns every queue");
            c.shutdown().await;
            let text = std::fs::read_to_string(dir.path().join("bc-g/offsets.json")).unwrap();
            assert!(text.contains("offsetTable"), "{text}");
        }
        println!(
            "broadcast test: {} deliveries for 2 × 500",
            log.lock().unwrap().len()
        );
        p.shutdown().await;
    });
}

#[test]
fn reconsume_later_comes_back_from_the_retry_topic_with_its_original_topic() {
    // Short delay levels: the retry waits at level 3.
    let b = Broker::start("messageDelayLevel=1s 1s 1s\n");
    run(async {
        let topic = "Retry";
        b.create_topic(topic, 2).await;
        let p = b.producer("rt-pg");
        let log: Log = Log::default();
        let l2 = log.clone();
        let listener = move |msgs: &[MessageExt], ctx: &mut ConsumeContext| {
            let m = &msgs[0];
            l2.lock().unwrap().push(seen(0, m, ctx));
            if m.properties["KEYS"] == "k3" && m.reconsume_times == 0 {
                ConsumeStatus::ReconsumeLater
            } else {
                ConsumeStatus::Success
            }
        };
        let c = b.subscribed(config("rt-g"), topic, "even || odd", listener);
        c.start().await.unwrap();
        send_range(&p, topic, 0..10).await;
        wait_until("k3 redelivered", Duration::from_secs(30), async || {
            log.lock().unwrap().iter().filter(|s| s.key == "k3").count() >= 2
        })
        .await;
        let l = log.lock().unwrap().clone();
        let k3: Vec<&Seen> = l.iter().filter(|s| s.key == "k3").collect();
        assert_eq!(k3[0].reconsume_times, 0);
        assert_eq!(k3[1].reconsume_times, 1);
        assert_eq!(k3[1].topic, topic, "original topic restored");
        assert_eq!(
            k3[1].queue.topic, "%RETRY%rt-g",
            "came from the retry topic"
        );
        assert_eq!(distinct_keys(&log).len(), 10);
        c.shutdown().await;
        p.shutdown().await;
    });
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn start_positions_and_resumption_follow_committed_offsets() {
    let b = Broker::start("");
    run(async {
        let topic = "Pos";
        b.create_topic(topic, 2).await;
        let p = b.producer("pos-pg");
        send_range(&p, topic, 0..50).await;
        sleep(Duration::from_millis(300)).await;
        let ts = now_ms();
        sleep(Duration::from_millis(300)).await;
        send_range(&p, topic, 50..100).await;

        // A new group from a timestamp gets exactly what was stored after it.
        let log: Log = Log::default();
        let mut cfg = config("pos-ts");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromTimestamp;
        cfg.consume_timestamp_ms = Some(ts);
        let c = concurrent(&b, cfg, topic, 0, &log).await;
        wait_until(
            "the 50 later messages",
            Duration::from_secs(20),
            async || distinct_keys(&log).len() >= 50,
        )
        .await;
        sleep(Duration::from_millis(500)).await;
        let keys = distinct_keys(&log);
        let expected: BTreeSet<String> = (50..100).map(|i| format!("k{i}")).collect();
        assert_eq!(keys, expected, "consume-from-timestamp");
        c.shutdown().await;

        // A new group from the last offset skips what is there, gets what comes.
        let log_last: Log = Log::default();
        let mut cfg = config("pos-last");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromLastOffset;
        let last = concurrent(&b, cfg, topic, 0, &log_last).await;
        wait_until("queues owned", Duration::from_secs(10), async || {
            last.assignment()
                .iter()
                .filter(|q| q.topic == topic)
                .count()
                == 2
        })
        .await;

        // A group consumes everything, stops, and resumes exactly after its offsets.
        let log1: Log = Log::default();
        let first = concurrent(&b, config("pos-resume"), topic, 0, &log1).await;
        wait_until("100 messages", Duration::from_secs(20), async || {
            distinct_keys(&log1).len() == 100
        })
        .await;
        first.shutdown().await;
        send_range(&p, topic, 100..130).await;
        let log2: Log = Log::default();
        let second = concurrent(&b, config("pos-resume"), topic, 1, &log2).await;
        wait_until("30 new messages", Duration::from_secs(20), async || {
            distinct_keys(&log2).len() >= 30
        })
        .await;
        sleep(Duration::from_millis(500)).await;
        let expected: BTreeSet<String> = (100..130).map(|i| format!("k{i}")).collect();
        assert_eq!(
            distinct_keys(&log2),
            expected,
            "no re-delivery after restart"
        );
        assert_eq!(log2.lock().unwrap().len(), 30);
        second.shutdown().await;

        wait_until(
            "the 30 new messages at the from-last group",
            Duration::from_secs(20),
            async || distinct_keys(&log_last).len() >= 30,
        )
        .await;
        assert_eq!(distinct_keys(&log_last), expected, "consume-from-last");
        last.shutdown().await;
        p.shutdown().await;
    });
}
