//! Unit tests of the index: file names, overflow found by fuzzing, stepped queries.

use super::query::QueryAt;
use super::*;
use crate::commitlog::{CommitLog, Recovery};
use crate::faulty::FaultPlan;
use crate::ram::RamDir;
use std::vec;
use std::vec::Vec;

/// Small files: 4 slots, 8 entries (7 records each).
const SMALL: IndexConfig = IndexConfig {
    slots: 4,
    entries: 8,
};

/// A record of topic `T` whose only key is its UNIQ_KEY `u`.
const UNIQ_U: RecordKeys<'static> = RecordKeys {
    topic: "T",
    uniq_key: Some("u"),
    keys: None,
};

/// Buffers for an index of `N` small files over an empty one-segment log.
fn buffers<const N: usize>() -> (Vec<u8>, [Vec<u8>; N]) {
    let file = 2 * SMALL.file_size() as usize;
    (
        vec![0u8; 2 * 512],
        core::array::from_fn(|_| vec![0u8; file]),
    )
}

/// An index of up to `N` small files over the buffers of [`buffers`].
fn small_index<'a, const N: usize>(
    plan: &'a FaultPlan,
    (log_buf, idx_bufs): &'a mut (Vec<u8>, [Vec<u8>; N]),
) -> Index<RamDir<'a, N>, N> {
    let log_dir: RamDir<'_, 1> = RamDir::with_buffers(plan, [log_buf]).unwrap();
    let idx_dir: RamDir<'_, N> = RamDir::with_buffers(plan, idx_bufs).unwrap();
    let (log, _) = CommitLog::open(log_dir, 512, Recovery::Scan { from: 0 }).unwrap();
    Index::open(idx_dir, SMALL, &log, None).unwrap()
}

#[test]
fn file_stamp_of_any_time_fits_seventeen_digits() {
    // Found by the `recovery` fuzz target: a record's store time is not under its CRC,
    // and a rotted one overflowed the name while re-dispatch rolled an index file.
    assert_eq!(file_stamp(i64::MAX), 99_991_231_235_959_999);
    assert_eq!(file_stamp(MAX_STAMP_MS + 1), 99_991_231_235_959_999);
    assert_eq!(file_stamp(MAX_STAMP_MS), 99_991_231_235_959_999);
    assert_eq!(file_stamp(i64::MIN), 19_700_101_000_000_000);
    assert_eq!(file_stamp(1_700_000_000_123), 20_231_114_221_320_123);
}

#[test]
fn store_times_at_the_ends_of_i64_index_without_overflow() {
    // Found by the `recovery` fuzz target: re-dispatch of records whose (rotted) store
    // times lie far apart overflowed `ts - begin_timestamp` in `put_key`.
    let plan = FaultPlan::none();
    let mut bufs = buffers::<1>();
    let mut index = small_index(&plan, &mut bufs);
    assert_eq!(index.put_record(UNIQ_U, 0, i64::MIN), Ok(1));
    assert_eq!(index.put_record(UNIQ_U, 100, i64::MAX), Ok(1));
    let mut hits = 0;
    index
        .query("T", "u", 8, i64::MIN, i64::MAX, &mut |_| hits += 1)
        .unwrap();
    assert_eq!(hits, 2);
}

#[test]
fn a_rotted_entry_count_rolls_instead_of_overflowing() {
    // Found by the `recovery` fuzz target: a header whose count reads as u32::MAX
    // overflowed `count + needed` on the next put.
    let plan = FaultPlan::none();
    let mut bufs = buffers::<2>();
    let mut index = small_index(&plan, &mut bufs);
    assert_eq!(index.put_record(UNIQ_U, 0, 1_000), Ok(1));
    index.head.index_count = I32::new(-1);
    assert_eq!(index.put_record(UNIQ_U, 100, 2_000), Ok(1));
    assert_eq!(index.file_count(), 2, "the rotted file was rolled over");
}

#[test]
fn a_query_in_steps_finds_what_one_go_finds_while_the_index_grows() {
    let plan = FaultPlan::none();
    let mut bufs = buffers::<4>();
    let mut index = small_index(&plan, &mut bufs);
    let put = |index: &mut Index<_, 4>, i: u64| {
        let keys = RecordKeys {
            topic: "T",
            uniq_key: Some(if i % 2 == 0 { "a" } else { "b" }),
            keys: None,
        };
        index
            .put_record(keys, i * 100, 1_000 + i as i64 * 1_000)
            .unwrap();
    };
    for i in 0..12 {
        put(&mut index, i);
    }
    assert_eq!(index.file_count(), 2);
    let mut at_once = Vec::new();
    index
        .query("T", "a", 64, 0, i64::MAX, &mut |o| at_once.push(o))
        .unwrap();
    assert_eq!(at_once, [1000, 800, 600, 400, 200, 0]);

    // One hop at a time, with records added (and a roll) between the steps: the query
    // finds what was there when it began, newest first, and nothing twice.
    let mut q = IndexQuery::new("T", "a", 64, 0, i64::MAX);
    let mut stepped = Vec::new();
    let mut next = 12;
    while !q.step(&index, 1, &mut |o| stepped.push(o)).unwrap() {
        put(&mut index, next);
        next += 1;
    }
    assert_eq!(index.file_count(), 3, "the index rolled during the query");
    assert_eq!(stepped, at_once);
    assert_eq!(q.found(), at_once.len());

    // A file removed under a paused query ends it there: older ones went with it.
    let mut q = IndexQuery::new("T", "a", 64, 0, i64::MAX);
    let oldest = *index.files.front().unwrap();
    let mut cut = Vec::new();
    while !matches!(q.at, QueryAt::File { base, next } if base == oldest && next > 0) {
        assert!(!q.step(&index, 1, &mut |o| cut.push(o)).unwrap());
    }
    let found = cut.len();
    let ends = index.header(oldest).unwrap().end_phy_offset.get() as u64;
    index.delete_before_log(ends + 1).unwrap();
    assert_eq!(index.file_count(), 2);
    assert!(q.step(&index, 1, &mut |o| cut.push(o)).unwrap());
    assert_eq!(cut.len(), found, "nothing read from a removed file");
}
