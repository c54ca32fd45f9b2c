//! Property tests for the small codecs: checkpoint, properties string, consume-queue
//! entries, and index file names. Encode → decode is identity; any bytes decode to a value
//! or to nothing, never a panic. (The record codec has its own in `src/record/tests.rs`.)

use proptest::prelude::*;
use tern_engine::checkpoint::Checkpoint;
use tern_engine::commitlog::{CommitLog, Recovery};
use tern_engine::consumequeue::{ConsumeQueue, Entry, Put};
use tern_engine::faulty::FaultPlan;
use tern_engine::index::file_stamp;
use tern_engine::layout::CHECKPOINT_MAGIC;
use tern_engine::properties::{self, Properties};
use tern_engine::ram::RamDir;

/// CRC-32 (IEEE), bit by bit: an oracle that shares no code with the engine's.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Byte ranges of the checkpoint layout (layout.rs, `CheckpointLayout`).
const MAGIC_AT: usize = 40;
const CRC_AT: usize = 64;

fn offset() -> impl Strategy<Value = u64> {
    // Offsets are stored as Java longs: a real one never exceeds i64::MAX.
    0..=i64::MAX as u64
}

prop_compose! {
    fn checkpoint()(
        physic_timestamp in any::<i64>(),
        logics_timestamp in any::<i64>(),
        index_timestamp in any::<i64>(),
        flushed_offset in offset(),
        dispatched_offset in offset(),
        clean_end in proptest::option::of(offset()),
    ) -> Checkpoint {
        Checkpoint {
            physic_timestamp,
            logics_timestamp,
            index_timestamp,
            flushed_offset,
            dispatched_offset,
            clean_end,
        }
    }
}

proptest! {
    #[test]
    fn checkpoint_encode_decode_is_identity(c in checkpoint()) {
        let bytes = c.encode();
        prop_assert_eq!(&bytes[MAGIC_AT..MAGIC_AT + 4], &CHECKPOINT_MAGIC.to_be_bytes());
        prop_assert_eq!(&bytes[CRC_AT..], &crc32(&bytes[..CRC_AT]).to_be_bytes());
        prop_assert_eq!(Checkpoint::decode(&bytes), Some(c));
    }

    #[test]
    fn checkpoint_decodes_arbitrary_bytes_only_when_sealed(bytes in any::<[u8; 68]>()) {
        let sealed = bytes[MAGIC_AT..MAGIC_AT + 4] == CHECKPOINT_MAGIC.to_be_bytes()
            && bytes[CRC_AT..] == crc32(&bytes[..CRC_AT]).to_be_bytes();
        prop_assert_eq!(Checkpoint::decode(&bytes).is_some(), sealed);
    }

    #[test]
    fn checkpoint_with_magic_and_crc_fixed_up_decodes_to_its_fields(
        mut bytes in any::<[u8; 68]>(),
    ) {
        bytes[MAGIC_AT..MAGIC_AT + 4].copy_from_slice(&CHECKPOINT_MAGIC.to_be_bytes());
        let crc = crc32(&bytes[..CRC_AT]);
        bytes[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
        let long = |at: usize| i64::from_be_bytes(bytes[at..at + 8].try_into().unwrap());
        let c = Checkpoint::decode(&bytes).expect("sealed bytes decode");
        prop_assert_eq!(c.physic_timestamp, long(0));
        prop_assert_eq!(c.logics_timestamp, long(8));
        prop_assert_eq!(c.index_timestamp, long(16));
        prop_assert_eq!(c.flushed_offset, long(24) as u64);
        prop_assert_eq!(c.dispatched_offset, long(48) as u64);
        prop_assert_eq!(c.clean_end, u64::try_from(long(56)).ok());
        // One flipped bit anywhere breaks the seal.
        let mut torn = bytes;
        torn[(crc as usize) % 68] ^= 1 << (crc % 8);
        prop_assert_eq!(Checkpoint::decode(&torn), None);
    }
}

/// Text without the two separators: what a name or value may hold.
fn piece() -> impl Strategy<Value = String> {
    "[^\u{1}\u{2}]{1,12}"
}

proptest! {
    #[test]
    fn properties_append_then_iterate_is_identity(
        pairs in proptest::collection::vec((piece(), piece()), 0..12),
    ) {
        let mut buf = vec![0u8; 2048];
        let mut len = 0;
        for (name, value) in &pairs {
            properties::append(&mut buf, &mut len, name, value).expect("fits");
        }
        let got: Vec<(&str, &str)> = Properties::new(&buf[..len]).collect();
        let want: Vec<(&str, &str)> =
            pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        prop_assert_eq!(got, want);
        // `get` finds the last value of each name, as Java's map keeps it.
        for (name, _) in &pairs {
            let last = pairs.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            prop_assert_eq!(properties::get(&buf[..len], name), last);
        }
    }

    #[test]
    fn properties_append_refuses_what_does_not_fit_and_keeps_the_prefix(
        name in piece(),
        value in piece(),
        room in 0usize..40,
    ) {
        let mut buf = vec![0xEEu8; room];
        let mut len = 0;
        let fits = name.len() + value.len() + 2 <= room;
        prop_assert_eq!(properties::append(&mut buf, &mut len, &name, &value).is_some(), fits);
        prop_assert_eq!(len, if fits { name.len() + value.len() + 2 } else { 0 });
    }

    #[test]
    fn properties_of_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for (name, value) in Properties::new(&bytes) {
            prop_assert!(!name.is_empty() && !value.is_empty());
            prop_assert!(!name.as_bytes().contains(&properties::NAME_VALUE_SEPARATOR));
            prop_assert!(!value.as_bytes().contains(&properties::PROPERTY_SEPARATOR));
        }
        let _ = properties::get(&bytes, properties::key::KEYS);
        let _ = properties::tag_code(&bytes);
    }
}

const CQ_ENTRIES_PER_FILE: u64 = 4;
const CQ_FILES: usize = 16;

/// Runs `f` on an empty consume queue in RAM, beside an empty commit log.
fn with_empty_queue<R>(f: impl FnOnce(&mut ConsumeQueue<RamDir<'_, CQ_FILES>>) -> R) -> R {
    let plan = FaultPlan::none();
    let mut log_buf = vec![0u8; 2 * 512];
    let log_dir: RamDir<'_, 1> = RamDir::with_buffers(&plan, [&mut log_buf]).unwrap();
    let (log, _) = CommitLog::open(log_dir, 512, Recovery::Scan { from: 0 }).unwrap();
    let mut bufs = vec![vec![0u8; 2 * (CQ_ENTRIES_PER_FILE * 20) as usize]; CQ_FILES];
    let dir: RamDir<'_, CQ_FILES> = RamDir::with_buffers(&plan, &mut bufs).unwrap();
    let mut q = ConsumeQueue::open(dir, CQ_ENTRIES_PER_FILE, &log, None).unwrap();
    f(&mut q)
}

proptest! {
    #[test]
    fn consume_queue_put_then_get_is_identity(
        start in 0u64..10,
        raw in proptest::collection::vec((0u64..1000, 1u32..i32::MAX as u32, any::<i64>()), 1..30),
    ) {
        with_empty_queue(|q| {

        // Records follow each other in the log: each entry starts at or after the last end.
        let mut at = 0u64;
        let mut entries = Vec::new();
        for (gap, size, tag_code) in raw {
            let e = Entry { physical_offset: at + gap, size, tag_code };
            at = e.physical_offset + u64::from(size);
            entries.push(e);
        }
        for (i, e) in entries.iter().enumerate() {
            prop_assert_eq!(q.put(start + i as u64, *e).unwrap(), Put::Stored(start + i as u64));
        }
        // Re-dispatching the same records is a no-op.
        prop_assert_eq!(q.put(start, entries[0]).unwrap(), Put::AlreadyPresent);
        prop_assert_eq!(q.min_offset(), start);
        prop_assert_eq!(q.max_offset(), start + entries.len() as u64);
        for (i, e) in entries.iter().enumerate() {
            prop_assert_eq!(q.get(start + i as u64).unwrap(), Some(*e));
        }
        prop_assert_eq!(q.get(start + entries.len() as u64).unwrap(), None);
        if start > 0 {
            prop_assert_eq!(q.get(start - 1).unwrap(), None);
        }
        let mut scanned = Vec::new();
        q.scan(0, u64::MAX, None, &mut |_, e| {
            scanned.push(e);
            true
        })
        .unwrap();
        prop_assert_eq!(scanned, entries);
        Ok(())
        })?;
    }
}

/// Last ms of year 9999, the latest time an index file name can spell.
const MAX_STAMP_MS: i64 = 253_402_300_799_999;

fn is_leap(y: u64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Splits `yyyyMMddHHmmssSSS`, checks every field is a valid date or time, and turns it
/// back into ms since the epoch by counting days (no shared code with the engine).
fn stamp_to_ms(stamp: u64) -> Result<i64, TestCaseError> {
    let (y, mo, d) = (
        stamp / 10_000_000_000_000,
        stamp / 100_000_000_000 % 100,
        stamp / 1_000_000_000 % 100,
    );
    let (h, mi, s, ms) = (
        stamp / 10_000_000 % 100,
        stamp / 100_000 % 100,
        stamp / 1000 % 100,
        stamp % 1000,
    );
    prop_assert!((1970..=9999).contains(&y), "year {} in {}", y, stamp);
    prop_assert!((1..=12).contains(&mo), "month {} in {}", mo, stamp);
    prop_assert!(
        d >= 1 && d <= days_in_month(y, mo),
        "day {} in {}",
        d,
        stamp
    );
    prop_assert!(h < 24 && mi < 60 && s < 60, "time in {}", stamp);
    let mut days = (1970..y)
        .map(|y| if is_leap(y) { 366 } else { 365 })
        .sum::<u64>();
    days += (1..mo).map(|m| days_in_month(y, m)).sum::<u64>();
    days += d - 1;
    Ok((((days * 24 + h) * 60 + mi) * 60 + s) as i64 * 1000 + ms as i64)
}

proptest! {
    #[test]
    fn file_stamp_spells_a_valid_date_of_the_same_ms(ms in 0..=MAX_STAMP_MS) {
        prop_assert_eq!(stamp_to_ms(file_stamp(ms))?, ms);
    }

    #[test]
    fn file_stamp_is_monotonic_in_ms(a in any::<i64>(), b in any::<i64>()) {
        let (lo, hi) = (a.min(b), a.max(b));
        prop_assert!(file_stamp(lo) <= file_stamp(hi));
        // Inside the representable range, distinct ms give distinct names.
        if lo != hi && lo >= 0 && hi <= MAX_STAMP_MS {
            prop_assert!(file_stamp(lo) < file_stamp(hi));
        }
    }

    #[test]
    fn file_stamp_clamps_times_outside_its_range(ms in any::<i64>()) {
        let stamp = file_stamp(ms);
        prop_assert!((19_700_101_000_000_000..=99_991_231_235_959_999).contains(&stamp));
        stamp_to_ms(stamp)?;
    }
}

#[test]
fn file_stamp_matches_known_names() {
    assert_eq!(file_stamp(0), 19_700_101_000_000_000);
    // 2000-02-29 (a leap day of a century leap year), 12:34:56.789 UTC.
    assert_eq!(file_stamp(951_827_696_789), 20_000_229_123_456_789);
    assert_eq!(file_stamp(MAX_STAMP_MS), 99_991_231_235_959_999);
}

#[test]
fn consume_queue_put_at_an_offset_too_large_for_bytes_is_an_error() {
    // Found by the `recovery` fuzz target: a rotted record's queue offset, re-dispatched
    // into an empty queue, overflowed `offset * 20`.
    let e = Entry {
        physical_offset: 0,
        size: 100,
        tag_code: 0,
    };
    with_empty_queue(|q| {
        assert!(q.put(u64::MAX / 4, e).is_err());
        assert_eq!(
            q.put(0, e).unwrap(),
            Put::Stored(0),
            "the queue still works"
        );
    });
}
