//! The timer on real files: made on first open, found again after the process is gone
//! (nothing closed, as after `kill -9`), and refused with a clear reason when the wheel
//! was made with another geometry.

use tern_engine::timer::{Filing, SlotUnit, TimerConfig};
use tern_engine_fs::layout::StoreLayout;
use tern_engine_fs::timer_files::open_timer;

const CFG: TimerConfig = TimerConfig {
    slots: 256,
    precision_ms: 1000,
    roll_window_ms: 60_000,
    log_segment_size: 64 * 1024,
};
const NOW: i64 = 1_700_000_000_000;

fn filing(i: u64) -> Filing {
    Filing {
        slot_ms: NOW + 5_000,
        phy_offset: i * 200,
        phy_size: 200,
        queue_offset: i,
        topic_hash: 3,
        recall: false,
    }
}

fn units(t: &tern_engine_fs::timer_files::FsTimer, slot: i64) -> Vec<u64> {
    let mut out = [SlotUnit::default(); 64];
    let (n, _) = t.slot_units(slot, None, &mut out).unwrap();
    out[..n].iter().map(|u| u.phy_offset).collect()
}

#[test]
fn the_timer_files_survive_the_process_and_a_wrong_geometry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StoreLayout::new(dir.path());
    std::fs::create_dir_all(layout.config_dir()).unwrap();
    {
        let (mut t, r) = open_timer(&layout, CFG, u64::MAX, NOW).unwrap();
        assert!(r.fresh);
        for i in 0..3 {
            t.file(filing(i), NOW).unwrap();
        }
        t.flush_log().unwrap();
        t.checkpoint(NOW, None, t.queue_offset()).unwrap();
        // Dropped without anything more: the wheel's last writes were never flushed.
    }
    assert_eq!(
        std::fs::metadata(layout.timer_wheel_path()).unwrap().len(),
        256 * 32
    );
    let (t, r) = open_timer(&layout, CFG, u64::MAX, NOW).unwrap();
    assert!(!r.fresh);
    assert_eq!(r.log.units, 3);
    assert_eq!(units(&t, NOW + 5_000), [400, 200, 0]);
    assert_eq!(t.queue_offset(), 3);
    drop(t);

    let other = TimerConfig { slots: 512, ..CFG };
    let e = open_timer(&layout, other, u64::MAX, NOW).unwrap_err();
    let said = e.to_string();
    assert!(
        said.contains("8192 bytes") && said.contains("geometry"),
        "{said}"
    );
}
