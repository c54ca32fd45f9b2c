//! The real `tern-broker --standalone` process, driven over sockets as a Java-style client:
//! routes, send → pull round trips (every field, msgIds, lookups by id and key), tag
//! filtering, pull status codes and long polling.
//!
//! Offsets, clients and errors are in `broker_clients.rs`; durability, config and a
//! name server that is down in `broker_process.rs`. The harness is `common/mod.rs`.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tern_engine::hash::java_string_hash;
use tern_shell::body::{TopicRouteData, from_json};
use tern_shell::headers::{ViewMessageRequestHeader, pull_sys_flag};
use tern_shell::message::{Message, decode_offset_msg_id, decode_pulled};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

#[test]
fn route_lists_broker_for_tbw102_and_new_topic_at_once() {
    let (_dir, b) = start("");
    run(async {
        let ns = Client::connect(b.namesrv.as_deref().unwrap()).await;
        // Registration runs in the background at start: allow it a moment.
        let mut resp = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(5), async || {
                let r = ns.call(route_req("TBW102")).await;
                let routed = r.response_code() == ResponseCode::Success;
                resp = Some(r);
                routed
            })
            .await,
            "TBW102 has no route: {:?}",
            resp.unwrap().remark
        );
        let route = from_json::<TopicRouteData>(&resp.unwrap().body).unwrap();
        assert_eq!(route.broker_datas.len(), 1, "{route:?}");
        assert_eq!(route.broker_datas[0].master_addr(), Some(b.addr.as_str()));
        assert_eq!(route.broker_datas[0].cluster, "DefaultCluster");
        let qd = &route.queue_datas[0];
        assert_eq!(qd.broker_name, route.broker_datas[0].broker_name);
        assert_eq!((qd.write_queue_nums, qd.perm & 6), (8, 6));

        // No route for a topic nobody created.
        expect_code(
            &ns.call(route_req("RouteNew")).await,
            ResponseCode::TopicNotExist,
        );
        let broker = Client::connect(&b.addr).await;
        create_topic(&broker, "RouteNew", 3).await;
        // The broker registered before answering: the route is there now, no waiting.
        let resp = ns.call(route_req("RouteNew")).await;
        expect_code(&resp, ResponseCode::Success);
        let route: TopicRouteData = from_json(&resp.body).unwrap();
        assert_eq!(route.broker_datas[0].master_addr(), Some(b.addr.as_str()));
        assert_eq!(route.queue_datas[0].read_queue_nums, 3);
        assert_eq!(route.queue_datas[0].write_queue_nums, 3);
    });
}

#[test]
fn sent_messages_pull_back_intact_and_are_found_by_id_and_key() {
    with_broker("", async |b, c| {
        let topic = "RoundTrip";
        let mk = |i: usize| {
            let mut m = msg(
                topic,
                format!("body-{i}-{}", "x".repeat(i * 37)).as_bytes(),
                &[
                    ("TAGS", if i % 2 == 0 { "TagA" } else { "TagB" }),
                    ("KEYS", &format!("key-{i} shared")),
                    ("UNIQ_KEY", &format!("UNIQ{i:028}")),
                    ("userProp", &format!("v{i}")),
                ],
            );
            m.flag = i as i32 * 3;
            m
        };
        let sent: Vec<Message> = (0..10).map(mk).collect();
        // (msgId, queueOffset) per message, in send order.
        let mut acks = Vec::new();
        for m in &sent[0..3] {
            let h = send_ok(c, send_v1(m, 1)).await;
            acks.push((h.msg_id, h.queue_offset, h.queue_id));
        }
        for m in &sent[3..6] {
            let h = send_ok(c, send_v2(m, 1)).await;
            acks.push((h.msg_id, h.queue_offset, h.queue_id));
        }
        let h = send_ok(c, send_batch(&sent[6..10], 1)).await;
        let ids: Vec<&str> = h.msg_id.split(',').collect();
        assert_eq!(ids.len(), 4, "batch msgIds: {}", h.msg_id);
        for (i, id) in ids.iter().enumerate() {
            acks.push((id.to_string(), h.queue_offset + i as i64, h.queue_id));
        }

        let got = pull_all(c, topic, 1, 0).await;
        assert_eq!(got.len(), sent.len(), "exactly the records sent");
        for (i, (g, m)) in got.iter().zip(&sent).enumerate() {
            check_record(g, m, 1, b, c);
            assert_eq!(g.queue_offset, i as i64, "queue offsets are consecutive");
            let (id, qoff, qid) = &acks[i];
            assert_eq!((*qoff, *qid), (g.queue_offset, 1));
            let decoded = decode_offset_msg_id(id).unwrap();
            assert_eq!(decoded.store_host.to_string(), b.addr);
            assert_eq!(decoded.commit_log_offset, g.commit_log_offset);
            assert_eq!(id, &g.offset_msg_id);
            // VIEW_MESSAGE_BY_ID with the decoded offset: the same record.
            let view = c
                .call(RemotingCommand::request(
                    RequestCode::ViewMessageById,
                    &ViewMessageRequestHeader {
                        offset: decoded.commit_log_offset,
                        topic: None,
                    },
                ))
                .await;
            expect_code(&view, ResponseCode::Success);
            assert_eq!(decode_pulled(&view.body, true).unwrap(), vec![g.clone()]);
        }
        // Other queues got nothing.
        assert!(pull_all(c, topic, 0, 0).await.is_empty());

        // QUERY_MESSAGE by key (the index follows the log asynchronously: allow a moment).
        let query = |key: &str| query_req(topic, key, 32);
        let mut resp = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(3), async || {
                let r = c.call(query("key-7")).await;
                let found = r.response_code() == ResponseCode::Success;
                resp = Some(r);
                found
            })
            .await,
            "key-7 not found: {:?}",
            resp.unwrap().remark
        );
        let found = decode_pulled(&resp.unwrap().body, true).unwrap();
        assert_eq!(found, vec![got[7].clone()]);
        let resp = c.call(query("shared")).await;
        expect_code(&resp, ResponseCode::Success);
        let mut shared = decode_pulled(&resp.body, true).unwrap();
        shared.sort_by_key(|m| m.queue_offset);
        assert_eq!(shared, got);
        expect_code(
            &c.call(query("no-such-key")).await,
            ResponseCode::QueryNotFound,
        );
        // By UNIQ_KEY, as Java's viewMessage(topic, msgId) asks: single and batch sends.
        for i in [2, 8] {
            let mut q = query(&format!("UNIQ{i:028}"));
            q.ext_fields.insert("_UNIQUE_KEY_QUERY", "true");
            let resp = c.call(q).await;
            expect_code(&resp, ResponseCode::Success);
            assert_eq!(
                decode_pulled(&resp.body, true).unwrap(),
                vec![got[i].clone()]
            );
        }
    });
}

#[test]
fn heartbeat_tag_subscription_filters_pulls_and_skips_the_rest() {
    with_client("", async |c| {
        let topic = "Tagged";
        let tags = [
            "TagC", "TagA", "TagC", "TagC", "TagB", "TagC", "TagA", "TagC", "TagC",
        ];
        for (i, t) in tags.iter().enumerate() {
            send_ok(
                c,
                send_v1(&msg(topic, format!("m{i}").as_bytes(), &[("TAGS", t)]), 0),
            )
            .await;
        }
        // As the C++ client sends it: spaces around `||`, codeSet zeros.
        let hb = heartbeat(
            "127.0.0.1@tagtest",
            "G_TAG",
            topic,
            "TagA || TagB",
            vec![0, 0],
        );
        expect_code(&c.call(hb).await, ResponseCode::Success);
        let pull =
            |offset: i64, max: i32| pull_with(pull_req("G_TAG", topic, 0, offset, None), max, 0, 0);

        let resp = c.call(pull(0, 32)).await;
        expect_code(&resp, ResponseCode::Success);
        let got = decode_pulled(&resp.body, true).unwrap();
        let got_tags: Vec<&str> = got.iter().map(|m| m.tags().unwrap()).collect();
        assert_eq!(got_tags, ["TagA", "TagB", "TagA"]);
        assert_eq!(
            got.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
            [1, 4, 6]
        );
        assert_eq!(
            pull_offsets(&resp),
            (9, 0, 9),
            "next skips the trailing TagC"
        );

        // One at a time: each answer's next offset skips the filtered messages.
        let resp = c.call(pull(0, 1)).await;
        expect_code(&resp, ResponseCode::Success);
        assert_eq!(decode_pulled(&resp.body, false).unwrap()[0].queue_offset, 1);
        assert_eq!(pull_offsets(&resp).0, 2);
        let resp = c.call(pull(2, 1)).await;
        expect_code(&resp, ResponseCode::Success);
        assert_eq!(decode_pulled(&resp.body, false).unwrap()[0].queue_offset, 4);
        assert_eq!(pull_offsets(&resp).0, 5);
        // Only filtered messages left: nothing returned, next moves to the end.
        let resp = c.call(pull(7, 32)).await;
        assert_ne!(resp.response_code(), ResponseCode::Success);
        assert!(resp.body.is_empty());
        assert_eq!(pull_offsets(&resp).0, 9, "{:?}", resp.response_code());

        // Java-computed codes work the same.
        let hb = heartbeat(
            "127.0.0.1@tagtest",
            "G_TAG2",
            topic,
            "TagB",
            vec![java_string_hash("TagB")],
        );
        expect_code(&c.call(hb).await, ResponseCode::Success);
        let resp = c.call(pull_req("G_TAG2", topic, 0, 0, None)).await;
        let got = decode_pulled(&resp.body, false).unwrap();
        assert_eq!(got.iter().map(|m| m.queue_offset).collect::<Vec<_>>(), [4]);

        // No heartbeat, no SUBSCRIPTION flag: 24 SUBSCRIPTION_NOT_EXIST.
        let resp = c.call(pull_req("G_NONE", topic, 0, 0, None)).await;
        expect_code(&resp, ResponseCode::SubscriptionNotExist);
    });
}

#[test]
fn pull_answers_19_at_max_and_21_out_of_range_with_bounds() {
    with_client("", async |c| {
        let topic = "PullCodes";
        create_topic(c, topic, 2).await;
        let pull = |q: i32, offset: i64| pull_req("G_CODES", topic, q, offset, Some("*"));
        // An empty queue: 19 at 0, 21 anywhere else; bounds 0/0.
        let resp = c.call(pull(1, 0)).await;
        expect_code(&resp, ResponseCode::PullNotFound);
        assert_eq!(pull_offsets(&resp), (0, 0, 0));
        let resp = c.call(pull(1, 5)).await;
        expect_code(&resp, ResponseCode::PullOffsetMoved);
        assert_eq!(pull_offsets(&resp), (0, 0, 0));

        for i in 0..5 {
            send_ok(c, send_v1(&msg(topic, format!("p{i}").as_bytes(), &[]), 0)).await;
        }
        let resp = c.call(pull(0, 2)).await;
        expect_code(&resp, ResponseCode::Success);
        assert_eq!(pull_offsets(&resp), (5, 0, 5));
        let got = decode_pulled(&resp.body, true).unwrap();
        assert_eq!(
            got.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
            [2, 3, 4]
        );
        // At max: 19, next stays, bounds right.
        let resp = c.call(pull(0, 5)).await;
        expect_code(&resp, ResponseCode::PullNotFound);
        assert_eq!(pull_offsets(&resp), (5, 0, 5));
        // Past max: 21 with next corrected to the minimum (0 here).
        let resp = c.call(pull(0, 9)).await;
        expect_code(&resp, ResponseCode::PullOffsetMoved);
        assert_eq!(pull_offsets(&resp), (0, 0, 5));
        // Below min: 21 with next = min.
        let resp = c.call(pull(0, -1)).await;
        expect_code(&resp, ResponseCode::PullOffsetMoved);
        assert_eq!(pull_offsets(&resp), (0, 0, 5));
        // Queue id beyond the topic's: an error, not a hang.
        let resp = c.call(pull(7, 0)).await;
        assert_eq!(resp.response_code(), ResponseCode::SystemError);
        assert!(resp.remark.unwrap_or_default().contains("queueId[7]"));
    });
}

#[test]
fn long_poll_is_answered_on_arrival_and_with_19_after_timeout() {
    with_broker("", async |b, c| {
        let topic = "LongPoll";
        send_ok(c, send_v1(&msg(topic, b"first", &[]), 0)).await;
        let suspend = pull_sys_flag::SUSPEND;

        // Held at max offset; answered as soon as a message arrives.
        let puller = Client::connect(&b.addr).await;
        let t0 = Instant::now();
        let held = runtime::spawn(async move {
            let r = puller
                .call(pull_with(
                    pull_req("G_LP", "LongPoll", 0, 1, Some("*")),
                    32,
                    suspend,
                    10_000,
                ))
                .await;
            (r, Instant::now())
        });
        runtime::sleep(Duration::from_millis(400)).await;
        send_ok(c, send_v1(&msg(topic, b"second", &[]), 0)).await;
        let sent_at = Instant::now();
        let (resp, answered_at) = held.await;
        expect_code(&resp, ResponseCode::Success);
        let got = decode_pulled(&resp.body, true).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, b"second");
        assert!(
            answered_at.duration_since(t0) >= Duration::from_millis(350),
            "was held"
        );
        let lag = answered_at.saturating_duration_since(sent_at);
        assert!(
            lag < Duration::from_secs(3),
            "answered {lag:?} after the send"
        );
        assert_eq!(pull_offsets(&resp), (2, 0, 2));

        // Nothing comes: 19 after the client's suspend timeout.
        let t0 = Instant::now();
        let resp = c
            .call(pull_with(
                pull_req("G_LP", topic, 0, 2, Some("*")),
                32,
                suspend,
                800,
            ))
            .await;
        let waited = t0.elapsed();
        expect_code(&resp, ResponseCode::PullNotFound);
        assert_eq!(pull_offsets(&resp), (2, 0, 2));
        assert!(
            waited >= Duration::from_millis(700) && waited < Duration::from_secs(4),
            "held {waited:?} for an 800 ms suspend"
        );
        // A queue never written, held at offset 0: answered when its first message comes.
        let puller = Client::connect(&b.addr).await;
        let held = runtime::spawn(async move {
            puller
                .call(pull_with(
                    pull_req("G_LP", "LongPoll", 3, 0, Some("*")),
                    32,
                    suspend,
                    10_000,
                ))
                .await
        });
        runtime::sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        send_ok(c, send_v1(&msg(topic, b"q3", &[]), 3)).await;
        let resp = held.await;
        expect_code(&resp, ResponseCode::Success);
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
        assert_eq!(decode_pulled(&resp.body, true).unwrap()[0].body, b"q3");

        // Without SUSPEND: answered at once, whatever the suspend timeout says.
        let t0 = Instant::now();
        let resp = c
            .call(pull_with(
                pull_req("G_LP", topic, 0, 2, Some("*")),
                32,
                0,
                8_000,
            ))
            .await;
        expect_code(&resp, ResponseCode::PullNotFound);
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    });
}

/// Queries by key read the published index without the store's lock while eight senders
/// keep rewriting the very slot they read (one hot key in 16 slots) and the index files
/// roll under them (300 messages a file). Each answer is newest first with no duplicate,
/// and holds every message acknowledged before it was asked, down to the oldest it
/// returns (all of them while it returns fewer than 64); an older unique key is found too.
#[test]
fn a_hot_key_queried_while_it_is_sent_misses_nothing_acknowledged() {
    let (_dir, b) = start("maxHashSlotNum=16\nmaxIndexNum=600\n");
    run(async {
        let topic = "HotKey";
        const SENDERS: usize = 8;
        const SENDS: usize = 400;
        let c = Client::connect(&b.addr).await;
        create_topic(&c, topic, 1).await;
        // Queries wanted while the sends run: the senders wait for them, so a loaded
        // machine cannot finish the sends before the queries had their turn.
        const QUERIES: usize = 20;
        // Queue offsets acknowledged, and the unique key of each.
        let acked = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let queried = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut sending = Vec::new();
        for s in 0..SENDERS {
            let (acked, queried) = (acked.clone(), queried.clone());
            let sender = Client::connect(&b.addr).await;
            sending.push(runtime::spawn(async move {
                for i in 0..SENDS {
                    while queried.load(std::sync::atomic::Ordering::Acquire) < i * QUERIES / SENDS {
                        runtime::sleep(Duration::from_millis(1)).await;
                    }
                    let key = format!("k{s}-{i}");
                    let keys = format!("hot {key}");
                    let m = msg(topic, b"x", &[("KEYS", keys.as_str())]);
                    let h = send_ok(&sender, send_v1(&m, 0)).await;
                    acked.lock().unwrap().insert(h.queue_offset, key);
                }
            }));
        }
        let query = |key: &str| query_req(topic, key, 64);
        let (mut queries, mut full) = (0, 0);
        loop {
            let before = acked.lock().unwrap().clone();
            let Some((&newest, _)) = before.last_key_value() else {
                runtime::sleep(Duration::from_millis(1)).await;
                continue;
            };
            let resp = c.call(query("hot")).await;
            expect_code(&resp, ResponseCode::Success);
            let got: Vec<i64> = decode_pulled(&resp.body, true)
                .unwrap()
                .iter()
                .map(|m| m.queue_offset)
                .collect();
            assert!(got.windows(2).all(|w| w[0] > w[1]), "newest first: {got:?}");
            assert!(got.len() <= 64, "{} answers", got.len());
            let oldest = if got.len() == 64 { got[63] } else { 0 };
            full += usize::from(got.len() == 64);
            for &o in before.range(oldest..).map(|(o, _)| o) {
                assert!(
                    got.contains(&o),
                    "acknowledged {o} missing (newest {newest}): {got:?}"
                );
            }
            let (&older, key) = before
                .range(..=newest / 2)
                .next_back()
                .unwrap_or((&newest, &before[&newest]));
            let resp = c.call(query(key)).await;
            expect_code(&resp, ResponseCode::Success);
            let one = decode_pulled(&resp.body, true).unwrap();
            assert_eq!(one.len(), 1);
            assert_eq!(one[0].queue_offset, older);
            queries += 1;
            queried.store(queries, std::sync::atomic::Ordering::Release);
            if before.len() == SENDERS * SENDS {
                break;
            }
        }
        for s in sending {
            s.await;
        }
        assert!(
            queries >= QUERIES && full >= 10,
            "{queries} queries, {full} of 64"
        );
    });
}
