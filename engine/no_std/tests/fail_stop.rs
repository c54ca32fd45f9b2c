//! Fail-stop flushes ("fsyncgate"): Linux reports a failed write-back once, and a retried
//! flush then succeeds although the data never reached the disk. The store must never
//! call such data durable: after a failed flush it refuses writes and flushes, its
//! flushed offset stays, and reopening (recovery) makes the tail durable again.

mod support;

use support::*;
use tern_engine::Error;
use tern_engine::faulty::Crash;
use tern_engine::ram::RamError;

/// The log holds exactly `sent`, in order.
#[track_caller]
fn assert_log(store: &TestEngine<'_>, sent: &[Sent]) {
    let found = log_records(store);
    let offsets: Vec<u64> = found.iter().map(|(o, _)| *o).collect();
    let want: Vec<u64> = sent.iter().map(|s| s.offset).collect();
    assert_eq!(offsets, want, "record offsets");
    for ((_, body), s) in found.iter().zip(sent) {
        assert!(body == &s.body, "body at {}", s.offset);
    }
}

#[test]
fn a_failed_flush_is_never_reported_durable() {
    with_store(|mut store, plan| {
        let mut t = Traffic::new(7);
        t.put_n(&mut store, 5);
        let flushed = store.flush_log().unwrap();
        let acked = t.sent.len();
        t.put_n(&mut store, 5);

        plan.fail_flushes(1);
        assert_eq!(store.flush_log(), Err(Error::Media(RamError::Injected)));
        assert_eq!(plan.flushes_to_fail(), 0, "the media would flush again now");
        assert!(store.is_failed() && store.log().is_failed());
        // Linux would now answer Ok without writing anything: the store does not ask.
        assert_eq!(store.flush_log(), Err(Error::FlushFailed));
        assert_eq!(store.log().flushed_offset(), flushed);
        store.log_mut().mark_flushed(u64::MAX);
        assert_eq!(
            store.log().flushed_offset(),
            flushed,
            "mark_flushed is ignored"
        );

        let mut s = new_message(&mut t.rng, 99);
        assert_eq!(put(&mut store, &mut s, TS), Err(Error::FlushFailed));
        let msgs = [message(&s)];
        assert_eq!(
            store.put_batch(&msgs, TS, &mut |_| {}),
            Err(Error::FlushFailed)
        );
        let end = store.log().max_offset();
        assert_eq!(store.append_replicated(end, &[]), Err(Error::FlushFailed));
        assert_eq!(store.checkpoint(), Err(Error::FlushFailed));
        assert_eq!(store.seal(&mut []), Err(Error::FlushFailed));
        assert_eq!(store.log().flushed_offset(), flushed);
        // Reads and dispatch go on.
        assert_eq!(dispatch_all(&mut store), Ok(10));
        assert_log(&store, &t.sent);

        // Power cut: what the failed flush covered is gone, everything acknowledged stays.
        let mut store =
            recover(store, Crash::DropUnflushed).expect("recovery after a failed flush");
        assert!(!store.is_failed());
        t.sent.truncate(acked);
        assert_log(&store, &t.sent);

        // And the store accepts writes again.
        t.put_n(&mut store, 3);
        dispatch_all(&mut store).unwrap();
        store.checkpoint().unwrap();
        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_log(&store, &t.sent);
        assert_queued(&store, &t.sent);
    });
}

#[test]
fn recovery_writes_again_a_tail_a_failed_flush_left_only_in_the_page_cache() {
    with_store(|mut store, plan| {
        let mut t = Traffic::new(11);
        t.put_n(&mut store, 5);
        store.flush_log().unwrap();
        t.put_n(&mut store, 5);
        plan.fail_flushes(1);
        assert!(store.flush_log().is_err());

        // The process dies; the machine does not: the five unflushed records are still
        // readable, from pages that no flush will write again.
        let mut store = recover(store, Crash::Process).unwrap();
        assert_log(&store, &t.sent); // a process crash keeps them
        assert_eq!(store.log().flushed_offset(), store.log().max_offset());

        // Recovery called them flushed, so they must survive a power cut, and so must a
        // record acknowledged after them.
        t.put_n(&mut store, 1);
        store.flush_log().unwrap();
        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_log(&store, &t.sent);
    });
}

#[test]
fn a_failed_queue_flush_at_a_checkpoint_stops_the_store() {
    with_store(|mut store, plan| {
        let mut t = Traffic::new(3);
        t.put_n(&mut store, 4);
        store.flush_log().unwrap();
        dispatch_all(&mut store).unwrap();
        // The log has nothing to flush: the first flush is a queue's.
        plan.fail_flushes(1);
        assert_eq!(store.checkpoint(), Err(Error::Media(RamError::Injected)));
        assert!(store.is_failed());
        assert!(!store.log().is_failed(), "the log's own flushes were fine");
        let mut s = new_message(&mut t.rng, 9);
        assert_eq!(put(&mut store, &mut s, TS), Err(Error::FlushFailed));
        assert_eq!(store.checkpoint(), Err(Error::FlushFailed));

        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_log(&store, &t.sent);
        assert_queued(&store, &t.sent);
    });
}

#[test]
fn an_owner_reported_sync_failure_stops_the_store_and_its_log() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(5);
        t.put_n(&mut store, 3);
        let (_, to) = store.log().unflushed();
        // The owner's fdatasync of the segment files failed.
        store.mark_failed();
        store.log_mut().mark_flushed(to);
        assert_eq!(store.log().flushed_offset(), 0);
        assert!(store.is_failed() && store.log().is_failed());
        assert_eq!(store.flush_log(), Err(Error::FlushFailed));
        let mut s = new_message(&mut t.rng, 9);
        assert_eq!(put(&mut store, &mut s, TS), Err(Error::FlushFailed));
    });
}
