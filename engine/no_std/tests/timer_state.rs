//! The timer's state across crashes: units reach the wheel only once the log holding them
//! is durable, a wheel write lost at a power cut is replayed from the log, delivery
//! resumes where the checkpoint says, and long delays are filed a window at a time.

use tern_engine::Error;
use tern_engine::faulty::{Crash, FaultPlan};
use tern_engine::testkit::{RamTimer, SMALL_TIMER, timer_parts};
use tern_engine::timer::state::MAX_STAGED;
use tern_engine::timer::wheel::SLOT_SIZE;
use tern_engine::timer::{Filing, SlotUnit, Timer, TimerConfig, TimerRecovery};

/// 1 s slots, a 10 s roll window: the delays below are chosen against these.
const CFG: TimerConfig = SMALL_TIMER;
const NOW: i64 = 1_000_000;

struct Bufs {
    wheel: Vec<u8>,
    cp: Vec<u8>,
    log: Vec<Vec<u8>>,
}

impl Bufs {
    /// Buffers for `cfg`'s wheel and eight of its log segments.
    fn new(cfg: &TimerConfig) -> Self {
        Bufs {
            wheel: vec![0u8; 2 * (u64::from(cfg.slots) * SLOT_SIZE) as usize],
            cp: vec![0u8; 2 * 4096],
            log: (0..8)
                .map(|_| vec![0u8; 2 * cfg.log_segment_size as usize])
                .collect(),
        }
    }
}

type T<'a> = RamTimer<'a, 8>;

/// Opens a timer of geometry `cfg` over `b`, empty.
fn fresh<'a>(b: &'a mut Bufs, plan: &'a FaultPlan, cfg: TimerConfig) -> (T<'a>, TimerRecovery) {
    let (wheel, dir, cp) =
        timer_parts(plan, cfg.slots, &mut b.wheel, &mut b.log, &mut b.cp).unwrap();
    Timer::open(wheel, dir, cp, cfg, u64::MAX, NOW).unwrap()
}

/// Runs `test` on a new, empty timer of geometry [`CFG`] over new buffers, with the fault
/// plan its media share.
fn with_timer(test: impl for<'a> FnOnce(T<'a>, &'a FaultPlan)) {
    let plan = FaultPlan::none();
    let mut b = Bufs::new(&CFG);
    let (t, r) = fresh(&mut b, &plan, CFG);
    assert!(r.fresh);
    test(t, &plan);
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

/// Files unit `i` due at `slot_ms`, makes the log durable and checkpoints: the unit is
/// in the wheel.
fn file_durably(t: &mut T<'_>, slot_ms: i64, i: u64) {
    t.file(filing(slot_ms, i), NOW).unwrap();
    t.flush_log().unwrap();
    t.checkpoint(NOW, None, t.queue_offset()).unwrap();
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
    with_timer(|mut t, _| {
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
    });
}

#[test]
fn units_lost_with_an_unsynced_log_never_reach_the_wheel() {
    with_timer(|mut t, _| {
        file_durably(&mut t, 5_000 + NOW, 0);
        t.file(filing(5_000 + NOW, 1), NOW).unwrap();
        let (t, r) = crash(t, Crash::DropUnflushed);
        assert!(!r.fresh);
        assert_eq!(walk(&t, 5_000 + NOW), [0]);
        assert_eq!(t.queue_offset(), 1, "entry 1 is filed again from the queue");
    });
}

#[test]
fn units_synced_but_not_in_the_flushed_wheel_are_replayed() {
    with_timer(|mut t, _| {
        file_durably(&mut t, 5_000 + NOW, 0);
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
    });
}

#[test]
fn long_delays_are_filed_a_window_ahead_and_marked_to_roll() {
    with_timer(|mut t, _| {
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
    });
}

#[test]
fn a_slot_the_clock_passed_before_delivery_reached_it_keeps_its_units() {
    // Delivery lags the clock after a restart: entries for the slots in between are filed
    // at a write time past their slot, and must still be walked there (with the older
    // units behind them).
    with_timer(|mut t, _| {
        let slot = NOW + 2_000;
        t.file(filing(slot, 0), NOW).unwrap();
        t.file(filing(slot, 1), NOW + 5_000).unwrap();
        t.flush_log().unwrap();
        assert_eq!(walk(&t, slot), [1, 0]);
        let (t, _) = crash(t, Crash::DropUnflushed);
        assert_eq!(walk(&t, slot), [1, 0], "and after a replay");
    });
}

#[test]
fn units_a_failed_flush_left_readable_are_made_durable_at_recovery() {
    // Linux marks the pages of a failed write-back clean: a process crash keeps them
    // readable, but no later flush writes them, so a power cut after the next run would
    // take them (and, with them, the scan's way to the units after).
    with_timer(|mut t, plan| {
        t.file(filing(NOW + 5_000, 0), NOW).unwrap();
        plan.fail_flushes(1);
        assert!(t.flush_log().is_err());
        let (mut t, r) = crash(t, Crash::Process);
        assert_eq!(r.log.units, 1);
        file_durably(&mut t, NOW + 5_000, 1);
        let (t, r) = crash(t, Crash::DropUnflushed);
        assert_eq!(r.log.units, 2, "{r:?}");
        assert_eq!(walk(&t, NOW + 5_000), [1, 0]);
    });
}

#[test]
fn delivery_resumes_where_the_checkpoint_says_and_skips_what_the_ring_reused() {
    with_timer(|mut t, _| {
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
    });
}

#[test]
fn units_without_a_checkpoint_are_read_from_the_oldest_slot_the_ring_holds() {
    with_timer(|mut t, _| {
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
    });
}

#[test]
fn staging_is_bounded() {
    let plan = FaultPlan::none();
    let cfg = TimerConfig {
        log_segment_size: 64 * 1024,
        ..CFG
    };
    let mut b = Bufs::new(&cfg);
    let (mut t, _) = fresh(&mut b, &plan, cfg);
    for i in 0..MAX_STAGED as u64 {
        t.file(filing(NOW + 3_000, i), NOW).unwrap();
    }
    assert_eq!(t.file(filing(NOW + 3_000, 999), NOW), Err(Error::TableFull));
    t.flush_log().unwrap();
    t.file(filing(NOW + 3_000, 999), NOW).unwrap();
}
