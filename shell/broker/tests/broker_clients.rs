//! The real `tern-broker --standalone` process, driven over sockets as a Java-style client:
//! consumer offsets and queue bounds (also across a clean restart), group membership with
//! NOTIFY_CONSUMER_IDS_CHANGED and queue locks, and clear answers to bad requests.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tern_shell::body::{
    GetConsumerListByGroupResponseBody, LockBatchRequestBody, LockBatchResponseBody, MessageQueue,
    from_json, to_json,
};
use tern_shell::headers::{
    ConsumerGroupRequestHeader, GetEarliestMsgStoretimeResponseHeader,
    QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader, pull_sys_flag,
};
use tern_shell::message::Message;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

#[test]
fn consumer_offsets_and_queue_bounds_answer_and_survive_a_clean_restart() {
    let (dir, mut b) = start("");
    let topic = "Offsets";
    let stamps = b.with_client(async |c| {
        for i in 0..6 {
            send_ok(c, send_v1(&msg(topic, format!("o{i}").as_bytes(), &[]), 2)).await;
            runtime::sleep(Duration::from_millis(15)).await;
        }
        let got = pull_all(c, topic, 2, 0).await;
        let stamps: Vec<i64> = got.iter().map(|m| m.store_timestamp).collect();
        assert_eq!(stamps.len(), 6);

        let query = |group: &str, q: i32| {
            RemotingCommand::request(
                RequestCode::QueryConsumerOffset,
                &QueryConsumerOffsetRequestHeader {
                    consumer_group: group.into(),
                    topic: topic.into(),
                    queue_id: q,
                    set_zero_if_not_found: None,
                },
            )
        };
        // A new group on a queue that starts at 0: 0.
        assert_eq!(offset_of(&c.call(query("G_NEW", 2)).await), 0);
        commit(c, "G_OFF", topic, 2, 4).await;
        assert_eq!(offset_of(&c.call(query("G_OFF", 2)).await), 4);
        // Java sends the update oneway: no answer, still stored.
        let oneway = commit_req("G_ONEWAY", topic, 2, 5);
        c.conn.oneway(oneway).await.unwrap();
        tern_testkit::wait_until(
            "oneway offset update not applied",
            Duration::from_secs(2),
            async || offset_of(&c.call(query("G_ONEWAY", 2)).await) == 5,
        )
        .await;
        // A pull with COMMIT_OFFSET stores the offset too.
        let mut p = pull_with(
            pull_req("G_PULLC", topic, 2, 3, Some("*")),
            1,
            pull_sys_flag::COMMIT_OFFSET,
            0,
        );
        p.ext_fields.insert("commitOffset", "3");
        expect_code(&c.call(p).await, ResponseCode::Success);
        assert_eq!(offset_of(&c.call(query("G_PULLC", 2)).await), 3);

        assert_eq!(offset_of(&c.call(max_offset_req(topic, 2)).await), 6);
        assert_eq!(
            offset_of(
                &c.call(topic_queue(RequestCode::GetMinOffset, topic, 2))
                    .await
            ),
            0
        );
        assert_eq!(offset_of(&c.call(max_offset_req(topic, 0)).await), 0);

        let search = |ts: i64, upper: bool| {
            RemotingCommand::request(
                RequestCode::SearchOffsetByTimestamp,
                &SearchOffsetRequestHeader {
                    topic: topic.into(),
                    queue_id: 2,
                    timestamp: ts,
                    boundary_type: upper.then(|| "upper".into()),
                },
            )
        };
        for k in 0..6 {
            let lower = stamps.iter().position(|&t| t >= stamps[k]).unwrap() as i64;
            let upper = stamps.iter().rposition(|&t| t <= stamps[k]).unwrap() as i64;
            assert_eq!(offset_of(&c.call(search(stamps[k], false)).await), lower);
            assert_eq!(offset_of(&c.call(search(stamps[k], true)).await), upper);
        }
        assert_eq!(
            offset_of(&c.call(search(stamps[0] - 10_000, false)).await),
            0
        );

        let resp = c
            .call(topic_queue(RequestCode::GetEarliestMsgStoretime, topic, 2))
            .await;
        expect_code(&resp, ResponseCode::Success);
        let h: GetEarliestMsgStoretimeResponseHeader = resp.decode_header().unwrap();
        assert_eq!(h.timestamp, stamps[0]);
        // An empty queue: -1, as Java's store answers.
        let resp = c
            .call(topic_queue(RequestCode::GetEarliestMsgStoretime, topic, 0))
            .await;
        expect_code(&resp, ResponseCode::Success);
        let h: GetEarliestMsgStoretimeResponseHeader = resp.decode_header().unwrap();
        assert_eq!(h.timestamp, -1);
        stamps
    });

    // Stop while a consumer is registered and a pull is held: prompt, clean exit.
    let (registered_tx, registered) = std::sync::mpsc::channel();
    let addr = b.addr.clone();
    let held = std::thread::spawn(move || {
        run(async move {
            let c = Client::connect(&addr).await;
            let hb = heartbeat("127.0.0.1@stopper", "G_STOP", topic, "*", vec![]);
            expect_code(&c.call(hb).await, ResponseCode::Success);
            registered_tx.send(()).unwrap();
            let pull = pull_req("G_STOP", topic, 2, 6, None);
            let pull = pull_with(pull, 32, pull_sys_flag::SUSPEND, 20_000);
            c.conn.request(pull, RPC_TIMEOUT * 3).await
        })
    });
    registered.recv().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let status = b.stop();
    assert!(status.success(), "SIGTERM exit: {status}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        t0.elapsed()
    );
    assert!(
        !dir.path().join("data/store/abort").exists(),
        "clean stop removes abort"
    );
    if let Ok(resp) = held.join().unwrap() {
        expect_code(&resp, ResponseCode::PullNotFound);
    }
    let mut b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        let q = RemotingCommand::request(
            RequestCode::QueryConsumerOffset,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: "G_OFF".into(),
                topic: topic.into(),
                queue_id: 2,
                set_zero_if_not_found: None,
            },
        );
        assert_eq!(offset_of(&c.call(q).await), 4, "committed offset survived");
        assert_eq!(offset_of(&c.call(max_offset_req(topic, 2)).await), 6);
        let got = pull_all(c, topic, 2, 0).await;
        assert_eq!(
            got.iter().map(|m| m.store_timestamp).collect::<Vec<_>>(),
            stamps
        );
    });
    assert!(b.stop().success());
}

#[test]
fn group_members_are_listed_notified_of_changes_and_lock_queues_exclusively() {
    let (_dir, b) = start("");
    run(async {
        let group = "G_MEMBERS";
        let topic = "Members";
        let rec_a = std::sync::Arc::new(Recorder::default());
        let a = Client::connect_with(&b.addr, rec_a.clone()).await;
        let bb = Client::connect(&b.addr).await;
        create_topic(&a, topic, 4).await;
        let wait = Duration::from_secs(3);
        let notify = RequestCode::NotifyConsumerIdsChanged;

        expect_code(
            &a.call(heartbeat("10.0.0.1@A", group, topic, "*", vec![]))
                .await,
            ResponseCode::Success,
        );
        let n0 = rec_a.wait_for(notify, 1, wait).await;
        expect_code(
            &bb.call(heartbeat("10.0.0.2@B", group, topic, "*", vec![]))
                .await,
            ResponseCode::Success,
        );
        assert!(
            rec_a.wait_for(notify, n0 + 1, wait).await > n0,
            "A told when B joined"
        );
        {
            let reqs = rec_a.requests.lock().unwrap();
            let last = reqs.iter().rev().find(|r| r.code == notify.raw()).unwrap();
            assert_eq!(last.ext_fields.get("consumerGroup"), Some(group));
        }
        // A heartbeat that changes nothing does not notify again.
        let n1 = rec_a.count(notify);
        expect_code(
            &a.call(heartbeat("10.0.0.1@A", group, topic, "*", vec![]))
                .await,
            ResponseCode::Success,
        );

        let list = RemotingCommand::request(
            RequestCode::GetConsumerListByGroup,
            &ConsumerGroupRequestHeader {
                consumer_group: group.into(),
            },
        );
        let resp = a.call(list.clone()).await;
        expect_code(&resp, ResponseCode::Success);
        let ids: GetConsumerListByGroupResponseBody = from_json(&resp.body).unwrap();
        assert_eq!(ids.consumer_id_list, ["10.0.0.1@A", "10.0.0.2@B"]);

        // Locks: one owner per queue.
        let mq = |q: i32| MessageQueue {
            topic: topic.into(),
            broker_name: "broker-a".into(),
            queue_id: q,
        };
        let lock_body = |client: &str, qs: &[i32]| LockBatchRequestBody {
            consumer_group: group.into(),
            client_id: client.into(),
            only_this_broker: false,
            mq_set: qs.iter().map(|&q| mq(q)).collect(),
        };
        let lock = |client: &str, qs: &[i32]| {
            RemotingCommand::request_code(RequestCode::LockBatchMq)
                .with_body(to_json(&lock_body(client, qs)))
        };
        let locked = |resp: RemotingCommand| -> Vec<i32> {
            expect_code(&resp, ResponseCode::Success);
            let r: LockBatchResponseBody = from_json(&resp.body).unwrap();
            let mut q: Vec<i32> = r.lock_ok_mq_set.iter().map(|m| m.queue_id).collect();
            q.sort();
            q
        };
        assert_eq!(locked(a.call(lock("10.0.0.1@A", &[0, 1])).await), [0, 1]);
        assert_eq!(
            locked(bb.call(lock("10.0.0.2@B", &[1, 2])).await),
            [2],
            "queue 1 is A's"
        );
        assert_eq!(
            locked(a.call(lock("10.0.0.1@A", &[0, 1])).await),
            [0, 1],
            "renewal"
        );
        let unlock = RemotingCommand::request_code(RequestCode::UnlockBatchMq)
            .with_body(to_json(&lock_body("10.0.0.1@A", &[1])));
        expect_code(&a.call(unlock).await, ResponseCode::Success);
        assert_eq!(
            locked(bb.call(lock("10.0.0.2@B", &[1])).await),
            [1],
            "freed by unlock"
        );
        assert_eq!(
            locked(a.call(lock("10.0.0.1@A", &[1])).await),
            Vec::<i32>::new()
        );

        // B's connection closes: A is told, and the list shrinks.
        assert_eq!(rec_a.count(notify), n1);
        bb.conn.close();
        bb.conn.closed().await;
        assert!(
            rec_a.wait_for(notify, n1 + 1, wait).await > n1,
            "A told when B left"
        );
        let resp = a.call(list).await;
        let ids: GetConsumerListByGroupResponseBody = from_json(&resp.body).unwrap();
        assert_eq!(ids.consumer_id_list, ["10.0.0.1@A"]);
    });
}

#[test]
fn bad_requests_get_clear_errors_and_nothing_stored_is_lost() {
    with_broker("", async |b, c| {
        let topic = "Errors";
        let good: Vec<Message> = (0..3)
            .map(|i| msg(topic, format!("good{i}").as_bytes(), &[("TAGS", "T")]))
            .collect();
        for m in &good[..2] {
            send_ok(c, send_v2(m, 0)).await;
        }
        let remark = |r: &RemotingCommand| r.remark.clone().unwrap_or_default();

        // Illegal topic characters.
        let resp = c.call(send_v1(&msg("bad topic!", b"x", &[]), 0)).await;
        expect_code(&resp, ResponseCode::SystemError);
        assert!(remark(&resp).contains("illegal characters"), "{resp:?}");

        // The broker's own system topics: 16 NO_PERMISSION.
        for system in [
            "SCHEDULE_TOPIC_XXXX",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        ] {
            let resp = c.call(send_v1(&msg(system, b"x", &[]), 0)).await;
            expect_code(&resp, ResponseCode::NoPermission);
            assert!(remark(&resp).contains("forbidden"), "{resp:?}");
        }

        // A 5 MiB body: 13 MESSAGE_ILLEGAL.
        let big = msg(topic, &vec![b'z'; 5 * 1024 * 1024], &[]);
        let resp = c.call(send_v1(&big, 0)).await;
        expect_code(&resp, ResponseCode::MessageIllegal);
        assert!(remark(&resp).contains("exceeds the maximum"), "{resp:?}");

        // An unknown request code: 3, naming it.
        let mut unknown = RemotingCommand::request_code(RequestCode::GetMaxOffset);
        unknown.code = 9999;
        let resp = c.call(unknown).await;
        expect_code(&resp, ResponseCode::RequestCodeNotSupported);
        assert!(remark(&resp).contains("9999"), "{resp:?}");

        // A batch to a retry topic.
        let retry = [
            msg("%RETRY%G_ERR", b"r1", &[]),
            msg("%RETRY%G_ERR", b"r2", &[]),
        ];
        let resp = c.call(send_batch(&retry, 0)).await;
        expect_code(&resp, ResponseCode::MessageIllegal);
        assert!(remark(&resp).contains("retry topic"), "{resp:?}");

        // A required header field missing: the remark names it.
        let mut req = send_v1(&good[2], 0);
        req.ext_fields.remove("bornTimestamp");
        let resp = c.call(req).await;
        expect_code(&resp, ResponseCode::SystemError);
        assert!(remark(&resp).contains("bornTimestamp"), "{resp:?}");
        let mut pull = pull_req("G_ERR", topic, 0, 0, Some("*"));
        pull.ext_fields.remove("queueOffset");
        let resp = c.call(pull).await;
        expect_code(&resp, ResponseCode::SystemError);
        assert!(remark(&resp).contains("queueOffset"), "{resp:?}");

        // Still serving, and nothing lost.
        send_ok(c, send_v1(&good[2], 0)).await;
        let got = pull_all(c, topic, 0, 0).await;
        assert_eq!(got.len(), 3, "exactly the good messages");
        for (g, m) in got.iter().zip(&good) {
            check_record(g, m, 0, b, c);
        }
        assert_eq!(
            offset_of(&c.call(max_offset_req("%RETRY%G_ERR", 0)).await),
            0
        );
    });
}

/// A reset makes the group's clients drop their queues and wait for the pull in flight on
/// each (the C++ client spins until it returns): the broker answers those held pulls
/// soon after telling the clients, instead of holding them for the rest of their 15 s.
#[test]
fn a_reset_answers_the_groups_held_pulls_soon_after_telling_its_clients() {
    let (_dir, b) = start("");
    run(async {
        let (group, topic) = ("G_RESET_HELD", "ResetHeld");
        let rec = std::sync::Arc::new(Recorder::default());
        let a = Client::connect_with(&b.addr, rec.clone()).await;
        create_topic(&a, topic, 1).await;
        expect_code(
            &a.call(heartbeat("10.0.0.1@R", group, topic, "*", vec![]))
                .await,
            ResponseCode::Success,
        );
        expect_code(
            &a.call(send_v2(&msg(topic, b"one", &[]), 0)).await,
            ResponseCode::Success,
        );
        let pull = pull_with(
            pull_req(group, topic, 0, 1, Some("*")),
            32,
            pull_sys_flag::SUSPEND,
            15_000,
        );
        let puller = a.clone();
        let held = runtime::spawn(async move {
            let asked = Instant::now();
            (puller.call(pull).await, asked.elapsed())
        });
        runtime::sleep(Duration::from_millis(300)).await;
        let admin = Client::connect(&b.addr).await;
        let reset = tern_shell::headers::ResetOffsetRequestHeader {
            topic: topic.into(),
            group: group.into(),
            timestamp: 0,
            is_force: true,
            queue_id: None,
            offset: None,
        };
        expect_code(
            &admin
                .call(RemotingCommand::request(
                    RequestCode::InvokeBrokerToResetOffset,
                    &reset,
                ))
                .await,
            ResponseCode::Success,
        );
        let told = rec
            .wait_for(
                RequestCode::ResetConsumerClientOffset,
                1,
                Duration::from_secs(3),
            )
            .await;
        assert_eq!(told, 1, "the member is told of the reset once");
        let (resp, took) = runtime::timeout(Duration::from_secs(6), held)
            .await
            .expect("the held pull is answered well before its 15 s");
        expect_code(&resp, ResponseCode::PullNotFound);
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
    });
}
