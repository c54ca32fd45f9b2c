//! The producer's latency fault avoidance against the real `tern-broker --standalone`.

mod common;

use common::{Broker, run};
use tern_client::{Message, Producer, ProducerConfig, SendStatus};

#[test]
fn sends_record_latency_and_fall_back_when_every_broker_is_unavailable() {
    let b = Broker::start("");
    run(async {
        let mut cfg = ProducerConfig::new("fault-pg");
        assert!(!cfg.send_latency_fault_enable, "off by default, as in Java");
        cfg.send_latency_fault_enable = true;
        let p = Producer::new(cfg, b.client_config()).unwrap();
        p.start();
        for i in 0..5 {
            let r = p
                .send(Message::new("FaultT", format!("m{i}")))
                .await
                .unwrap();
            assert_eq!(r.status, SendStatus::SendOk);
        }
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
