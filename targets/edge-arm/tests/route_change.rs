//! Per-key order across a central route change: the central cluster has two brokers
//! behind one name server; one is killed mid-stream (its queues leave the route) and
//! started again. Every key's messages stay in the one central queue they started in,
//! in order.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{Central, CentralBroker, Edge, run};
use tern_client::admin::Target;
use tern_client::{Admin, Message, Producer};
use tern_shell::body::TopicConfig;
use tern_testkit::wait_until;

const DEVICES: usize = 8;

async fn send(
    p: &Producer,
    range: std::ops::Range<usize>,
    sent: &mut BTreeMap<String, (usize, usize)>,
) {
    for i in range {
        let dev = i % DEVICES;
        let r = p
            .send_ordered(
                Message::new("Keys", format!("{dev} {i}")),
                &format!("device-{dev}"),
            )
            .await
            .unwrap_or_else(|e| panic!("reading {i}: {e}"));
        sent.insert(r.msg_id, (dev, i));
    }
}

async fn brokers_in_route(admin: &Admin) -> BTreeSet<String> {
    admin
        .topic_route("Keys")
        .await
        .map(|r| r.queue_datas.into_iter().map(|q| q.broker_name).collect())
        .unwrap_or_default()
}

#[test]
fn each_key_stays_in_its_central_queue_in_order_while_a_central_broker_leaves_and_returns() {
    let central = Central::started();
    let mut b = CentralBroker::started(&central, "broker-b");
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "edgeRetryMaxMs=1000\n");
    run(async {
        let admin = Admin::new(central.client_config()).unwrap();
        let cfg = TopicConfig {
            topic_name: "Keys".into(),
            read_queue_nums: 4,
            write_queue_nums: 4,
            perm: 6,
            ..TopicConfig::default()
        };
        admin
            .create_topic(&Target::Cluster("DefaultCluster".into()), &cfg)
            .await
            .unwrap();
        wait_until(
            "Keys on both brokers",
            Duration::from_secs(30),
            async || brokers_in_route(&admin).await.len() == 2,
        )
        .await;

        // 8 local queues too, so keys map onto both brokers' queues.
        let local = Admin::new(edge.client_config()).unwrap();
        local
            .create_topic(
                &Target::Broker(edge.broker.clone()),
                &TopicConfig {
                    write_queue_nums: 8,
                    read_queue_nums: 8,
                    ..cfg.clone()
                },
            )
            .await
            .unwrap();
        local.shutdown().await;
        let p = edge.producer("sensors");
        let mut sent = BTreeMap::new();
        send(&p, 0..80, &mut sent).await;
        wait_until(
            "the first stretch forwarded",
            Duration::from_secs(90),
            async || central.messages("Keys").await.0.len() == 80,
        )
        .await;

        b.kill9();
        wait_until(
            "broker-b out of the route",
            Duration::from_secs(30),
            async || brokers_in_route(&admin).await.len() == 1,
        )
        .await;
        // Longer than the forwarder's route refresh (30 s): it sees the smaller route.
        for round in 0..8 {
            let at = 80 + round * 10;
            send(&p, at..at + 10, &mut sent).await;
            tern_shell::runtime::sleep(Duration::from_secs(5)).await;
        }
        b.start();
        send(&p, 160..240, &mut sent).await;
        wait_until(
            "everything forwarded",
            Duration::from_secs(180),
            async || {
                let got = central.messages("Keys").await.0;
                sent.keys().all(|id| got.contains_key(id))
            },
        )
        .await;

        let (got, _) = central.messages("Keys").await;
        let mut ms: Vec<_> = got.values().collect();
        ms.sort_by_key(|m| (m.store_host, m.queue_id, m.queue_offset));
        let mut queues: BTreeMap<usize, BTreeSet<(std::net::SocketAddr, i32)>> = BTreeMap::new();
        let mut last: BTreeMap<usize, usize> = BTreeMap::new();
        for m in ms {
            let (dev, i) = sent[m.msg_id()];
            queues
                .entry(dev)
                .or_default()
                .insert((m.store_host, m.queue_id));
            if let Some(prev) = last.insert(dev, i) {
                assert!(prev < i, "device {dev}: {i} after {prev}");
            }
        }
        for (dev, qs) in &queues {
            assert_eq!(
                qs.len(),
                1,
                "device {dev} moved between central queues: {qs:?}"
            );
        }
        let brokers: BTreeSet<_> = queues.values().flatten().map(|(host, _)| *host).collect();
        assert_eq!(brokers.len(), 2, "keys on both central brokers");
        assert_eq!(queues.len(), DEVICES);
        p.shutdown().await;
        admin.shutdown().await;
    });
    edge.stop();
}
