//! POP across restarts of the real `tern-broker` process: kill -9 between POP and ACK,
//! while reviving, mid orderly batch, and a clean stop. What was acked stays acked, what
//! was not comes back (once), and orderly queues keep their lock and order. Driven over
//! raw remoting frames as in `pop.rs`, whose notes on headers and timing apply here.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

#[test]
fn kill9_between_pop_and_ack_loses_nothing_and_acked_messages_stay_acked() {
    let (dir, mut b) = start("");
    let bodies: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let (acked, unacked) = b.with_client(async |c| {
        create_topic(c, "T6", 2).await;
        for (i, body) in bodies.iter().enumerate() {
            send_bodies(c, "T6", (i % 2) as i32, &[body]).await;
        }
        let got = pop_until(c, "T6", 40, 8_000, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 40);
        let (mut acked, mut unacked) = (BTreeSet::new(), BTreeSet::new());
        for (i, m) in got.iter().enumerate() {
            if i % 2 == 0 {
                expect_code(&c.call(m.ack()).await, ResponseCode::Success);
                acked.insert(m.body());
            } else {
                unacked.insert(m.body());
            }
        }
        // Past one save of the consumer offsets (every 5 s): re-popping from an offset
        // saved before the pop would be a duplicate RocketMQ allows, not what this checks.
        runtime::sleep(Duration::from_millis(5_500)).await;
        (acked, unacked)
    });
    b.kill9();
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        let got = pop_until(c, "T6", unacked.len(), 60_000, Duration::from_secs(20)).await;
        let seen: BTreeSet<String> = got.iter().map(Got::body).collect();
        assert_eq!(
            seen, unacked,
            "every unacked message revived after the restart"
        );
        assert!(got.iter().all(|g| g.msg.reconsume_times == 1));
        assert!(seen.is_disjoint(&acked));
        for g in &got {
            expect_code(&c.call(g.ack()).await, ResponseCode::Success);
        }
        let more = pop_until(c, "T6", 1, 60_000, Duration::from_secs(4)).await;
        assert!(
            more.is_empty(),
            "acked before the kill, revived anyway: {more:?}"
        );
    });
}

#[test]
fn request_modes_and_orderly_batches_survive_a_restart() {
    let (dir, mut b) = start("");
    let set = |topic: &str| {
        let body = format!(
            r#"{{"topic":"{topic}","consumerGroup":"{G}","mode":"POP","popShareQueueNum":0}}"#
        );
        RemotingCommand::request_code(RequestCode::SetMessageRequestMode)
            .with_body(body.into_bytes())
    };
    let all = || RemotingCommand::request_code(RequestCode::GetAllMessageRequestMode);
    b.with_client(async |c| {
        expect_code(&c.call(all()).await, ResponseCode::SystemError);
        create_topic(c, "T8", 1).await;
        expect_code(&c.call(set("T8")).await, ResponseCode::Success);
        expect_code(
            &c.call(set("%RETRY%GID_POP")).await,
            ResponseCode::NoPermission,
        );
        expect_code(
            &c.call(set("NO_SUCH_TOPIC")).await,
            ResponseCode::TopicNotExist,
        );
        let bad = RemotingCommand::request_code(RequestCode::SetMessageRequestMode)
            .with_body(&b"[1,"[..]);
        assert_ne!(c.call(bad).await.response_code(), ResponseCode::Success);
        send_bodies(c, "T8", 0, &["r0", "r1"]).await;
        let a = pop(c, orderly(pop_req("T8", 0, 1, 60_000, 0), "A")).await;
        assert_eq!(a.bodies(), ["r0"]);
    });
    b.stop();
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        let r = c.call(all()).await;
        expect_code(&r, ResponseCode::Success);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["messageRequestModeMap"]["T8"][G]["mode"], "POP");
        assert_eq!(v["messageRequestModeMap"]["T8"][G]["popShareQueueNum"], 0);
        // The batch popped before the restart still locks its queue.
        let other = pop(c, orderly(pop_req("T8", 0, 1, 60_000, 0), "B")).await;
        expect_code(&other.resp, ResponseCode::PollingTimeout);
        let same = pop(c, orderly(pop_req("T8", 0, 1, 60_000, 0), "A")).await;
        assert_eq!(same.bodies(), ["r0"]);
    });
}

/// GET_MAX_OFFSET of a queue (0 while the topic does not exist).
async fn max_of(c: &Client, topic: &str, queue_id: i32) -> i64 {
    let r = c.call(max_offset_req(topic, queue_id)).await;
    if r.response_code() == ResponseCode::Success {
        offset_of(&r)
    } else {
        0
    }
}

#[test]
fn kill9_while_reviving_and_after_changing_invisible_time_loses_nothing() {
    let (dir, mut b) = start("");
    let (revived, changed) = b.with_client(async |c| {
        create_topic(c, "K2", 2).await;
        create_topic(c, "K3", 1).await;
        let k2: Vec<String> = (0..60).map(|i| format!("r{i}")).collect();
        for (i, body) in k2.iter().enumerate() {
            send_bodies(c, "K2", (i % 2) as i32, &[body]).await;
        }
        let k3: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
        for body in &k3 {
            send_bodies(c, "K3", 0, &[body]).await;
        }
        assert_eq!(
            pop_until(c, "K2", 60, 6_000, Duration::from_secs(10))
                .await
                .len(),
            60
        );
        let k3_got = pop_until(c, "K3", 20, 60_000, Duration::from_secs(10)).await;
        assert_eq!(k3_got.len(), 20);
        // Past one save of the consumer offsets: after the restart nothing is popped
        // again from the topics themselves, only revived.
        runtime::sleep(Duration::from_millis(5_500)).await;
        for m in &k3_got {
            expect_code(&c.call(cit_req(m, 2_000)).await, ResponseCode::Success);
        }
        // Kill once the revive of K2 has begun.
        let deadline = Instant::now() + Duration::from_secs(20);
        while max_of(c, "%RETRY%GID_POP_K2", 0).await == 0 {
            assert!(Instant::now() < deadline, "nothing revived");
            runtime::sleep(Duration::from_millis(5)).await;
        }
        (k2, k3)
    });
    b.kill9();
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        for (topic, want) in [("K2", &revived), ("K3", &changed)] {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut seen = BTreeSet::new();
            while seen.len() < want.len() && Instant::now() < deadline {
                for g in pop_until(c, topic, 1, 60_000, Duration::from_secs(2)).await {
                    assert!(
                        g.msg.reconsume_times >= 1,
                        "{topic}: {} popped again, not revived",
                        g.body()
                    );
                    seen.insert(g.body());
                    expect_code(&c.call(g.ack()).await, ResponseCode::Success);
                }
            }
            let want: BTreeSet<String> = want.iter().cloned().collect();
            assert_eq!(
                seen, want,
                "{topic}: every message delivered again after kill -9"
            );
        }
    });
}

#[test]
fn kill9_mid_orderly_batch_keeps_the_lock_and_the_order() {
    let (dir, mut b) = start("");
    let req = |attempt: &str| orderly(pop_req("K4", 0, 2, 60_000, 0), attempt);
    b.with_client(async |c| {
        create_topic(c, "K4", 1).await;
        send_bodies(c, "K4", 0, &["q0", "q1", "q2", "q3", "q4", "q5"]).await;
        let a = pop(c, req("A")).await;
        assert_eq!(a.bodies(), ["q0", "q1"]);
        for m in &a.msgs {
            expect_code(&c.call(m.ack()).await, ResponseCode::Success);
        }
        let b2 = pop(c, req("B")).await;
        assert_eq!(b2.bodies(), ["q2", "q3"]);
        expect_code(&c.call(b2.msgs[0].ack()).await, ResponseCode::Success);
        // Past one save of the consumer offsets.
        runtime::sleep(Duration::from_millis(5_500)).await;
    });
    b.kill9();
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        // Still locked by the batch in flight at the kill.
        expect_code(&pop(c, req("C")).await.resp, ResponseCode::PollingTimeout);
        let mut seen = Vec::new();
        let mut attempt = "B".to_owned();
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.len() < 3 && Instant::now() < deadline {
            let p = pop(c, req(&attempt)).await;
            for m in &p.msgs {
                seen.push(m.body());
                expect_code(&c.call(m.ack()).await, ResponseCode::Success);
            }
            attempt.push('x');
        }
        assert_eq!(
            seen,
            ["q3", "q4", "q5"],
            "gap-free, in order, acked ones not repeated"
        );
    });
}

#[test]
fn a_clean_stop_between_pop_and_ack_revives_each_unacked_message_once() {
    let (dir, mut b) = start("");
    let unacked = b.with_client(async |c| {
        create_topic(c, "K6", 2).await;
        for i in 0..30 {
            send_bodies(c, "K6", i % 2, &[&format!("s{i}")]).await;
        }
        let got = pop_until(c, "K6", 30, 3_000, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 30);
        let mut unacked = Vec::new();
        for (i, m) in got.iter().enumerate() {
            if i % 3 == 0 {
                unacked.push(m.body());
            } else {
                expect_code(&c.call(m.ack()).await, ResponseCode::Success);
            }
        }
        unacked.sort();
        unacked
    });
    assert!(b.stop().success());
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        let mut seen = Vec::new();
        for g in pop_until(c, "K6", unacked.len() + 1, 60_000, Duration::from_secs(12)).await {
            seen.push(g.body());
            expect_code(&c.call(g.ack()).await, ResponseCode::Success);
        }
        seen.sort();
        assert_eq!(seen, unacked, "each unacked message once, no acked one");
    });
}
