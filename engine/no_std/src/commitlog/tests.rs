extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::error::Corruption;
use crate::faulty::{Crash, FaultPlan};
use crate::ram::RamDir;
use crate::record::RecordError;
use crate::testkit;

const SEG: u64 = 1024;

fn msg(body: &[u8]) -> MessageIn<'_> {
    testkit::message("T", 0, body, b"")
}

fn dir<'a>(plan: &'a FaultPlan, bufs: &'a mut [Vec<u8>]) -> RamDir<'a, 16> {
    RamDir::with_buffers(plan, bufs).unwrap()
}

fn bufs() -> Vec<Vec<u8>> {
    (0..16).map(|_| vec![0u8; 2 * SEG as usize]).collect()
}

/// Opens the log in `d` by a scan from its start: a new log when `d` is empty.
fn scan(d: RamDir<'_, 16>) -> (CommitLog<RamDir<'_, 16>>, RecoveryReport) {
    CommitLog::open(d, SEG, Recovery::Scan { from: 0 }).unwrap()
}

/// Appends `n` one-byte records, the i-th at queue offset and store time `i`, and flushes
/// them; returns the log's end.
fn append_flushed(log: &mut CommitLog<RamDir<'_, 16>>, n: i64) -> u64 {
    for i in 0..n {
        log.append(&msg(b"x"), i, i).unwrap();
    }
    log.flush().unwrap();
    log.max_offset()
}

#[test]
fn appends_roll_to_next_segment_with_a_blank_tail() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let body = [7u8; 300];
    let mut offsets = Vec::new();
    for _ in 0..5 {
        offsets.push(log.append(&msg(&body), 0, 5).unwrap());
    }
    // 300-byte bodies make ~390-byte records: two per 1 KiB segment.
    assert_eq!(offsets[2].offset, SEG);
    assert_eq!(offsets[4].offset, 2 * SEG);
    assert!(
        matches!(log.slot_at(offsets[1].offset + u64::from(offsets[1].size)).unwrap(), Slot::Skip(n) if n == SEG)
    );
    for a in &offsets {
        log.with_record(a.offset, a.size, &mut [], |v| {
            let v = v.unwrap();
            assert_eq!(v.physical_offset() as u64, a.offset);
            assert_eq!(v.body(), &body[..]);
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn record_larger_than_a_segment_is_refused() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let body = [0u8; 1000];
    assert_eq!(log.append(&msg(&body), 0, 0), Err(Error::TooLarge));
    assert_eq!(log.max_offset(), 0);
}

#[test]
fn recovery_scan_cuts_a_torn_tail_and_keeps_flushed_records() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let a = log.append(&msg(b"one"), 0, 1).unwrap();
    let b1 = log.append(&msg(b"two"), 1, 2).unwrap();
    log.flush().unwrap();
    let _c = log.append(&msg(b"three, never flushed"), 2, 3).unwrap();
    let mut d = log.into_dir();
    // The third record's write reaches the media only in part.
    d.crash(Crash::Torn {
        keep: 0,
        tear_at: 20,
    });
    let (log, report) = scan(d);
    assert_eq!(report.records_verified, 2);
    assert_eq!(log.max_offset(), b1.offset + u64::from(b1.size));
    assert!(report.cut);
    assert_eq!(a.offset, 0);
}

#[test]
fn clean_recovery_trusts_the_recorded_end() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let end = append_flushed(&mut log, 7);
    let d = log.into_dir();
    let (log, report) = CommitLog::open(d, SEG, Recovery::Clean { end }).unwrap();
    assert_eq!(log.max_offset(), end);
    assert_eq!(report.records_verified, 0);
}

#[test]
fn clean_recovery_drops_the_segment_made_ahead_without_reading_the_tail() {
    use crate::media::{Directory, Media};
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let end = append_flushed(&mut log, 3);
    let mut d = log.into_dir();
    // The broker makes the next segment ahead of the roll.
    d.create(SEG, SEG).unwrap();
    // A mark past the end, which a clean close never leaves: it survives only if the
    // tail is not read (and zeroed) on the way in, which on a 1 GiB preallocated
    // segment cost a second per restart.
    let (_, seg) = d.segments_mut().next().unwrap();
    seg.write_at(SEG - 8, &[7; 8]).unwrap();
    let (log, report) = CommitLog::open(d, SEG, Recovery::Clean { end }).unwrap();
    assert_eq!((log.max_offset(), report.records_verified), (end, 0));
    let mut d = log.into_dir();
    assert_eq!(
        d.segments_mut().count(),
        1,
        "the segment made ahead is removed"
    );
    let (_, seg) = d.segments_mut().next().unwrap();
    let mut tail = [0u8; 8];
    seg.read_at(SEG - 8, &mut tail).unwrap();
    assert_eq!(tail, [7; 8], "the tail was not rewritten");
}

#[test]
fn flipped_bit_ends_the_log_at_the_damaged_record() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let first = log.append(&msg(b"good"), 0, 1).unwrap();
    let second = log.append(&msg(b"rotten"), 1, 1).unwrap();
    log.flush().unwrap();
    let mut d = log.into_dir();
    let (_, seg) = d.segments_mut().next().unwrap();
    seg.flip_bit(second.offset + u64::from(second.size) - 8, 3);
    let (log, _) = scan(d);
    assert_eq!(log.max_offset(), first.offset + u64::from(first.size));
}

#[test]
fn truncate_zeroes_the_tail_so_it_never_comes_back() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let mut last = None;
    for i in 0..10 {
        last = Some(log.append(&msg(&[1u8; 200]), i, i).unwrap());
    }
    log.flush().unwrap();
    let keep = log.append(&msg(b"k"), 10, 10).unwrap();
    let _ = last;
    log.truncate(keep.offset).unwrap();
    assert_eq!(log.max_offset(), keep.offset);
    let d = log.into_dir();
    let (log, _) = scan(d);
    assert_eq!(log.max_offset(), keep.offset);
}

#[test]
fn delete_segments_before_keeps_the_active_one() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    for i in 0..9 {
        log.append(&msg(&[0u8; 300]), i, i).unwrap();
    }
    assert_eq!(log.segment_span(), Some((0, 4 * SEG)));
    assert_eq!(log.delete_segments_before(2 * SEG).unwrap(), 2);
    assert_eq!(log.min_offset(), 2 * SEG);
    assert_eq!(log.delete_segments_before(u64::MAX).unwrap(), 2);
    assert_eq!(log.segment_span(), Some((4 * SEG, 4 * SEG)));
}

#[test]
fn store_timestamp_is_read_from_the_fixed_part() {
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let a = log.append(&msg(b"x"), 0, 1234).unwrap();
    assert_eq!(log.store_timestamp_at(a.offset).unwrap(), 1234);
}

#[test]
fn store_timestamp_past_the_end_is_an_error() {
    // Found by the `recovery` fuzz target: a rotted queue entry pointing past the log end
    // underflowed `write_pos - offset` in a time search.
    let plan = FaultPlan::none();
    let mut b = bufs();
    let (mut log, _) = scan(dir(&plan, &mut b));
    let a = log.append(&msg(b"x"), 0, 1234).unwrap();
    let end = a.offset + u64::from(a.size);
    assert_eq!(log.store_timestamp_at(end), Err(Error::OutOfRange));
    assert_eq!(log.store_timestamp_at(end + 7), Err(Error::OutOfRange));
}

/// The master's log from `from` to its end, as one stream of bytes.
fn stream_of<D: Directory>(log: &CommitLog<D>, from: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = from;
    while at < log.max_offset() {
        let seg_end = (at / log.segment_size() + 1) * log.segment_size();
        let mut buf = vec![0u8; (seg_end.min(log.max_offset()) - at) as usize];
        log.read(at, &mut buf).unwrap();
        out.extend_from_slice(&buf);
        at += buf.len() as u64;
    }
    out
}

/// Feeds `stream` (starting at `from`) to `replica` in chunks of `chunk` bytes, keeping
/// the unconsumed tail as a replica's connection does.
fn replicate<D: Directory>(replica: &mut CommitLog<D>, from: u64, stream: &[u8], chunk: usize) {
    let (mut pending, mut pending_at) = (Vec::new(), from);
    for piece in stream.chunks(chunk) {
        pending.extend_from_slice(piece);
        let to = replica.append_replicated(pending_at, &pending).unwrap();
        pending.drain(..(to - pending_at) as usize);
        pending_at = to;
    }
    assert!(pending.is_empty(), "{} bytes left over", pending.len());
}

fn master_with_records<'a>(
    b: &'a mut [Vec<u8>],
    plan: &'a FaultPlan,
    n: i64,
) -> CommitLog<RamDir<'a, 16>> {
    let (mut log, _) = scan(dir(plan, b));
    for i in 0..n {
        let body = vec![i as u8; 40 + 37 * i as usize % 300];
        log.append(&msg(&body), i, 100 + i).unwrap();
    }
    log
}

#[test]
fn a_replica_fed_in_any_chunking_holds_the_masters_bytes() {
    let plan = FaultPlan::none();
    let mut mb = bufs();
    let master = master_with_records(&mut mb, &plan, 20);
    let stream = stream_of(&master, 0);
    for chunk in [1, 7, 8, 100, 389, 4096] {
        let mut rb = bufs();
        let (mut replica, _) = scan(dir(&plan, &mut rb));
        replicate(&mut replica, 0, &stream, chunk);
        assert_eq!(replica.max_offset(), master.max_offset(), "chunk {chunk}");
        assert_eq!(stream_of(&replica, 0), stream, "chunk {chunk}");
        // What recovery sees after the replica dies is every record it took.
        replica.flush().unwrap();
        let (back, report) = scan(replica.into_dir());
        assert_eq!(back.max_offset(), master.max_offset());
        assert_eq!(report.records_verified, 20);
    }
}

#[test]
fn a_replica_starts_at_the_segment_its_master_streams_from() {
    let plan = FaultPlan::none();
    let mut mb = bufs();
    let master = master_with_records(&mut mb, &plan, 20);
    let (first, last) = master.segment_span().unwrap();
    assert!(last > first);
    let mut rb = bufs();
    let (mut replica, _) = scan(dir(&plan, &mut rb));
    assert_eq!(replica.start_replica_at(last + 1), Err(Error::OutOfRange));
    replica.start_replica_at(last).unwrap();
    replicate(&mut replica, last, &stream_of(&master, last), 50);
    assert_eq!(replica.max_offset(), master.max_offset());
    replica.flush().unwrap();
    let (back, _) =
        CommitLog::open(replica.into_dir(), SEG, Recovery::Scan { from: last }).unwrap();
    assert_eq!(back.min_offset(), last);
    assert_eq!(back.max_offset(), master.max_offset());
}

#[test]
fn a_replica_refuses_damaged_records_gaps_and_other_segment_sizes() {
    let plan = FaultPlan::none();
    let mut mb = bufs();
    let master = master_with_records(&mut mb, &plan, 6);
    let stream = stream_of(&master, 0);
    let first = u64::from_be_bytes([0, 0, 0, 0, stream[0], stream[1], stream[2], stream[3]]);

    let mut rb = bufs();
    let (mut replica, _) = scan(dir(&plan, &mut rb));
    assert_eq!(
        replica.append_replicated(5, &stream),
        Err(Error::OutOfRange)
    );
    // A flipped body bit in the second record: the first is taken, the second refused.
    let mut bad = stream.clone();
    bad[first as usize + 100] ^= 1;
    let err = replica.append_replicated(0, &bad).unwrap_err();
    assert!(
        matches!(err, Error::Corrupt(Corruption::Record { offset, .. }) if offset == first),
        "{err:?}"
    );
    assert_eq!(replica.max_offset(), first);
    // Sent again from 0, the taken record is skipped and the rest follows.
    assert_eq!(
        replica.append_replicated(0, &stream).unwrap(),
        master.max_offset()
    );

    // A replica with larger segments meets the master's blank tail where its own
    // segment does not end.
    let mut rb: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 4 * SEG as usize]).collect();
    let (mut other, _) =
        CommitLog::open(dir(&plan, &mut rb), 2 * SEG, Recovery::Scan { from: 0 }).unwrap();
    let err = other.append_replicated(0, &stream).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Corrupt(Corruption::Record {
                error: RecordError::BadSize(_),
                ..
            })
        ),
        "{err:?}"
    );
}
