//! The simple consumer against the real `tern-broker --standalone`: receive, ack,
//! change the invisible duration, tag filtering, two brokers taken in turn.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Broker, run};
use tern_client::{Message, MessageBuilder, MessageSelector, ReceivedMessage, SimpleConsumer};

async fn send(b: &Broker, topic: &str, n: usize, tag: impl Fn(usize) -> &'static str) {
    let p = b.producer("simple-pg");
    for i in 0..n {
        p.send(Message::new(topic, format!("s{i}")).with_tags(tag(i)))
            .await
            .unwrap();
    }
    p.shutdown().await;
}

/// Receives until `n` messages came or `within` passed.
async fn receive_n(
    c: &SimpleConsumer,
    n: usize,
    invisible: Duration,
    within: Duration,
) -> Vec<ReceivedMessage> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(c.receive(32, invisible).await.unwrap());
    }
    got
}

fn bodies(ms: &[ReceivedMessage]) -> BTreeSet<String> {
    ms.iter()
        .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
        .collect()
}

#[test]
fn receive_ack_and_change_invisible_duration() {
    let b = Broker::start("");
    run(async {
        b.create_topic("SIMPLE", 4).await;
        send(&b, "SIMPLE", 10, |_| "t").await;
        let c = SimpleConsumer::with_await("simple-cg", b.client_config(), Duration::from_secs(2))
            .unwrap();
        c.start();
        c.subscribe("SIMPLE", MessageSelector::all()).await.unwrap();
        let got = receive_n(&c, 10, Duration::from_secs(30), Duration::from_secs(20)).await;
        assert_eq!(got.len(), 10);
        assert_eq!(bodies(&got).len(), 10);
        assert!(
            got.iter()
                .all(|m| m.message.properties.contains_key("POP_CK"))
        );
        // Nothing more while they are invisible.
        assert!(
            c.receive(32, Duration::from_secs(30))
                .await
                .unwrap()
                .is_empty()
        );
        let (later, rest) = got.split_first().unwrap();
        for m in rest {
            c.ack(m).await.unwrap();
        }
        // One is made visible again in half a second: it comes back from the retry topic.
        let later = c
            .change_invisible_duration(later, Duration::from_millis(500))
            .await
            .unwrap();
        let again = receive_n(&c, 1, Duration::from_secs(30), Duration::from_secs(15)).await;
        assert_eq!(bodies(&again), bodies(std::slice::from_ref(&later)));
        let m = &again[0];
        assert_eq!(
            m.message.topic, "SIMPLE",
            "shown under the subscribed topic"
        );
        assert_eq!(m.message.reconsume_times, 1);
        c.ack(m).await.unwrap();
        assert!(
            receive_n(&c, 1, Duration::from_secs(30), Duration::from_secs(4))
                .await
                .is_empty()
        );
        c.shutdown().await;
    });
}

#[test]
fn tags_filter_and_both_brokers_are_read() {
    let a = Broker::start("");
    let b2 = Broker::join(&a, "brokerName=broker-b\n");
    run(async {
        a.create_topic("SIMPLE_TAGS", 2).await;
        send(&a, "SIMPLE_TAGS", 20, |i| {
            if i % 2 == 0 { "even" } else { "odd" }
        })
        .await;
        let c =
            SimpleConsumer::with_await("simple-tags", a.client_config(), Duration::from_secs(1))
                .unwrap();
        c.start();
        c.subscribe("SIMPLE_TAGS", MessageSelector::tag("even"))
            .await
            .unwrap();
        let got = receive_n(&c, 10, Duration::from_secs(30), Duration::from_secs(20)).await;
        let want: BTreeSet<String> = (0..20).step_by(2).map(|i| format!("s{i}")).collect();
        assert_eq!(bodies(&got), want);
        let brokers: BTreeSet<&str> = got
            .iter()
            .map(|m| m.receipt_handle.split(' ').nth(5).unwrap())
            .collect();
        assert_eq!(brokers.len(), 2, "{brokers:?}");
        for m in &got {
            c.ack(m).await.unwrap();
        }
        c.shutdown().await;
    });
    drop(b2);
}
