//! Request-reply against the real `tern-broker --standalone`: `Producer::request` waits for
//! the reply a push consumer sends with `create_reply` (SEND_REPLY_MESSAGE_V2 → the broker
//! pushes PUSH_REPLY_MESSAGE_TO_CLIENT to the requester and stores the reply in
//! `DefaultCluster_REPLY_TOPIC`); no reply times out; a reply to a client that is not
//! connected is refused with RocketMQ's remark.

use crate::common;

use std::time::{Duration, Instant};

use common::{Broker, run, wait_for};
use tern_client::{
    Admin, ClientError, ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageExt,
    Producer, ProducerConfig, PushConsumer, PushConsumerConfig, create_reply,
};

/// A push consumer on `topic` that answers each request with `re:<body>`.
async fn replier(b: &Broker, topic: &str) -> (PushConsumer, Producer) {
    let answers = b.producer("rr-replier-pg");
    let mut cfg = PushConsumerConfig::new("rr-replier-cg");
    cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    let p = answers.clone();
    let listener = move |msgs: &[MessageExt], _: &mut ConsumeContext| {
        for m in msgs {
            let body = format!("re:{}", String::from_utf8_lossy(&m.body));
            let reply = create_reply(m, body).unwrap();
            if let Err(e) = tern_client::block_on(p.send(reply)) {
                panic!("reply to {} refused: {e}", m.msg_id());
            }
        }
        ConsumeStatus::Success
    };
    let c = b.push_consumer(cfg, topic, listener).await;
    (c, answers)
}

#[test]
fn a_request_gets_the_reply_its_consumer_sends() {
    let b = Broker::start("");
    run(async {
        b.create_topic("RR1", 2).await;
        let (c, answers) = replier(&b, "RR1").await;
        let requester =
            Producer::new(ProducerConfig::new("rr-requester-pg"), b.client_config()).unwrap();
        requester.start();
        for i in 0..10 {
            let started = Instant::now();
            let reply = requester
                .request(
                    Message::new("RR1", format!("ask-{i}")),
                    Duration::from_secs(10),
                )
                .await
                .unwrap();
            assert_eq!(reply.body, format!("re:ask-{i}").into_bytes());
            assert_eq!(reply.topic, "DefaultCluster_REPLY_TOPIC");
            assert!(reply.properties.contains_key("CORRELATION_ID"));
            assert!(reply.properties.contains_key("PUSH_REPLY_TIME"));
            assert!(started.elapsed() < Duration::from_secs(10));
        }
        // Requests in flight at once each get their own reply.
        let asks: Vec<_> = (0..8)
            .map(|i| {
                let r = requester.clone();
                tern_shell::runtime::spawn(async move {
                    let m = Message::new("RR1", format!("many-{i}"));
                    (i, r.request(m, Duration::from_secs(10)).await)
                })
            })
            .collect();
        for a in asks {
            let (i, reply) = a.await;
            assert_eq!(reply.unwrap().body, format!("re:many-{i}").into_bytes());
        }
        // Stored too (storeReplyMessageEnable, RocketMQ's default). A reply is pushed to
        // its requester once appended; topic stats count what reput has dispatched to the
        // queues, which can be a pass behind the last reply.
        let admin = Admin::new(b.client_config()).unwrap();
        let within = Duration::from_secs(5);
        wait_for("the 18 replies stored", within, async || {
            let stats = admin
                .topic_stats("DefaultCluster_REPLY_TOPIC")
                .await
                .unwrap();
            match stats.values().map(|o| o.max_offset).sum::<i64>() {
                18 => Ok(()),
                stored => Err(stored),
            }
        })
        .await;
        admin.shutdown().await;
        requester.shutdown().await;
        c.shutdown().await;
        answers.shutdown().await;
    });
}

#[test]
fn a_request_nobody_answers_times_out_and_a_reply_to_nobody_is_refused() {
    let b = Broker::start("");
    run(async {
        b.create_topic("RR2", 1).await;
        let requester =
            Producer::new(ProducerConfig::new("rr-requester-pg"), b.client_config()).unwrap();
        requester.start();
        let started = Instant::now();
        let e = requester
            .request(Message::new("RR2", "anyone?"), Duration::from_millis(1500))
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Timeout { .. }), "{e}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(1400) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // A reply whose requester is not connected: RocketMQ's refusal.
        let mut stray = Message::new("DefaultCluster_REPLY_TOPIC", "late");
        for (k, v) in [
            ("MSG_TYPE", "reply"),
            ("CORRELATION_ID", "c-1"),
            ("REPLY_TO_CLIENT", "10.0.0.9@gone"),
        ] {
            stray.properties.insert(k.into(), v.into());
        }
        let e = requester.send(stray).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::Broker { code: 1, remark } if remark.contains("channel of <10.0.0.9@gone> not found")),
            "{e}"
        );
        requester.shutdown().await;
    });
}
