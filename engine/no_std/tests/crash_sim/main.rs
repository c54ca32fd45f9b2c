//! Deterministic crash simulation: random appends, flushes, dispatches, checkpoints and
//! retention over fault-injecting media (which may run out, or fail one flush the way
//! Linux does), checkpoints in one phase or in two (regions synced by the "owner", other
//! operations between the phases, sometimes a crash between them), a power cut or process
//! crash at a random point, recovery, and a comparison
//! with a model of what was acknowledged; up to three such rounds per case, then a clean
//! close and reopen. A message counts as acknowledged only once a flush covering it
//! returned `Ok`.
//!
//! Timer messages ride along ([`timers`]): puts on a simulated clock, recall markers,
//! rounds of the engine's timer driver delivering through the store, timer checkpoints,
//! and the wheel, timer log and timer checkpoint crashing with the rest; once the clock
//! has passed every due time the timer model is checked.
//!
//! Every case is a seed. A failure prints it; replay one with
//! `TERN_SIM_SEED=<seed> cargo test -p tern-engine --test crash_sim`. `TERN_SIM_CASES`
//! sets how many cases run (default 2000).

#[path = "../support/mod.rs"]
mod support;
mod timers;

use support::*;
use tern_engine::Error;
use tern_engine::commitlog::Slot;
use tern_engine::faulty::FaultPlan;
use tern_engine::ram::RamError;
use tern_engine::record::{MessageIn, RecordView};

/// What the cases did, summed over the run and printed at its end, so a run shows that the
/// faults it is meant to cover happened.
mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static ROUNDS: AtomicU64 = AtomicU64::new(0);
    pub static PROCESS_CRASHES: AtomicU64 = AtomicU64::new(0);
    pub static OUT_OF_FUEL: AtomicU64 = AtomicU64::new(0);
    pub static FAILED_STORES: AtomicU64 = AtomicU64::new(0);
    pub static TWO_PHASE_FINISHED: AtomicU64 = AtomicU64::new(0);
    pub static CRASHED_BETWEEN_PHASES: AtomicU64 = AtomicU64::new(0);
    pub static FAILED_OWNER_SYNCS: AtomicU64 = AtomicU64::new(0);
    pub static DELETED_SEGMENTS: AtomicU64 = AtomicU64::new(0);
    pub static ACKED_CHECKED: AtomicU64 = AtomicU64::new(0);
    pub static TIMERS_PUT: AtomicU64 = AtomicU64::new(0);
    pub static TIMER_ROLLS: AtomicU64 = AtomicU64::new(0);
    pub static TIMER_CHECKPOINTS: AtomicU64 = AtomicU64::new(0);
    pub static TIMER_LOG_CUTS: AtomicU64 = AtomicU64::new(0);
    pub static TIMERS_CHECKED: AtomicU64 = AtomicU64::new(0);
    pub static RECALLS_CHECKED: AtomicU64 = AtomicU64::new(0);
    pub static TIMER_REPEATS: AtomicU64 = AtomicU64::new(0);

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn summary() -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} rounds: {} process crashes, the rest power cuts; {} ran out of fuel; {} stopped \
             on one failed flush, Linux style ({} of them an owner's sync); {} two-phase checkpoints finished, \
             {} crashed between the phases; {} segments deleted by retention; {} acknowledged \
             messages checked after recovery; timers: {} put, {} roll legs, {} checkpoints, \
             {} timer logs cut at recovery, {} delivered checked, {} recalls checked never \
             delivered, {} repeated deliveries",
            g(&ROUNDS),
            g(&PROCESS_CRASHES),
            g(&OUT_OF_FUEL),
            g(&FAILED_STORES),
            g(&FAILED_OWNER_SYNCS),
            g(&TWO_PHASE_FINISHED),
            g(&CRASHED_BETWEEN_PHASES),
            g(&DELETED_SEGMENTS),
            g(&ACKED_CHECKED),
            g(&TIMERS_PUT),
            g(&TIMER_ROLLS),
            g(&TIMER_CHECKPOINTS),
            g(&TIMER_LOG_CUTS),
            g(&TIMERS_CHECKED),
            g(&RECALLS_CHECKED),
            g(&TIMER_REPEATS),
        )
    }
}

/// What the simulation knows: every message appended, and what the store acknowledged.
struct Model {
    sent: Vec<Sent>,
    /// The store said everything below this log offset is durable: a flush, checkpoint
    /// or recovery returned `Ok` with it. Only these messages count as acknowledged.
    flushed: u64,
    /// The log's first offset after the last retention pass (deletes are durable at once).
    min_offset: u64,
}

impl Model {
    fn acked(&self) -> usize {
        acked(&self.sent, self.flushed)
    }
}

/// The timer beside the store: its driver, and what the model knows of timers.
struct Timers<'a> {
    driver: timers::Driver<'a>,
    model: timers::TimerModel,
}

/// What the random operations run on and against; each takes all of it.
struct Ops<'r, 'a> {
    store: &'r mut TestEngine<'a>,
    timer: &'r mut Timers<'a>,
    rng: &'r mut Rng,
    plan: &'r FaultPlan,
    model: &'r mut Model,
    /// An operation may also make the next flush fail (Linux style).
    faults: bool,
}

/// Runs random operations until `ops` are done or one fails.
fn run_ops(o: &mut Ops<'_, '_>, ops: u64) -> Result<(), Error<RamError>> {
    for _ in 0..ops {
        match one_op(o, false) {
            Ok(Flow::Go) => {}
            Ok(Flow::Crash) => return Ok(()),
            Err(e) => {
                if o.store.is_failed() {
                    check_refusals(o.store, o.rng, o.model);
                }
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Whether the round goes on.
enum Flow {
    Go,
    /// Stop here (between the phases of a checkpoint): the crash comes now.
    Crash,
}

fn one_op(o: &mut Ops<'_, '_>, in_checkpoint: bool) -> Result<Flow, Error<RamError>> {
    let Ops {
        store,
        timer,
        rng,
        plan,
        model,
        faults,
    } = o;
    if rng.chance(15) {
        timers::op(store, &mut timer.driver, rng, model, &mut timer.model)?;
        return Ok(Flow::Go);
    }
    let sent = &mut model.sent;
    match rng.below(200) {
        0..=119 => {
            let mut s = new_message(rng, sent.len() as u64);
            put(store, &mut s, TS + sent.len() as i64 * 7)?;
            sent.push(s);
        }
        120..=139 => {
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
            store.put_batch(&msgs, TS + sent.len() as i64 * 7, &mut |s| landed.push(s))?;
            for (mut m, s) in batch.into_iter().zip(landed) {
                m.offset = s.at.offset;
                m.queue_offset = s.queue_offset;
                sent.push(m);
            }
        }
        140..=167 => {
            model.flushed = store.flush_log()?;
        }
        168..=187 => {
            // A broker's reput pass: bounded; with deferred index rolls, a stop before a
            // roll stays until a later step flushes the index (a checkpoint, as the
            // broker's does). A quarter of the passes are bounded at a random offset, as
            // a replicated broker's reput stops at its confirm offset, often mid-record.
            let below = if rng.chance(25) {
                rng.below(store.log().max_offset() + 1)
            } else {
                u64::MAX
            };
            let before = store.dispatched_offset();
            let pass = store.dispatch_some(&mut [], 1 + rng.below(16), below, &mut |_| {})?;
            assert!(
                store.dispatched_offset() <= below.max(before),
                "a pass dispatched past its bound"
            );
            assert!(!(pass.limited && pass.more), "{pass:?}");
        }
        196..=197 => {
            let upto = rng.below(store.log().max_offset() + 1);
            let removed = store.delete_before(upto);
            // Segments may go before a later step fails.
            model.min_offset = store.log().min_offset();
            stats::add(&stats::DELETED_SEGMENTS, u64::from(removed?));
            // The timer log's units whose records went, as the broker's retention does.
            let min = store.log().min_offset();
            timer.driver.timer_mut().delete_before(min)?;
        }
        198..=199 if *faults => plan.fail_flushes(1),
        188..=191 if !in_checkpoint => {
            return two_phase_checkpoint(o);
        }
        _ => {
            dispatch_all(store)?;
            store.checkpoint()?;
            model.flushed = store.log().flushed_offset();
        }
    }
    Ok(Flow::Go)
}

/// A checkpoint as a broker makes it outside its lock: begin, sync every region handed
/// out through the media (an fdatasync of a duplicated handle), maybe a few operations
/// in between, finish. Sometimes the crash comes between the phases.
fn two_phase_checkpoint(o: &mut Ops<'_, '_>) -> Result<Flow, Error<RamError>> {
    let store = &mut *o.store;
    dispatch_all(store)?;
    let mut sync_error = None;
    let cp = store.checkpoint_begin(&mut |_, m, range| {
        if let Err(e) = m.sync(range) {
            sync_error = Some(e);
        }
    })?;
    if let Some(e) = sync_error {
        store.mark_failed();
        stats::add(&stats::FAILED_OWNER_SYNCS, 1);
        drop(cp);
        return Err(Error::Media(e));
    }
    for _ in 0..o.rng.below(4) {
        if let Flow::Crash = one_op(o, true)? {
            return Ok(Flow::Crash);
        }
    }
    if o.rng.chance(10) {
        stats::add(&stats::CRASHED_BETWEEN_PHASES, 1);
        return Ok(Flow::Crash);
    }
    o.store.checkpoint_finish(cp)?;
    stats::add(&stats::TWO_PHASE_FINISHED, 1);
    o.model.flushed = o.store.log().flushed_offset();
    Ok(Flow::Go)
}

/// After a failed flush the store refuses writes and checkpoints, and after a failed log
/// flush the log's flushed offset no longer moves.
fn check_refusals(store: &mut TestEngine<'_>, rng: &mut Rng, model: &Model) {
    let flushed = store.log().flushed_offset();
    assert!(flushed >= model.flushed);
    let mut s = new_message(rng, u64::MAX);
    assert_eq!(put(store, &mut s, TS), Err(Error::FlushFailed));
    assert_eq!(store.checkpoint(), Err(Error::FlushFailed));
    // A failed queue, index or checkpoint flush stops the store, not its log.
    if store.log().is_failed() {
        assert_eq!(store.flush_log(), Err(Error::FlushFailed));
        store.log_mut().mark_flushed(u64::MAX);
        assert_eq!(store.log().flushed_offset(), flushed);
    }
}

/// Checks the recovered store against the model; returns how many sent messages survived
/// (those below the log's start, deleted by retention, count as survived).
fn verify(store: &TestEngine<'_>, model: &Model, process_crash: bool, seed: u64) -> usize {
    let (sent, acked) = (&model.sent, model.acked());
    // 1. The log is a prefix of what was sent (after what retention deleted), at least as
    //    long as what was acknowledged.
    let log = store.log();
    if log.segment_span().is_some() {
        assert_eq!(log.min_offset(), model.min_offset, "seed {seed}: log start");
    }
    let first = sent
        .iter()
        .position(|s| s.offset >= log.min_offset())
        .unwrap_or(sent.len());
    let mut pos = log.min_offset();
    let mut found = first;
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
    // 2. Every surviving message is in its queue exactly once, at its queue offset; the
    //    queue ends after the last one.
    assert_queues_hold(store, &sent[..found], log.min_offset(), seed);
    // 3. The index finds every surviving key.
    for s in &sent[first..found] {
        if let Some(k) = &s.key {
            let hits = index_hits(store, s.topic, k);
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

/// Cuts power (or kills the process) under a stopped store and its timer, each media
/// its own way.
fn crash<'a>(
    store: TestEngine<'a>,
    driver: timers::Driver<'a>,
    rng: &mut Rng,
    process: bool,
) -> (Parts<'a>, timers::TimerParts<'a>) {
    let mut parts = Parts::from_store(store);
    crash_each(&mut parts, rng, process);
    let (mut wheel, mut timer_log, mut timer_cp) = driver.into_timer().into_parts();
    crash_dir(&mut timer_log, rng, process);
    for m in [&mut wheel, &mut timer_cp] {
        crash_media(m, rng, process);
    }
    (parts, (wheel, timer_log, timer_cp))
}

fn run_case(seed: u64) {
    let mut rng = Rng(seed);
    let plan = FaultPlan::none();
    let mut arena = Arena::new();
    let mut timer_arena = timers::TimerArena::new();
    let mut store = arena.parts(&plan).open(CONFIG, false).unwrap();
    // Half the seeds roll the index as the broker does: after a checkpoint flushed it.
    let defer_rolls = seed % 2 == 1;
    store.defer_index_rolls(defer_rolls);
    let mut model = Model {
        sent: Vec::new(),
        flushed: 0,
        min_offset: 0,
    };
    let clock = TS + 123;
    let mut timer = Timers {
        driver: timers::open(timer_arena.parts(&plan), 0, clock, seed),
        model: timers::TimerModel::new(clock),
    };

    // One to three rounds of operations, each ended by a crash and checked after recovery.
    for _ in 0..1 + rng.below(3) {
        // Sometimes the media start failing partway; sometimes one flush fails, as Linux
        // fails a write-back. The round stops at the first error.
        if rng.chance(25) {
            plan.refuel(50 + rng.below(400));
        }
        let faults = rng.chance(50);
        let ops = 20 + rng.below(120);
        let mut o = Ops {
            store: &mut store,
            timer: &mut timer,
            rng: &mut rng,
            plan: &plan,
            model: &mut model,
            faults,
        };
        let _ = run_ops(&mut o, ops);
        let out_of_fuel = plan.fuel() == 0;
        plan.refuel(u64::MAX);
        plan.fail_flushes(0);
        stats::add(&stats::ROUNDS, 1);
        stats::add(&stats::OUT_OF_FUEL, u64::from(out_of_fuel));
        stats::add(
            &stats::FAILED_STORES,
            u64::from(store.is_failed() && !out_of_fuel),
        );
        stats::add(&stats::ACKED_CHECKED, model.acked() as u64);

        // A process crash loses nothing written; after media that failed mid-write the
        // model cannot say what "written" was.
        let process = !out_of_fuel && rng.chance(15);
        stats::add(&stats::PROCESS_CRASHES, u64::from(process));
        let (parts, timer_parts) = crash(store, timer.driver, &mut rng, process);
        store = parts
            .open(CONFIG, true)
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:?}"));
        store.defer_index_rolls(defer_rolls);
        let found = verify(&store, &model, process, seed);
        model.sent.truncate(found);
        let end = store.log().max_offset();
        timer.model.truncate(end);
        timer.driver = timers::open(timer_parts, end, timer.model.clock, seed);
        // Recovery calls everything it kept flushed: later rounds hold it to that.
        model.flushed = store.log().flushed_offset();
        assert_eq!(model.flushed, store.log().max_offset(), "seed {seed}");
    }

    // The store goes on: new messages get the next queue offsets, and a clean close and
    // reopen keeps everything.
    let mut o = Ops {
        store: &mut store,
        timer: &mut timer,
        rng: &mut rng,
        plan: &plan,
        model: &mut model,
        faults: false,
    };
    run_ops(&mut o, 30).unwrap_or_else(|e| panic!("seed {seed}: after recovery: {e:?}"));
    // The clock passes every due time; then a clean stop.
    timers::drain(
        &mut store,
        &mut timer.driver,
        &mut model,
        &mut timer.model,
        seed,
    );
    timers::close(&mut store, &mut timer.driver)
        .unwrap_or_else(|e| panic!("seed {seed}: closing the timer: {e:?}"));
    let store = Parts::from_closed(store)
        .unwrap()
        .open(CONFIG, false)
        .unwrap();
    model.flushed = u64::MAX;
    let found = verify(&store, &model, true, seed);
    assert_eq!(
        found,
        model.sent.len(),
        "seed {seed}: clean close keeps everything"
    );
    timers::check(&model, &timer.model, seed);
}

#[test]
fn recovery_after_random_crashes_keeps_every_acknowledged_message() {
    if let Some(cases) = run_seeds("TERN_SIM", 2000, 0xC0FFEE, "crash simulation", run_case) {
        println!("crash_sim: {cases} cases, {}", stats::summary());
    }
}
