//! Bounded dispatch: a pass does at most its budget of records and says whether more
//! remain, so an owner can take its lock once per pass.

mod support;

use support::*;
use tern_engine::properties;

#[test]
fn dispatch_some_stops_at_its_budget_and_says_whether_more_remain() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(31);
        // Across three segments, so passes cross blank tails.
        t.put_until(&mut store, 2 * LOG_SEG + 100);
        let sent = &t.sent;
        let pass = store
            .dispatch_some(&mut [], 0, u64::MAX, &mut |_| {})
            .unwrap();
        assert_eq!((pass.count, pass.more), (0, true));
        let mut seen = Vec::new();
        let mut passes = 0;
        loop {
            let pass = store
                .dispatch_some(&mut [], 3, u64::MAX, &mut |r| seen.push(r.offset))
                .unwrap();
            passes += 1;
            assert!(pass.count <= 3);
            assert_eq!(
                pass.more,
                store.dispatched_offset() < store.log().max_offset()
            );
            if !pass.more {
                break;
            }
            assert_eq!(pass.count, 3, "a pass short of its budget has nothing more");
        }
        let want: Vec<u64> = sent.iter().map(|s| s.offset).collect();
        assert_eq!(seen, want, "every record once, in order");
        assert_eq!(passes, sent.len().div_ceil(3));
        assert_eq!(store.dispatched_offset(), store.log().max_offset());
        let pass = store
            .dispatch_some(&mut [], 3, u64::MAX, &mut |_| {})
            .unwrap();
        assert_eq!((pass.count, pass.more), (0, false));
        // `dispatch` is the same loop without a budget.
        let mut s = new_message(&mut t.rng, sent.len() as u64);
        put(&mut store, &mut s, TS).unwrap();
        assert_eq!(dispatch_all(&mut store), Ok(1));
        let q = store.queue(s.topic, s.queue_id).unwrap();
        assert_eq!(
            q.get(s.queue_offset).unwrap().unwrap().physical_offset,
            s.offset
        );
    });
}

#[test]
fn a_deferred_index_roll_stops_dispatch_until_the_full_file_is_flushed() {
    with_store(|mut store, _| {
        store.defer_index_rolls(true);
        let mut t = Traffic::new(47);
        // Every message has a UNIQ_KEY: 24-entry files roll several times.
        t.put_n(&mut store, 80);
        let files_before = store.index().file_count();
        let (mut stops, mut passes) = (0, 0);
        while store.dispatched_offset() < store.log().max_offset() {
            passes += 1;
            assert!(passes < 10_000, "dispatch made no progress");
            let pass = store
                .dispatch_some(&mut [], 5, u64::MAX, &mut |_| {})
                .unwrap();
            if pass.index_flush {
                stops += 1;
                assert!(!pass.more, "a pass that waits for a flush asks for no more");
                // Nothing moves until the flush: the same answer again.
                let at = store.dispatched_offset();
                let again = store
                    .dispatch_some(&mut [], 5, u64::MAX, &mut |_| {})
                    .unwrap();
                assert_eq!((again.count, again.index_flush), (0, true));
                assert_eq!(store.dispatched_offset(), at);
                let files = store.index().file_count();
                store.checkpoint().unwrap();
                let next = store
                    .dispatch_some(&mut [], 1, u64::MAX, &mut |_| {})
                    .unwrap();
                assert!(!next.index_flush && next.count == 1, "{next:?}");
                assert_eq!(
                    store.index().file_count(),
                    files + 1,
                    "the roll came after the flush"
                );
            }
        }
        assert!(
            stops >= 2,
            "80 keyed messages roll 24-entry files more than once: {stops}"
        );
        assert!(store.index().file_count() > files_before);
        // Every key is found: nothing was skipped at a stop.
        for s in &t.sent {
            let uniq = properties::get(&s.props, properties::key::UNIQ_KEY).unwrap();
            let found = index_hits(&store, s.topic, uniq);
            assert!(found.contains(&s.offset), "{uniq} at {}", s.offset);
        }
    });
}

#[test]
fn a_bounded_pass_dispatches_no_record_that_ends_past_its_bound() {
    with_store(|mut store, _| {
        let mut t = Traffic::new(59);
        // Into the second segment, so one bound falls in the first one's blank tail.
        t.put_until(&mut store, LOG_SEG + 1000);
        let sent = &t.sent;
        let mut seen = Vec::new();
        let pass = |store: &mut TestEngine, below: u64, seen: &mut Vec<u64>| {
            store
                .dispatch_some(&mut [], 1000, below, &mut |r| seen.push(r.offset))
                .unwrap()
        };
        // A bound one byte into record 5: records 0..5 go, record 5 waits whole.
        let p = pass(&mut store, sent[5].offset + 1, &mut seen);
        assert!(p.limited && !p.more, "{p:?}");
        assert_eq!(store.dispatched_offset(), sent[5].offset);
        assert_eq!(seen, sent[..5].iter().map(|s| s.offset).collect::<Vec<_>>());
        // The same bound again: nothing moves.
        let p = pass(&mut store, sent[5].offset + 1, &mut seen);
        assert_eq!((p.count, p.limited), (0, true));
        // A bound on a record's end takes that record.
        let p = pass(&mut store, sent[6].offset, &mut seen);
        assert_eq!((p.count, p.limited), (1, true));
        assert_eq!(store.dispatched_offset(), sent[6].offset);
        // A bound in the first segment's blank tail stops before the blank.
        let first_of_second = sent.iter().position(|s| s.offset >= LOG_SEG).unwrap();
        assert_eq!(sent[first_of_second].offset, LOG_SEG);
        let p = pass(&mut store, LOG_SEG - 1, &mut seen);
        assert!(p.limited, "{p:?}");
        assert!(store.dispatched_offset() < LOG_SEG);
        assert!(store.dispatched_offset() > sent[first_of_second - 1].offset);
        // No bound: the rest, every record once, in order.
        let p = pass(&mut store, u64::MAX, &mut seen);
        assert!(!p.limited && !p.more, "{p:?}");
        assert_eq!(store.dispatched_offset(), store.log().max_offset());
        assert_eq!(seen, sent.iter().map(|s| s.offset).collect::<Vec<_>>());
        assert_queued(&store, sent);
    });
}
