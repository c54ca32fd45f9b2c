//! The timer's state across crashes: units reach the wheel only once the log holding them
//! is durable, a wheel write lost at a power cut is replayed from the log, delivery
//! resumes where the checkpoint says, and long delays are filed a window at a time.

use tern_engine::Error;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::ram::RamDir;
use tern_engine::timer::log::UNIT_SIZE;
use tern_engine::timer::state::MAX_STAGED;
use tern_engine::timer::{Filing, SlotUnit, Timer, TimerConfig, TimerRecovery};

const SLOTS: u32 = 128;
const SEG: u64 = 8 * UNIT_SIZE + 16;
const CFG: TimerConfig = TimerConfig {
    slots: SLOTS,
    precision_ms: 1000,
    roll_window_ms: 10_000,
    log_segment_size: SEG,
};
const NOW: i64 = 1_000_000;

struct Bufs {
    wheel: Vec<u8>,
    cp: Vec<u8>,
    log: Vec<Vec<u8>>,
}

impl Bufs {
    fn new() -> Self {
        Bufs {
            wheel: vec![0u8; 2 * SLOTS as usize * 32],
            cp: vec![0u8; 2 * 4096],
            log: (0..8).map(|_| vec![0u8; 2 * SEG as usize]).collect(),
        }
    }
}

type T<'a> = Timer<FaultyMedia<'a>, RamDir<'a, 8>, FaultyMedia<'a>>;

fn fresh<'a>(b: &'a mut Bufs, plan: &'a FaultPlan) -> (T<'a>, TimerRecovery) {
    let wheel = FaultyMedia::new(&mut b.wheel, SLOTS as usize * 32, plan).unwrap();
    let cp = FaultyMedia::new(&mut b.cp, 4096, plan).unwrap();
    let dir = RamDir::with_buffers(plan, &mut b.log).unwrap();
    Timer::open(wheel, dir, cp, CFG, u64::MAX, NOW).unwrap()
}

fn filing(slot_ms: i64, i: u64) -> Filing {
    Filing {
        slot_ms,
        phy_offset: i * 100,
        phy_size: 100,
        queue_offset: i,
        topic_hash: 1,
        recall: false,
    }
}

fn walk(t: &T<'_>, slot: i64) -> Vec<u64> {
    let mut out = [SlotUnit::default(); 2];
    let mut got = Vec::new();
    let mut from = None;
    // Two at a time, resuming where each call stopped.
    loop {
        let (n, next) = t.slot_units(slot, from, &mut out).unwrap();
        got.extend(out[..n].iter().map(|u| u.phy_offset / 100));
        match next {
            Some(p) => from = Some(p),
            None => return got,
        }
    }
}

fn crash(t: T<'_>, kind: Crash) -> (T<'_>, TimerRecovery) {
    let (mut w, mut d, mut c) = t.into_parts();
    w.crash(kind);
    d.crash(kind);
    c.crash(kind);
    Timer::open(w, d, c, CFG, u64::MAX, NOW).unwrap()
}

#[test]
fn a_slot_walks_its_units_newest_first_once_they_are_applied() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, r) = fresh(&mut b, &plan);
    assert!(r.fresh);
    for i in 0..3 {
        t.file(filing(5_000 + NOW, i), NOW).unwrap();
    }
    t.file(filing(7_000 + NOW, 3), NOW).unwrap();
    assert!(
        walk(&t, 5_000 + NOW).is_empty(),
        "staged, not in the wheel yet"
    );
    t.flush_log().unwrap();
    assert_eq!(walk(&t, 5_000 + NOW), [2, 1, 0]);
    assert_eq!(walk(&t, 7_000 + NOW), [3]);
    assert_eq!(walk(&t, 6_000 + NOW), Vec::<u64>::new());
    assert_eq!(t.queue_offset(), 4);
}

#[test]
fn units_lost_with_an_unsynced_log_never_reach_the_wheel() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    t.file(filing(5_000 + NOW, 0), NOW).unwrap();
    t.flush_log().unwrap();
    t.checkpoint(NOW, None, t.queue_offset()).unwrap();
    t.file(filing(5_000 + NOW, 1), NOW).unwrap();
    let (t, r) = crash(t, Crash::DropUnflushed);
    assert!(!r.fresh);
    assert_eq!(walk(&t, 5_000 + NOW), [0]);
    assert_eq!(t.queue_offset(), 1, "entry 1 is filed again from the queue");
}

#[test]
fn units_synced_but_not_in_the_flushed_wheel_are_replayed() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    t.file(filing(5_000 + NOW, 0), NOW).unwrap();
    t.flush_log().unwrap();
    t.checkpoint(NOW, None, t.queue_offset()).unwrap();
    // Synced and applied, but the wheel's write is lost at the power cut.
    for i in 1..11 {
        t.file(filing(5_000 + NOW, i), NOW).unwrap();
    }
    t.flush_log().unwrap();
    let (t, r) = crash(t, Crash::DropUnflushed);
    assert_eq!(r.replayed, 10);
    assert_eq!(walk(&t, 5_000 + NOW), [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(t.queue_offset(), 11, "from the newest unit kept");
    // A process crash keeps everything and replays nothing twice into a slot.
    let (t, _) = crash(t, Crash::Process);
    assert_eq!(walk(&t, 5_000 + NOW).len(), 11);
}

#[test]
fn long_delays_are_filed_a_window_ahead_and_marked_to_roll() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    // 25 s ahead, window 10 s: a whole window leaves 15 s, more than a third.
    t.file(filing(NOW + 25_000, 0), NOW).unwrap();
    // 12 s ahead: a whole window would leave 2 s, less than a third: half a window.
    t.file(filing(NOW + 12_000, 1), NOW).unwrap();
    t.file(filing(NOW + 9_000, 2), NOW).unwrap();
    t.flush_log().unwrap();
    let mut out = [SlotUnit::default(); 4];
    let (n, _) = t.slot_units(NOW + 10_000, None, &mut out).unwrap();
    assert_eq!((n, out[0].phy_offset, out[0].roll), (1, 0, true));
    let (n, _) = t.slot_units(NOW + 5_000, None, &mut out).unwrap();
    assert_eq!((n, out[0].phy_offset, out[0].roll), (1, 100, true));
    let (n, _) = t.slot_units(NOW + 9_000, None, &mut out).unwrap();
    assert_eq!((n, out[0].phy_offset, out[0].roll), (1, 200, false));
}

#[test]
fn a_slot_the_clock_passed_before_delivery_reached_it_keeps_its_units() {
    // Delivery lags the clock after a restart: entries for the slots in between are filed
    // at a write time past their slot, and must still be walked there (with the older
    // units behind them).
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    let slot = NOW + 2_000;
    t.file(filing(slot, 0), NOW).unwrap();
    t.file(filing(slot, 1), NOW + 5_000).unwrap();
    t.flush_log().unwrap();
    assert_eq!(walk(&t, slot), [1, 0]);
    let (t, _) = crash(t, Crash::DropUnflushed);
    assert_eq!(walk(&t, slot), [1, 0], "and after a replay");
}

#[test]
fn units_a_failed_flush_left_readable_are_made_durable_at_recovery() {
    // Linux marks the pages of a failed write-back clean: a process crash keeps them
    // readable, but no later flush writes them, so a power cut after the next run would
    // take them (and, with them, the scan's way to the units after).
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    t.file(filing(NOW + 5_000, 0), NOW).unwrap();
    plan.fail_flushes(1);
    assert!(t.flush_log().is_err());
    let (mut t, r) = crash(t, Crash::Process);
    assert_eq!(r.log.units, 1);
    t.file(filing(NOW + 5_000, 1), NOW).unwrap();
    t.flush_log().unwrap();
    t.checkpoint(NOW, None, t.queue_offset()).unwrap();
    let (t, r) = crash(t, Crash::DropUnflushed);
    assert_eq!(r.log.units, 2, "{r:?}");
    assert_eq!(walk(&t, NOW + 5_000), [1, 0]);
}

#[test]
fn delivery_resumes_where_the_checkpoint_says_and_skips_what_the_ring_reused() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    t.file(filing(NOW + 5_000, 0), NOW).unwrap();
    t.flush_log().unwrap();
    t.checkpoint(NOW + 5_000, Some(0), t.queue_offset())
        .unwrap();
    let (t, r) = crash(t, Crash::DropUnflushed);
    assert_eq!(t.resume_point(), (NOW + 5_000, Some(0)));
    assert_eq!(r.skipped_slots, 0);
    // Down for longer than the ring: the oldest slots were reused.
    let (w, d, c) = t.into_parts();
    let later = NOW + 5_000 + 100_000;
    let (t, r) = Timer::open(w, d, c, CFG, u64::MAX, later).unwrap();
    assert!(r.skipped_slots > 0);
    assert_eq!(t.resume_point().1, None);
    assert!(t.resume_point().0 > NOW + 5_000);
}

#[test]
fn units_without_a_checkpoint_are_read_from_the_oldest_slot_the_ring_holds() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    let (mut t, _) = fresh(&mut b, &plan);
    t.file(filing(NOW + 5_000, 0), NOW).unwrap();
    t.flush_log().unwrap();
    // No checkpoint ever written, then a power cut.
    let (t, r) = crash(t, Crash::DropUnflushed);
    assert!(r.fresh);
    assert_eq!(r.log.units, 1);
    assert!(
        t.resume_point().0 <= NOW + 5_000,
        "the unit's slot is still read"
    );
    assert_eq!(walk(&t, NOW + 5_000), [0]);
}

#[test]
fn staging_is_bounded() {
    let plan = FaultPlan::none();
    let mut b = Bufs::new();
    b.log = (0..8).map(|_| vec![0u8; 2 * 64 * 1024]).collect();
    let wheel = FaultyMedia::new(&mut b.wheel, SLOTS as usize * 32, &plan).unwrap();
    let cp = FaultyMedia::new(&mut b.cp, 4096, &plan).unwrap();
    let dir: RamDir<'_, 8> = RamDir::with_buffers(&plan, &mut b.log).unwrap();
    let cfg = TimerConfig {
        log_segment_size: 64 * 1024,
        ..CFG
    };
    let (mut t, _) = Timer::open(wheel, dir, cp, cfg, u64::MAX, NOW).unwrap();
    for i in 0..MAX_STAGED as u64 {
        t.file(filing(NOW + 3_000, i), NOW).unwrap();
    }
    assert_eq!(t.file(filing(NOW + 3_000, 999), NOW), Err(Error::TableFull));
    t.flush_log().unwrap();
    t.file(filing(NOW + 3_000, 999), NOW).unwrap();
}
