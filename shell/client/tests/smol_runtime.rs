//! The SDK driven from smol, the edge gateway's runtime, instead of async-std: the API
//! holds no runtime-specific types, and both runtimes share async-io's reactor.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Broker, send_ok};
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, PushConsumer,
    PushConsumerConfig, SendStatus,
};

#[test]
fn produce_and_push_consume_under_smol() {
    let b = Broker::start("");
    smol::block_on(async {
        b.create_topic("SmolT", 4).await;
        let p = b.producer("smol-pg");
        send_ok(&p, "SmolT", 50, |i| format!("sync {i}")).await;
        let pending: Vec<_> = (0..50)
            .map(|i| p.send_async(Message::new("SmolT", format!("async {i}"))))
            .collect();
        for f in pending {
            assert_eq!(f.await.unwrap().status, SendStatus::SendOk);
        }
        p.send_batch(
            (0..20)
                .map(|i| Message::new("SmolT", format!("batch {i}")))
                .collect(),
        )
        .await
        .unwrap();

        let mut cfg = PushConsumerConfig::new("smol-cg");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let c = PushConsumer::new(cfg, b.client_config()).unwrap();
        c.subscribe("SmolT", "*").unwrap();
        let got: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = got.clone();
        c.register_concurrent(move |msgs: &[MessageExt], _: &mut ConsumeContext| {
            let mut g = sink.lock().unwrap();
            g.extend(
                msgs.iter()
                    .map(|m| String::from_utf8_lossy(&m.body).into_owned()),
            );
            ConsumeStatus::Success
        });
        c.start().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.lock().unwrap().len() < 120 {
            assert!(
                Instant::now() < deadline,
                "only {} consumed",
                got.lock().unwrap().len()
            );
            smol::Timer::after(Duration::from_millis(20)).await;
        }
        let mut bodies = got.lock().unwrap().clone();
        bodies.sort();
        bodies.dedup();
        assert_eq!(bodies.len(), 120, "every message once or more");
        c.shutdown().await;
        p.shutdown().await;
    });
}
