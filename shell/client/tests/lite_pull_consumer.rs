//! The lite pull consumer against the real `tern-broker --standalone`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Broker, run, wait_for};
use tern_client::{
    ConsumeFromWhere, LitePullConsumer, LitePullConsumerConfig, Message, MessageBuilder,
    MessageExt, MessageQueue, Producer, PullConsumer,
};

fn msg(topic: &str, i: usize) -> Message {
    Message::new(topic, format!("body-{i}"))
        .with_tags(if i % 2 == 0 { "even" } else { "odd" })
        .with_keys([format!("key-{i}")])
        .with_property("seq", i.to_string())
        .with_flag(i as i32)
}

/// Sends `range` and returns them by msg id.
async fn send(p: &Producer, topic: &str, range: std::ops::Range<usize>) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for i in range {
        let r = p.send(msg(topic, i)).await.unwrap();
        out.insert(r.msg_id, i);
    }
    out
}

fn config(group: &str) -> LitePullConsumerConfig {
    let mut cfg = LitePullConsumerConfig::new(group);
    cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    cfg.rebalance_interval = Duration::from_secs(1);
    cfg
}

async fn start(
    b: &Broker,
    cfg: LitePullConsumerConfig,
    topic: &str,
    expr: &str,
) -> LitePullConsumer {
    let c = LitePullConsumer::new(cfg, b.client_config()).unwrap();
    c.subscribe(topic, expr).unwrap();
    c.start().await.unwrap();
    c
}

/// Polls until `want` messages came (or 30 s), checking each batch's shape.
async fn poll_n(c: &LitePullConsumer, want: usize) -> Vec<MessageExt> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < want && Instant::now() < deadline {
        got.extend(poll_batch(c, Duration::from_millis(500)).await);
    }
    got
}

async fn poll_batch(c: &LitePullConsumer, timeout: Duration) -> Vec<MessageExt> {
    let batch = c.poll(timeout).await;
    assert!(batch.len() <= 10, "pullBatchSize is 10: {}", batch.len());
    let queues: BTreeSet<i32> = batch.iter().map(|m| m.queue_id).collect();
    assert!(queues.len() <= 1, "a batch is one queue's");
    batch
}

#[test]
fn subscribe_and_poll_get_every_message_with_fields_intact() {
    let b = Broker::start("");
    run(async {
        b.create_topic("LiteAll", 4).await;
        let p = b.producer("lite-pg");
        let sent = send(&p, "LiteAll", 0..30).await;

        let c = start(&b, config("lite-all"), "LiteAll", "*").await;
        let got = poll_n(&c, 30).await;
        assert_eq!(got.len(), 30, "no duplicates, nothing missing");
        assert_eq!(c.assignment().len(), 4);
        for m in &got {
            let i = sent[m.msg_id()];
            assert_eq!(m.topic, "LiteAll");
            assert_eq!(m.body, format!("body-{i}").into_bytes());
            assert_eq!(m.tags(), Some(if i % 2 == 0 { "even" } else { "odd" }));
            assert_eq!(m.properties.get("KEYS"), Some(&format!("key-{i}")));
            assert_eq!(m.properties.get("seq"), Some(&i.to_string()));
            assert_eq!(m.flag, i as i32);
        }
        // Per queue, in offset order.
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        for m in &got {
            let prev = last.insert(m.queue_id, m.queue_offset);
            assert!(prev.is_none_or(|o| o < m.queue_offset));
        }

        // A tag expression: the broker and the client filter.
        let even = start(&b, config("lite-even"), "LiteAll", "even").await;
        let got = poll_n(&even, 15).await;
        assert_eq!(got.len(), 15);
        assert!(got.iter().all(|m| m.tags() == Some("even")));
        assert!(even.poll(Duration::from_millis(500)).await.is_empty());

        even.shutdown().await;
        c.shutdown().await;
        p.shutdown().await;
    });
}

#[test]
fn two_lite_consumers_split_the_queues_and_together_get_everything() {
    let b = Broker::start("");
    run(async {
        b.create_topic("LiteSplit", 4).await;
        let c1 = start(&b, config("lite-split"), "LiteSplit", "*").await;
        let c2 = start(&b, config("lite-split"), "LiteSplit", "*").await;
        wait_for("two queues each", Duration::from_secs(20), async || {
            let (a1, a2) = (c1.assignment(), c2.assignment());
            let union: BTreeSet<&MessageQueue> = a1.iter().chain(&a2).collect();
            if a1.len() == 2 && a2.len() == 2 && union.len() == 4 {
                Ok(())
            } else {
                Err(format!("no split: {a1:?} / {a2:?}"))
            }
        })
        .await;

        let p = b.producer("lite-pg");
        let sent = send(&p, "LiteSplit", 0..40).await;
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        let mut per_consumer = [0usize; 2];
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.len() < 40 && Instant::now() < deadline {
            for (n, c) in [&c1, &c2].into_iter().enumerate() {
                let owned = c.assignment();
                for m in poll_batch(c, Duration::from_millis(100)).await {
                    assert!(owned.iter().any(|q| q.queue_id == m.queue_id));
                    per_consumer[n] += 1;
                    assert!(got.insert(m.msg_id().to_owned(), n).is_none(), "duplicate");
                }
            }
        }
        assert_eq!(got.len(), 40);
        assert!(got.keys().all(|id| sent.contains_key(id)));
        assert!(
            per_consumer[0] > 0 && per_consumer[1] > 0,
            "{per_consumer:?}"
        );

        c1.shutdown().await;
        c2.shutdown().await;
        p.shutdown().await;
    });
}

#[test]
fn assign_seek_pause_and_resume() {
    let b = Broker::start("");
    run(async {
        b.create_topic("LiteSeek", 2).await;
        let p = b.producer("lite-pg");
        let mut cfg = config("lite-seek");
        cfg.auto_commit = false;
        let c = LitePullConsumer::new(cfg, b.client_config()).unwrap();
        let queues = c.fetch_queues("LiteSeek").await.unwrap();
        let q0 = queues[0].clone();
        for i in 0..10 {
            p.send_to_queue(msg("LiteSeek", i), &q0).await.unwrap();
        }
        c.assign(queues.clone()).await.unwrap();
        assert!(
            c.subscribe("LiteSeek", "*").is_err(),
            "assign and subscribe mix"
        );
        c.start().await.unwrap();
        assert_eq!(c.assignment(), queues);

        let offsets = |v: &[MessageExt]| v.iter().map(|m| m.queue_offset).collect::<Vec<_>>();
        let got = poll_n(&c, 10).await;
        assert_eq!(offsets(&got), (0..10).collect::<Vec<_>>());

        c.seek(&q0, 3).await.unwrap();
        let got = poll_n(&c, 7).await;
        assert_eq!(offsets(&got), (3..10).collect::<Vec<_>>());

        c.seek_to_begin(&q0).await.unwrap();
        let got = poll_n(&c, 10).await;
        assert_eq!(offsets(&got), (0..10).collect::<Vec<_>>());

        assert!(c.seek(&q0, 11).await.is_err(), "beyond the max offset");
        let other = MessageQueue {
            topic: "Elsewhere".into(),
            ..q0.clone()
        };
        assert!(c.seek(&other, 0).await.is_err(), "not assigned");

        c.seek_to_end(&q0).await.unwrap();
        c.pause(std::slice::from_ref(&q0));
        p.send_to_queue(msg("LiteSeek", 10), &q0).await.unwrap();
        assert!(
            c.poll(Duration::from_millis(800)).await.is_empty(),
            "paused"
        );
        c.resume(std::slice::from_ref(&q0));
        let got = poll_n(&c, 1).await;
        assert_eq!(offsets(&got), [10]);

        c.shutdown().await;
        p.shutdown().await;
    });
}

#[test]
fn committed_offsets_are_resumed_after_restart() {
    let b = Broker::start("");
    run(async {
        b.create_topic("LiteResume", 4).await;
        let p = b.producer("lite-pg");
        send(&p, "LiteResume", 0..20).await;

        let c1 = start(&b, config("lite-resume"), "LiteResume", "*").await;
        assert_eq!(poll_n(&c1, 20).await.len(), 20);
        c1.shutdown().await; // commits

        let later = send(&p, "LiteResume", 20..30).await;
        let mut cfg = config("lite-resume");
        cfg.auto_commit = false;
        let c2 = start(&b, cfg, "LiteResume", "*").await;
        let got = poll_n(&c2, 10).await;
        let ids: BTreeSet<&str> = got.iter().map(|m| m.msg_id()).collect();
        assert_eq!(ids, later.keys().map(String::as_str).collect());
        assert!(c2.poll(Duration::from_millis(500)).await.is_empty());
        c2.commit_sync().await.unwrap();

        let check = PullConsumer::new("lite-resume", b.client_config()).unwrap();
        let mut total = 0;
        for q in check.fetch_queues("LiteResume").await.unwrap() {
            total += check.query_offset(&q).await.unwrap().unwrap_or(0);
        }
        assert_eq!(total, 30, "every polled message is committed");

        check.shutdown().await;
        c2.shutdown().await;
        p.shutdown().await;
    });
}
