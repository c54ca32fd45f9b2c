//! The gateway as a device runs it: local producers send to `tern-edge` through its name
//! server; everything they were told is stored arrives on the central cluster, in order
//! per queue and with its message id, across an uplink that is down, a gateway killed
//! with `kill -9`, and a backlog that fills its budget.

use crate::certs;
use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Central, Edge, run, with_gateway};
use tern_client::{ClientError, Message, MessageBuilder, Producer, ProducerConfig, SendStatus};
use tern_testkit::wait_until;

/// Message `i` of device `dev`: a key, a sequence number, a user property.
fn reading(topic: &str, dev: usize, i: usize) -> Message {
    Message::new(topic, format!("device {dev} reading {i}"))
        .with_tags("reading")
        .with_keys([format!("dev{dev}-{i}")])
        .with_property("device", dev.to_string())
        .with_property("seq", i.to_string())
}

/// Sends readings `range` of 4 devices, each device's in order into one queue
/// (sharded by device); returns message id → (device, seq).
async fn send(
    p: &Producer,
    topic: &str,
    range: std::ops::Range<usize>,
) -> BTreeMap<String, (usize, usize)> {
    let message = |dev, i| reading(topic, dev, i);
    let check = |r: &tern_client::SendResult| assert_eq!(r.status, SendStatus::SendOk);
    common::send_by_device(p, range, 4, message, check).await
}

/// Waits until the central cluster holds every message of `sent`; checks bodies and
/// properties, and that each device's readings are in order in their central queue.
async fn arrived(central: &Central, topic: &str, sent: &BTreeMap<String, (usize, usize)>) -> usize {
    let mut total = 0;
    wait_until(
        "every acknowledged message forwarded",
        Duration::from_secs(90),
        async || {
            let (got, n) = central.messages(topic).await;
            total = n;
            sent.keys().all(|id| got.contains_key(id))
        },
    )
    .await;
    let (got, _) = central.messages(topic).await;
    let mut last_seq: BTreeMap<(String, i32), usize> = BTreeMap::new();
    let mut by_queue: Vec<_> = got.values().collect();
    by_queue.sort_by_key(|m| (m.store_host, m.queue_id, m.queue_offset));
    for m in by_queue {
        let Some(&(dev, i)) = sent.get(m.msg_id()) else {
            continue;
        };
        assert_eq!(m.body, format!("device {dev} reading {i}").into_bytes());
        assert_eq!(m.properties.get("device"), Some(&dev.to_string()));
        assert_eq!(m.properties.get("KEYS"), Some(&format!("dev{dev}-{i}")));
        assert_eq!(
            m.properties.get("TAGS").map(String::as_str),
            Some("reading")
        );
        let key = (dev.to_string(), m.queue_id);
        if let Some(prev) = last_seq.insert(key, i) {
            assert!(
                prev < i,
                "device {dev}: reading {i} after {prev} in queue {}",
                m.queue_id
            );
        }
    }
    total
}

/// The central cluster serves TLS only (`tls.server.mode=enforcing`) and checks access
/// (`aclEnable`): the forwarder connects with TLS (`tls.enable`, trusting the central
/// CA) and signs with the gateway's `innerClientAuthenticationCredentials`, an account
/// that may only publish to the topic.
#[test]
fn readings_sent_to_the_gateway_reach_the_central_cluster_in_order_with_their_ids() {
    let mut central = Central::reserved();
    let pki = tempfile::tempdir().unwrap();
    let ca = certs::Ca::new("Tern edge test CA");
    let id = ca.issue(pki.path(), "central", &["127.0.0.1", "localhost"], false);
    let ca_file = ca.write(pki.path(), "ca.pem");
    let rules = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        rules.path(),
        "accounts:\n  - accessKey: edge_forwarder\n    secretKey: edge_secret\n    \
         defaultTopicPerm: DENY\n    topicPerms: [Readings=PUB, TBW102=PUB]\n  \
         - accessKey: central_admin\n    secretKey: admin_secret\n    admin: true\n",
    )
    .unwrap();
    central.extra_conf = format!(
        "aclEnable=true\nplainAclFile={}\ntls.server.mode=enforcing\ntls.server.certPath={}\n\
         tls.server.keyPath={}\ntls.enable=true\ntls.client.trustCertPath={}\n",
        rules.path().display(),
        id.cert.display(),
        id.key.display(),
        ca_file.display()
    );
    central.trust = Some(ca_file.clone());
    central.credentials = Some(tern_client::SessionCredentials::new(
        "central_admin",
        "admin_secret",
    ));
    central.start();
    let (_dir, mut edge) = Edge::start_in_temp(
        &central.namesrv,
        &format!(
            "innerClientAuthenticationCredentials={{\"accessKey\":\"edge_forwarder\",\"secretKey\":\"edge_secret\"}}\n\
             tls.enable=true\ntls.client.trustCertPath={}\n",
            ca_file.display()
        ),
    );
    run(async {
        // Access is checked: an unsigned producer is refused centrally.
        let mut unsigned = central.client_config();
        unsigned.credentials = None;
        let stranger = Producer::new(ProducerConfig::new("stranger"), unsigned).unwrap();
        stranger.start();
        let refused = stranger.send(reading("Readings", 0, 0)).await;
        assert!(refused.is_err(), "{refused:?}");
        stranger.shutdown().await;

        let p = edge.producer("sensors");
        let sent = send(&p, "Readings", 0..300).await;
        let total = arrived(&central, "Readings", &sent).await;
        assert_eq!(total, 300, "no duplicates without a crash");
        p.shutdown().await;
    });
    edge.stop();
}

#[test]
fn an_uplink_that_is_down_and_a_gateway_killed_with_kill_9_lose_nothing() {
    let mut central = Central::reserved();
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "");
    let mut sent = run(async {
        let p = edge.producer("sensors");
        let sent = send(&p, "Outage", 0..200).await;
        p.shutdown().await;
        sent
    });
    // Power loss while nothing could be forwarded.
    edge.crash_and_restart();
    run(async {
        let p = edge.producer("sensors");
        sent.extend(send(&p, "Outage", 200..300).await);
        p.shutdown().await;
    });
    central.start();
    run(async {
        arrived(&central, "Outage", &sent).await;
    });
    // Killed again once caught up: what was forwarded before its progress was saved
    // may go twice (same ids), nothing goes missing.
    edge.crash_and_restart();
    run(async {
        let p = edge.producer("sensors");
        sent.extend(send(&p, "Outage", 300..350).await);
        p.shutdown().await;
        arrived(&central, "Outage", &sent).await;
    });
    edge.stop();
}

#[test]
fn a_full_backlog_refuses_sends_until_the_uplink_drains_it() {
    let mut central = Central::reserved();
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "edgeBacklogBudget=1048576\n");
    // Incompressible (the producer zips bodies over 4 KiB).
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let body: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let (sent, refused) = run(async {
        let p = edge.producer("bulk");
        let mut sent = BTreeSet::new();
        let mut refused = None;
        for i in 0..64 {
            match p
                .send(Message::new("Bulk", body.clone()).with_keys([format!("b{i}")]))
                .await
            {
                Ok(r) => {
                    sent.insert(r.msg_id);
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        p.shutdown().await;
        (sent, refused)
    });
    let e = refused.expect("a 1 MiB budget refuses before 4 MiB are stored");
    assert!(
        matches!(&e, ClientError::Broker { code: 14, remark } if remark.contains("budget")),
        "{e}"
    );
    assert!(sent.len() >= 10, "only {} accepted", sent.len());
    central.start();
    run(async {
        wait_until(
            "the backlog forwarded",
            Duration::from_secs(90),
            async || {
                let (got, _) = central.messages("Bulk").await;
                sent.iter().all(|id| got.contains_key(id))
            },
        )
        .await;
        // Drained: sends are taken again.
        let p = edge.producer("bulk");
        wait_until(
            "sends accepted again",
            Duration::from_secs(30),
            async || {
                p.send(Message::new("Bulk", b"after".to_vec()))
                    .await
                    .is_ok()
            },
        )
        .await;
        p.shutdown().await;
    });
    edge.stop();
}

#[test]
fn a_message_the_cluster_refuses_for_good_is_set_aside_and_the_rest_flows() {
    let central = Central::started_with("maxMessageSize=2048\n");
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "");
    run(async {
        let p = edge.producer("mixed");
        let mut sent = BTreeMap::new();
        sent.extend(send(&p, "Mixed", 0..20).await);
        // Under the producer's 4 KiB compression threshold: it reaches the cluster as is.
        let big = p
            .send(Message::new("Mixed", vec![b'z'; 3000]).with_keys(["too-big"]))
            .await
            .unwrap();
        sent.extend(send(&p, "Mixed", 20..40).await);
        p.shutdown().await;
        arrived(&central, "Mixed", &sent).await;
        let (got, _) = central.messages("Mixed").await;
        assert!(
            !got.contains_key(&big.msg_id),
            "the cluster took a message over its limit"
        );
        wait_until(
            "the refused message kept",
            Duration::from_secs(30),
            async || edge.dead_letters().len() == 1,
        )
        .await;
        let kept = std::fs::read(&edge.dead_letters()[0]).unwrap();
        let m = tern_shell::message::decode_pulled(&kept, true)
            .unwrap()
            .remove(0);
        assert_eq!(m.msg_id(), big.msg_id);
        assert_eq!(m.body, vec![b'z'; 3000]);
    });
    edge.stop();
}

#[test]
fn a_timer_message_is_forwarded_as_sent_and_timed_by_the_central_cluster() {
    with_gateway("", async |central, edge| {
        let p = edge.producer("sensors");
        let sent_at = tern_shell::runtime::now_ms();
        let r = p
            .send(reading("Timed", 0, 0).with_delay_sec(3))
            .await
            .unwrap();
        // Nothing waits on the gateway, whose retention could take it before it is due.
        assert!(r.recall_handle.is_none(), "not timed on the gateway");
        let plain = send(&p, "Timed", 1..5).await;
        arrived(central, "Timed", &plain).await;
        let mut one = BTreeMap::new();
        one.insert(r.msg_id.clone(), (0, 0));
        assert_eq!(arrived(central, "Timed", &one).await, 5, "each once");
        let (got, _) = central.messages("Timed").await;
        let m = &got[&r.msg_id];
        assert!(
            m.store_timestamp >= sent_at + 3_000 - 20,
            "stored centrally early"
        );
        assert!(m.properties.contains_key("TIMER_OUT_MS"), "timed centrally");
        assert!(!m.properties.contains_key("REAL_TOPIC"));
        p.shutdown().await;
    });
}
