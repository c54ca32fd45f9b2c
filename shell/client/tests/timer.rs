//! Timer messages from Tern's producer through the real `tern-broker --standalone`:
//! `with_delay_sec` / `with_delay_ms` / `with_deliver_time_ms` set RocketMQ 5's properties,
//! the send answers a recall handle, and `Producer::recall` cancels a message before it
//! is due while its sibling in the same second arrives on time.

use crate::common;

use std::time::Duration;

use common::{Broker, run};
use tern_client::{ClientError, Message, MessageBuilder, PullConsumer};
use tern_shell::runtime::{now_ms, sleep};

#[test]
fn timer_messages_wait_until_due_and_a_recalled_one_never_comes() {
    let b = Broker::start("recallMessageEnable=true\n");
    run(async {
        let p = b.producer("timer-pg");
        let t0 = now_ms();
        let kinds = [
            Message::new("Timed", "sec")
                .with_keys(["sec"])
                .with_delay_sec(2),
            Message::new("Timed", "ms")
                .with_keys(["ms"])
                .with_delay_ms(2_000),
            Message::new("Timed", "at")
                .with_keys(["at"])
                .with_deliver_time_ms(t0 + 2_000),
            Message::new("Timed", "gone")
                .with_keys(["gone"])
                .with_delay_sec(2),
        ];
        let mut handles = Vec::new();
        for m in kinds {
            let r = p.send(m).await.unwrap();
            handles.push(
                r.recall_handle
                    .expect("a timer message has a recall handle"),
            );
        }
        let plain = p.send(Message::new("Timed", "now")).await.unwrap();
        assert!(plain.recall_handle.is_none());
        let id = p.recall("Timed", &handles[3]).await.unwrap();
        assert!(!id.is_empty());
        match p.recall("Timed", "garbage").await {
            Err(ClientError::InvalidMessage(_)) => {}
            other => panic!("{other:?}"),
        }

        let c = PullConsumer::new("timer-check", b.client_config()).unwrap();
        c.start().await;
        let queues = c.fetch_queues("Timed").await.unwrap();
        let mut got = Vec::new();
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(30), async || {
                got.clear();
                for q in &queues {
                    let r = c.pull(q, 0, 32).await.unwrap();
                    got.extend(r.messages);
                }
                got.len() >= 4
            })
            .await,
            "{} of 4 arrived",
            got.len()
        );
        // Past the slot: the recalled one stays away.
        sleep(Duration::from_millis((t0 + 4_000 - now_ms()).max(0) as u64)).await;
        got.clear();
        for q in &queues {
            got.extend(c.pull(q, 0, 32).await.unwrap().messages);
        }
        let key = |m: &tern_client::MessageExt| m.properties.get("KEYS").cloned();
        let mut keys: Vec<String> = got.iter().map(|m| key(m).unwrap_or_default()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["", "at", "ms", "sec"], "the recalled message came");
        for m in got.iter().filter(|m| key(m).is_some()) {
            assert!(m.store_timestamp >= t0 + 2_000 - 20, "{:?} early", key(m));
        }
        c.shutdown().await;
        p.shutdown().await;
    });
}
