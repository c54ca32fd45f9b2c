use super::*;
use crate::config::BrokerConfig;

/// A store of 64 KiB segments holding `n` 1 KiB records; their log offsets.
fn store_with(dir: &std::path::Path, n: usize) -> (Arc<StoreService>, Vec<u64>) {
    let config = BrokerConfig {
        store_root: dir.to_path_buf(),
        commit_log_segment_bytes: 64 << 10,
        ..BrokerConfig::default()
    };
    let store = StoreService::open(&config).unwrap();
    let m = super::super::test_message(&[7u8; 1024], b"");
    let offsets = (0..n).map(|_| store.put(&m).unwrap().at.offset).collect();
    (store, offsets)
}

#[test]
fn reads_for_executor_threads_meet_cold_records_on_a_blocking_thread() {
    // Where /tmp is tmpfs its pages are never cold: then only the bytes are checked.
    let dir = tempfile::tempdir().unwrap();
    let (store, offsets) = store_with(dir.path(), 200);
    let first = offsets[0];
    let hot = store.record_at(first).unwrap();
    let hot_log = store
        .log_bytes(first, 4096, ReadMode::Wait)
        .unwrap()
        .unwrap();
    store.close().unwrap();
    drop(store);
    // Reopened after a clean close, no page of the first segment is mapped (recovery
    // reads from the checkpoint on): its pages can be dropped.
    let (store, _) = store_with(dir.path(), 0);
    let segment =
        std::fs::File::open(dir.path().join("commitlog").join(format!("{first:020}"))).unwrap();
    segment.sync_all().unwrap();
    rustix::fs::fadvise(&segment, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    let on_tmpfs = rustix::fs::fstatfs(&segment).unwrap().f_type == 0x0102_1994;
    let cached = store.record_at_mode(first, MAX_RECORD_READ, ReadMode::Cached);
    assert!(
        on_tmpfs || cached == Err(WouldBlock),
        "a cold record read from the page cache answered {cached:?}"
    );
    let read = tern_shell::runtime::block_on(store.record_at_off_executor(first, MAX_RECORD_READ));
    assert_eq!(read.unwrap(), hot);
    // Warm again now: the executor thread reads it itself.
    let cached = store.record_at_mode(first, MAX_RECORD_READ, ReadMode::Cached);
    assert_eq!(cached, Ok(Ok(hot.clone())));

    rustix::fs::fadvise(&segment, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    let cached = store.log_bytes(first, 4096, ReadMode::Cached);
    assert!(
        on_tmpfs || cached == Err(WouldBlock),
        "cold log bytes read from the page cache answered {cached:?}"
    );
    let read = tern_shell::runtime::block_on(store.log_bytes_off_executor(first, 4096));
    assert_eq!(read.unwrap(), hot_log);
}

#[test]
fn a_record_larger_than_the_caller_allows_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let (store, offsets) = store_with(dir.path(), 2);
    let size = store.record_at(offsets[0]).unwrap().len() as u32;
    let read = |max| tern_shell::runtime::block_on(store.record_at_off_executor(offsets[0], max));
    assert_eq!(read(size).unwrap().len(), size as usize);
    let refused = read(size - 1).unwrap_err();
    assert!(refused.to_string().contains("implausible"), "{refused}");
}

#[test]
fn pulls_read_in_runs_return_what_record_by_record_reads_return() {
    // 64 KiB segments: runs meet segment ends (a blank between), queues interleave
    // (runs of one record) and batches lie back to back (runs of many).
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store_with(dir.path(), 0);
    let shutdown = tern_shell::runtime::Shutdown::new();
    let reput = tern_shell::runtime::spawn(store.clone().run_reput(shutdown.clone(), |_, _| {}));
    // Every tenth record is ~50 KB: pulls stop at MAX_PULL_BYTES (256 KiB) too.
    let bodies: Vec<Vec<u8>> = (0..40u8)
        .map(|i| {
            vec![
                i;
                if i % 10 == 9 {
                    50_000
                } else {
                    200 + 97 * i as usize
                }
            ]
        })
        .collect();
    for round in 0..6 {
        for (i, b) in bodies.iter().enumerate() {
            let q = (i + round) as i32 % 2;
            store
                .put(&tern_engine::testkit::message("T", q, b, b""))
                .unwrap();
        }
        // A batch lies in one segment: its small records only.
        let batch: Vec<_> = bodies[..24]
            .iter()
            .filter(|b| b.len() < 50_000)
            .map(|b| tern_engine::testkit::message("T", 0, b, b""))
            .collect();
        store.put_batch(&batch).unwrap();
    }
    let end = store.log_end();
    assert!(tern_shell::runtime::block_on(
        store.await_dispatched(end, std::time::Duration::from_secs(10))
    ));
    let every: &dyn Fn(&[u8]) -> bool = &|_| true;
    let mut stopped_for_size = false;
    for q in 0..2 {
        let (_, max) = store.queue_bounds("T", q);
        assert!(max > 100, "queue {q} holds {max}");
        for from in 0..max {
            for want in [1, 7, 32] {
                let read = |rf| {
                    store
                        .read_queue(("T", q), (from, want), None, rf, ReadMode::Wait)
                        .unwrap()
                        .unwrap()
                };
                let (runs, one_by_one) = (read(None), read(Some(every)));
                assert_eq!(runs.body, one_by_one.body, "queue {q} from {from}, {want}");
                assert_eq!(
                    (runs.count, runs.next, runs.last_physical),
                    (one_by_one.count, one_by_one.next, one_by_one.last_physical),
                    "queue {q} from {from}, {want}"
                );
                assert!(runs.count >= 1 && runs.count <= want.min((max - from) as u32));
                assert!(runs.next > from && runs.next <= max);
                stopped_for_size |= runs.count < want.min((max - from) as u32);
            }
        }
    }
    assert!(stopped_for_size, "no pull met the byte limit");
    shutdown.trigger();
    tern_shell::runtime::block_on(reput);
}
