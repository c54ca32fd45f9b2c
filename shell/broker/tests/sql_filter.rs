//! SQL92 property filtering in the real `tern-broker --standalone` process, driven over
//! sockets the way Java consumers drive it: the subscription in the pull (lite pull) or
//! from the heartbeat (push), CHECK_CLIENT_CONFIG at start, code 23 for a bad expression,
//! `enablePropertyFilter=false`, and queues where nothing matches.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use tern_shell::body::{CheckClientRequestBody, SubscriptionData, to_json};
use tern_shell::headers::pull_sys_flag;
use tern_shell::message::{Message, decode_pulled};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

const EXPR: &str = "a BETWEEN 3 AND 6 AND TAGS IN ('A','B')";

/// A pull carrying `expr` as its SQL92 subscription (Java's lite pull consumer).
fn sql_pull(group: &str, topic: &str, offset: i64, expr: &str) -> RemotingCommand {
    let mut req = pull_req(group, topic, 0, offset, Some(expr));
    req.ext_fields.insert("expressionType", "SQL92");
    req
}

/// A HEART_BEAT registering `group` on `topic` with an SQL92 subscription.
fn sql_heartbeat(group: &str, topic: &str, expr: &str) -> RemotingCommand {
    let sub = SubscriptionData {
        topic: topic.into(),
        sub_string: expr.into(),
        sub_version: 1,
        expression_type: "SQL92".into(),
        ..SubscriptionData::default()
    };
    heartbeat_for("127.0.0.1@sqltest", group, sub)
}

fn check_client(expr: &str) -> RemotingCommand {
    let body = CheckClientRequestBody {
        client_id: "127.0.0.1@sqltest".into(),
        group: "G_CHECK".into(),
        subscription_data: Some(SubscriptionData {
            topic: "T".into(),
            sub_string: expr.into(),
            expression_type: "SQL92".into(),
            ..SubscriptionData::default()
        }),
    };
    RemotingCommand::request_code(RequestCode::CheckClientConfig).with_body(to_json(&body))
}

/// Message `i` of the mixed stream: `a` cycles 0..10 (missing every 7th), TAGS A/B/C.
fn mixed(topic: &str, i: usize) -> Message {
    let tag = ["A", "B", "C"][i % 3];
    let a = (i % 10).to_string();
    let mut props = vec![("TAGS", tag), ("KEYS", "k")];
    if i % 7 != 0 {
        props.push(("a", a.as_str()));
    }
    msg(topic, format!("m{i}").as_bytes(), &props)
}

fn matches(i: usize) -> bool {
    i % 7 != 0 && (3..=6).contains(&(i % 10)) && i % 3 != 2
}

/// Pulls `[offset, end)` with `make`, following nextBeginOffset through 0 and 20 answers.
async fn pull_through(
    c: &Client,
    mut offset: i64,
    make: impl Fn(i64) -> RemotingCommand,
) -> Vec<tern_shell::message::MessageExt> {
    let mut got = Vec::new();
    for _ in 0..200 {
        let resp = c.call(make(offset)).await;
        match resp.response_code() {
            ResponseCode::Success => got.extend(decode_pulled(&resp.body, true).unwrap()),
            ResponseCode::PullRetryImmediately => assert!(resp.body.is_empty()),
            ResponseCode::PullNotFound => return got,
            other => panic!("pull at {offset}: {other:?} {:?}", resp.remark),
        }
        let next = pull_offsets(&resp).0;
        assert!(next > offset, "pull at {offset} answered next {next}");
        offset = next;
    }
    panic!("the queue never ended");
}

/// Waits until `queue 0` of `topic` holds `max` messages (GET_MAX_OFFSET).
async fn wait_dispatched(c: &Client, topic: &str, max: i64) {
    assert!(
        tern_testkit::poll_until_async(Duration::from_secs(20), async || {
            offset_of(&c.call(max_offset_req(topic, 0)).await) >= max
        })
        .await,
        "{topic} never reached {max}"
    );
}

#[test]
fn sql92_pulls_return_exactly_the_matching_records_intact() {
    with_broker("", async |b, c| {
        let topic = "SqlMixed";
        let sent: Vec<Message> = (0..300).map(|i| mixed(topic, i)).collect();
        for m in &sent {
            send_ok(c, send_v1(m, 0)).await;
        }
        let want: Vec<usize> = (0..300).filter(|i| matches(*i)).collect();
        assert!(want.len() > 30);

        // The subscription in the pull (lite pull consumer).
        let got = pull_through(c, 0, |o| sql_pull("G_SQL_LITE", topic, o, EXPR)).await;
        let got_idx: Vec<usize> = got.iter().map(|m| m.queue_offset as usize).collect();
        assert_eq!(got_idx, want);
        for m in &got {
            check_record(m, &sent[m.queue_offset as usize], 0, b, c);
        }

        // The subscription from the heartbeat (push consumer): the same messages.
        let hb = c.call(sql_heartbeat("G_SQL_PUSH", topic, EXPR)).await;
        expect_code(&hb, ResponseCode::Success);
        assert!(
            hb.version >= 232,
            "Java refuses SQL92 below 232: {}",
            hb.version
        );
        let got = pull_through(c, 0, |o| pull_req("G_SQL_PUSH", topic, 0, o, None)).await;
        let got_idx: Vec<usize> = got.iter().map(|m| m.queue_offset as usize).collect();
        assert_eq!(got_idx, want);

        // NULL and type rules reach the wire: `a IS NULL` is every 7th.
        let got = pull_through(c, 0, |o| sql_pull("G_SQL_NULL", topic, o, "a IS NULL")).await;
        let got_idx: BTreeSet<usize> = got.iter().map(|m| m.queue_offset as usize).collect();
        assert_eq!(got_idx, (0..300).filter(|i| i % 7 == 0).collect());
        // Tag subscriptions are untouched.
        let got = pull_through(c, 0, |o| pull_req("G_TAG", topic, 0, o, Some("C"))).await;
        assert_eq!(got.len(), 100);
    });
}

#[test]
fn a_bad_expression_is_refused_with_23_naming_the_column() {
    with_broker("", async |b, c| {
        let topic = "SqlBad";
        send_ok(c, send_v1(&mixed(topic, 1), 0)).await;

        let resp = c.call(sql_pull("G_BAD", topic, 0, "a BETWEEN 3 AND")).await;
        expect_code(&resp, ResponseCode::SubscriptionParseFailed);
        let remark = resp.remark.unwrap_or_default();
        assert!(
            remark.contains("parse the consumer's subscription failed")
                && remark.contains("column 16")
                && remark.contains("a BETWEEN 3 AND"),
            "{remark}"
        );
        assert!(resp.body.is_empty());

        // From a heartbeat: the heartbeat succeeds, the broker says why in its log, and
        // every pull is refused the same way.
        let hb = c
            .call(sql_heartbeat("G_BAD_HB", topic, "a = 1 OR b !=2"))
            .await;
        expect_code(&hb, ResponseCode::Success);
        let resp = c.call(pull_req("G_BAD_HB", topic, 0, 0, None)).await;
        expect_code(&resp, ResponseCode::SubscriptionParseFailed);
        assert!(resp.remark.unwrap_or_default().contains("column 12"));
        let line = b.wait_for_log(&["G_BAD_HB", "invalid SQL92"], Duration::from_secs(10));
        assert!(line.is_some(), "{}", b.stderr_text());

        // CHECK_CLIENT_CONFIG, which consumers send at start.
        let resp = c.call(check_client("a >")).await;
        expect_code(&resp, ResponseCode::SubscriptionParseFailed);
        assert!(resp.remark.unwrap_or_default().contains("column 4"));
        expect_code(&c.call(check_client(EXPR)).await, ResponseCode::Success);
        let empty = RemotingCommand::request_code(RequestCode::CheckClientConfig);
        expect_code(&c.call(empty).await, ResponseCode::Success);

        // An expression type no broker knows.
        let mut req = pull_req("G_BAD", topic, 0, 0, Some("x"));
        req.ext_fields.insert("expressionType", "CLASS");
        expect_code(&c.call(req).await, ResponseCode::SubscriptionParseFailed);
    });
}

#[test]
fn enable_property_filter_false_refuses_sql92_as_rocketmq_does() {
    with_broker("enablePropertyFilter=false\n", async |b, c| {
        let topic = "SqlOff";
        send_ok(c, send_v1(&mixed(topic, 4), 0)).await;
        let want = "The broker does not support consumer to filter message by SQL92";
        let resp = c.call(sql_pull("G_OFF", topic, 0, EXPR)).await;
        expect_code(&resp, ResponseCode::SystemError);
        assert_eq!(resp.remark.as_deref(), Some(want));
        let resp = c.call(check_client(EXPR)).await;
        expect_code(&resp, ResponseCode::SystemError);
        assert_eq!(resp.remark.as_deref(), Some(want));
        // Tags still work.
        let resp = c.call(pull_req("G_OFF", topic, 0, 0, Some("B"))).await;
        expect_code(&resp, ResponseCode::Success);
        // The key is known, so no "unknown key" warning.
        assert!(
            !b.stderr_text().contains("enablePropertyFilter"),
            "{}",
            b.stderr_text()
        );
    });
}

#[test]
fn unmatched_messages_move_the_offset_and_never_wake_a_held_pull() {
    with_broker("", async |b, c| {
        let topic = "SqlNone";
        let nope = |i: usize| msg(topic, format!("n{i}").as_bytes(), &[("a", "0")]);
        for chunk in (0..1000).collect::<Vec<_>>().chunks(100) {
            let batch: Vec<Message> = chunk.iter().map(|i| nope(*i)).collect();
            send_ok(c, send_batch(&batch, 0)).await;
        }
        // A batch is answered once appended (ASYNC_FLUSH), before reput dispatched it: a
        // pull whose every message is filtered out does not wait for dispatch, so let it
        // catch up first, or the queue's max is a batch short.
        wait_dispatched(c, topic, 1000).await;
        let expr = "a = 1";
        // Without SUSPEND: 20 with nextBeginOffset further each time, then 19 at the end.
        let mut offset = 0;
        let mut pulls = 0;
        loop {
            pulls += 1;
            let resp = c.call(sql_pull("G_NONE", topic, offset, expr)).await;
            let (next, _, max) = pull_offsets(&resp);
            assert_eq!(max, 1000);
            if resp.response_code() == ResponseCode::PullNotFound {
                assert_eq!(next, 1000);
                break;
            }
            expect_code(&resp, ResponseCode::PullRetryImmediately);
            assert!(
                next > offset && pulls < 5,
                "pull {pulls}: {offset} → {next}"
            );
            offset = next;
        }

        // Held at the end: non-matching arrivals do not answer it, a matching one does,
        // with that message only.
        let suspend = pull_sys_flag::SUSPEND;
        let held_pull = |offset: i64, ms: i64| {
            pull_with(sql_pull("G_NONE", topic, offset, expr), 32, suspend, ms)
        };
        let puller = Client::connect(&b.addr).await;
        let t0 = Instant::now();
        let mut held = Box::pin(runtime::spawn({
            let req = held_pull(1000, 20_000);
            async move { (puller.call(req).await, t0.elapsed()) }
        }));
        runtime::sleep(Duration::from_millis(200)).await;
        for i in 1000..1005 {
            send_ok(c, send_v1(&nope(i), 0)).await;
        }
        wait_dispatched(c, topic, 1005).await;
        // A wrong answer would come at once; a slow machine can only hide it, not fake it.
        let early = runtime::race(async { Some((&mut held).await) }, async {
            runtime::sleep(Duration::from_millis(500)).await;
            None
        })
        .await;
        assert!(
            early.is_none(),
            "answered by non-matching messages: {early:?}"
        );
        send_ok(c, send_v1(&msg(topic, b"yes", &[("a", "1")]), 0)).await;
        let (resp, waited) = held.await;
        expect_code(&resp, ResponseCode::Success);
        let got = decode_pulled(&resp.body, true).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].body.as_slice(), got[0].queue_offset),
            (&b"yes"[..], 1005)
        );
        assert_eq!(pull_offsets(&resp).0, 1006);
        assert!(
            waited < Duration::from_secs(15),
            "answered after {waited:?}"
        );

        // Nothing matching comes: after its suspend time it says how far it got (Java's
        // NO_MATCHED_MESSAGE, 20).
        let puller = Client::connect(&b.addr).await;
        let t0 = Instant::now();
        let held = runtime::spawn({
            let req = held_pull(1006, 4_000);
            async move { (puller.call(req).await, t0.elapsed()) }
        });
        runtime::sleep(Duration::from_millis(100)).await;
        for i in 1006..1009 {
            send_ok(c, send_v1(&nope(i), 0)).await;
        }
        let (resp, waited) = held.await;
        expect_code(&resp, ResponseCode::PullRetryImmediately);
        assert_eq!(pull_offsets(&resp).0, 1009);
        assert!(
            waited >= Duration::from_millis(3_900),
            "answered after {waited:?}"
        );
    });
}
