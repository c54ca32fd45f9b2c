//! A master and its slave (HA replication) under Tern's own client, each a real process
//! registering with a name server of its own: SYNC_MASTER sends come back SEND_OK only
//! once the slave holds them, and after the master is killed with `kill -9` a consumer
//! reads every acknowledged message from the slave.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{Broker, LogOf, NameSrv, Sink, recorder, run, wait_for};
use tern_client::{
    ConsumeFromWhere, Message, MessageBuilder, PushConsumer, PushConsumerConfig, SendStatus,
};
use tern_testkit::wait_until;

const TOPIC: &str = "HaTopic";

fn msg(i: usize) -> Message {
    Message::new(TOPIC, format!("replicated {i}")).with_keys([format!("k{i}")])
}

/// A started push consumer of `TOPIC` from its first offset, through `broker`'s name
/// server, and the keys it has consumed.
async fn keys_consumer(
    mut cfg: PushConsumerConfig,
    broker: &Broker,
) -> (PushConsumer, Sink<String>) {
    cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
    let seen: Sink<String> = Sink::default();
    let listener = recorder(&seen, |m, _| {
        m.properties.get("KEYS").cloned().unwrap_or_default()
    });
    (broker.push_consumer(cfg, TOPIC, listener).await, seen)
}

/// The distinct keys in `seen`.
fn distinct(seen: &Sink<String>) -> BTreeSet<String> {
    seen.lock().unwrap().iter().cloned().collect()
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
        let p = master.producer("ha-pg");
        // Until the slave is connected, sends are stored but not replicated.
        let mut i = 0;
        tern_testkit::wait_until(
            "the slave never caught up",
            Duration::from_secs(20),
            async || {
                let r = p.send(msg(i)).await.unwrap();
                i += 1;
                if r.status == SendStatus::SendOk {
                    return true;
                }
                assert_eq!(r.status, SendStatus::SlaveNotAvailable);
                false
            },
        )
        .await;
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

    run(async {
        let (c, seen) = keys_consumer(PushConsumerConfig::new("ha-cg"), &slave).await;
        let what = "every acknowledged message read from the slave";
        wait_for(what, Duration::from_secs(60), async || {
            let got = distinct(&seen);
            if acked.is_subset(&got) {
                return Ok(());
            }
            let read = acked.intersection(&got).count();
            Err((read, acked.len(), LogOf(&slave)))
        })
        .await;
        c.shutdown().await;
    });
}

/// Messages the broker at `addr` handed out today, from its runtime info.
pub(crate) async fn messages_served(admin: &tern_client::Admin, addr: &str) -> u64 {
    let info = admin.broker_runtime_info(addr).await.unwrap();
    info["msgGetTotalTodayNow"].parse().unwrap()
}

/// A name server, a SYNC_MASTER and its slave (id 1), both with `slaveReadEnable` and
/// `accessMessageInMemoryMaxRatio=0`: any reader with a record after the one it read is
/// "far behind", so the master suggests the group's `whichBrokerWhenConsumeSlowly` (1)
/// for every pull that found messages, and the slave sends a reader it has nothing for
/// back to the master. Returns once `n` keyed messages of `topic` (2 queues) are
/// acknowledged by both, with their keys.
pub(crate) fn slave_read_pair(topic: &str, n: usize) -> (NameSrv, Broker, Broker, Vec<String>) {
    let read = "slaveReadEnable=true\naccessMessageInMemoryMaxRatio=0\n";
    let ns = NameSrv::start();
    let master = Broker::with_namesrv(
        &ns.addr,
        &format!("brokerRole=SYNC_MASTER\nhaListenPort=0\n{read}"),
    );
    let slave = Broker::with_namesrv(
        &ns.addr,
        &format!("brokerRole=SLAVE\nbrokerId=1\nhaSendHeartbeatInterval=500\n{read}"),
    );
    let keys = run(async {
        master.create_topic(topic, 2).await;
        let p = master.producer("read-pg");
        // Bodies as the C++ interop script checks them.
        let m =
            |i: usize| Message::new(topic, format!("restart k{i}")).with_keys([format!("k{i}")]);
        tern_testkit::wait_until(
            "the slave never caught up",
            Duration::from_secs(20),
            async || p.send(m(0)).await.unwrap().status == SendStatus::SendOk,
        )
        .await;
        for i in 1..n {
            assert_eq!(p.send(m(i)).await.unwrap().status, SendStatus::SendOk);
        }
        p.shutdown().await;
        (0..n).map(|i| format!("k{i}")).collect()
    });
    (ns, master, slave, keys)
}

#[test]
fn pulls_go_to_the_slave_a_master_suggests_and_back_when_caught_up() {
    let (_ns, master, slave, keys) = slave_read_pair(TOPIC, 300);
    run(async {
        let sent: BTreeSet<String> = keys.into_iter().collect();
        let admin = tern_client::Admin::new(master.client_config()).unwrap();
        let slave_before = messages_served(&admin, &slave.addr).await;
        let mut cfg = PushConsumerConfig::new("read-cg");
        cfg.pull_batch_size = 8;
        let (c, seen) = keys_consumer(cfg, &master).await;
        wait_until(
            "every message consumed",
            Duration::from_secs(60),
            async || sent.is_subset(&distinct(&seen)),
        )
        .await;
        let from_slave = messages_served(&admin, &slave.addr).await - slave_before;
        let from_master = messages_served(&admin, &master.addr).await;
        assert!(
            from_slave >= 100,
            "the slave handed out {from_slave} messages, the master {from_master}"
        );
        // Caught up, the consumer is back on the master: a new message comes from it.
        let before = messages_served(&admin, &master.addr).await;
        let p = master.producer("read-pg");
        assert_eq!(p.send(msg(1000)).await.unwrap().status, SendStatus::SendOk);
        wait_until("k1000 consumed", Duration::from_secs(20), async || {
            distinct(&seen).contains("k1000")
        })
        .await;
        assert!(
            messages_served(&admin, &master.addr).await > before,
            "a caught-up reader pulls from the master"
        );
        c.shutdown().await;
        p.shutdown().await;
        admin.shutdown().await;
    });
}
