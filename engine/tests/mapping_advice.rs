//! The commit log's and queues' mappings read ahead only where they are read: the files
//! present at open up to their end (a recovery scan reads them front to back), never where
//! the appender writes, since a fault that reads ahead fills the page cache with large
//! folios and a write through the mapping then dirties a whole one (`Access::past_the_end`).
//!
//! Checked on the mappings' `VmFlags` in `/proc/self/smaps` (`sr`: sequential read-ahead,
//! `rr`: none), which is what the kernel's fault path consults.

use tern_engine::media::Media;
use tern_engine::store::StoreConfig;
use tern_engine::testkit;
use tern_engine_fs::FsStore;

/// Small segments, so a few hundred messages roll the log.
const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: 256 * 1024,
    ..StoreConfig::SERVER
};

fn put(store: &mut FsStore, n: usize) {
    let body = [7u8; 1000];
    for _ in 0..n {
        let msg = testkit::message("Advice", 0, &body, b"");
        store
            .engine_mut()
            .put(&msg, testkit::BORN_TIMESTAMP)
            .unwrap_or_else(|e| panic!("{}", store.error("put", e)));
    }
}

/// The `VmFlags` of the mapping holding log offset `at`.
fn flags_at(store: &FsStore, at: u64) -> String {
    let mut addr = None;
    store.engine().log().regions(at, at + 1, &mut |m, r| {
        addr = Some(m.as_bytes().unwrap().as_ptr() as usize + r.start as usize);
    });
    flags(addr.expect("a segment holds the offset"))
}

/// The `VmFlags` of the mapping holding the end of the queue's entries.
fn queue_end_flags(store: &FsStore) -> String {
    let mut addr = None;
    let queue = store.engine().queue("Advice", 0).expect("the queue exists");
    queue.tail(&mut |m, r| {
        addr = Some(m.as_bytes().unwrap().as_ptr() as usize + r.start as usize);
    });
    flags(addr.expect("a file holds the queue's end"))
}

/// The `VmFlags` of the mapping holding `addr`.
fn flags(addr: usize) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            inside = (start..end).contains(&addr);
        } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
            return flags.trim().to_string();
        }
    }
    panic!("no mapping holds {addr:#x}");
}

fn reads_ahead(flags: &str) -> bool {
    !flags.split_whitespace().any(|f| f == "rr")
}

#[test]
fn log_and_queues_read_ahead_below_their_end_and_never_past_it() {
    let page = rustix::param::page_size() as u64;
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    put(&mut store, 10);
    store.dispatch(&mut |_| {}).unwrap();
    // The first segment was made by this open: wholly past the end then.
    let fresh = flags_at(&store, 0);
    assert!(!reads_ahead(&fresh), "{fresh}");
    store.close().unwrap();

    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    let end = store.engine().log().max_offset();
    assert!(end > 2 * page);
    // Reopened: read ahead below the page holding the end, not from it on.
    let below = flags_at(&store, 0);
    assert!(reads_ahead(&below), "{below}");
    let past = flags_at(&store, end);
    assert!(!reads_ahead(&past), "{past}");
    assert!(!reads_ahead(&flags_at(&store, CONFIG.log_segment_size - 1)));
    // The queue's file, scanned at open, from its end on likewise.
    let queue = queue_end_flags(&store);
    assert!(!reads_ahead(&queue), "{queue}");
    // A segment made later, by a roll: none anywhere.
    put(&mut store, 300);
    let (_, last) = store.engine().log().segment_span().unwrap();
    assert!(last > 0, "the log rolled");
    assert!(!reads_ahead(&flags_at(&store, last)));
    store.close().unwrap();
}
