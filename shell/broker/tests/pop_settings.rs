//! POP's smaller codes and settings against the real `tern-broker` process, over raw
//! frames as RocketMQ 5's Java client and tools send them: POLLING_INFO counts the POPs
//! held per queue key, POP_ROLLBACK, `enableRetryTopicV2` (redeliveries in
//! `%RETRY%<group>+<topic>`, handles flagged 2), `defaultMessageRequestMode=POP`.

use crate::common;

use std::time::Duration;

use common::*;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

fn polling_info(topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::PollingInfo)
        .with_ext("consumerGroup", G)
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id.to_string())
}

async fn polling_num(c: &Client, topic: &str, queue_id: i32) -> i64 {
    let r = c.call(polling_info(topic, queue_id)).await;
    expect_code(&r, ResponseCode::Success);
    r.ext_fields["pollingNum"].parse().unwrap()
}

#[test]
fn polling_info_counts_the_pops_held_on_a_queue_key() {
    with_broker("", async |b, c| {
        create_topic(c, "PI", 2).await;
        assert_eq!(polling_num(c, "PI", -1).await, 0);
        // Two all-queue POPs and one NOTIFICATION held on an empty topic.
        let mut held = Vec::new();
        for _ in 0..2 {
            let h = Client::connect(&b.addr).await;
            held.push(runtime::spawn(async move {
                pop(&h, pop_req("PI", -1, 1, 30_000, 2_500)).await.resp
            }));
        }
        let n = Client::connect(&b.addr).await;
        let note = RemotingCommand::request_code(RequestCode::Notification)
            .with_ext("consumerGroup", G)
            .with_ext("topic", "PI")
            .with_ext("queueId", "-1")
            .with_ext("pollTime", "2500")
            .with_ext("bornTime", now_ms().to_string());
        let noted = runtime::spawn(async move { n.call(note).await });
        tern_testkit::wait_until("POPs never held", Duration::from_secs(2), async || {
            polling_num(c, "PI", -1).await >= 2
        })
        .await;
        // The NOTIFICATION is not counted, nor POPs on another key.
        assert_eq!(polling_num(c, "PI", -1).await, 2);
        assert_eq!(polling_num(c, "PI", 0).await, 0);
        for h in held {
            expect_code(&h.await, ResponseCode::PollingTimeout);
        }
        noted.await;
        assert_eq!(polling_num(c, "PI", -1).await, 0);
        // RocketMQ's refusals.
        expect_code(
            &c.call(polling_info("NoSuch", 0)).await,
            ResponseCode::TopicNotExist,
        );
        let bad = c.call(polling_info("PI", 9)).await;
        assert_ne!(bad.response_code(), ResponseCode::Success);
        assert!(
            bad.remark
                .unwrap_or_default()
                .contains("queueId[9] is illegal")
        );
        // POP_ROLLBACK: nothing to move out of a RocksDB store; SUCCESS as RocketMQ.
        let r = c
            .call(RemotingCommand::request_code(RequestCode::PopRollback))
            .await;
        expect_code(&r, ResponseCode::Success);
    });
}

#[test]
fn with_retry_topic_v2_redeliveries_go_to_group_plus_topic() {
    with_client("enableRetryTopicV2=true\n", async |c| {
        create_topic(c, "RV2", 1).await;
        send_bodies(c, "RV2", 0, &["v0"]).await;
        let first = pop_until(c, "RV2", 1, 1_000, Duration::from_secs(5)).await;
        assert_eq!(first.len(), 1);
        // Not acked: revived after a second into the V2 retry topic.
        let again = pop_until(c, "RV2", 1, 60_000, Duration::from_secs(15)).await;
        assert_eq!(again.len(), 1, "never redelivered");
        let m = &again[0];
        assert_eq!(m.msg.topic, format!("%RETRY%{G}+RV2"));
        assert_eq!(m.body(), "v0");
        assert_eq!(m.msg.reconsume_times, 1);
        assert_eq!(m.handle.split(' ').nth(4), Some("2"), "{}", m.handle);
        expect_code(&c.call(m.ack()).await, ResponseCode::Success);
        // Acked: nothing comes again.
        let none = pop_until(c, "RV2", 1, 60_000, Duration::from_secs(3)).await;
        assert!(none.is_empty(), "{none:?}");
    });
}

#[test]
fn a_group_without_a_mode_gets_the_default_request_mode() {
    let conf = "defaultMessageRequestMode=POP\ndefaultPopShareQueueNum=-1\n";
    with_client(conf, async |c| {
        create_topic(c, "DM", 4).await;
        expect_code(
            &c.call(heartbeat("C1", G, "DM", "*", vec![])).await,
            ResponseCode::Success,
        );
        let body = format!(
            r#"{{"topic":"DM","consumerGroup":"{G}","clientId":"C1","strategyName":"AVG","messageModel":"CLUSTERING"}}"#
        );
        let r = c
            .call(
                RemotingCommand::request_code(RequestCode::QueryAssignment)
                    .with_body(body.into_bytes()),
            )
            .await;
        expect_code(&r, ResponseCode::Success);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let a = v["messageQueueAssignments"].as_array().unwrap();
        assert_eq!(a.len(), 1, "{v}");
        assert_eq!(
            (
                a[0]["mode"].as_str(),
                a[0]["messageQueue"]["queueId"].as_i64()
            ),
            (Some("POP"), Some(-1))
        );
    });
    // A mode RocketMQ does not have is refused at start, naming the key.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("broker.conf");
    std::fs::write(&conf, format!("{GEOMETRY}defaultMessageRequestMode=PUSH\n")).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tern-broker"));
    cmd.args(BrokerProc::standalone_args(dir.path(), &conf));
    let mut b = tern_testkit::Proc::spawn("tern-broker", &mut cmd);
    let status = b
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("a broker with defaultMessageRequestMode=PUSH started"));
    assert!(!status.success());
    // Complete: `wait_exit` returned a status, so the log reader reached its end.
    let err = b.log();
    assert!(err.contains("defaultMessageRequestMode"), "{err}");
}
