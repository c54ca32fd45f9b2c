use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_engine::properties::{append, key};
use tern_engine_fs::ReadMode;
use tern_shell::runtime::{self, Shutdown};

use super::super::{LogReadError, StoreService, test_message};
use super::TruncateError;
use crate::config::BrokerConfig;

/// 64 KiB log segments, 16-entry queue files, 24-entry index files: a few dozen 1 KiB
/// records span several of each.
fn config(dir: &Path) -> BrokerConfig {
    BrokerConfig {
        store_root: dir.to_path_buf(),
        commit_log_segment_bytes: 64 << 10,
        consume_queue_entries: 16,
        index_slots: 8,
        index_entries: 24,
        ..BrokerConfig::default()
    }
}

/// The store with its tasks running (reput, flush, checkpoint, prepare, warm), as the
/// broker runs them.
struct Running {
    store: Arc<StoreService>,
    shutdown: Shutdown,
    tasks: Vec<runtime::JoinHandle<()>>,
}

impl Running {
    fn open(dir: &Path) -> Self {
        let store = StoreService::open(&config(dir)).unwrap();
        let shutdown = Shutdown::new();
        let tasks = vec![
            runtime::spawn(store.clone().run_flush(shutdown.clone())),
            runtime::spawn(store.clone().run_prepare(shutdown.clone())),
            runtime::spawn(store.clone().run_warm(shutdown.clone())),
            runtime::spawn(store.clone().run_reput(shutdown.clone(), |_, _| {})),
            runtime::spawn(
                store
                    .clone()
                    .run_checkpoint(shutdown.clone(), Duration::from_millis(50)),
            ),
        ];
        Running {
            store,
            shutdown,
            tasks,
        }
    }

    /// Stops the tasks; with `clean`, seals the store (else the next open recovers it as
    /// after a crash).
    fn stop(self, clean: bool) {
        self.shutdown.trigger();
        runtime::block_on(async {
            for t in self.tasks {
                t.await;
            }
        });
        if clean {
            self.store.close().unwrap();
        }
    }

    fn caught_up(&self) {
        let end = self.store.log_end();
        assert!(runtime::block_on(
            self.store.await_dispatched(end, Duration::from_secs(10))
        ));
    }
}

/// What the test appended: record `i` went to queue `i % 2` of `T` with KEYS `k{i}`.
#[derive(Clone, Debug)]
struct Sent {
    offset: u64,
    queue_id: i32,
    queue_offset: u64,
    key: String,
    bytes: Vec<u8>,
}

fn put(store: &StoreService, i: usize, body_len: usize) -> Sent {
    let key = format!("k{i:05}");
    let mut props = vec![0u8; 64];
    let mut len = 0;
    append(&mut props, &mut len, key::KEYS, &key).unwrap();
    let body = vec![(i % 251) as u8; body_len];
    let mut m = test_message(&body, &props[..len]);
    m.queue_id = (i % 2) as i32;
    let stored = store.put(&m).unwrap();
    let bytes = store.record_at(stored.at.offset).unwrap();
    Sent {
        offset: stored.at.offset,
        queue_id: m.queue_id,
        queue_offset: stored.queue_offset,
        key,
        bytes,
    }
}

/// The store holds exactly `kept`: records, queue bounds and entries, index keys; the
/// records of `cut` are gone from all three.
fn check(store: &StoreService, kept: &[Sent], cut: &[Sent]) {
    let end = store.log_end();
    for s in kept {
        assert_eq!(
            store.record_at(s.offset).unwrap(),
            s.bytes,
            "record at {}",
            s.offset
        );
        let e = store
            .queue_entry("T", s.queue_id, s.queue_offset)
            .unwrap()
            .unwrap_or_else(|| panic!("entry {} of queue {}", s.queue_offset, s.queue_id));
        assert_eq!(e.physical_offset, s.offset);
        assert!(
            store
                .query_index("T", &s.key, 64, 0, i64::MAX)
                .contains(&s.offset),
            "key {} not found",
            s.key
        );
    }
    for q in 0..2 {
        let want = kept.iter().filter(|s| s.queue_id == q).count() as u64;
        assert_eq!(store.queue_bounds("T", q), (0, want), "bounds of queue {q}");
        // Reading at the old end of the queue finds nothing.
        let pulled = store
            .read_queue(("T", q), (want, 32), None, None, ReadMode::Wait)
            .unwrap()
            .unwrap();
        assert_eq!(pulled.count, 0, "queue {q} past its end");
    }
    for s in cut {
        assert!(s.offset >= end, "a cut record below the end");
        assert!(
            store.record_at(s.offset).is_err(),
            "record at {} read",
            s.offset
        );
        assert!(
            !store
                .query_index("T", &s.key, 64, 0, i64::MAX)
                .contains(&s.offset),
            "key {} of a cut record found",
            s.key
        );
    }
    if let Some(s) = cut.first() {
        let past = store.log_bytes_sync(s.offset, 16);
        assert!(
            past.is_err() || s.offset == end,
            "log bytes past the end: {past:?}"
        );
    }
}

impl StoreService {
    fn log_bytes_sync(&self, from: u64, max: usize) -> Result<Vec<u8>, LogReadError> {
        self.log_bytes(from, max, ReadMode::Wait)
            .unwrap_or(Err(LogReadError::WaitedWouldBlock { offset: from }))
    }
}

/// Commit-log segment bases on disk.
fn segments_on_disk(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    bases.sort_unstable();
    bases
}

/// Appends one record after the cut: it lands at the log's end with its queue's next
/// offset, and reads back.
fn put_after_cut(store: &StoreService, kept: &mut Vec<Sent>, i: usize) {
    let end = store.log_end();
    let segment = 64u64 << 10;
    let s = put(store, i, 1000);
    assert!(
        s.offset == end || s.offset == end - end % segment + segment,
        "appended at {} with the end at {end}",
        s.offset
    );
    let q = kept.iter().filter(|k| k.queue_id == s.queue_id).count() as u64;
    assert_eq!(s.queue_offset, q, "queue offset after the cut");
    kept.push(s);
}

#[test]
fn truncating_at_a_record_forgets_it_and_every_later_one_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let run = Running::open(dir.path());
    let mut sent: Vec<Sent> = (0..40).map(|i| put(&run.store, i, 1000)).collect();
    run.caught_up();
    let k = 25;
    let offset = sent[k].offset;
    runtime::block_on(run.store.truncate_log(offset)).unwrap();
    let cut = sent.split_off(k);
    assert_eq!(run.store.log_end(), offset);
    assert_eq!(run.store.dispatched_offset(), offset);
    assert_eq!(run.store.durable_end(), offset, "the cut is durable");
    check(&run.store, &sent, &cut);
    // Appends continue at the cut, with the queue offsets that follow the records kept.
    put_after_cut(&run.store, &mut sent, 1000);
    run.caught_up();
    check(&run.store, &sent, &[]);
    // A crash (no clean close), then recovery: the same.
    run.stop(false);
    let run = Running::open(dir.path());
    check(&run.store, &sent, &[]);
    assert_eq!(
        run.store.log_end(),
        sent.last().map_or(0, |s| s.offset + s.bytes.len() as u64)
    );
    put_after_cut(&run.store, &mut sent, 1001);
    run.caught_up();
    run.stop(true);
    let run = Running::open(dir.path());
    check(&run.store, &sent, &[]);
    run.stop(true);
}

#[test]
fn a_cut_below_several_segments_removes_them_and_the_one_made_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let run = Running::open(dir.path());
    // About 60 records a segment: four segments and the next one made ahead.
    let mut sent: Vec<Sent> = (0..220).map(|i| put(&run.store, i, 1000)).collect();
    run.caught_up();
    let segment = 64u64 << 10;
    let last = sent.last().unwrap().offset / segment * segment;
    assert!(last >= 3 * segment, "the log spans several segments");
    // The preparer makes the segment after the last; then the cut, in the first.
    let ahead = last + segment;
    for _ in 0..100 {
        if segments_on_disk(dir.path()).contains(&ahead) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(segments_on_disk(dir.path()).contains(&ahead), "made ahead");
    let k = 30;
    let offset = sent[k].offset;
    assert!(offset < segment);
    runtime::block_on(run.store.truncate_log(offset)).unwrap();
    let cut = sent.split_off(k);
    let on_disk = segments_on_disk(dir.path());
    assert!(
        on_disk.iter().all(|&b| b <= segment),
        "segments past the cut (or made ahead of the old end) remain: {on_disk:?}"
    );
    check(&run.store, &sent, &cut);
    // The log grows through the segment boundary again, into new segments.
    for i in 0..100 {
        put_after_cut(&run.store, &mut sent, 2000 + i);
    }
    assert!(run.store.log_end() > segment, "past the old boundary");
    run.caught_up();
    check(&run.store, &sent, &[]);
    run.stop(false);
    let run = Running::open(dir.path());
    check(&run.store, &sent, &[]);
    run.stop(true);
    let run = Running::open(dir.path());
    check(&run.store, &sent, &[]);
    run.stop(true);
}

#[test]
fn offsets_that_are_not_a_record_start_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = Running::open(dir.path());
    let sent: Vec<Sent> = (0..10).map(|i| put(&run.store, i, 500)).collect();
    run.caught_up();
    let end = run.store.log_end();
    let r = runtime::block_on(run.store.truncate_log(sent[3].offset + 4));
    assert!(
        matches!(r, Err(TruncateError::NotRecordBoundary { .. })),
        "{r:?}"
    );
    let r = runtime::block_on(run.store.truncate_log(end + 1));
    assert!(matches!(r, Err(TruncateError::OutOfRange { .. })), "{r:?}");
    assert_eq!(run.store.log_end(), end);
    assert!(run.store.failure().is_none());
    check(&run.store, &sent, &[]);
    // The end itself is a cut that changes nothing.
    runtime::block_on(run.store.truncate_log(end)).unwrap();
    check(&run.store, &sent, &[]);
    run.stop(true);
}

#[test]
fn readers_racing_a_truncation_get_an_error_or_whole_records_of_one_log() {
    let dir = tempfile::tempdir().unwrap();
    let run = Running::open(dir.path());
    let old: Vec<Sent> = (0..120).map(|i| put(&run.store, i, 700)).collect();
    run.caught_up();
    let store = run.store.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let offsets: Vec<u64> = old.iter().map(|s| s.offset).collect();
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (store, stop, offsets) = (store.clone(), stop.clone(), offsets.clone());
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let at = offsets[i % offsets.len()];
                    if let Ok(bytes) = store.record_at(at) {
                        seen.push((at, bytes));
                    }
                    let q = (i % 2) as i32;
                    if let Ok(Some(p)) =
                        store.read_queue(("T", q), (0, 32), None, None, ReadMode::Wait)
                    {
                        seen.push((u64::MAX - q as u64, p.body));
                    }
                    i += 7;
                }
                seen
            })
        })
        .collect();
    // Cut, then write different records (other bodies, same sizes) where the cut ones were.
    let k = 40;
    runtime::block_on(store.truncate_log(old[k].offset)).unwrap();
    let new: Vec<Sent> = (k..120).map(|i| put(&store, 5000 + i, 700)).collect();
    run.caught_up();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut whole_pulls = 0;
    for r in readers {
        for (at, bytes) in r.join().unwrap() {
            if at >= u64::MAX - 1 {
                // A pull's records, back to back: each one old or new, whole.
                let mut rest = &bytes[..];
                while !rest.is_empty() {
                    let size = i32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                    let rec = &rest[..size];
                    assert!(
                        old.iter().chain(&new).any(|s| s.bytes == rec),
                        "a pull returned a record of neither log"
                    );
                    rest = &rest[size..];
                }
                whole_pulls += 1;
                continue;
            }
            let was = old.iter().find(|s| s.offset == at).unwrap();
            let now = new.iter().find(|s| s.offset == at);
            assert!(
                bytes == was.bytes || now.is_some_and(|n| n.bytes == bytes),
                "the record at {at} mixes the logs"
            );
        }
    }
    assert!(whole_pulls > 0);
    run.stop(true);
}

#[test]
fn a_pull_that_overlaps_a_truncation_returns_records_of_one_log_only() {
    let dir = tempfile::tempdir().unwrap();
    let run = Running::open(dir.path());
    let old: Vec<Sent> = (0..20).map(|i| put(&run.store, i, 700)).collect();
    run.caught_up();
    let k = 2;
    let new = std::sync::Mutex::new(Vec::new());
    let cut_once = std::sync::atomic::AtomicBool::new(false);
    // The SQL92 filter runs between the records of a pull: the first call cuts the log
    // after the pull's first record and writes other, smaller records where the cut ones
    // were, so the rest of the pull would copy the new log's bytes at the offsets and
    // sizes of its (old) entries.
    let cut_mid_pull = |_: &[u8]| {
        if !cut_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            runtime::block_on(run.store.truncate_log(old[k].offset)).unwrap();
            let mut new = new.lock().unwrap();
            for i in k..20 {
                new.push(put(&run.store, 5000 + i, 650));
            }
        }
        true
    };
    let pulled = run
        .store
        .read_queue(("T", 0), (0, 32), None, Some(&cut_mid_pull), ReadMode::Wait)
        .unwrap()
        .unwrap();
    assert!(cut_once.load(std::sync::atomic::Ordering::SeqCst));
    let new_log: Vec<Sent> = old[..k]
        .iter()
        .cloned()
        .chain(new.into_inner().unwrap())
        .collect();
    // Whole records, back to back, every one of the old log or every one of the new.
    let mut records = Vec::new();
    let mut rest = &pulled.body[..];
    while !rest.is_empty() {
        let size = rest.get(..4).map_or(0, |b| {
            i32::from_be_bytes(b.try_into().unwrap()).max(0) as usize
        });
        let rec = rest.get(..size).filter(|_| size > 0);
        let rec = rec.unwrap_or_else(|| panic!("a pull returned bytes that are not a record"));
        records.push(rec);
        rest = &rest[size..];
    }
    let of = |log: &[Sent]| records.iter().all(|r| log.iter().any(|s| s.bytes == *r));
    assert!(
        of(&old) || of(&new_log),
        "a pull returned records of both logs ({} records)",
        records.len()
    );
    assert_eq!(pulled.count as usize, records.len());
    run.caught_up();
    run.stop(true);
}
