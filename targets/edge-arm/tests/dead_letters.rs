//! Records the gateway cannot forward are kept as dead letters with their reason,
//! counted in the local broker's runtime info, and handled with `tern-edge dead-letters
//! list|resend|drop`: a body compressed with LZ4 (which this build cannot inflate) and a
//! message the cluster refused for good, resent once the cluster takes it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Central, Edge, eventually};
use tern_client::{Admin, Message, Producer, ProducerConfig};
use tern_shell::code::RequestCode;
use tern_shell::headers::{SendMessageRequestHeader, SendMessageRequestHeaderV2};
use tern_shell::{Connection, ConnectionConfig, RemotingCommand};

fn run<F: std::future::Future>(f: F) -> F::Output {
    tern_client::block_on(f)
}

/// RocketMQ 5's sysFlag for a compressed body (bit 0) whose compression type (bits 8-10)
/// is LZ4 (1), as `MessageSysFlag.COMPRESSED_FLAG | COMPRESSION_LZ4_TYPE`.
const SYSFLAG_LZ4_COMPRESSED: i32 = 0x1 | (0x1 << 8);

/// Sends a record with an LZ4-flagged body straight to the gateway's broker, as a 5.x
/// producer configured with `compressType=LZ4` does.
async fn send_lz4(edge: &Edge, topic: &str, uniq: &str, body: &[u8]) {
    let h: SendMessageRequestHeaderV2 = SendMessageRequestHeader {
        producer_group: "lz4-producer".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id: 0,
        sys_flag: SYSFLAG_LZ4_COMPRESSED,
        born_timestamp: 0,
        flag: 0,
        properties: Some(format!("UNIQ_KEY\u{1}{uniq}\u{2}")),
        ..Default::default()
    }
    .into();
    let conn = Connection::connect(
        &edge.broker,
        ConnectionConfig::default(),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let resp = conn
        .request(
            RemotingCommand::request(RequestCode::SendMessageV2, &h).with_body(body.to_vec()),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
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
    eventually(
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

#[test]
fn an_lz4_body_is_kept_as_a_dead_letter_with_its_reason_counted_and_dropped_on_request() {
    let central = Central::started();
    let dir = tempfile::tempdir().unwrap();
    let mut edge = Edge::start(dir.path(), &central.namesrv, "");
    run(async {
        let p = Producer::new(ProducerConfig::new("mixed"), edge.client_config()).unwrap();
        p.start();
        let mut ids = send_plain(&p, "Mixed", 0..5).await;
        send_lz4(
            &edge,
            "Mixed",
            "LZ4-BODY-1",
            b"\x04\x22\x4d\x18 an lz4 frame",
        )
        .await;
        ids.extend(send_plain(&p, "Mixed", 5..10).await);
        let got = all_arrived(&central, "Mixed", &ids).await;
        assert!(
            !got.contains_key("LZ4-BODY-1"),
            "sent without its compression"
        );
        eventually("the LZ4 record kept", Duration::from_secs(30), async || {
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

        let (ok, list, err) = edge.dead_letters_cmd(&["list"]);
        assert!(ok, "{err}");
        let line = list
            .lines()
            .find(|l| l.contains("Mixed"))
            .unwrap_or_else(|| panic!("listed: {list}"));
        assert!(
            line.contains("unsupported compression type 0x100"),
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
    edge.stop();
}

#[test]
fn a_message_refused_for_good_is_resent_once_the_cluster_takes_it() {
    let mut central = Central::reserved();
    central.extra_conf = "maxMessageSize=2048\n".into();
    central.start();
    let dir = tempfile::tempdir().unwrap();
    let mut edge = Edge::start(dir.path(), &central.namesrv, "");
    run(async {
        let p = Producer::new(ProducerConfig::new("mixed"), edge.client_config()).unwrap();
        p.start();
        let mut ids = send_plain(&p, "Sized", 0..3).await;
        // Under the producer's 4 KiB compression threshold: it reaches the cluster as is.
        let big = p
            .send(Message::new("Sized", vec![b'z'; 3000]))
            .await
            .unwrap();
        ids.extend(send_plain(&p, "Sized", 3..6).await);
        all_arrived(&central, "Sized", &ids).await;
        eventually(
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
        eventually(
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
