//! The two-phase checkpoint over real files, the way a broker would run it: regions taken
//! under the store lock as duplicated file handles, `fdatasync` outside it while appends
//! go on, then the claim. Also checks that the engine's API fits the file types.

use std::fs::File;

use tern_engine::checkpoint::Checkpoint;
use tern_engine::index::IndexConfig;
use tern_engine::properties::{append, key};
use tern_engine::store::{Part, StoreConfig};
use tern_engine::testkit;
use tern_engine_fs::{FsStore, MappedFile};

const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: 16 * 1024,
    queue_entries_per_file: 64,
    index: IndexConfig {
        slots: 16,
        entries: 64,
    },
    ..StoreConfig::SERVER
};

fn put(store: &mut FsStore, i: u64) -> (u64, i32, u64) {
    let body = vec![i as u8; 100 + (i % 50) as usize];
    let mut props = vec![0u8; 64];
    let mut n = 0;
    append(&mut props, &mut n, key::KEYS, &format!("key-{i}")).unwrap();
    props.truncate(n);
    let queue_id = (i % 3) as i32;
    let msg = testkit::message("TwoPhase", queue_id, &body, &props);
    let stored = store
        .engine_mut()
        .put(&msg, 1_700_000_000_000 + i as i64)
        .unwrap();
    (stored.at.offset, queue_id, stored.queue_offset)
}

fn read_checkpoint(root: &std::path::Path) -> Checkpoint {
    let media = MappedFile::open(&root.join("checkpoint"), tern_engine_fs::Access::Random).unwrap();
    Checkpoint::read(&media).unwrap().expect("a checkpoint")
}

#[test]
fn a_checkpoint_synced_outside_the_lock_claims_what_was_dispatched_at_begin() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (mut store, _) = FsStore::open(root, CONFIG).unwrap();
    let mut sent: Vec<_> = (0..300).map(|i| put(&mut store, i)).collect();
    store.engine_mut().dispatch(&mut [], &mut |_| {}).unwrap();

    // Under the lock: handles on every region.
    let mut files: Vec<(Part, File)> = Vec::new();
    let plan = store
        .engine_mut()
        .checkpoint_begin(&mut |part, media: &MappedFile, _range| {
            files.push((part, media.file().try_clone().unwrap()));
        })
        .unwrap();
    let dispatched_at_begin = store.engine().dispatched_offset();
    for part in [Part::Log, Part::Queue, Part::Index] {
        assert!(files.iter().any(|(p, _)| *p == part), "{part:?} handed out");
    }
    // Outside it: appends and dispatch go on while the files are synced.
    sent.extend((300..400).map(|i| put(&mut store, i)));
    store.engine_mut().dispatch(&mut [], &mut |_| {}).unwrap();
    for (_, f) in &files {
        f.sync_data().unwrap();
    }
    store.engine_mut().checkpoint_finish(plan).unwrap();
    assert!(store.engine().log().flushed_offset() >= sent[299].0);
    let c = read_checkpoint(root);
    assert_eq!(c.dispatched_offset, dispatched_at_begin);
    assert_eq!(c.clean_end, None);

    // The process dies: the reopen recovers everything.
    drop(store);
    let (store, report) = FsStore::open(root, CONFIG).unwrap();
    assert!(report.crashed);
    for (offset, queue_id, queue_offset) in &sent {
        let q = store.engine().queue("TwoPhase", *queue_id).unwrap();
        assert_eq!(
            q.get(*queue_offset).unwrap().unwrap().physical_offset,
            *offset
        );
    }
    store.close().unwrap();
}
