//! Body compression through the real `tern-broker --standalone`: RocketMQ 5's LZ4 and
//! ZSTD bodies stored as sent and read back by every consumer; a body that cannot be
//! decompressed is an error for that message only, never a stalled queue.

use crate::common;

use std::time::{Duration, Instant};

use common::{Broker, Sink, recorder, run, wait_for};
use tern_client::{
    ConsumeFromWhere, LitePullConsumer, LitePullConsumerConfig, Message, MessageBuilder,
    MessageQueue, Producer, ProducerConfig, PullConsumer, PushConsumerConfig,
};
use tern_shell::headers::SendMessageRequestHeaderV2;
use tern_shell::message::{
    Compression, PulledError, SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_TYPE_MASK,
};
use tern_shell::runtime::now_ms;
use tern_shell::{RemotingCommand, RequestCode};
use tern_testkit::wait_until;

/// A body that compresses well and is over the 4 KiB threshold.
fn big_body(i: usize) -> Vec<u8> {
    format!("reading {i}: ").repeat(600).into_bytes()
}

/// Stores `body` in queue 0 of `topic` with `sys_flag` as is, the way a producer that
/// compressed it would send it (SEND_MESSAGE_V2).
async fn send_raw(p: &Producer, topic: &str, sys_flag: i32, body: &[u8], key: &str) {
    let info = p.publish_info(topic).await.unwrap();
    let mq = &info.queues[0];
    let addr = p.client().any_addr(&mq.broker_name).unwrap();
    let h = SendMessageRequestHeaderV2 {
        a: "compression-pg".into(),
        b: topic.into(),
        c: "TBW102".into(),
        d: 4,
        e: mq.queue_id,
        f: sys_flag,
        g: now_ms(),
        h: 0,
        i: Some(format!("KEYS\u{1}{key}\u{2}")),
        j: Some(0),
        k: Some(false),
        l: None,
        m: Some(false),
        n: None,
    };
    let cmd = RemotingCommand::request(RequestCode::SendMessageV2, &h).with_body(body.to_vec());
    p.client().invoke_ok(&addr, cmd).await.unwrap();
}

fn producer(b: &Broker, kind: Compression) -> Producer {
    let mut cfg = ProducerConfig::new(format!("pg-{}", kind.name()));
    cfg.compress_type = kind;
    let p = Producer::new(cfg, b.client_config()).unwrap();
    p.start();
    p
}

#[test]
fn lz4_and_zstd_bodies_are_stored_as_sent_and_read_back_by_every_consumer() {
    let b = Broker::start("");
    run(async {
        for kind in [Compression::Lz4, Compression::Zstd, Compression::Zlib] {
            let topic = format!("Compressed{}", kind.name());
            let p = producer(&b, kind);
            for i in 0..20 {
                let m = Message::new(&topic, big_body(i)).with_keys([format!("k{i}")]);
                p.send(m).await.unwrap();
            }
            // Stored with the type bits the producer set, and smaller than sent.
            let pull = PullConsumer::new("compression-pull", b.client_config()).unwrap();
            // A send is answered once appended; its queue entry follows (reput), so on a
            // busy machine the last ones may not be pullable yet: read again until all are.
            let got = wait_for(
                &format!("20 {kind:?} messages pulled"),
                Duration::from_secs(30),
                async || {
                    let mut got = Vec::new();
                    for mq in pull.fetch_queues(&topic).await.unwrap() {
                        let r = pull.pull(&mq, 0, 32).await.unwrap();
                        assert!(r.undecodable.is_empty());
                        got.extend(r.messages);
                    }
                    if got.len() == 20 {
                        Ok(got)
                    } else {
                        Err(got.len())
                    }
                },
            )
            .await;
            for m in &got {
                let i: usize = m.properties["KEYS"][1..].parse().unwrap();
                assert_eq!(m.body, big_body(i), "{kind:?} body {i}");
                assert_eq!(
                    Compression::of_sys_flag(m.sys_flag),
                    Ok(Some(kind)),
                    "{kind:?} sysFlag {:#x}",
                    m.sys_flag
                );
                assert!((m.store_size as usize) < big_body(i).len() / 2);
            }
            pull.shutdown().await;

            // A push consumer gets the same bodies, decompressed.
            let seen: Sink<Vec<u8>> = Sink::default();
            let mut cfg = PushConsumerConfig::new(format!("compression-push-{}", kind.name()));
            cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
            let listener = recorder(&seen, |m, _| m.body.clone());
            let c = b.push_consumer(cfg, &topic, listener).await;
            wait_until("20 pushed", Duration::from_secs(30), async || {
                seen.lock().unwrap().len() >= 20
            })
            .await;
            let mut bodies = seen.lock().unwrap().clone();
            bodies.sort();
            let mut want: Vec<Vec<u8>> = (0..20).map(big_body).collect();
            want.sort();
            assert_eq!(bodies, want, "{kind:?}");
            c.shutdown().await;
            p.shutdown().await;
        }
    });
}

#[test]
fn an_undecodable_body_goes_to_the_dlq_and_the_queue_moves_on() {
    let b = Broker::start("");
    run(async {
        let topic = "Undecodable";
        let p = producer(&b, Compression::Lz4);
        // Before and after: good messages in the same queue as the bad ones.
        let q0: MessageQueue = p.publish_info(topic).await.unwrap().queues[0].clone();
        p.send_to_queue(Message::new(topic, big_body(1)).with_keys(["before"]), &q0)
            .await
            .unwrap();
        // An LZ4 flag on bytes that are no LZ4 frame (a buggy or hostile producer).
        let lz4 = Compression::Lz4.sys_flag();
        send_raw(&p, topic, lz4, b"these bytes are not an LZ4 frame", "bad").await;
        // A zstd frame cut short.
        let zstd = Compression::Zstd.compress(&big_body(2), 5).unwrap();
        let cut = &zstd[..zstd.len() / 2];
        send_raw(&p, topic, Compression::Zstd.sys_flag(), cut, "cut").await;
        p.send_to_queue(Message::new(topic, big_body(3)).with_keys(["after"]), &q0)
            .await
            .unwrap();

        // The pull consumer is told, message by message.
        let pull = PullConsumer::new("undecodable-pull", b.client_config()).unwrap();
        let r = pull.pull(&q0, 0, 32).await.unwrap();
        let keys: Vec<&str> = r
            .messages
            .iter()
            .map(|m| m.properties["KEYS"].as_str())
            .collect();
        assert_eq!(keys, ["before", "after"]);
        let bad: Vec<&str> = r
            .undecodable
            .iter()
            .map(|u| u.message.properties["KEYS"].as_str())
            .collect();
        assert_eq!(bad, ["bad", "cut"]);
        assert!(
            r.undecodable
                .iter()
                .all(|u| matches!(u.error, PulledError::Inflate(_)))
        );
        assert_eq!(
            r.undecodable[0].message.body,
            b"these bytes are not an LZ4 frame"
        );

        // A push consumer consumes the good ones, the bad ones go to its DLQ as stored,
        // and its offset moves past all four.
        let group = "undecodable-push";
        let seen: Sink<String> = Sink::default();
        let mut cfg = PushConsumerConfig::new(group);
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let listener = recorder(&seen, |m, _| m.properties["KEYS"].clone());
        let c = b.push_consumer(cfg, topic, listener).await;
        wait_until(
            "the good messages pushed",
            Duration::from_secs(30),
            async || seen.lock().unwrap().len() >= 2,
        )
        .await;
        let dlq = format!("%DLQ%{group}");
        let within = Duration::from_secs(30);
        let mut in_dlq = wait_for("both undecodable in the DLQ", within, async || {
            let mut in_dlq = Vec::new();
            if let Ok(queues) = pull.fetch_queues(&dlq).await {
                for mq in queues {
                    let r = pull.pull(&mq, 0, 32).await.unwrap();
                    assert!(r.messages.is_empty(), "only the undecodable ones");
                    for u in r.undecodable {
                        assert_eq!(
                            u.message.sys_flag
                                & (SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_TYPE_MASK),
                            if u.message.properties["KEYS"] == "bad" {
                                lz4
                            } else {
                                Compression::Zstd.sys_flag()
                            },
                            "kept as stored"
                        );
                        in_dlq.push(u.message.properties["KEYS"].clone());
                    }
                }
            }
            if in_dlq.len() < 2 {
                Err(in_dlq)
            } else {
                Ok(in_dlq)
            }
        })
        .await;
        in_dlq.sort();
        assert_eq!(in_dlq, ["bad", "cut"]);
        let mut got = seen.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, ["after", "before"]);
        // The group's offset passes the bad ones: nothing is stuck behind them.
        let probe = PullConsumer::new(group, b.client_config()).unwrap();
        wait_for("the offset past all four", within, async || {
            match probe.query_offset(&q0).await.ok().flatten().unwrap_or(-1) {
                4 => Ok(()),
                o => Err(format!("offset {o}")),
            }
        })
        .await;
        c.shutdown().await;
        probe.shutdown().await;

        // The lite pull consumer hands them out as errors beside the batch.
        let mut lcfg = LitePullConsumerConfig::new("undecodable-lite");
        lcfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let lite = LitePullConsumer::new(lcfg, b.client_config()).unwrap();
        lite.subscribe(topic, "*").unwrap();
        lite.start().await.unwrap();
        let mut polled = Vec::new();
        let t = Instant::now();
        while polled.len() < 2 {
            assert!(t.elapsed() < Duration::from_secs(30));
            polled.extend(lite.poll(Duration::from_millis(500)).await);
        }
        let errors: Vec<String> = lite
            .take_undecodable()
            .into_iter()
            .map(|u| u.message.properties["KEYS"].clone())
            .collect();
        assert_eq!(errors, ["bad", "cut"]);
        lite.shutdown().await;
        pull.shutdown().await;
        p.shutdown().await;
    });
}
