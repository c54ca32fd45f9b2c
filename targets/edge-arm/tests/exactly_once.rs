//! Effectively once: a gateway killed with `kill -9` while it forwards, again and again,
//! forwards its last stretch again each time; with the central broker's
//! idempotent-produce window on (`duplicateCheckWindowSeconds`) the central cluster still
//! holds every acknowledged message exactly once. Without it the same loop is only at
//! least once (its duplicates are logged, not asserted: they depend on timing).

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{Central, Edge, run};
use tern_client::{Message, MessageBuilder, Producer, ProducerConfig, SendStatus};
use tern_testkit::wait_until;

const TOPIC: &str = "Once";
/// Gateway kills while producers send and the forwarder forwards.
const LOOPS: usize = 6;

fn reading(i: usize) -> Message {
    Message::new(TOPIC, format!("reading {i}")).with_keys([format!("r{i}")])
}

/// Sends readings from `from` to the gateway at `namesrv` until `stop` is set, `max` are
/// sent, or a send fails (the gateway was killed); returns the acknowledged ids.
fn send_readings(namesrv: String, from: usize, max: usize, stop: Arc<AtomicBool>) -> Vec<String> {
    run(async move {
        let mut cfg = ProducerConfig::new("once-sensors");
        // One attempt each: a send the kill interrupted is simply not acknowledged.
        cfg.retry_times_when_send_failed = 0;
        let p = Producer::new(cfg, tern_client::ClientConfig::new(&namesrv)).unwrap();
        p.start();
        let mut acked = Vec::new();
        for i in from..from + max {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match p.send(reading(i)).await {
                Ok(r) if r.status == SendStatus::SendOk => acked.push(r.msg_id),
                _ => break,
            }
        }
        // The gateway may be dead: do not wait long for the goodbyes.
        let _ = tern_shell::runtime::timeout(Duration::from_secs(5), p.shutdown()).await;
        acked
    })
}

/// Runs the kill loop against `central`; returns the acknowledged ids, and the central
/// store's distinct ids and total count once everything acknowledged has arrived.
fn kill_loop(central: &Central) -> (BTreeSet<String>, usize, usize) {
    // Small batches: more forwards in flight when the kill comes.
    let (_dir, mut edge) = Edge::start_in_temp(&central.namesrv, "edgeForwardBatch=16\n");
    let mut acked = BTreeSet::new();
    let mut next = 0;
    let started = Instant::now();
    for round in 0..LOOPS {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, flag) = (edge.namesrv.clone(), stop.clone());
        let sender = thread::spawn(move || send_readings(ns, next, 100_000, flag));
        // Killed at a different point of its forwarding each round.
        thread::sleep(Duration::from_millis(500 + 170 * round as u64));
        edge.kill9();
        stop.store(true, Ordering::Relaxed);
        let ids = sender.join().unwrap();
        next += ids.len() + 1_000;
        eprintln!(
            "round {round}: {} acknowledged before the kill ({:?} in)",
            ids.len(),
            started.elapsed()
        );
        acked.extend(ids);
        edge.crash_and_restart();
    }
    // A last stretch with no kill: once it is central, everything before it in the
    // gateway's log has been forwarded too (forwarding is in log order).
    let last = send_readings(edge.namesrv.clone(), next, 200, Arc::default());
    assert_eq!(last.len(), 200, "the restarted gateway takes sends");
    acked.extend(last);
    run(wait_until(
        "every acknowledged message forwarded",
        Duration::from_secs(120),
        async || {
            let (got, _) = central.messages(TOPIC).await;
            acked.iter().all(|id| got.contains_key(id))
        },
    ));
    // Stopped cleanly: nothing more is forwarded after the count.
    edge.stop();
    let (got, total) = run(central.messages(TOPIC));
    assert!(acked.iter().all(|id| got.contains_key(id)));
    eprintln!(
        "{} acknowledged; central holds {} distinct, {total} in all, after {LOOPS} kills in {:?}",
        acked.len(),
        got.len(),
        started.elapsed()
    );
    (acked, got.len(), total)
}

#[test]
fn with_the_central_window_a_gateway_killed_mid_batch_again_and_again_forwards_each_message_once() {
    let central = Central::started_with("duplicateCheckWindowSeconds=600\n");
    let (acked, distinct, total) = kill_loop(&central);
    assert!(acked.len() >= 200);
    assert_eq!(
        total, distinct,
        "{} copies stored for {distinct} messages",
        total
    );
    // Messages whose acknowledgement the kill cut off may be there too (stored on the
    // gateway, forwarded): each at most once, as the equality above says.
    assert!(distinct >= acked.len());
}

#[test]
fn without_the_window_the_same_loop_is_at_least_once() {
    let central = Central::started();
    let (acked, distinct, total) = kill_loop(&central);
    assert!(acked.len() >= 200 && distinct >= acked.len());
    eprintln!(
        "without duplicateCheckWindowSeconds: {} duplicate copies centrally",
        total - distinct
    );
}
