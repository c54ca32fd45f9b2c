//! The commit log's and queues' mappings read ahead only where they are read: the files
//! present at open up to their end (a recovery scan reads them front to back), never where
//! the appender writes, since a fault that reads ahead fills the page cache with large
//! folios and a write through the mapping then dirties a whole one (`Access::past_the_end`).
//! Once the store is open a queue's last file reads ahead nowhere, so it stays one map
//! area (`Advised::Whole`); the log's last segment still does below its end.
//!
//! Checked on the mappings' `VmFlags` in `/proc/self/smaps` (`sr`: sequential read-ahead,
//! `rr`: none), which is what the kernel's fault path consults, and after a crash on the
//! page cache itself (util-linux's `fincore`).

use tern_engine::media::Media;
use tern_engine::store::StoreConfig;
use tern_engine::testkit;
use tern_engine_fs::FsStore;

/// Small segments, so a few hundred messages roll the log.
const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: 256 * 1024,
    ..StoreConfig::SERVER
};

/// Puts `n` messages of ~1.1 KB; returns where each landed.
fn put(store: &mut FsStore, n: usize) -> Vec<u64> {
    let body = [7u8; 1000];
    (0..n)
        .map(|_| {
            let msg = testkit::message("Advice", 0, &body, b"");
            store
                .engine_mut()
                .put(&msg, testkit::BORN_TIMESTAMP)
                .unwrap_or_else(|e| panic!("{}", store.error("put", e)))
                .at
                .offset
        })
        .collect()
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
fn the_log_reads_ahead_below_its_end_and_never_past_it() {
    let page = rustix::param::page_size() as u64;
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    // Records over a few pages, whatever the page size (~1.1 KB each).
    put(&mut store, (3 * page / 1000) as usize + 1);
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
    assert!(below.split_whitespace().any(|f| f == "sr"), "{below}");
    let past = flags_at(&store, end);
    assert!(!reads_ahead(&past), "{past}");
    assert!(!reads_ahead(&flags_at(&store, CONFIG.log_segment_size - 1)));
    // The queue's file, scanned at open: whole (see the next test).
    let queue = queue_end_flags(&store);
    assert!(!reads_ahead(&queue), "{queue}");
    // A segment made later, by a roll: none anywhere.
    put(&mut store, 300);
    let (_, last) = store.engine().log().segment_span().unwrap();
    assert!(last > 0, "the log rolled");
    assert!(!reads_ahead(&flags_at(&store, last)));
    store.close().unwrap();
}

/// How many of this process's map areas (lines of `/proc/self/maps`) map `path`.
fn map_areas(path: &std::path::Path) -> usize {
    // The maps name the file by its canonical path (TMPDIR may be a link).
    let path = path.canonicalize().unwrap();
    let path = path.to_str().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.ends_with(path)).count()
}

#[test]
fn a_queue_past_its_first_page_stays_one_map_area_after_a_reopen() {
    // Advised from its end, a queue's file would split in two where the advice changes:
    // with tens of thousands of queues, twice the map areas, near `vm.max_map_count`.
    let page = rustix::param::page_size() as u64;
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    // Entries are 20 bytes: more than a page of them, so the end is past page 0.
    put(&mut store, (2 * page / 20) as usize + 1);
    store.dispatch(&mut |_| {}).unwrap();
    store.close().unwrap();

    let (store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    let file = tmp
        .path()
        .join("consumequeue/Advice/0/00000000000000000000");
    assert!(file.exists(), "{}", file.display());
    assert_eq!(map_areas(&file), 1, "{}", file.display());
    // No read-ahead anywhere in it: at its end, and at its first entry (where the file
    // was mapped to read ahead for recovery's scan).
    let queue = queue_end_flags(&store);
    assert!(!reads_ahead(&queue), "{queue}");
    let mut first = None;
    let queue = store.engine().queue("Advice", 0).expect("the queue exists");
    queue.tail(&mut |m, _| first = Some(m.as_bytes().unwrap().as_ptr() as usize));
    let first = flags(first.expect("a file holds the queue's end"));
    assert!(!reads_ahead(&first), "{first}");
    // The log's one tail is split on purpose: its last segment reads ahead below the
    // page holding the end, not from it on.
    let end = store.engine().log().max_offset();
    let (_, last) = store.engine().log().segment_span().unwrap();
    assert!(end - last > page, "the last segment holds more than a page");
    let below = flags_at(&store, last);
    assert!(below.split_whitespace().any(|f| f == "sr"), "{below}");
    assert!(!reads_ahead(&flags_at(&store, end)));
    store.close().unwrap();
}

#[test]
fn a_cut_moves_the_advice_back_with_the_end() {
    let page = rustix::param::page_size() as u64;
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    let at = put(&mut store, (3 * page / 1000) as usize + 1);
    store.close().unwrap();
    // Reopened, the pages below the end read ahead; cut back to the second record, the
    // end is in one of them, and from there on the log is written again.
    let (mut store, _) = FsStore::open(tmp.path(), CONFIG).unwrap();
    assert!(reads_ahead(&flags_at(&store, at[1])));
    store.truncate_log(at[1]).unwrap();
    assert_eq!(store.engine().log().max_offset(), at[1]);
    let cut = flags_at(&store, at[1]);
    assert!(!reads_ahead(&cut), "{cut}");
    store.close().unwrap();
}

#[test]
fn after_a_crash_the_log_past_its_end_is_not_left_in_the_page_cache() {
    // Segments big enough that read-ahead's folios (at most 2 MiB) do not span them.
    const BIG: StoreConfig = StoreConfig {
        log_segment_size: 64 << 20,
        ..StoreConfig::SERVER
    };
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, _) = FsStore::open(tmp.path(), BIG).unwrap();
    put(&mut store, 10);
    store.engine_mut().flush_log().unwrap();
    drop(store); // a crash: no close, the abort marker stays
    // Recovery's cut reads the rest of the segment through the mapping, reading ahead:
    // those pages must not stay cached in the folios read-ahead made. The folio holding
    // the end may (it holds records too), so look well past it.
    let (store, report) = FsStore::open(tmp.path(), BIG).unwrap();
    assert!(report.crashed);
    let end = store.engine().log().max_offset();
    // util-linux's `fincore` (mincore(2) on the file): the segment's bytes in the page
    // cache. The folio holding the end stays (it holds records too): at most 2 MiB.
    let path = tmp.path().join("commitlog/00000000000000000000");
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(&path)
        .output()
        .expect("util-linux's fincore");
    let resident: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        resident <= end + (2 << 20),
        "{resident} bytes of the segment cached, the log ends at {end}"
    );
    store.close().unwrap();
}
