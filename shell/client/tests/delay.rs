//! Delay levels end to end with the SDK against the real `tern-broker --standalone`: a
//! delayed send reaches a push consumer after its level's delay with the producer's
//! message id; a listener that keeps asking to reconsume later gets each retry after its
//! level's delay, then the message lands in the group's DLQ.
//!
//! Timing checks are one-sided where a loaded machine can only make things later.

use crate::common;

use std::time::Duration;

use common::{Broker, Sink, recorder, run, wait_for};
use tern_client::{
    ConcurrentListener, ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder,
    MessageExt, MessageQueue, PullConsumer, PullStatus, PushConsumer, PushConsumerConfig,
};
use tern_shell::runtime::{now_ms, sleep};
use tern_testkit::wait_until;

/// How much earlier than due a delivery may be seen (ms rounding of store times).
const EARLY_MS: i64 = 20;
/// Generous bound for anything to arrive on a loaded machine.
const LATE: Duration = Duration::from_secs(40);

/// A delivery as the listener saw it, and when.
#[derive(Debug, Clone)]
struct Seen {
    msg: MessageExt,
    queue_topic: String,
    at: i64,
}

type Log = Sink<Seen>;

async fn push_consumer(
    b: &Broker,
    cfg: PushConsumerConfig,
    topic: &str,
    log: &Log,
    status: ConsumeStatus,
) -> PushConsumer {
    let record = recorder(log, |m, ctx| Seen {
        msg: m.clone(),
        queue_topic: ctx.queue.topic.clone(),
        at: now_ms(),
    });
    let listener = move |msgs: &[MessageExt], ctx: &mut ConsumeContext| {
        record.consume(msgs, ctx);
        status
    };
    b.push_consumer(cfg, topic, listener).await
}

fn config(group: &str) -> PushConsumerConfig {
    let mut c = PushConsumerConfig::new(group);
    c.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    c.consume_thread_min = 2;
    c.consume_thread_max = 4;
    c
}

#[test]
fn a_delayed_send_reaches_a_push_consumer_after_its_level_with_its_msg_id() {
    let b = Broker::start("messageDelayLevel=1s 2s 3s\n");
    run(async {
        let topic = "DelayedPush";
        b.create_topic(topic, 2).await;
        let log = Log::default();
        let c = push_consumer(&b, config("delayed-g"), topic, &log, ConsumeStatus::Success).await;
        let p = b.producer("delayed-pg");
        let mut sent = Vec::new();
        for (key, level) in [("two", 2), ("one", 1)] {
            let m = Message::new(topic, format!("body {key}"))
                .with_tags("TagD")
                .with_keys([key.to_owned()])
                .with_property("shape", "round")
                .with_delay_level(level);
            let at = now_ms();
            let r = p.send(m.clone()).await.unwrap();
            sent.push((m, r, at, i64::from(level) * 1_000));
        }
        wait_until("both delayed messages", LATE, async || {
            log.lock().unwrap().len() >= 2
        })
        .await;
        sleep(Duration::from_millis(1_500)).await;
        let seen = log.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "each once: {seen:?}");
        assert_eq!(
            seen[0].msg.properties["KEYS"], "one",
            "the shorter level first"
        );
        for (m, r, at, delay) in &sent {
            let s = seen
                .iter()
                .find(|s| s.msg.msg_id() == r.msg_id)
                .expect("arrived with the producer's msg id");
            assert!(
                s.at >= at + delay - EARLY_MS,
                "{:?} after {} ms",
                m.properties,
                s.at - at
            );
            assert_eq!(s.msg.topic, topic);
            assert_eq!(s.msg.queue_id, r.queue.queue_id, "the queue it was sent to");
            assert_eq!(s.msg.body, m.body);
            assert_eq!(s.msg.tags(), Some("TagD"));
            assert_eq!(s.msg.properties["KEYS"], m.properties["KEYS"]);
            assert_eq!(s.msg.properties["shape"], "round");
            assert_eq!(s.msg.reconsume_times, 0);
            assert!(!s.msg.properties.contains_key("DELAY"));
        }
        c.shutdown().await;
        p.shutdown().await;
    });
}

/// Pulls `%DLQ%group` queue 0 until a message is there (its route appears when the
/// broker creates the topic and registers).
async fn first_in_dlq(b: &Broker, group: &str) -> MessageExt {
    let c = PullConsumer::new("dlq-reader", b.client_config()).unwrap();
    c.start().await;
    let q = MessageQueue {
        topic: format!("%DLQ%{group}"),
        broker_name: "broker-a".into(),
        queue_id: 0,
    };
    let m = wait_for("a message in the DLQ", LATE, async || {
        match c.pull(&q, 0, 32).await {
            Ok(r) if r.status == PullStatus::Found => Ok(r.messages.into_iter().next().unwrap()),
            _ => Err(format!("nothing in {}", q.topic)),
        }
    })
    .await;
    c.shutdown().await;
    m
}

#[test]
fn reconsume_later_retries_after_each_levels_delay_then_lands_in_the_dlq() {
    // Retry n waits at level 3 + n: 2 s, then 1 s.
    let b = Broker::start("messageDelayLevel=1s 1s 2s 1s\n");
    run(async {
        let topic = "Flaky";
        b.create_topic(topic, 1).await;
        let log = Log::default();
        let mut cfg = config("flaky-g");
        cfg.max_reconsume_times = Some(2);
        let c = push_consumer(&b, cfg, topic, &log, ConsumeStatus::ReconsumeLater).await;
        let p = b.producer("flaky-pg");
        let r = p
            .send(Message::new(topic, "fails").with_keys(["f1".to_owned()]))
            .await
            .unwrap();
        wait_until("three deliveries", LATE, async || {
            log.lock().unwrap().len() >= 3
        })
        .await;
        let dlq = first_in_dlq(&b, "flaky-g").await;
        sleep(Duration::from_millis(1_500)).await;
        let seen = log.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "no delivery past the limit: {seen:?}");
        let times: Vec<i32> = seen.iter().map(|s| s.msg.reconsume_times).collect();
        assert_eq!(times, [0, 1, 2]);
        for (s, from) in seen.iter().zip([topic, "%RETRY%flaky-g", "%RETRY%flaky-g"]) {
            assert_eq!(s.queue_topic, from);
            assert_eq!(s.msg.topic, topic, "the original topic, as Java shows it");
            assert_eq!(s.msg.msg_id(), r.msg_id);
            assert_eq!(s.msg.body, b"fails");
        }
        assert!(
            seen[1].at - seen[0].at >= 2_000 - EARLY_MS,
            "level 3: {seen:?}"
        );
        assert!(
            seen[2].at - seen[1].at >= 1_000 - EARLY_MS,
            "level 4: {seen:?}"
        );
        assert_eq!(dlq.reconsume_times, 3);
        assert_eq!(dlq.msg_id(), r.msg_id);
        assert_eq!(dlq.body, b"fails");
        assert_eq!(dlq.properties["RETRY_TOPIC"], topic);
        c.shutdown().await;
        p.shutdown().await;
    });
}
