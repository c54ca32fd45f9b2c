//! Recovery across two crashes in a row, and retention racing the checkpoint: what the
//! store claims in a checkpoint must already be durable, and must still be in the log.

mod support;

use support::*;
use tern_engine::faulty::Crash;

/// Three segments' worth of messages, a checkpoint after the first one and a half
/// (everything below it dispatched): a store whose last checkpoint claims less than the
/// log holds.
fn checkpoint_then_fill_three_segments(store: &mut TestEngine<'_>, t: &mut Traffic) {
    t.put_until(store, LOG_SEG + LOG_SEG / 2);
    dispatch_all(store).unwrap();
    store.checkpoint().unwrap();
    t.put_until(store, 3 * LOG_SEG + 100);
}

/// Every message at or after the log's start is in its queue at its queue offset, and
/// each queue ends after its last message.
#[track_caller]
fn assert_queues(store: &TestEngine<'_>, sent: &[Sent]) {
    for s in sent {
        let q = store.queue(s.topic, s.queue_id).expect("queue");
        assert!(q.max_offset() > s.queue_offset);
        if s.offset >= store.log().min_offset() {
            let e = q.get(s.queue_offset).unwrap().expect("entry");
            assert_eq!(e.physical_offset, s.offset);
        }
    }
}

#[test]
fn a_second_power_cut_right_after_recovery_keeps_what_recovery_dispatched() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(21);
        t.put_until(&mut store, 1500);
        store.flush_log().unwrap();
        // Never dispatched: recovery dispatches all of it.
        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_queues(&store, &t.sent);
        // The checkpoint recovery wrote claims those entries: they must be durable.
        let store = recover(store, Crash::DropUnflushed).expect("second recovery");
        assert_queues(&store, &t.sent);
        assert_eq!(log_records(&store).len(), t.sent.len());
    });
}

#[test]
fn retention_past_the_last_checkpoint_checkpoints_first() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(22);
        checkpoint_then_fill_three_segments(&mut store, &mut t);
        dispatch_all(&mut store).unwrap();
        // Everything is dispatched, but the last checkpoint claims less; recovery would
        // restart there, in a segment this deletes. So it checkpoints first.
        assert_eq!(store.delete_before(store.log().max_offset()), Ok(3));

        let store = recover(store, Crash::DropUnflushed).expect("recovery after retention");
        assert_queues(&store, &t.sent);
    });
}

#[test]
fn a_failed_store_deletes_nothing_its_last_checkpoint_has_not_dispatched() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(23);
        checkpoint_then_fill_three_segments(&mut store, &mut t);
        // Nothing dispatched since the checkpoint: what it claims.
        let checkpointed = store.dispatched_offset();
        store.flush_log().unwrap();
        dispatch_all(&mut store).unwrap();
        store.mark_failed();
        // It cannot checkpoint now, so only the segment below the last claim goes.
        assert_eq!(store.delete_before(store.log().max_offset()), Ok(1));
        assert!(store.log().min_offset() <= checkpointed);

        let store = recover(store, Crash::DropUnflushed).expect("recovery after retention");
        assert_queues(&store, &t.sent);
    });
}
