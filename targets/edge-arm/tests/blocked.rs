//! A topic the central cluster refuses until an operator acts (its perm made
//! read-only) is parked: the other topics keep flowing, the state is logged once and
//! shown in the gateway's runtime info, and once the perm is restored every parked
//! message arrives, in order per key.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Central, with_gateway};
use tern_client::admin::Target;
use tern_client::{Admin, Message, Producer};
use tern_shell::body::TopicConfig;
use tern_testkit::wait_until;

/// Readings `range` of `topic`, device `i % 3`'s in order under its sharding key;
/// returns message id → (device, seq).
async fn send(
    p: &Producer,
    topic: &str,
    range: std::ops::Range<usize>,
) -> BTreeMap<String, (usize, usize)> {
    let message = |dev, i: usize| {
        Message::new(topic, format!("{topic} {dev} {i}")).with_property("seq", i.to_string())
    };
    common::send_by_device(p, range, 3, message, |_| {}).await
}

/// How many of `sent` are stored centrally; checks each device's order per queue.
async fn stored(central: &Central, topic: &str, sent: &BTreeMap<String, (usize, usize)>) -> usize {
    let (got, _) = central.messages(topic).await;
    let mut ms: Vec<_> = got
        .values()
        .filter(|m| sent.contains_key(m.msg_id()))
        .collect();
    ms.sort_by_key(|m| (m.store_host, m.queue_id, m.queue_offset));
    let mut last: BTreeMap<(usize, i32), usize> = BTreeMap::new();
    for m in &ms {
        let (dev, i) = sent[m.msg_id()];
        if let Some(prev) = last.insert((dev, m.queue_id), i) {
            assert!(prev < i, "{topic} device {dev}: {i} after {prev}");
        }
    }
    ms.len()
}

/// Waits up to `within` until every one of `sent` is stored centrally; `what` says which.
async fn all_stored(
    central: &Central,
    topic: &str,
    sent: &BTreeMap<String, (usize, usize)>,
    what: &str,
    within: Duration,
) {
    wait_until(what, within, async || {
        stored(central, topic, sent).await == sent.len()
    })
    .await;
}

async fn set_perm(central: &Central, topic: &str, perm: i32) {
    let admin = Admin::new(central.client_config()).unwrap();
    let route = admin.topic_route(topic).await.unwrap();
    let q = &route.queue_datas[0];
    let cfg = TopicConfig {
        topic_name: topic.into(),
        read_queue_nums: q.read_queue_nums,
        write_queue_nums: q.write_queue_nums,
        perm,
        ..TopicConfig::default()
    };
    admin
        .create_topic(&Target::Broker(central.broker_addr()), &cfg)
        .await
        .unwrap();
    admin.shutdown().await;
}

async fn runtime_info(addr: &str) -> BTreeMap<String, String> {
    let admin = Admin::new(tern_client::ClientConfig::new(addr)).unwrap();
    let info = admin.broker_runtime_info(addr).await.unwrap();
    admin.shutdown().await;
    info
}

#[test]
fn a_topic_the_cluster_will_not_take_waits_while_the_others_flow_and_arrives_in_order_once_allowed()
{
    // Seconds instead of minutes between tries of the blocked topic, for the test.
    let conf = "edgeBlockedRetryMs=1000\nedgeBlockedRetryMaxMs=4000\n";
    with_gateway(conf, async |central, edge| {
        let p = edge.producer("sensors");
        let mut locked = send(&p, "Locked", 0..15).await;
        let mut open = send(&p, "Open", 0..15).await;
        wait_until(
            "both topics forwarded",
            Duration::from_secs(90),
            async || {
                stored(central, "Locked", &locked).await == 15
                    && stored(central, "Open", &open).await == 15
            },
        )
        .await;

        // Read-only centrally (perm 4: PERM_READ).
        set_perm(central, "Locked", 4).await;
        for round in 0..4 {
            let at = 15 + round * 10;
            locked.extend(send(&p, "Locked", at..at + 10).await);
            open.extend(send(&p, "Open", at..at + 10).await);
        }
        all_stored(
            central,
            "Open",
            &open,
            "the open topic keeps flowing",
            Duration::from_secs(90),
        )
        .await;
        wait_until(
            "the blocked topic shown",
            Duration::from_secs(60),
            async || {
                let info = runtime_info(&edge.broker).await;
                info.get("edgeBlockedTopicCount").map(String::as_str) == Some("1")
                    && info
                        .get("edgeBlockedTopics")
                        .is_some_and(|t| t.starts_with("Locked: NO_PERMISSION"))
            },
        )
        .await;
        // Several tries later (1 s, 2 s, 4 s...), still one line about it.
        tern_shell::runtime::sleep(Duration::from_secs(8)).await;
        assert_eq!(
            stored(central, "Locked", &locked).await,
            15,
            "sent past a refusal"
        );
        let log = edge.log();
        assert_eq!(
            log.matches("topic Locked held (NO_PERMISSION").count(),
            1,
            "logged once per change of state:\n{log}"
        );

        set_perm(central, "Locked", 6).await;
        all_stored(
            central,
            "Locked",
            &locked,
            "the parked messages forwarded",
            Duration::from_secs(120),
        )
        .await;
        // The line follows the forward that drained it; under qemu it can trail the
        // central store by a moment.
        wait_until(
            "the flowing-again line",
            Duration::from_secs(10),
            async || edge.log().contains("topic Locked flowing again"),
        )
        .await;
        let info = runtime_info(&edge.broker).await;
        assert_eq!(
            info.get("edgeBlockedTopicCount").map(String::as_str),
            Some("0")
        );
        // Nothing was forwarded twice.
        assert_eq!(central.messages("Locked").await.1, locked.len());
        assert_eq!(central.messages("Open").await.1, open.len());
        p.shutdown().await;
    });
}
