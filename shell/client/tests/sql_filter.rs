//! SQL92 subscriptions (`MessageSelector::sql`) through the client against the real
//! `tern-broker --standalone`: push and lite pull consumers get exactly the matching
//! messages, a bad expression or a broker that does not filter by properties fails
//! `start` with the broker's answer, and queues where nothing matches are consumed to
//! their end.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Broker, Sink, recorder, run, send_in_flight, wait_progress};
use tern_client::{
    Admin, ClientError, ConsumeContext, ConsumeFromWhere, ConsumeStatus, LitePullConsumer,
    LitePullConsumerConfig, Message, MessageBuilder, MessageExt, MessageSelector, PullConsumer,
    PushConsumer, PushConsumerConfig,
};

const EXPR: &str = "a BETWEEN 3 AND 6 AND TAGS IN ('A','B')";

/// Message `i`: `a` cycles 0..10 (absent every 7th message), tags A, B, C in turn.
fn mixed(topic: &str, i: usize) -> Message {
    let mut m = Message::new(topic, format!("body-{i}"))
        .with_tags(["A", "B", "C"][i % 3])
        .with_keys([format!("k{i}")])
        .with_property("seq", i.to_string());
    if i % 7 != 0 {
        m = m.with_property("a", (i % 10).to_string());
    }
    m
}

fn matches(i: usize) -> bool {
    i % 7 != 0 && (3..=6).contains(&(i % 10)) && i % 3 != 2
}

/// Checks a delivered message against what `mixed` sent; returns its index.
#[track_caller]
fn check(m: &MessageExt) -> usize {
    let i: usize = m.properties["seq"].parse().unwrap();
    assert!(matches(i), "message {i} does not match {EXPR}");
    assert_eq!(m.body, format!("body-{i}").into_bytes());
    assert_eq!(m.tags(), Some(["A", "B", "C"][i % 3]));
    assert_eq!(m.properties.get("KEYS"), Some(&format!("k{i}")));
    assert_eq!(m.properties.get("a"), Some(&(i % 10).to_string()));
    i
}

async fn send_all(
    b: &Broker,
    topic: &str,
    range: std::ops::Range<usize>,
    msg: fn(&str, usize) -> Message,
) {
    let p = b.producer("sql-pg");
    send_in_flight(&p, range.map(|i| msg(topic, i))).await;
    p.shutdown().await;
}

/// A listener that consumes everything it is given.
fn ack(_: &[MessageExt], _: &mut ConsumeContext) -> ConsumeStatus {
    ConsumeStatus::Success
}

fn push_config(group: &str) -> PushConsumerConfig {
    let mut c = PushConsumerConfig::new(group);
    c.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    c.persist_offset_interval = Duration::from_millis(500);
    c.broker_suspend_max = Duration::from_secs(2);
    c
}

/// Waits until the group's committed offsets reach the end of all `queues` of `topic`.
async fn wait_consumed_to_end(b: &Broker, group: &str, topic: &str, queues: usize) {
    let admin = Admin::new(b.client_config()).unwrap();
    wait_progress(&admin, group, topic, Duration::from_secs(90), |p| {
        p.queues.len() == queues && p.diff_total == 0
    })
    .await;
    admin.shutdown().await;
}

#[test]
fn push_consumer_gets_exactly_the_matching_messages_of_a_mixed_stream() {
    let b = Broker::start("");
    run(async {
        let topic = "SqlPush";
        b.create_topic(topic, 4).await;
        send_all(&b, topic, 0..1000, mixed).await;

        let got: Sink<usize> = Sink::default();
        let sql = MessageSelector::sql(EXPR);
        let listener = recorder(&got, |m, _| check(m));
        let c = b.subscribed(push_config("sql-push"), topic, sql, listener);
        c.start().await.unwrap();
        // Offsets at the end of every queue: everything was pulled, filtered, consumed.
        wait_consumed_to_end(&b, "sql-push", topic, 4).await;

        let got = got.lock().unwrap().clone();
        let want: BTreeSet<usize> = (0..1000).filter(|i| matches(*i)).collect();
        assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), want);
        assert_eq!(got.len(), want.len(), "no duplicates");
        c.shutdown().await;
    });
}

#[test]
fn lite_pull_consumer_gets_exactly_the_matching_messages() {
    let b = Broker::start("");
    run(async {
        let topic = "SqlLite";
        b.create_topic(topic, 4).await;
        send_all(&b, topic, 0..1000, mixed).await;
        let want: BTreeSet<usize> = (0..1000).filter(|i| matches(*i)).collect();

        let mut cfg = LitePullConsumerConfig::new("sql-lite");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let c = LitePullConsumer::new(cfg, b.client_config()).unwrap();
        c.subscribe(topic, MessageSelector::sql(EXPR)).unwrap();
        c.start().await.unwrap();
        let mut got: BTreeMap<usize, usize> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < want.len() && Instant::now() < deadline {
            for m in c.poll(Duration::from_millis(500)).await {
                *got.entry(check(&m)).or_default() += 1;
            }
        }
        assert_eq!(got.keys().copied().collect::<BTreeSet<_>>(), want);
        assert!(got.values().all(|n| *n == 1), "no duplicates");
        // Nothing else is waiting (a wrong match would show up here or in `check`).
        assert!(c.poll(Duration::from_millis(500)).await.is_empty());
        c.shutdown().await;
    });
}

#[test]
fn a_queue_where_nothing_matches_is_consumed_to_its_end() {
    let b = Broker::start("");
    run(async {
        let topic = "SqlNone";
        b.create_topic(topic, 2).await;
        send_all(&b, topic, 0..1000, mixed).await;
        let delivered: Sink<String> = Sink::default();
        let sql = MessageSelector::sql("seq IS NULL OR a > 100");
        let listener = recorder(&delivered, |m, _| m.msg_id().to_owned());
        let c = b.subscribed(push_config("sql-none"), topic, sql, listener);
        c.start().await.unwrap();
        wait_consumed_to_end(&b, "sql-none", topic, 2).await;
        // More of them later: the held pulls step over them and the offsets follow.
        send_all(&b, topic, 1000..1300, mixed).await;
        wait_consumed_to_end(&b, "sql-none", topic, 2).await;
        assert_eq!(*delivered.lock().unwrap(), Vec::<String>::new());
        c.shutdown().await;
    });
}

#[test]
fn a_bad_expression_fails_start_and_pulls_with_the_column() {
    let b = Broker::start("");
    run(async {
        let topic = "SqlBad";
        b.create_topic(topic, 2).await;
        send_all(&b, topic, 0..20, mixed).await;
        let is_23_at_column = |e: &ClientError, col: &str| {
            matches!(e, ClientError::Broker { code: 23, remark }
                if remark.contains(&format!("column {col}")) && remark.contains("SQL92"))
        };

        let consumed: Sink<String> = Sink::default();
        let sql = MessageSelector::sql("a BETWEEN 3 AND");
        let listener = recorder(&consumed, |m, _| m.msg_id().to_owned());
        let c = b.subscribed(push_config("sql-bad"), topic, sql, listener);
        let e = c.start().await.unwrap_err();
        assert!(is_23_at_column(&e, "16"), "{e}");
        assert!(e.to_string().contains("a BETWEEN 3 AND"), "{e}");
        c.shutdown().await;

        let lite = LitePullConsumer::new(
            LitePullConsumerConfig::new("sql-bad-lite"),
            b.client_config(),
        )
        .unwrap();
        lite.subscribe(topic, MessageSelector::sql("TAGS = 'A' AND"))
            .unwrap();
        let e = lite.start().await.unwrap_err();
        assert!(is_23_at_column(&e, "15"), "{e}");
        lite.shutdown().await;

        // The pull consumer gets the broker's answer on each pull.
        let pc = PullConsumer::new("sql-bad-pull", b.client_config()).unwrap();
        let q = pc.fetch_queues(topic).await.unwrap()[0].clone();
        let e = pc
            .pull_with_selector(&q, &MessageSelector::sql("a <> 'x"), 0, 32)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ClientError::Broker { code: 23, remark } if remark.contains("unterminated string")),
            "{e}"
        );
        // A valid one through the same call.
        let r = pc
            .pull_with_selector(&q, &MessageSelector::sql("a IS NOT NULL"), 0, 32)
            .await
            .unwrap();
        assert!(r.messages.iter().all(|m| m.properties.contains_key("a")));
        pc.shutdown().await;

        // A lite consumer subscribing after start cannot fail `subscribe`: its pulls are
        // refused and nothing is consumed.
        let mut cfg = LitePullConsumerConfig::new("sql-bad-late");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let late = LitePullConsumer::new(cfg, b.client_config()).unwrap();
        late.start().await.unwrap();
        late.subscribe(topic, MessageSelector::sql("a ==")).unwrap();
        assert!(late.poll(Duration::from_secs(3)).await.is_empty());
        late.shutdown().await;
        assert_eq!(*consumed.lock().unwrap(), Vec::<String>::new());
        // An empty SQL92 expression is refused before anything is sent, as in Java.
        let empty = PushConsumer::new(push_config("sql-empty"), b.client_config()).unwrap();
        assert!(empty.subscribe(topic, MessageSelector::sql("  ")).is_err());
    });
}

#[test]
fn a_broker_without_property_filtering_refuses_at_start() {
    let b = Broker::start("enablePropertyFilter=false\n");
    run(async {
        let topic = "SqlOff";
        b.create_topic(topic, 2).await;
        let sql = MessageSelector::sql(EXPR);
        let c = b.subscribed(push_config("sql-off"), topic, sql, ack);
        let e = c.start().await.unwrap_err();
        assert_eq!(
            e,
            ClientError::Broker {
                code: 1,
                remark: "The broker does not support consumer to filter message by SQL92".into()
            }
        );
        c.shutdown().await;
        // Tag subscriptions start as before.
        let t = b.subscribed(push_config("sql-off-tag"), topic, "A || B", ack);
        t.start().await.unwrap();
        t.shutdown().await;
    });
}
