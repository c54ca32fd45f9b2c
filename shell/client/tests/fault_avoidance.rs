//! The producer's latency fault avoidance against the real `tern-broker --standalone`.

use crate::common;

use common::{Broker, run, send_ok};
use tern_client::{Message, Producer, ProducerConfig};

#[test]
fn sends_record_latency_and_fall_back_when_every_broker_is_unavailable() {
    let b = Broker::start("");
    run(async {
        let mut cfg = ProducerConfig::new("fault-pg");
        assert!(!cfg.send_latency_fault_enable, "off by default, as in Java");
        cfg.send_latency_fault_enable = true;
        let p = Producer::new(cfg, b.client_config()).unwrap();
        p.start();
        send_ok(&p, "FaultT", 5, |i| format!("m{i}")).await;
        let faults = p.latency_faults();
        assert!(faults.is_available("broker-a"), "fast local sends");
        // The only broker put aside: sends still go to it rather than failing.
        faults.record("broker-a", 0, true);
        assert!(!faults.is_available("broker-a"));
        let r = p.send(Message::new("FaultT", "fallback")).await.unwrap();
        assert_eq!(r.queue.broker_name, "broker-a");
        assert!(faults.is_available("broker-a"), "its fast send cleared it");
        p.shutdown().await;
    });
}

/// Two brokers serve a topic; one is killed. Sync and async sends retry on the other
/// broker and all succeed; with fault avoidance on, the dead broker is put aside after
/// its first failure, so later sends do not try it first.
#[test]
fn sends_retry_on_the_other_broker_and_avoid_a_dead_one() {
    let a = Broker::start("");
    let mut b = Broker::join(&a, "brokerName=broker-b\n");
    run(async {
        a.create_topic("TwoBrokers", 4).await;
        for avoid in [false, true] {
            let mut cfg = ProducerConfig::new(format!("two-pg-{avoid}"));
            cfg.send_latency_fault_enable = avoid;
            let p = Producer::new(cfg, a.client_config()).unwrap();
            p.start();
            let mut used = std::collections::BTreeSet::new();
            for i in 0..16 {
                let r = p
                    .send(Message::new("TwoBrokers", format!("before {i}")))
                    .await
                    .unwrap();
                used.insert(r.queue.broker_name);
            }
            assert_eq!(
                used.into_iter().collect::<Vec<_>>(),
                ["broker-a", "broker-b"],
                "round robin spans both brokers"
            );
            p.shutdown().await;
        }
    });
    // The producers below cached the route with both brokers before the kill, as a
    // running application would have.
    run(async {
        let mut producers = Vec::new();
        for avoid in [false, true] {
            let mut cfg = ProducerConfig::new(format!("kill-pg-{avoid}"));
            cfg.send_latency_fault_enable = avoid;
            let p = Producer::new(cfg, a.client_config()).unwrap();
            p.start();
            p.send(Message::new("TwoBrokers", "warm")).await.unwrap();
            producers.push((avoid, p));
        }
        b.kill9();
        for (avoid, p) in &producers {
            for i in 0..40 {
                let r = p
                    .send(Message::new("TwoBrokers", format!("after {i}")))
                    .await
                    .unwrap_or_else(|e| panic!("avoid={avoid}: send {i} failed: {e}"));
                assert_eq!(r.queue.broker_name, "broker-a", "only broker-a is alive");
            }
            let futures: Vec<_> = (0..40)
                .map(|i| p.send_async(Message::new("TwoBrokers", format!("async {i}"))))
                .collect();
            for f in futures {
                let r = f
                    .await
                    .unwrap_or_else(|e| panic!("avoid={avoid}: async: {e}"));
                assert_eq!(r.queue.broker_name, "broker-a");
            }
            if *avoid {
                assert!(
                    !p.latency_faults().is_available("broker-b"),
                    "the dead broker is put aside"
                );
            }
        }
        for (_, p) in producers {
            p.shutdown().await;
        }
    });
}
