//! The two-phase checkpoint: regions handed out under the owner's lock, synced by the
//! owner, then claimed. What happens between the phases (appends, dispatch, an index
//! roll, new queues, retention) must not be claimed.

mod support;

use support::*;
use tern_engine::Error;
use tern_engine::checkpoint::Checkpoint;
use tern_engine::faulty::{Crash, FaultyMedia};
use tern_engine::ram::RamError;
use tern_engine::store::{CheckpointPlan, Part};

/// `n` new messages to `topic`, each with a key and no other property.
fn put_n(store: &mut TestEngine<'_>, t: &mut Traffic, n: usize, topic: &'static str) {
    let sent = &mut t.sent;
    for _ in 0..n {
        let mut s = new_message(&mut t.rng, sent.len() as u64);
        s.topic = topic;
        s.key = Some(format!("k{}", sent.len()));
        s.props.clear();
        let mut props = vec![0u8; 64];
        let mut len = 0;
        tern_engine::properties::append(
            &mut props,
            &mut len,
            tern_engine::properties::key::KEYS,
            s.key.as_deref().unwrap(),
        )
        .unwrap();
        props.truncate(len);
        s.props = props;
        put(store, &mut s, TS + sent.len() as i64).unwrap();
        sent.push(s);
    }
}

/// Begins a checkpoint and syncs every region as the owner would, counting them by part.
fn begin_and_sync(store: &mut TestEngine<'_>) -> (CheckpointPlan, [usize; 3]) {
    let mut parts = [0usize; 3];
    let plan = store
        .checkpoint_begin(&mut |part, m: &FaultyMedia<'_>, r| {
            parts[part as usize] += 1;
            m.sync(r).unwrap();
        })
        .unwrap();
    (plan, parts)
}

/// Every message is in the log, its queue and the index.
#[track_caller]
fn assert_all(store: &TestEngine<'_>, sent: &[Sent]) {
    assert_eq!(log_records(store).len(), sent.len(), "log");
    for s in sent {
        let q = store.queue(s.topic, s.queue_id).expect("queue");
        let e = q.get(s.queue_offset).unwrap().expect("queue entry");
        assert_eq!(e.physical_offset, s.offset);
        let hits = index_hits(store, s.topic, s.key.as_deref().unwrap());
        assert!(hits.contains(&s.offset), "key of {} indexed", s.offset);
    }
}

#[test]
fn a_checkpoint_begun_before_an_index_roll_claims_only_what_it_covered() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(41);
        put_n(&mut store, &mut t, 12, "orders");
        dispatch_all(&mut store).unwrap();
        let files = store.index().file_count();

        let (cp, parts) = begin_and_sync(&mut store);
        assert!(parts[Part::Log as usize] >= 1, "the log's tail");
        assert!(parts[Part::Queue as usize] >= 1, "the queues written");
        assert_eq!(parts[Part::Index as usize], 1, "the newest index file");
        let dispatched_at_begin = store.dispatched_offset();

        // Between the phases: appends to a new queue, dispatch, an index roll, the log
        // made durable (so recovery finds these records and must dispatch them again).
        put_n(&mut store, &mut t, 20, "audit-log");
        dispatch_all(&mut store).unwrap();
        assert!(store.index().file_count() > files, "the index rolled");
        store.flush_log().unwrap();
        store.checkpoint_finish(cp).unwrap();

        let mut parts = Parts::from_store(store);
        let c = Checkpoint::read(&parts.checkpoint).unwrap().unwrap();
        assert_eq!(
            c.dispatched_offset, dispatched_at_begin,
            "claims begin's offset"
        );
        parts.crash(Crash::DropUnflushed);
        let store = parts.open(CONFIG, true).expect("recovery");
        assert_all(&store, &t.sent);
    });
}

#[test]
fn regions_handed_out_are_all_a_checkpoint_needs() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(42);
        for topic in TOPICS {
            put_n(&mut store, &mut t, 9, topic);
        }
        dispatch_all(&mut store).unwrap();
        let (cp, _) = begin_and_sync(&mut store);
        store.checkpoint_finish(cp).unwrap();
        assert_eq!(store.log().flushed_offset(), store.log().max_offset());
        // Nothing written since: the next begin has nothing to hand out.
        let (cp, parts) = begin_and_sync(&mut store);
        assert_eq!(parts, [0, 0, 0]);
        store.checkpoint_finish(cp).unwrap();

        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_all(&store, &t.sent);
    });
}

#[test]
fn a_plan_superseded_by_a_newer_begin_still_finishes_correctly() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(43);
        put_n(&mut store, &mut t, 6, "orders");
        dispatch_all(&mut store).unwrap();
        let (first, _) = begin_and_sync(&mut store);
        put_n(&mut store, &mut t, 6, "orders");
        dispatch_all(&mut store).unwrap();
        // The second begin hands out the newer entries, but its owner has not synced
        // them when the first plan finishes.
        let second = store.checkpoint_begin(&mut |_, _, _| {}).unwrap();
        store.checkpoint_finish(first).unwrap();
        drop(second);
        // The next checkpoint must hand those entries out again: the first plan's finish
        // did not count them as flushed.
        let (third, parts) = begin_and_sync(&mut store);
        assert!(parts[Part::Queue as usize] >= 1);
        store.checkpoint_finish(third).unwrap();
        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_all(&store, &t.sent);
    });
}

#[test]
fn an_owner_whose_sync_failed_marks_the_store_failed_and_nothing_is_claimed() {
    with_store(|mut store, plan| {
        let mut t = Traffic::new(44);
        put_n(&mut store, &mut t, 6, "orders");
        store.flush_log().unwrap();
        let acked = t.sent.len();
        put_n(&mut store, &mut t, 6, "orders");
        dispatch_all(&mut store).unwrap();
        plan.fail_flushes(1);
        let mut failed = false;
        let cp = store
            .checkpoint_begin(&mut |_, m: &FaultyMedia<'_>, r| {
                failed |= m.sync(r) == Err(RamError::Injected);
            })
            .unwrap();
        assert!(failed);
        store.mark_failed();
        let flushed = store.log().flushed_offset();
        assert_eq!(store.checkpoint_finish(cp), Err(Error::FlushFailed));
        assert_eq!(store.log().flushed_offset(), flushed);
        assert!(matches!(
            store.checkpoint_begin(&mut |_, _, _| {}),
            Err(Error::FlushFailed)
        ));

        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert!(log_records(&store).len() >= acked);
        t.sent.truncate(log_records(&store).len());
        assert_all(&store, &t.sent);
    });
}

#[test]
fn a_log_truncated_between_the_phases_is_not_marked_flushed_past_the_cut() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(45);
        put_n(&mut store, &mut t, 6, "orders");
        let (cp, _) = begin_and_sync(&mut store);
        // A replica following a master that lost its tail: cut, then new records where
        // the synced ones were.
        let cut = t.sent[3].offset;
        store.log_mut().truncate(cut).unwrap();
        t.sent.truncate(3);
        put_n(&mut store, &mut t, 6, "orders");
        assert!(store.log().max_offset() > cut);
        store.checkpoint_finish(cp).unwrap();
        assert!(
            store.log().flushed_offset() <= cut,
            "bytes written after the sync"
        );
    });
}

#[test]
fn a_checkpoint_record_counts_for_retention_only_once_its_owner_synced_it() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(45);
        put_n(&mut store, &mut t, 6, "orders");
        dispatch_all(&mut store).unwrap();
        let (cp, _) = begin_and_sync(&mut store);
        let before = store.checkpointed();
        let written = store.checkpoint_write(cp).unwrap();
        assert_eq!(store.checkpointed(), before, "claimed before it is durable");
        // A crash before the owner syncs the record: the previous one (or none) is found,
        // and recovery rebuilds from it.
        let mut store = recover(store, Crash::DropUnflushed).unwrap();
        assert_all(&store, &t.sent);

        put_n(&mut store, &mut t, 6, "orders");
        dispatch_all(&mut store).unwrap();
        let (cp, _) = begin_and_sync(&mut store);
        let written_again = store.checkpoint_write(cp).unwrap();
        store
            .checkpoint_media()
            .sync(0..tern_engine::layout::CHECKPOINT_FILE_SIZE)
            .unwrap();
        store.checkpoint_synced(written_again);
        assert_eq!(store.checkpointed(), store.log().max_offset());
        drop(written);
        let store = recover(store, Crash::DropUnflushed).unwrap();
        assert_all(&store, &t.sent);
        let c = Checkpoint::read(store.checkpoint_media()).unwrap().unwrap();
        assert_eq!(c.dispatched_offset, store.log().max_offset());
    });
}
