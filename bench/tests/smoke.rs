//! The engine scenario runs end to end at tiny counts and produces its rows. No timings
//! are asserted: they depend on the machine.

use tern_bench::engine::{EngineParams, run};

#[test]
fn engine_scenario_produces_a_row_per_case() {
    let tmp = tempfile::tempdir().unwrap();
    let params = EngineParams::tiny(tmp.path().join("data"));
    let rows = run(&params).unwrap();
    assert_eq!(rows.len(), params.body_sizes.len() + params.groups.len());
    for r in &rows {
        assert!(r.record_bytes > r.body_bytes, "{r:?}");
        assert!(r.engine.msgs_per_s > 0.0 && r.raw.msgs_per_s > 0.0, "{r:?}");
    }
    let table = tern_bench::report::markdown(&rows);
    assert_eq!(table.lines().count(), rows.len() + 2);
    assert!(!params.dir.exists(), "the data folder is cleaned up");
}
