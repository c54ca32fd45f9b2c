//! Any bytes as the timer's files after a crash: the checkpoint copies, the wheel and the
//! timer log. Recovery opens them or refuses them, never panics, and what it opens holds
//! its invariants: every slot walk ends, each unit handed out is whole, and filing and
//! checkpointing go on working.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_engine::faulty::FaultPlan;
use tern_engine::testkit::{RamTimerParts, SMALL_TIMER, timer_parts};
use tern_engine::timer::wheel::SLOT_SIZE;
use tern_engine::timer::{Filing, SlotUnit, Timer, TimerConfig};

/// The tests' small timer, with a roll window of 30 slots.
const CFG: TimerConfig = TimerConfig {
    roll_window_ms: 30_000,
    ..SMALL_TIMER
};
const SLOTS: u32 = CFG.slots;
const SEG: u64 = CFG.log_segment_size;
const NOW: i64 = 1_000_000;

fuzz_target!(|data: &[u8]| {
    let plan = FaultPlan::none();
    let wheel_len = (u64::from(SLOTS) * SLOT_SIZE) as usize;
    let mut wheel_buf = vec![0u8; 2 * wheel_len];
    let mut cp_buf = vec![0u8; 2 * 4096];
    let mut seg_bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 2 * SEG as usize]).collect();
    let (mut wheel, mut dir, mut cp): RamTimerParts<'_, 4> =
        timer_parts(&plan, SLOTS, &mut wheel_buf, &mut seg_bufs, &mut cp_buf).unwrap();
    // The input, spread over the checkpoint page, the wheel and up to three log segments.
    let mut rest = data;
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
        let (a, b) = rest.split_at(n.min(rest.len()));
        *rest = b;
        a
    }
    use tern_engine::media::{Directory, Media};
    cp.write_at(0, take(&mut rest, 256)).unwrap();
    wheel.write_at(0, take(&mut rest, wheel_len)).unwrap();
    let mut base = 0;
    while !rest.is_empty() && base < 3 * SEG {
        dir.create(base, SEG).unwrap();
        let s = take(&mut rest, SEG as usize);
        dir.media_mut(base).unwrap().write_at(0, s).unwrap();
        base += SEG;
    }
    let Ok((mut t, _)) = Timer::open(wheel, dir, cp, CFG, u64::MAX, NOW) else {
        return;
    };
    let (read, resume) = t.resume_point();
    let mut out = [SlotUnit::default(); 16];
    // Every slot of the ring, walked to its end: positions strictly fall, so each walk
    // ends within the units the log holds.
    for s in 0..i64::from(SLOTS) {
        let slot = read + s * 1000;
        let mut from = if s == 0 { resume } else { None };
        let mut last = u64::MAX;
        for _ in 0..1_000 {
            let Ok((n, next)) = t.slot_units(slot, from, &mut out) else {
                break;
            };
            for u in &out[..n] {
                assert!(u.pos < last, "a walk must go to older units");
                last = u.pos;
                assert!(u.phy_size > 0);
            }
            match next {
                Some(p) => from = Some(p),
                None => break,
            }
        }
    }
    let f = Filing {
        slot_ms: NOW + 5_000,
        phy_offset: 0,
        phy_size: 10,
        queue_offset: t.queue_offset(),
        topic_hash: 0,
        recall: false,
    };
    if t.file(f, NOW).is_ok() {
        let _ = t.flush_log();
        let _ = t.checkpoint(read, None, t.queue_offset());
    }
});
