//! POP consumption against the real `tern-broker` process, driven over raw remoting
//! frames as RocketMQ 5's Java client sends them: JSON headers, language JAVA, version
//! 479, every extField a string with the names of `PopMessageRequestHeader`,
//! `AckMessageRequestHeader` and `ChangeInvisibleTimeRequestHeader`. Receipt handles are
//! rebuilt from the answer's header the way the Java client does
//! (`ExtraInfoUtil.buildExtraInfo`), spelled out here rather than taken from the shell
//! crate, so a format error on either side shows.
//!
//! Timing checks are one-sided where a loaded machine can only make things later.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tern_shell::body::SubscriptionGroupConfig;
use tern_shell::message::decode_pulled;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

#[test]
fn pop_answers_stored_records_writes_a_checkpoint_and_checks_acks() {
    with_client("", async |c| {
        create_topic(c, "T1", 1).await;
        send_bodies(c, "T1", 0, &["m0", "m1", "m2"]).await;
        let before = now_ms();
        let p = pop(c, pop_req("T1", 0, 32, 60_000, 0)).await;
        expect_code(&p.resp, ResponseCode::Success);
        assert_eq!(p.bodies(), ["m0", "m1", "m2"]);
        assert!((before..=now_ms()).contains(&p.num("popTime")));
        assert_eq!(p.num("invisibleTime"), 60_000);
        let rq = p.num("reviveQid");
        assert!((0..8).contains(&rq));
        assert_eq!(p.num("restNum"), 0);
        assert_eq!(p.field("startOffsetInfo"), "0 0 0");
        assert_eq!(p.field("msgOffsetInfo"), "0 0 0,1,2");
        assert_eq!(p.msgs[1].msg.properties["UNIQ_KEY"], "UK-m1");
        // One checkpoint in the revive queue, naming the three offsets.
        let cks = pull_all(c, REVIVE, rq as i32, 0).await;
        assert_eq!(cks.len(), 1);
        assert_eq!(cks[0].properties["TAGS"], "ck");
        let ck: serde_json::Value = serde_json::from_slice(&cks[0].body).unwrap();
        assert_eq!((ck["so"].as_i64(), ck["n"].as_i64()), (Some(0), Some(3)));
        assert_eq!(ck["d"], serde_json::json!([0, 1, 2]));
        assert_eq!(ck["t"], "T1");
        // Nobody else writes there.
        let forged = msg(REVIVE, b"{}", &[("TAGS", "ck")]);
        expect_code(
            &c.call(send_v1(&forged, 0)).await,
            ResponseCode::NoPermission,
        );
        // Nothing left to pop.
        let again = pop(c, pop_req("T1", 0, 32, 60_000, 0)).await;
        expect_code(&again.resp, ResponseCode::PollingTimeout);

        expect_code(&c.call(p.msgs[1].ack()).await, ResponseCode::Success);
        let acks = pull_all(c, REVIVE, rq as i32, 1).await;
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].properties["TAGS"], "ack");
        // Bad acks get RocketMQ's codes and write nothing.
        let h = &p.msgs[0].handle;
        expect_code(
            &c.call(ack_req("T1", 0, h, 99)).await,
            ResponseCode::NoMessage,
        );
        expect_code(
            &c.call(ack_req("NO_SUCH_TOPIC", 0, h, 0)).await,
            ResponseCode::TopicNotExist,
        );
        expect_code(
            &c.call(ack_req("T1", 9, h, 0)).await,
            ResponseCode::MessageIllegal,
        );
        expect_code(
            &c.call(ack_req("T1", 0, "1 2 x", 0)).await,
            ResponseCode::MessageIllegal,
        );
        expect_code(
            &c.call(ack_req("T1", 0, "0 1 2 64 0 b 0 0", 0)).await,
            ResponseCode::MessageIllegal,
        );
        let mut no_extra = ack_req("T1", 0, h, 0);
        no_extra.ext_fields.remove("extraInfo");
        let r = c.call(no_extra).await;
        assert_ne!(r.response_code(), ResponseCode::Success, "{r:?}");
        assert_eq!(
            pull_all(c, REVIVE, rq as i32, 2).await.len(),
            0,
            "no record for a refused ack"
        );
        // Bad POP headers.
        let r = c.call(pop_req("T1", 0, 33, 60_000, 0)).await;
        expect_code(&r, ResponseCode::InvalidParameter);
        let mut no_group = pop_req("T1", 0, 1, 60_000, 0);
        no_group.ext_fields.remove("consumerGroup");
        assert_ne!(
            c.call(no_group).await.response_code(),
            ResponseCode::Success
        );
        let r = c
            .call(pop_req("T1", 0, 1, 60_000, 0).with_ext("maxMsgNums", "many"))
            .await;
        assert_ne!(r.response_code(), ResponseCode::Success);
        expect_code(
            &c.call(pop_req("NO_SUCH_TOPIC", 0, 1, 60_000, 0)).await,
            ResponseCode::TopicNotExist,
        );
        // A request older than its poll time is answered POLLING_TIMEOUT at once.
        let old = pop_req("T1", 0, 1, 60_000, 1_000)
            .with_ext("bornTime", (now_ms() - 10_000).to_string());
        let t = Instant::now();
        let r = pop(c, old).await;
        expect_code(&r.resp, ResponseCode::PollingTimeout);
        assert!(t.elapsed() < Duration::from_millis(500));
    });
}

#[test]
fn unacked_messages_revive_to_the_retry_topic_once_with_reconsume_times_plus_one() {
    with_client("", async |c| {
        create_topic(c, "T2", 1).await;
        send_bodies(c, "T2", 0, &["a0", "a1", "a2"]).await;
        let first = pop(c, pop_req("T2", 0, 32, 2_000, 0)).await;
        expect_code(&first.resp, ResponseCode::Success);
        let pt = first.num("popTime");
        expect_code(&c.call(first.msgs[0].ack()).await, ResponseCode::Success);
        expect_code(&c.call(first.msgs[2].ack()).await, ResponseCode::Success);
        let got = pop_until(c, "T2", 1, 60_000, Duration::from_secs(15)).await;
        assert!(
            now_ms() >= pt + 2_000,
            "revived before its invisible time passed"
        );
        assert_eq!(got.len(), 1, "{got:?}");
        let r = &got[0];
        assert_eq!(r.body(), "a1");
        assert_eq!(r.msg.topic, "%RETRY%GID_POP_T2");
        assert_eq!(r.msg.queue_id, 0);
        assert_eq!(r.msg.reconsume_times, 1);
        assert_eq!(r.msg.properties["UNIQ_KEY"], "UK-a1");
        assert_eq!(r.msg.properties["1ST_POP_TIME"], pt.to_string());
        assert!(r.handle.starts_with("0 "), "{}", r.handle);
        expect_code(&c.call(r.ack()).await, ResponseCode::Success);
        // Acked everywhere: nothing more comes.
        let more = pop_until(c, "T2", 1, 60_000, Duration::from_secs(6)).await;
        assert!(more.is_empty(), "{more:?}");
    });
}

#[test]
fn batch_ack_and_changed_invisible_time_decide_what_revives() {
    with_client("", async |c| {
        create_topic(c, "T3", 1).await;
        send_bodies(c, "T3", 0, &["b0", "b1", "b2", "b3"]).await;
        let p = pop(c, pop_req("T3", 0, 32, 60_000, 0)).await;
        expect_code(&p.resp, ResponseCode::Success);
        let (pt, rq) = (p.num("popTime"), p.num("reviveQid"));
        // Offsets 0 and 1 in one batch ack: bit set {0, 1} = byte 0x03 = "Aw==".
        let body = format!(
            r#"{{"brokerName":"{BROKER}","acks":[{{"c":"{G}","t":"T3","r":"0","so":0,"q":0,"rq":{rq},"pt":{pt},"it":60000,"b":"Aw=="}}]}}"#
        );
        let req = RemotingCommand::request_code(RequestCode::BatchAckMessage)
            .with_body(body.into_bytes());
        expect_code(&c.call(req).await, ResponseCode::Success);
        let empty = RemotingCommand::request_code(RequestCode::BatchAckMessage);
        expect_code(&c.call(empty).await, ResponseCode::NoMessage);
        let junk =
            RemotingCommand::request_code(RequestCode::BatchAckMessage).with_body(&b"{nope"[..]);
        assert_ne!(c.call(junk).await.response_code(), ResponseCode::Success);
        // b2 becomes visible again in 1.5 s; b3 too, but is acked with its new handle.
        let before = now_ms();
        for m in &p.msgs[2..] {
            let r = c.call(cit_req(m, 1_500)).await;
            expect_code(&r, ResponseCode::Success);
            let new_pt: i64 = r.ext_fields["popTime"].parse().unwrap();
            assert!(new_pt >= before);
            assert_eq!(r.ext_fields["invisibleTime"], "1500");
            let new_rq = &r.ext_fields["reviveQid"];
            if m.body() == "b3" {
                let o = m.msg.queue_offset;
                let handle = format!("{o} {new_pt} 1500 {new_rq} 0 {BROKER} 0 {o}");
                expect_code(
                    &c.call(ack_req("T3", 0, &handle, o)).await,
                    ResponseCode::Success,
                );
            }
        }
        let bad = c
            .call(cit_req(&p.msgs[0], 1_000).with_ext("offset", "77"))
            .await;
        expect_code(&bad, ResponseCode::NoMessage);
        let got = pop_until(c, "T3", 2, 60_000, Duration::from_secs(10)).await;
        let bodies: Vec<String> = got.iter().map(Got::body).collect();
        assert_eq!(bodies, ["b2"], "only the changed, unacked message revives");
        assert!(now_ms() - before >= 1_500);
    });
}

#[test]
fn long_polling_peek_and_notification() {
    with_client("", async |c| {
        create_topic(c, "T4", 2).await;
        // A held POP of every queue is answered when a message arrives.
        let c2 = c.clone();
        let held = runtime::spawn(async move {
            let t = Instant::now();
            let p = pop(&c2, pop_req("T4", -1, 32, 60_000, 10_000)).await;
            (p, t.elapsed())
        });
        runtime::sleep(Duration::from_millis(500)).await;
        let sent = Instant::now();
        send_bodies(c, "T4", 1, &["late"]).await;
        let (p, waited) = held.await;
        expect_code(&p.resp, ResponseCode::Success);
        assert_eq!(p.bodies(), ["late"]);
        assert!(waited >= Duration::from_millis(500));
        assert!(
            sent.elapsed() < Duration::from_secs(3),
            "woken by the send, not the timeout"
        );
        assert_eq!(p.field("startOffsetInfo"), "0 1 0");
        // Nothing: held for pollTime, then POLLING_TIMEOUT.
        let t = Instant::now();
        let none = pop(c, pop_req("T4", -1, 32, 60_000, 1_000)).await;
        expect_code(&none.resp, ResponseCode::PollingTimeout);
        assert!(
            t.elapsed() >= Duration::from_millis(900),
            "{:?}",
            t.elapsed()
        );

        // PEEK shows messages without popping them.
        send_bodies(c, "T4", 0, &["p0", "p1"]).await;
        let peek = |q: i32| {
            RemotingCommand::request_code(RequestCode::PeekMessage)
                .with_ext("topic", "T4")
                .with_ext("queueId", q.to_string())
                .with_ext("maxMsgNums", "32")
                .with_ext("consumerGroup", G)
        };
        let r = c.call(peek(0)).await;
        expect_code(&r, ResponseCode::Success);
        assert_eq!(decode_pulled(&r.body, true).unwrap().len(), 2);
        assert_eq!(
            c.call(peek(0)).await.response_code(),
            ResponseCode::Success,
            "peek moves nothing"
        );
        // NOTIFICATION says there is something.
        let note = |poll: i64| {
            RemotingCommand::request_code(RequestCode::Notification)
                .with_ext("consumerGroup", G)
                .with_ext("topic", "T4")
                .with_ext("queueId", "-1")
                .with_ext("pollTime", poll.to_string())
                .with_ext("bornTime", now_ms().to_string())
        };
        let n = c.call(note(0)).await;
        expect_code(&n, ResponseCode::Success);
        assert_eq!(n.ext_fields["hasMsg"], "true");
        let p = pop(c, pop_req("T4", 0, 32, 60_000, 0)).await;
        assert_eq!(p.bodies(), ["p0", "p1"]);
        expect_code(&c.call(peek(0)).await, ResponseCode::PullNotFound);
        // Held NOTIFICATION: woken by a send; and false after its poll time.
        let t = Instant::now();
        let n = c.call(note(800)).await;
        assert_eq!(n.ext_fields["hasMsg"], "false");
        assert!(t.elapsed() >= Duration::from_millis(700));
        let c3 = c.clone();
        let held = runtime::spawn(async move { c3.call(note(10_000)).await });
        runtime::sleep(Duration::from_millis(300)).await;
        send_bodies(c, "T4", 0, &["n0"]).await;
        let n = held.await;
        assert_eq!(n.ext_fields["hasMsg"], "true");
    });
}

#[test]
fn orderly_pop_holds_one_batch_per_queue_until_acked_or_invisible() {
    with_client("", async |c| {
        create_topic(c, "T5", 1).await;
        send_bodies(c, "T5", 0, &["o0", "o1", "o2"]).await;
        let req = |attempt: &str, max: i32, it: i64| orderly(pop_req("T5", 0, max, it, 0), attempt);
        let a = pop(c, req("A", 2, 60_000)).await;
        expect_code(&a.resp, ResponseCode::Success);
        assert_eq!(a.bodies(), ["o0", "o1"]);
        assert_eq!(a.num("reviveQid"), 999);
        assert_eq!(a.field("orderCountInfo"), "0 qo0%0 0;0 qo0%1 0;0 0 0");
        // Another attempt finds the queue locked; the same attempt gets the same batch.
        expect_code(
            &pop(c, req("B", 2, 60_000)).await.resp,
            ResponseCode::PollingTimeout,
        );
        let again = pop(c, req("A", 2, 60_000)).await;
        assert_eq!(again.bodies(), ["o0", "o1"]);
        // Acking one of two keeps it locked; a stale handle is ignored.
        expect_code(&c.call(again.msgs[0].ack()).await, ResponseCode::Success);
        expect_code(
            &pop(c, req("B", 2, 60_000)).await.resp,
            ResponseCode::PollingTimeout,
        );
        expect_code(&c.call(again.msgs[1].ack()).await, ResponseCode::Success);
        let next = pop(c, req("B", 2, 2_500)).await;
        assert_eq!(next.bodies(), ["o2"]);
        // Not acked within its invisible time: popped again, counted once more.
        expect_code(
            &pop(c, req("C", 2, 1_000)).await.resp,
            ResponseCode::PollingTimeout,
        );
        runtime::sleep(Duration::from_millis(2_700)).await;
        let redo = pop(c, req("C", 2, 60_000)).await;
        assert_eq!(redo.bodies(), ["o2"]);
        assert_eq!(redo.field("orderCountInfo"), "0 qo0%2 1;0 0 1");
        // Changing the invisible time of a batch in flight extends the lock.
        let r = c.call(cit_req(&redo.msgs[0], 1_000)).await;
        expect_code(&r, ResponseCode::Success);
        assert_eq!(r.ext_fields["reviveQid"], "999");
        expect_code(&c.call(redo.msgs[0].ack()).await, ResponseCode::Success);
        send_bodies(c, "T5", 0, &["o3"]).await;
        assert_eq!(pop(c, req("D", 2, 60_000)).await.bodies(), ["o3"]);
    });
}

#[test]
fn a_message_never_acked_goes_to_the_dlq_after_max_reconsume_times() {
    with_client("", async |c| {
        create_topic(c, "T7", 1).await;
        let g = SubscriptionGroupConfig {
            group_name: G.into(),
            retry_max_times: 1,
            ..SubscriptionGroupConfig::default()
        };
        create_group(c, &g).await;
        send_bodies(c, "T7", 0, &["d0"]).await;
        let first = pop_until(c, "T7", 1, 1_000, Duration::from_secs(5)).await;
        assert_eq!(first.len(), 1);
        let retried = pop_until(c, "T7", 1, 1_000, Duration::from_secs(10)).await;
        assert_eq!(retried.len(), 1);
        assert_eq!(retried[0].msg.reconsume_times, 1);
        // Not acked again: reconsumeTimes 2 passes retryMaxTimes 1.
        let mut body = Vec::new();
        // Not asserted here: the DLQ's contents are checked below, timed out or not.
        let _ = tern_testkit::poll_until_async(Duration::from_secs(15), async || {
            let r = c
                .call(pull_req("PULL_DLQ", "%DLQ%GID_POP", 0, 0, Some("*")))
                .await;
            let found = r.response_code() == ResponseCode::Success;
            body = r.body;
            found
        })
        .await;
        let dlq = decode_pulled(&body, true).unwrap();
        assert_eq!(dlq.len(), 1);
        assert_eq!(dlq[0].body, b"d0");
        assert_eq!(dlq[0].reconsume_times, 2);
        assert!(
            pop_until(c, "T7", 1, 60_000, Duration::from_secs(3))
                .await
                .is_empty()
        );
    });
}

#[test]
fn query_assignment_balances_pull_and_hands_pop_groups_every_queue() {
    let (_dir, b) = start("");
    run(async {
        let c1 = Client::connect(&b.addr).await;
        let c2 = Client::connect(&b.addr).await;
        create_topic(&c1, "T9", 4).await;
        for (c, id) in [(&c1, "C1"), (&c2, "C2")] {
            expect_code(
                &c.call(heartbeat(id, G, "T9", "*", vec![])).await,
                ResponseCode::Success,
            );
        }
        let query = |client: &str, strategy: &str| {
            let body = format!(
                r#"{{"topic":"T9","consumerGroup":"{G}","clientId":"{client}","strategyName":"{strategy}","messageModel":"CLUSTERING"}}"#
            );
            RemotingCommand::request_code(RequestCode::QueryAssignment).with_body(body.into_bytes())
        };
        let assigned = |r: &RemotingCommand| -> Vec<(i32, String)> {
            expect_code(r, ResponseCode::Success);
            let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            let mut out: Vec<(i32, String)> = v["messageQueueAssignments"]
                .as_array()
                .unwrap_or_else(|| panic!("no assignments: {v}"))
                .iter()
                .map(|a| {
                    assert_eq!(a["messageQueue"]["brokerName"], BROKER);
                    (
                        a["messageQueue"]["queueId"].as_i64().unwrap() as i32,
                        a["mode"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            out.sort();
            out
        };
        // No mode set: PULL, AVG split between the two clients.
        let pull = |ids: &[i32]| {
            ids.iter()
                .map(|i| (*i, "PULL".to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(assigned(&c1.call(query("C1", "AVG")).await), pull(&[0, 1]));
        assert_eq!(assigned(&c1.call(query("C2", "AVG")).await), pull(&[2, 3]));
        assert_eq!(
            assigned(&c1.call(query("C2", "AVG_BY_CIRCLE")).await),
            pull(&[1, 3])
        );
        // An unknown strategy: null, the client keeps what it has.
        let r = c1.call(query("C1", "CONSISTENT_HASH")).await;
        expect_code(&r, ResponseCode::Success);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert!(
            v.get("messageQueueAssignments").is_none_or(|a| a.is_null()),
            "{v}"
        );
        // POP with no share: each client gets the broker once, queue id -1.
        let set =
            format!(r#"{{"topic":"T9","consumerGroup":"{G}","mode":"POP","popShareQueueNum":0}}"#);
        let req = RemotingCommand::request_code(RequestCode::SetMessageRequestMode)
            .with_body(set.into_bytes());
        expect_code(&c1.call(req).await, ResponseCode::Success);
        for id in ["C1", "C2"] {
            assert_eq!(
                assigned(&c1.call(query(id, "AVG")).await),
                [(-1, "POP".to_owned())]
            );
        }
        let junk =
            RemotingCommand::request_code(RequestCode::QueryAssignment).with_body(&b"nope"[..]);
        assert_ne!(c1.call(junk).await.response_code(), ResponseCode::Success);
    });
}

#[test]
fn unacked_messages_revive_while_producers_keep_the_log_growing() {
    with_broker("", async |b, c| {
        create_topic(c, "K5", 1).await;
        create_topic(c, "BUSY", 4).await;
        send_bodies(c, "K5", 0, &["v0"]).await;
        let first = pop_until(c, "K5", 1, 1_500, Duration::from_secs(5)).await;
        assert_eq!(first.len(), 1);
        // Senders that never let reput reach the log's end for long.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut senders = Vec::new();
        for q in 0..2 {
            let (addr, stop) = (b.addr.clone(), stop.clone());
            senders.push(runtime::spawn(async move {
                let c = Client::connect(&addr).await;
                let batch: Vec<_> = (0..32)
                    .map(|i| msg("BUSY", format!("x{i}").as_bytes(), &[]))
                    .collect();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    send_ok(&c, send_batch(&batch, q)).await;
                }
            }));
        }
        let got = pop_until(c, "K5", 1, 60_000, Duration::from_secs(12)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for s in senders {
            s.await;
        }
        assert_eq!(got.len(), 1, "not revived while the log kept growing");
        assert_eq!(got[0].msg.reconsume_times, 1);
    });
}
