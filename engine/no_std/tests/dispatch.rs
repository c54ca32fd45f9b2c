//! Bounded dispatch: a pass does at most its budget of records and says whether more
//! remain, so an owner can take its lock once per pass.

mod support;

use support::*;
use tern_engine::faulty::FaultPlan;

#[test]
fn dispatch_some_stops_at_its_budget_and_says_whether_more_remain() {
    in_big_stack(|| {
        let plan = FaultPlan::none();
        let mut arena = Arena::new();
        let mut store = open(arena.parts(&plan), false).unwrap();
        let mut rng = Rng(31);
        let mut sent = Vec::new();
        // Across three segments, so passes cross blank tails.
        while store.log().max_offset() < 2 * LOG_SEG + 100 {
            let mut s = new_message(&mut rng, sent.len() as u64);
            put(&mut store, &mut s, 1_700_000_000_000).unwrap();
            sent.push(s);
        }
        let pass = store.dispatch_some(&mut [], 0, &mut |_| {}).unwrap();
        assert_eq!((pass.count, pass.more), (0, true));
        let mut seen = Vec::new();
        let mut passes = 0;
        loop {
            let pass = store
                .dispatch_some(&mut [], 3, &mut |r| seen.push(r.offset))
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
        let pass = store.dispatch_some(&mut [], 3, &mut |_| {}).unwrap();
        assert_eq!((pass.count, pass.more), (0, false));
        // `dispatch` is the same loop without a budget.
        let mut s = new_message(&mut rng, sent.len() as u64);
        put(&mut store, &mut s, 1_700_000_000_000).unwrap();
        assert_eq!(store.dispatch(&mut [], &mut |_| {}), Ok(1));
        let q = store.queue(s.topic, s.queue_id).unwrap();
        assert_eq!(
            q.get(s.queue_offset).unwrap().unwrap().physical_offset,
            s.offset
        );
    })
    .unwrap();
}
