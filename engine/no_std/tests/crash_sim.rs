//! Deterministic crash simulation: random appends, flushes, dispatches and checkpoints over
//! fault-injecting media, a power cut (or process crash, or failing media) at a random
//! point, recovery, and a comparison with a model of what was acknowledged.
//!
//! Every case is a seed. A failure prints it; replay one with
//! `TERN_SIM_SEED=<seed> cargo test -p tern-engine --test crash_sim`. `TERN_SIM_CASES`
//! sets how many cases run (default 2000).

mod support;

use std::collections::HashMap;

use support::*;
use tern_engine::Error;
use tern_engine::commitlog::Slot;
use tern_engine::faulty::{Crash, FaultPlan};
use tern_engine::ram::RamError;
use tern_engine::record::{MessageIn, RecordView};

/// Cuts power to the queues the store had open.
fn crash_table(table: &mut Table<'_>, rng: &mut Rng) {
    table.close_all();
    for (_, d) in table.closed.iter_mut() {
        crash_dir(d, rng);
    }
}

fn crash_kind(rng: &mut Rng, pending: usize, process: bool) -> Crash {
    if process {
        return Crash::Process;
    }
    if pending == 0 || rng.chance(40) {
        Crash::DropUnflushed
    } else {
        Crash::Torn {
            keep: rng.below(pending as u64) as usize,
            tear_at: rng.below(600) as usize,
        }
    }
}

static PROCESS_CRASH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn crash_dir(d: &mut Dir<'_>, rng: &mut Rng) {
    let process = PROCESS_CRASH.load(std::sync::atomic::Ordering::Relaxed);
    for (_, m) in d.segments_mut() {
        let kind = crash_kind(rng, m.pending_writes(), process);
        m.crash(kind);
    }
}

/// Runs random operations until `ops` are done or the media fail.
fn run_ops(
    store: &mut TestStore<'_>,
    rng: &mut Rng,
    sent: &mut Vec<Sent>,
    acked: &mut usize,
    ops: u64,
) -> Result<(), Error<RamError>> {
    for _ in 0..ops {
        match rng.below(100) {
            0..=59 => {
                let mut s = new_message(rng, sent.len() as u64);
                let stored = store.put(&message(&s), 1_700_000_000_000 + sent.len() as i64 * 7)?;
                s.offset = stored.at.offset;
                s.queue_offset = stored.queue_offset;
                sent.push(s);
            }
            60..=69 => {
                let first = new_message(rng, sent.len() as u64);
                let n = 1 + rng.below(4);
                let mut batch = vec![first.clone()];
                for i in 1..n {
                    let mut m = new_message(rng, sent.len() as u64 + i);
                    m.topic = first.topic;
                    m.queue_id = first.queue_id;
                    batch.push(m);
                }
                let msgs: Vec<MessageIn<'_>> = batch.iter().map(message).collect();
                let mut landed = Vec::new();
                store.put_batch(&msgs, 1_700_000_000_000 + sent.len() as i64 * 7, &mut |s| {
                    landed.push(s)
                })?;
                for (mut m, s) in batch.into_iter().zip(landed) {
                    m.offset = s.at.offset;
                    m.queue_offset = s.queue_offset;
                    sent.push(m);
                }
            }
            70..=84 => {
                let flushed = store.flush_log()?;
                *acked = sent.iter().take_while(|s| s.offset < flushed).count();
            }
            85..=94 => {
                store.dispatch(&mut [], &mut |_| {})?;
            }
            _ => {
                store.dispatch(&mut [], &mut |_| {})?;
                store.checkpoint()?;
                let flushed = store.log().flushed_offset();
                *acked = sent.iter().take_while(|s| s.offset < flushed).count();
            }
        }
    }
    Ok(())
}

/// Checks the recovered store against the model; returns how many sent messages survived.
fn verify(
    store: &TestStore<'_>,
    sent: &[Sent],
    acked: usize,
    process_crash: bool,
    seed: u64,
) -> usize {
    // 1. The log is a prefix of what was sent, at least as long as what was flushed.
    let log = store.log();
    let mut pos = log.min_offset();
    let mut found = 0usize;
    while pos < log.max_offset() {
        match log.slot_at(pos).unwrap() {
            Slot::Skip(next) => pos = next,
            Slot::End => break,
            Slot::Record(size) => {
                let s = sent
                    .get(found)
                    .unwrap_or_else(|| panic!("seed {seed}: record at {pos} was never sent"));
                log.with_record(pos, size, &mut [], |v| {
                    let v: RecordView<'_> = v.unwrap();
                    v.verify_crc().unwrap();
                    assert_eq!(v.physical_offset() as u64, s.offset, "seed {seed}: order");
                    assert_eq!(v.body(), &s.body[..], "seed {seed}: body of #{found}");
                    assert_eq!(v.topic(), s.topic.as_bytes());
                    assert_eq!(v.queue_id(), s.queue_id);
                    assert_eq!(
                        v.queue_offset() as u64,
                        s.queue_offset,
                        "seed {seed}: queue offset of #{found}"
                    );
                    Ok(())
                })
                .unwrap();
                found += 1;
                pos += u64::from(size);
            }
        }
    }
    assert_eq!(pos, log.max_offset(), "seed {seed}: log end");
    assert!(
        found >= acked,
        "seed {seed}: {acked} acknowledged but only {found} recovered"
    );
    if process_crash {
        assert_eq!(
            found,
            sent.len(),
            "seed {seed}: a process crash loses nothing written"
        );
    }
    // 2. Every surviving message is in its queue exactly once, in order; nothing else is.
    let mut per_queue: HashMap<(&str, i32), Vec<&Sent>> = HashMap::new();
    for s in &sent[..found] {
        per_queue.entry((s.topic, s.queue_id)).or_default().push(s);
    }
    for topic in TOPICS {
        for q in 0..2 {
            let want = per_queue.get(&(topic, q)).map(Vec::as_slice).unwrap_or(&[]);
            let Some(cq) = store.queue(topic, q) else {
                assert!(want.is_empty(), "seed {seed}: queue {topic}/{q} missing");
                continue;
            };
            assert_eq!(
                cq.max_offset(),
                want.len() as u64,
                "seed {seed}: {topic}/{q} length"
            );
            for (i, s) in want.iter().enumerate() {
                let e = cq.get(i as u64).unwrap().unwrap_or_else(|| {
                    panic!(
                        "seed {seed}: {topic}/{q}#{i} missing (min {}, max {}, want {:?})",
                        cq.min_offset(),
                        cq.max_offset(),
                        want.iter().map(|s| s.offset).collect::<Vec<_>>()
                    )
                });
                assert_eq!(e.physical_offset, s.offset, "seed {seed}: {topic}/{q}#{i}");
            }
        }
    }
    // 3. The index finds every surviving key.
    for s in &sent[..found] {
        if let Some(k) = &s.key {
            let mut hits = Vec::new();
            store
                .index()
                .query(s.topic, k, 64, 0, i64::MAX, &mut |o| hits.push(o))
                .unwrap();
            assert!(
                hits.contains(&s.offset),
                "seed {seed}: key {k} at {} not indexed (found {hits:?}, acked {acked}, process {process_crash}, files {})",
                s.offset,
                store.index().file_count()
            );
        }
    }
    found
}

fn run_case(seed: u64) {
    let mut rng = Rng(seed);
    let plan = FaultPlan::none();
    let mut arena = Arena::new();
    let mut store = open(arena.parts(&plan), false).unwrap();

    let mut sent = Vec::new();
    let mut acked = 0;
    // Sometimes the media start failing partway: the run stops at the first error.
    if rng.chance(25) {
        plan.refuel(50 + rng.below(400));
    }
    let ops = 20 + rng.below(120);
    let failed = run_ops(&mut store, &mut rng, &mut sent, &mut acked, ops).is_err();
    plan.refuel(u64::MAX);

    let process = !failed && rng.chance(15);
    PROCESS_CRASH.store(process, std::sync::atomic::Ordering::Relaxed);
    let (mut log, mut index, mut table, mut checkpoint) = store.into_parts();
    crash_dir(&mut log, &mut rng);
    crash_dir(&mut index, &mut rng);
    crash_table(&mut table, &mut rng);
    let kind = crash_kind(&mut rng, checkpoint.pending_writes(), process);
    checkpoint.crash(kind);

    let mut store = open(
        Parts {
            log,
            index,
            table,
            checkpoint,
        },
        true,
    )
    .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:?}"));
    let found = verify(&store, &sent, acked, process, seed);
    sent.truncate(found);

    // The store goes on: new messages get the next queue offsets, and a clean close and
    // reopen keeps everything.
    let mut acked = found;
    run_ops(&mut store, &mut rng, &mut sent, &mut acked, 30)
        .unwrap_or_else(|e| panic!("seed {seed}: after recovery: {e:?}"));
    let (log, index, table, checkpoint) = store.close(&mut []).unwrap();
    let mut table = table;
    table.close_all();
    let store = open(
        Parts {
            log,
            index,
            table,
            checkpoint,
        },
        false,
    )
    .unwrap();
    let found = verify(&store, &sent, sent.len(), true, seed);
    assert_eq!(
        found,
        sent.len(),
        "seed {seed}: clean close keeps everything"
    );
}

#[test]
fn recovery_after_random_crashes_keeps_every_acknowledged_message() {
    if let Ok(seed) = std::env::var("TERN_SIM_SEED") {
        let seed = seed.parse().expect("TERN_SIM_SEED is a number");
        in_big_stack(move || run_case(seed)).expect("replayed case failed");
        return;
    }
    let cases: u64 = std::env::var("TERN_SIM_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    let base = std::env::var("TERN_SIM_BASE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0xC0FFEE);
    for i in 0..cases {
        let seed = base + i;
        if in_big_stack(move || run_case(seed)).is_err() {
            panic!("crash simulation failed; replay with TERN_SIM_SEED={seed}");
        }
    }
}
