//! A master and its slave (HA replication) under Tern's own client, each a real process
//! registering with a name server of its own: SYNC_MASTER sends come back SEND_OK only
//! once the slave holds them, and after the master is killed with `kill -9` a consumer
//! reads every acknowledged message from the slave.

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Broker, NameSrv, run};
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageBuilder, MessageExt, Producer,
    ProducerConfig, PushConsumer, PushConsumerConfig, SendStatus,
};
use tern_shell::runtime::sleep;

const TOPIC: &str = "HaTopic";

fn msg(i: usize) -> Message {
    Message::new(TOPIC, format!("replicated {i}")).with_keys([format!("k{i}")])
}

#[test]
fn acknowledged_messages_are_read_from_the_slave_after_the_master_is_killed() {
    let ns = NameSrv::start();
    let mut master = Broker::with_namesrv(&ns.addr, "brokerRole=SYNC_MASTER\nhaListenPort=0\n");
    let slave = Broker::with_namesrv(
        &ns.addr,
        "brokerRole=SLAVE\nbrokerId=1\nhaSendHeartbeatInterval=500\n",
    );
    let acked = run(async {
        master.create_topic(TOPIC, 4).await;
        let p = Producer::new(ProducerConfig::new("ha-pg"), master.client_config()).unwrap();
        p.start();
        // Until the slave is connected, sends are stored but not replicated.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut i = 0;
        loop {
            let r = p.send(msg(i)).await.unwrap();
            i += 1;
            if r.status == SendStatus::SendOk {
                break;
            }
            assert_eq!(r.status, SendStatus::SlaveNotAvailable);
            assert!(Instant::now() < deadline, "the slave never caught up");
            sleep(Duration::from_millis(100)).await;
        }
        let mut acked = BTreeSet::new();
        for i in 1000..1300 {
            let r = p.send(msg(i)).await.unwrap();
            assert_eq!(r.status, SendStatus::SendOk, "message {i}");
            acked.insert(format!("k{i}"));
        }
        p.shutdown().await;
        acked
    });
    master.kill9();

    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    run(async {
        let mut cfg = PushConsumerConfig::new("ha-cg");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let c = PushConsumer::new(cfg, slave.client_config()).unwrap();
        c.subscribe(TOPIC, "*").unwrap();
        let log = seen.clone();
        c.register_concurrent(move |msgs: &[MessageExt], _: &mut ConsumeContext| {
            let mut l = log.lock().unwrap();
            for m in msgs {
                l.insert(m.properties.get("KEYS").cloned().unwrap_or_default());
            }
            ConsumeStatus::Success
        });
        c.start().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !acked.is_subset(&seen.lock().unwrap()) {
            assert!(
                Instant::now() < deadline,
                "{} of {} acknowledged messages read from the slave; slave log:\n{}",
                acked.intersection(&seen.lock().unwrap()).count(),
                acked.len(),
                slave.log()
            );
            sleep(Duration::from_millis(100)).await;
        }
        c.shutdown().await;
    });
}
