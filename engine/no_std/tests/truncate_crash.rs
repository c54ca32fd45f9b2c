//! Truncation at a consistent point ([`Engine::truncate_log`]) under crashes: random
//! appends, flushes, dispatch passes, checkpoints and retention; a cut at a random record
//! boundary (sometimes with a two-phase checkpoint begun before it and finished after);
//! the media running out part way through the truncation, or a crash after it with more
//! appends in between; a power cut or process crash of every media its own way; recovery;
//! and then a check against a model of what was appended:
//!
//! - the log holds a prefix of what was appended, and nothing durable below the cut is
//!   lost;
//! - once the truncation reached its commit point (the log's end moved to the cut, even if
//!   a later step failed) or returned, no record past the cut ever comes back;
//! - each queue holds exactly the surviving records of its queue, at consecutive offsets;
//!   the index finds every surviving key and no truncated one;
//! - appends continue at the log's end with the next queue offsets, and a clean close and
//!   reopen keeps all of it.
//!
//! Every case is a seed; a failure names it. Replay one with
//! `TERN_TRUNCATE_SEED=<seed> cargo test -p tern-engine --test truncate_crash`;
//! `TERN_TRUNCATE_CASES` sets how many run (default 400).
//!
//! [`Engine::truncate_log`]: tern_engine::store::Engine::truncate_log

mod support;

use support::*;
use tern_engine::Error;
use tern_engine::faulty::FaultPlan;

/// Stops the store as a crash would and cuts power (or kills the process) under each
/// media its own way.
fn crash<'a>(store: TestEngine<'a>, rng: &mut Rng, process: bool) -> Parts<'a> {
    let mut p = Parts::from_store(store);
    crash_each(&mut p, rng, process);
    p
}

/// What the test knows.
struct Model {
    /// Every record appended and not cut, in log order.
    sent: Vec<Sent>,
    /// Numbers messages across the whole case (keys stay unique after a cut).
    serial: u64,
    /// The store said everything below this log offset is durable.
    flushed: u64,
}

impl Model {
    fn acked(&self) -> usize {
        acked(&self.sent, self.flushed)
    }

    fn put(
        &mut self,
        store: &mut TestEngine<'_>,
        rng: &mut Rng,
    ) -> Result<(), Error<tern_engine::ram::RamError>> {
        let mut s = new_message(rng, self.serial);
        self.serial += 1;
        put(store, &mut s, TS + self.serial as i64 * 7)?;
        self.sent.push(s);
        Ok(())
    }
}

/// Checks the store against `sent`: returns how many of them it holds (a prefix). Keys of
/// the records past that prefix must not be found where those records were.
fn check(store: &TestEngine<'_>, sent: &[Sent], seed: u64) -> usize {
    let log = store.log();
    let min = log.min_offset();
    let first = sent
        .iter()
        .position(|s| s.offset >= min)
        .unwrap_or(sent.len());
    let records = log_records(store);
    let found = first + records.len();
    assert!(found <= sent.len(), "seed {seed}: records never sent");
    for (i, (offset, body)) in records.iter().enumerate() {
        let s = &sent[first + i];
        assert_eq!(
            *offset,
            s.offset,
            "seed {seed}: record #{} offset",
            first + i
        );
        assert_eq!(body, &s.body, "seed {seed}: record #{} body", first + i);
    }
    let end = log.max_offset();
    if let Some(s) = sent.get(found) {
        assert!(s.offset >= end, "seed {seed}: a lost record below the end");
    }
    // Queues: exactly the surviving records, consecutive offsets, nothing past the end.
    assert_queues_hold(store, &sent[..found], min, seed);
    for topic in TOPICS {
        for q in 0..2 {
            if let Some(cq) = store.queue(topic, q) {
                assert!(
                    cq.max_physical_end() <= end,
                    "seed {seed}: {topic}/{q} past the end"
                );
            }
        }
    }
    // Index: surviving keys found; cut ones not found where their records were.
    let hits = |s: &Sent, k: &str| index_hits(store, s.topic, k);
    for s in &sent[first..found] {
        if let Some(k) = &s.key {
            assert!(hits(s, k).contains(&s.offset), "seed {seed}: key {k} lost");
        }
    }
    for s in &sent[found..] {
        if let Some(k) = &s.key {
            assert!(
                !hits(s, k).contains(&s.offset),
                "seed {seed}: key {k} of a cut record still indexed"
            );
        }
    }
    assert!(
        store.index().end_phy_offset() < end as i64 || end == 0,
        "seed {seed}: index ahead of the log"
    );
    found
}

/// Prints each queue's offsets and end, for TERN_TRUNCATE_DEBUG.
fn eprint_queues(store: &TestEngine<'_>) {
    for t in TOPICS {
        for q in 0..2 {
            if let Some(cq) = store.queue(t, q) {
                eprintln!(
                    "{t}/{q}: {}..{} end {}",
                    cq.min_offset(),
                    cq.max_offset(),
                    cq.max_physical_end()
                );
            }
        }
    }
}

/// Appends a few records after recovery: the first lands at the log's end (or, when it
/// does not fit the segment, at the next one) with its queue's next offset.
fn append_after(store: &mut TestEngine<'_>, model: &mut Model, rng: &mut Rng, seed: u64) {
    for _ in 0..1 + rng.below(8) {
        let end = store.log().max_offset();
        let next_segment = end - end % LOG_SEG + LOG_SEG;
        let mut s = new_message(rng, model.serial);
        model.serial += 1;
        let expect_q = model
            .sent
            .iter()
            .filter(|m| m.topic == s.topic && m.queue_id == s.queue_id)
            .count() as u64;
        put(store, &mut s, TS + model.serial as i64 * 7)
            .unwrap_or_else(|e| panic!("seed {seed}: put after the cut: {e:?}"));
        assert!(
            s.offset == end || (s.offset == next_segment && end != next_segment - LOG_SEG),
            "seed {seed}: appended at {} with the end at {end}",
            s.offset
        );
        assert_eq!(
            s.queue_offset, expect_q,
            "seed {seed}: queue offset after the cut"
        );
        model.sent.push(s);
    }
}

fn random_ops(store: &mut TestEngine<'_>, model: &mut Model, rng: &mut Rng, ops: u64) {
    for _ in 0..ops {
        match rng.below(20) {
            0..=13 => model.put(store, rng).unwrap(),
            14..=15 => model.flushed = store.flush_log().unwrap(),
            16..=17 => {
                store
                    .dispatch_some(&mut [], 1 + rng.below(8), u64::MAX, &mut |_| {})
                    .unwrap();
            }
            _ => {
                dispatch_all(store).unwrap();
                store.checkpoint().unwrap();
                model.flushed = store.log().flushed_offset();
            }
        }
    }
}

fn run_case(seed: u64) {
    let mut rng = Rng(seed);
    let plan = FaultPlan::none();
    let mut arena = Arena::new();
    let mut store = arena.parts(&plan).open(CONFIG, false).unwrap();
    let defer_rolls = seed % 2 == 1;
    store.defer_index_rolls(defer_rolls);
    let mut model = Model {
        sent: Vec::new(),
        serial: 0,
        flushed: 0,
    };
    let ops = 10 + rng.below(120);
    random_ops(&mut store, &mut model, &mut rng, ops);
    if rng.chance(20) {
        dispatch_all(&mut store).unwrap();
        store.checkpoint().unwrap();
        let upto = rng.below(store.log().max_offset() + 1);
        store.delete_before(upto).unwrap();
    }
    let (min, end) = (store.log().min_offset(), store.log().max_offset());
    let first = model
        .sent
        .iter()
        .position(|s| s.offset >= min)
        .unwrap_or(model.sent.len());

    // Offsets that are not cut points change nothing.
    if min > 0 {
        assert_eq!(store.truncate_log(min - 1, &mut []), Err(Error::OutOfRange));
    }
    assert_eq!(store.truncate_log(end + 1, &mut []), Err(Error::OutOfRange));
    if let Some(s) = model.sent.get(first) {
        let inside = s.offset + 1 + rng.below(40);
        assert_eq!(
            store.truncate_log(inside, &mut []),
            Err(Error::NotRecordBoundary),
            "seed {seed}"
        );
    }
    assert_eq!(
        store.log().max_offset(),
        end,
        "seed {seed}: a refused cut changed the log"
    );
    assert!(!store.is_failed());

    // The cut: a record's start, or the end.
    let k = first + rng.below((model.sent.len() - first) as u64 + 1) as usize;
    let offset = model.sent.get(k).map_or(end, |s| s.offset);
    let acked_before = model.acked();
    // Sometimes a two-phase checkpoint straddles the cut, as the broker's may.
    let straddling = rng.chance(25).then(|| {
        dispatch_all(&mut store).unwrap();
        store
            .checkpoint_begin(&mut |_, m, r| m.sync(r).unwrap())
            .unwrap()
    });
    let mid_cut = rng.chance(40);
    if mid_cut {
        plan.refuel(rng.below(80));
    }
    if std::env::var("TERN_TRUNCATE_DEBUG").is_ok() {
        eprintln!(
            "min {min} end {end} k {k} offset {offset} dispatched {} mid {mid_cut} sent {:?}",
            store.dispatched_offset(),
            model
                .sent
                .iter()
                .map(|s| (s.offset, s.topic, s.queue_id, s.queue_offset))
                .collect::<Vec<_>>()
        );
        eprint_queues(&store);
    }
    let result = store.truncate_log(offset, &mut []);
    if std::env::var("TERN_TRUNCATE_DEBUG").is_ok() {
        eprintln!("result {result:?} dispatched {}", store.dispatched_offset());
        eprint_queues(&store);
    }
    plan.refuel(u64::MAX);
    let process = rng.chance(20);
    match result {
        Err(e) => {
            assert!(
                mid_cut,
                "seed {seed}: truncation failed on healthy media: {e:?}"
            );
            assert!(
                store.is_failed(),
                "seed {seed}: a failed truncation must fail the store"
            );
            // The log's end moves to the cut at the commit point, not before.
            let committed = offset < end && store.log().max_offset() == offset;
            let _ = straddling; // Never finished: the store is failed.
            let mut reopened = crash(store, &mut rng, process)
                .open(CONFIG, true)
                .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:?}"));
            reopened.defer_index_rolls(defer_rolls);
            let found = check(&reopened, &model.sent, seed);
            if committed {
                assert_eq!(
                    found, k,
                    "seed {seed}: past the commit point, exactly the cut"
                );
            } else {
                assert!(
                    found >= acked_before.min(k),
                    "seed {seed}: durable record lost"
                );
                if process {
                    assert!(
                        found == k || found == model.sent.len(),
                        "seed {seed}: process crash kept {found} of {}, cut at {k}",
                        model.sent.len()
                    );
                }
            }
            model.sent.truncate(found);
            store = reopened;
        }
        Ok(done) => {
            assert_eq!(done.end_before, end);
            assert_eq!(store.log().max_offset(), offset, "seed {seed}: log end");
            // In memory at once: queues and index agree (and hold nothing of the cut
            // records), appends continue at the cut. A cut below the end dispatched
            // what was below it; one at the end changed nothing, reput goes on.
            if offset < end {
                assert_eq!(store.dispatched_offset(), offset, "seed {seed}: dispatched");
            }
            dispatch_all(&mut store).unwrap();
            assert_eq!(check(&store, &model.sent, seed), k);
            model.sent.truncate(k);
            model.flushed = offset;
            if rng.chance(50) {
                append_after(&mut store, &mut model, &mut rng, seed);
            }
            let ops = rng.below(20);
            random_ops(&mut store, &mut model, &mut rng, ops);
            if let Some(cp) = straddling {
                store.checkpoint_finish(cp).unwrap();
                assert!(
                    store.log().flushed_offset() <= store.log().max_offset(),
                    "seed {seed}"
                );
            }
            let acked = model.acked();
            assert!(
                acked >= k,
                "seed {seed}: the cut made everything below it durable"
            );
            let total = model.sent.len();
            let reopened = crash(store, &mut rng, process)
                .open(CONFIG, true)
                .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:?}"));
            store = reopened;
            store.defer_index_rolls(defer_rolls);
            let found = check(&store, &model.sent, seed);
            assert!(
                found >= acked,
                "seed {seed}: {acked} acknowledged, {found} found"
            );
            if process {
                assert_eq!(found, total, "seed {seed}: a process crash loses nothing");
            }
            model.sent.truncate(found);
        }
    }

    // The store goes on from where recovery left it, and a clean close keeps it all.
    append_after(&mut store, &mut model, &mut rng, seed);
    let ops = rng.below(30);
    random_ops(&mut store, &mut model, &mut rng, ops);
    dispatch_all(&mut store).unwrap();
    assert_eq!(check(&store, &model.sent, seed), model.sent.len());
    let store = Parts::from_closed(store)
        .unwrap()
        .open(CONFIG, false)
        .unwrap();
    assert_eq!(
        check(&store, &model.sent, seed),
        model.sent.len(),
        "seed {seed}: clean close keeps everything"
    );
}

#[test]
fn a_cut_at_a_record_boundary_survives_a_crash_at_any_point() {
    run_seeds(
        "TERN_TRUNCATE",
        400,
        0x7A11,
        "truncation crash test",
        run_case,
    );
}

#[test]
fn a_cut_that_empties_a_queue_lets_it_start_again_at_zero() {
    with_store(|mut store, _| {
        let mut rng = Rng(7);
        let mut model = Model {
            sent: Vec::new(),
            serial: 0,
            flushed: 0,
        };
        for _ in 0..30 {
            model.put(&mut store, &mut rng).unwrap();
        }
        dispatch_all(&mut store).unwrap();
        // Cut before the first record of some queue: that queue ends up empty.
        let (topic, q) = (model.sent[0].topic, model.sent[0].queue_id);
        let cut = model.sent[0].offset;
        store.truncate_log(cut, &mut []).unwrap();
        model.sent.clear();
        assert_eq!(store.queue(topic, q).unwrap().max_offset(), 0);
        assert_eq!(store.dispatched_offset(), cut);
        assert_eq!(check(&store, &model.sent, 7), 0);
        append_after(&mut store, &mut model, &mut rng, 7);
        dispatch_all(&mut store).unwrap();
        assert_eq!(check(&store, &model.sent, 7), model.sent.len());
    });
}
