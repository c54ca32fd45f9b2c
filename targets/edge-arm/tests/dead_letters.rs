//! Compressed bodies and records the gateway cannot forward: an LZ4 body (which this
//! build cannot inflate) is forwarded as stored, compression bits included, for 5.x
//! consumers to inflate; a body of a compression type RocketMQ does not define, and a
//! message the cluster refused for good, are kept as dead letters with their reason,
//! counted in the local broker's runtime info and metrics, and handled with `tern-edge
//! dead-letters list|resend|drop`.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Central, Edge, run, with_gateway};
use tern_client::{Admin, Message, Producer};
use tern_engine::record::RecordView;
use tern_shell::RemotingCommand;
use tern_shell::code::RequestCode;
use tern_shell::headers::{
    PullMessageRequestHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
};
use tern_testkit::wait_until;

/// RocketMQ 5's sysFlag for a compressed body (bit 0) whose compression type (bits 8-10)
/// is LZ4 (1), as `MessageSysFlag.COMPRESSED_FLAG | COMPRESSION_LZ4_TYPE`.
const SYSFLAG_LZ4_COMPRESSED: i32 = 0x1 | (0x1 << 8);
/// A compression type RocketMQ does not define (4).
const SYSFLAG_UNKNOWN_COMPRESSED: i32 = 0x1 | (0x4 << 8);

/// Sends a record with a compressed body flagged `sys_flag` straight to the gateway's
/// broker, as a 5.x producer configured with `compressType=LZ4` does.
async fn send_compressed(edge: &Edge, topic: &str, uniq: &str, sys_flag: i32, body: &[u8]) {
    let h: SendMessageRequestHeaderV2 = SendMessageRequestHeader {
        producer_group: "lz4-producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag,
        born_timestamp: 0,
        flag: 0,
        properties: Some(format!("UNIQ_KEY\u{1}{uniq}\u{2}")),
        ..Default::default()
    }
    .into();
    let conn = common::connect(&edge.broker).await;
    let resp = common::call(
        &conn,
        RemotingCommand::request(RequestCode::SendMessageV2, &h).with_body(body.to_vec()),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        resp.code, 0,
        "the gateway stores it as it is: {:?}",
        resp.remark
    );
}

async fn send_plain(p: &Producer, topic: &str, range: std::ops::Range<usize>) -> Vec<String> {
    let mut ids = Vec::new();
    for i in range {
        let r = p
            .send_ordered(Message::new(topic, format!("plain {i}")), "one-key")
            .await
            .unwrap();
        ids.push(r.msg_id);
    }
    ids
}

async fn all_arrived(
    central: &Central,
    topic: &str,
    ids: &[String],
) -> BTreeMap<String, tern_client::MessageExt> {
    let mut got = BTreeMap::new();
    wait_until(
        "the other messages forwarded",
        Duration::from_secs(90),
        async || {
            got = central.messages(topic).await.0;
            ids.iter().all(|id| got.contains_key(id))
        },
    )
    .await;
    got
}

async fn runtime_info(addr: &str) -> BTreeMap<String, String> {
    let admin = Admin::new(tern_client::ClientConfig::new(addr)).unwrap();
    let info = admin.broker_runtime_info(addr).await.unwrap();
    admin.shutdown().await;
    info
}

/// Every record stored centrally in `topic`, raw (Tern's own consumer would refuse
/// to inflate LZ4): (sysFlag, UNIQ_KEY, body).
async fn central_records(central: &Central, topic: &str) -> Vec<(i32, String, Vec<u8>)> {
    let conn = common::connect(&central.broker_addr()).await;
    let mut out = Vec::new();
    for queue_id in 0..16 {
        let h = PullMessageRequestHeader::new("raw-check", topic, queue_id, 0, 32).filter(
            Some("*".into()),
            "TAG",
            0,
        );
        let resp = common::call(
            &conn,
            RemotingCommand::request(RequestCode::PullMessage, &h),
            Duration::from_secs(10),
        )
        .await;
        if resp.code != 0 {
            // No message in this queue (PULL_NOT_FOUND), or no such queue.
            continue;
        }
        let mut body: &[u8] = &resp.body;
        while !body.is_empty() {
            let view = RecordView::parse(body).unwrap();
            let props = tern_shell::message::string_to_properties(view.properties());
            out.push((
                view.sys_flag(),
                props.get("UNIQ_KEY").cloned().unwrap_or_default(),
                view.body().to_vec(),
            ));
            body = &body[view.total_size() as usize..];
        }
    }
    out
}

#[test]
fn an_lz4_body_is_forwarded_as_stored_with_its_compression_bits() {
    with_gateway("", async |central, edge| {
        let p = edge.producer("mixed");
        let mut ids = send_plain(&p, "Packed", 0..5).await;
        let frame = b"\x04\x22\x4d\x18 an lz4 frame".to_vec();
        send_compressed(edge, "Packed", "LZ4-BODY-1", SYSFLAG_LZ4_COMPRESSED, &frame).await;
        ids.extend(send_plain(&p, "Packed", 5..10).await);
        ids.push("LZ4-BODY-1".into());
        let mut got = Vec::new();
        wait_until(
            "every record forwarded",
            Duration::from_secs(90),
            async || {
                got = central_records(central, "Packed").await;
                ids.iter().all(|id| got.iter().any(|(_, g, _)| g == id))
            },
        )
        .await;
        let (sys_flag, _, body) = got
            .into_iter()
            .find(|(_, id, _)| id == "LZ4-BODY-1")
            .unwrap();
        assert_eq!(sys_flag & 0x701, SYSFLAG_LZ4_COMPRESSED, "{sys_flag:#x}");
        assert_eq!(body, frame, "the body as the producer compressed it");
        assert!(edge.dead_letters().is_empty());
        p.shutdown().await;
    });
}

#[test]
fn a_body_of_an_unknown_compression_is_kept_as_a_dead_letter_with_its_reason_counted_and_dropped() {
    with_gateway("metricsExporterType=PROM\n", async |central, edge| {
        let p = edge.producer("mixed");
        let mut ids = send_plain(&p, "Mixed", 0..5).await;
        send_compressed(
            edge,
            "Mixed",
            "ODD-BODY-1",
            SYSFLAG_UNKNOWN_COMPRESSED,
            b"??",
        )
        .await;
        ids.extend(send_plain(&p, "Mixed", 5..10).await);
        let got = all_arrived(central, "Mixed", &ids).await;
        assert!(
            !got.contains_key("ODD-BODY-1"),
            "sent without its compression"
        );
        wait_until("the record kept", Duration::from_secs(30), async || {
            edge.dead_letters().len() == 1
        })
        .await;
        let info = runtime_info(&edge.broker).await;
        assert_eq!(
            info.get("edgeDeadLetters").map(String::as_str),
            Some("1"),
            "{info:?}"
        );
        assert_eq!(
            info.get("edgeBlockedTopicCount").map(String::as_str),
            Some("0")
        );
        // And in the metrics, beside what the local broker counted.
        let text = tern_testkit::metrics::scrape(edge.metrics.as_deref().expect("metrics on"));
        let dead = text
            .lines()
            .find(|l| l.starts_with("tern_edge_dead_letters{"))
            .unwrap_or_else(|| panic!("no tern_edge_dead_letters in:\n{text}"));
        assert!(dead.ends_with(" 1") || dead.ends_with(" 1.0"), "{dead}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("rocketmq_messages_in_total{")
                    && l.contains("topic=\"Mixed\"")
                    && l.ends_with(" 11")),
            "{text}"
        );

        let (ok, list, err) = edge.dead_letters_cmd(&["list"]);
        assert!(ok, "{err}");
        let line = list
            .lines()
            .find(|l| l.contains("Mixed"))
            .unwrap_or_else(|| panic!("listed: {list}"));
        assert!(
            line.contains("unsupported compression type 0x400"),
            "{line}"
        );
        let offset = line.split_whitespace().next().unwrap().to_owned();

        // It cannot be sent (its body would reach consumers undecodable): kept.
        let (ok, _, err) = edge.dead_letters_cmd(&["resend", "--all"]);
        assert!(!ok && err.contains("cannot be sent"), "{err}");
        assert_eq!(edge.dead_letters().len(), 1);

        let (ok, out, err) = edge.dead_letters_cmd(&["drop", &offset]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("dropped {offset}")), "{out}");
        assert!(edge.dead_letters().is_empty());
        p.shutdown().await;
    });
}

#[test]
fn a_message_refused_for_good_is_resent_once_the_cluster_takes_it() {
    let mut central = Central::started_with("maxMessageSize=2048\n");
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "");
    run(async {
        let p = edge.producer("mixed");
        let mut ids = send_plain(&p, "Sized", 0..3).await;
        // Under the producer's 4 KiB compression threshold: it reaches the cluster as is.
        let big = p
            .send(Message::new("Sized", vec![b'z'; 3000]))
            .await
            .unwrap();
        ids.extend(send_plain(&p, "Sized", 3..6).await);
        all_arrived(&central, "Sized", &ids).await;
        wait_until(
            "the refused message kept",
            Duration::from_secs(30),
            async || edge.dead_letters().len() == 1,
        )
        .await;
        let (ok, list, err) = edge.dead_letters_cmd(&["list"]);
        assert!(ok, "{err}");
        assert!(list.contains("refused for good"), "{list}");

        // The operator raises the cluster's limit, then resends.
        central.kill9();
        central.extra_conf = String::new();
        central.start();
        let mut out = String::new();
        wait_until(
            "the dead letter resent",
            Duration::from_secs(60),
            async || {
                let (ok, o, _) = edge.dead_letters_cmd(&["resend", "--all"]);
                out = o;
                ok
            },
        )
        .await;
        assert!(out.contains(&format!("as {}", big.msg_id)), "{out}");
        assert!(edge.dead_letters().is_empty());
        let got = central.messages("Sized").await.0;
        assert_eq!(got.get(&big.msg_id).map(|m| m.body.len()), Some(3000));
        p.shutdown().await;
    });
    edge.stop();
}
