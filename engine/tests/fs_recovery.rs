//! `FsStore` over real files: a clean restart, crashes followed by damage to the commit
//! log's unflushed tail, and a real `kill -9` of a process appending and flushing.
//!
//! Each test keeps a model (every message put, where it landed, whether it was flushed)
//! and checks the reopened store against it: every flushed message intact and in its
//! queue and the index, nothing that was never written, and appends continuing with the
//! right offsets.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tern_engine::commitlog::{Appended, Slot};
use tern_engine::index::IndexConfig;
use tern_engine::properties::{append, key};
use tern_engine::record::MessageIn;
use tern_engine::store::StoreConfig;
use tern_engine::testkit;
use tern_engine_fs::{FsStore, Writes};

/// Small geometry, so a few thousand messages span several segments and index files.
const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: 64 * 1024,
    queue_entries_per_file: 1_000,
    index: IndexConfig {
        slots: 64,
        entries: 256,
    },
    ..StoreConfig::SERVER
};

/// Set in the child of `acknowledged_messages_survive_kill_9` to the store's root.
const KILL_CHILD_ENV: &str = "TERN_FS_RECOVERY_KILL_CHILD";

const TOPICS: [&str; 3] = ["TopicA", "TopicB", "%RETRY%group"];
const QUEUES: i32 = 4;
const BASE_TIME_MS: i64 = 1_700_000_000_000;

/// Message `i`: its topic, queue, body and keys all derive from `i`, so a record read back
/// can be checked against what was sent without storing it.
struct Msg {
    topic: &'static str,
    queue_id: i32,
    body: Vec<u8>,
    props: Vec<u8>,
    key: String,
}

fn msg(i: u64) -> Msg {
    let len = 40 + (i * 37 % 400) as usize;
    let body: Vec<u8> = format!("message {i} ").bytes().cycle().take(len).collect();
    let key = format!("key-{i}");
    let mut props = vec![0u8; 128];
    let mut n = 0;
    append(&mut props, &mut n, key::KEYS, &key).unwrap();
    append(&mut props, &mut n, key::TAGS, &format!("tag{}", i % 5)).unwrap();
    append(&mut props, &mut n, key::UNIQ_KEY, &format!("U{i:016X}")).unwrap();
    props.truncate(n);
    Msg {
        topic: TOPICS[(i % 3) as usize],
        queue_id: (i / 3 % QUEUES as u64) as i32,
        body,
        props,
        key,
    }
}

fn message_in(m: &Msg) -> MessageIn<'_> {
    testkit::message(m.topic, m.queue_id, &m.body, &m.props)
}

/// Where message `i` landed.
#[derive(Clone, Copy, Debug)]
struct Sent {
    i: u64,
    at: Appended,
    queue_offset: u64,
}

fn put(store: &mut FsStore, i: u64) -> Sent {
    let m = msg(i);
    let stored = store
        .engine_mut()
        .put(&message_in(&m), BASE_TIME_MS + i as i64)
        .unwrap_or_else(|e| panic!("{}", store.error("put", e)));
    Sent {
        i,
        at: stored.at,
        queue_offset: stored.queue_offset,
    }
}

fn put_range(store: &mut FsStore, range: std::ops::Range<u64>, sent: &mut Vec<Sent>) {
    for i in range {
        sent.push(put(store, i));
    }
}

fn open(root: &Path) -> (FsStore, tern_engine::store::OpenReport) {
    FsStore::open(root, CONFIG).unwrap_or_else(|e| panic!("open: {e}"))
}

/// Checks the store holds exactly `sent` (in log order): the log's records are these and
/// no others, each queue holds its messages at their queue offsets, the index finds every
/// key, and the keys in `gone` are found nowhere.
fn verify(store: &FsStore, sent: &[Sent], gone: &[u64]) {
    let s = store.engine();
    let log = s.log();
    // The log, front to back: exactly the messages sent, in order.
    let mut pos = log.min_offset();
    let mut n = 0;
    while pos < log.max_offset() {
        match log.slot_at(pos).unwrap() {
            Slot::Record(size) => {
                let expect = sent
                    .get(n)
                    .unwrap_or_else(|| panic!("extra record at {pos}"));
                assert_eq!(
                    (pos, size),
                    (expect.at.offset, expect.at.size),
                    "record {n}"
                );
                check_record(store, expect);
                pos += u64::from(size);
                n += 1;
            }
            Slot::Skip(next) => pos = next,
            Slot::End => panic!("log ends at {pos} before its max offset"),
        }
    }
    assert_eq!(n, sent.len(), "records in the log");
    // Every queue: its messages at their offsets, and nothing after them.
    let mut per_queue: BTreeMap<(&str, i32), Vec<&Sent>> = BTreeMap::new();
    for x in sent {
        let m = msg(x.i);
        per_queue.entry((m.topic, m.queue_id)).or_default().push(x);
    }
    for ((topic, qid), list) in &per_queue {
        let q = s.queue(topic, *qid).expect("queue exists");
        assert_eq!(q.max_offset(), list.len() as u64, "{topic}/{qid} length");
        for x in list {
            let e = q.get(x.queue_offset).unwrap().expect("entry");
            assert_eq!((e.physical_offset, e.size), (x.at.offset, x.at.size));
        }
    }
    // The index: each kept key finds its record; each lost key finds nothing.
    for x in sent {
        let found = query(store, x.i);
        assert!(found.contains(&x.at.offset), "key of {} not indexed", x.i);
    }
    for &i in gone {
        assert_eq!(
            query(store, i),
            Vec::<u64>::new(),
            "lost message {i} indexed"
        );
    }
}

fn query(store: &FsStore, i: u64) -> Vec<u64> {
    let m = msg(i);
    let mut found = Vec::new();
    store
        .engine()
        .index()
        .query(m.topic, &m.key, 64, 0, i64::MAX, &mut |o| found.push(o))
        .unwrap();
    found
}

/// The record at `x` is message `x.i`, whole: topic, queue, offsets, body, CRC.
fn check_record(store: &FsStore, x: &Sent) {
    let m = msg(x.i);
    let log = store.engine().log();
    log.with_record(x.at.offset, x.at.size, &mut [], |v| {
        let v = v?;
        v.verify_crc()?;
        assert_eq!(v.topic(), m.topic.as_bytes());
        assert_eq!(v.queue_id(), m.queue_id);
        assert_eq!(v.queue_offset(), x.queue_offset as i64);
        assert_eq!(v.physical_offset(), x.at.offset as i64);
        assert_eq!(v.body(), &m.body[..]);
        assert_eq!(v.properties(), &m.props[..]);
        Ok(())
    })
    .unwrap_or_else(|e| panic!("message {}: {}", x.i, store.error("read", e)));
}

/// Appends after recovery continue where the log and each queue end.
fn append_more_and_check(store: &mut FsStore, sent: &mut Vec<Sent>, from: u64, count: u64) {
    let log_end = store.engine().log().max_offset();
    let mut next_in_queue = BTreeMap::new();
    for x in sent.iter() {
        let m = msg(x.i);
        next_in_queue.insert((m.topic, m.queue_id), x.queue_offset + 1);
    }
    let first = put(store, from);
    assert!(
        first.at.offset == log_end || first.at.offset % CONFIG.log_segment_size == 0,
        "first append at {} after a log ending at {log_end}",
        first.at.offset
    );
    let m = msg(from);
    let expected = next_in_queue.get(&(m.topic, m.queue_id)).copied();
    assert_eq!(
        first.queue_offset,
        expected.unwrap_or(0),
        "queue offset continues"
    );
    sent.push(first);
    put_range(store, from + 1..from + count, sent);
    store.dispatch(&mut |_| {}).unwrap();
}

fn segment_path(root: &Path, offset: u64) -> PathBuf {
    let base = offset - offset % CONFIG.log_segment_size;
    root.join("commitlog").join(format!("{base:020}"))
}

#[test]
fn clean_restart_keeps_every_message_and_continues_offsets() {
    clean_restart(Writes::Mapped);
}

#[test]
fn clean_restart_keeps_every_message_written_through_the_file() {
    clean_restart(Writes::Through);
}

/// Opens the store at `root` and has its log written `writes`' way.
fn open_writing(root: &Path, writes: Writes) -> (FsStore, tern_engine::store::OpenReport) {
    let (mut store, report) = open(root);
    if writes == Writes::Through {
        store.write_log_through();
    }
    (store, report)
}

fn clean_restart(writes: Writes) {
    let tmp = tempfile::tempdir().unwrap();
    let (mut store, report) = open_writing(tmp.path(), writes);
    assert!(!report.crashed);
    let mut sent = Vec::new();
    put_range(&mut store, 0..2_000, &mut sent);
    store.dispatch(&mut |_| {}).unwrap();
    store.engine_mut().flush_log().unwrap();
    assert!(
        store.engine().log().segment_span().unwrap().1 > 0,
        "several segments"
    );
    store.close().unwrap();
    assert!(!tmp.path().join("abort").exists());

    let (mut store, report) = open_writing(tmp.path(), writes);
    assert!(!report.crashed);
    assert_eq!(report.log.records_verified, 0, "a clean open does not scan");
    assert_eq!(report.redispatched, 0);
    verify(&store, &sent, &[]);
    append_more_and_check(&mut store, &mut sent, 2_000, 300);
    store.close().unwrap();

    let (store, _) = open(tmp.path());
    verify(&store, &sent, &[]);
    store.close().unwrap();
}

#[test]
fn schedule_entries_hold_the_delivery_time_and_recovery_recomputes_it() {
    use tern_engine::delay::{DelayLevels, SCHEDULE_TOPIC};
    let tmp = tempfile::tempdir().unwrap();
    let mut delayed = Msg {
        topic: SCHEDULE_TOPIC,
        queue_id: 1,
        ..msg(0)
    };
    let mut props = delayed.props.clone();
    props.resize(props.len() + 16, 0);
    let mut n = delayed.props.len();
    append(&mut props, &mut n, key::DELAY, "2").unwrap();
    props.truncate(n);
    delayed.props = props;
    let plain = msg(1);
    let with_levels = |levels: &str| StoreConfig {
        delay_levels: DelayLevels::parse(levels).unwrap(),
        ..CONFIG
    };
    let tag_codes = |store: &FsStore, topic: &str, queue_id: i32| -> Vec<i64> {
        let q = store.engine().queue(topic, queue_id).expect("queue exists");
        (q.min_offset()..q.max_offset())
            .map(|i| q.get(i).unwrap().unwrap().tag_code)
            .collect()
    };

    let (mut store, _) = FsStore::open(tmp.path(), with_levels("1s 5s 10s")).unwrap();
    for (i, m) in [&delayed, &plain, &delayed].into_iter().enumerate() {
        store
            .engine_mut()
            .put(&message_in(m), BASE_TIME_MS + i as i64)
            .unwrap();
    }
    store.dispatch(&mut |_| {}).unwrap();
    assert_eq!(
        tag_codes(&store, SCHEDULE_TOPIC, 1),
        [BASE_TIME_MS + 5_000, BASE_TIME_MS + 2 + 5_000],
        "store time + level 2's delay"
    );
    let plain_tag = tern_engine::properties::tag_code(&plain.props);
    assert_eq!(tag_codes(&store, plain.topic, plain.queue_id), [plain_tag]);
    // A crash before any checkpoint: the queues are rebuilt from the log, with the
    // levels the store is opened with now.
    drop(store);
    let (store, report) = FsStore::open(tmp.path(), with_levels("1s 7s")).unwrap();
    assert!(report.crashed);
    assert_eq!(
        tag_codes(&store, SCHEDULE_TOPIC, 1),
        [BASE_TIME_MS + 7_000, BASE_TIME_MS + 2 + 7_000]
    );
    assert_eq!(tag_codes(&store, plain.topic, plain.queue_id), [plain_tag]);
    store.close().unwrap();
}

/// How the unflushed tail is damaged after the crash, as power loss could leave it.
#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Random bytes from the flushed end on.
    RandomAfterFlushed,
    /// The first unflushed record cut in half: zeros from its middle to the end.
    TornRecord,
    /// One page in the middle of the unflushed records zeroed; records after it intact.
    ZeroedMiddlePage,
}

/// Crashes a store holding flushed and unflushed messages (all dispatched), damages the
/// unflushed tail on disk, reopens it and checks it against the model.
fn crash_damage_and_recover(damage: Damage) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (mut store, _) = open(root);
    let mut sent = Vec::new();
    put_range(&mut store, 0..800, &mut sent);
    store.dispatch(&mut |_| {}).unwrap();
    store.engine_mut().checkpoint().unwrap();
    put_range(&mut store, 800..1_500, &mut sent);
    store.dispatch(&mut |_| {}).unwrap();
    let flushed = store.engine_mut().flush_log().unwrap();
    let flushed_count = sent.len();
    // Unflushed, but dispatched: queues and index point at them when the crash comes.
    put_range(&mut store, 1_500..2_100, &mut sent);
    store.dispatch(&mut |_| {}).unwrap();
    drop(store); // crash: no close, the abort marker stays

    let unflushed = &sent[flushed_count..];
    let end = match damage {
        Damage::RandomAfterFlushed => {
            let file = File::options()
                .write(true)
                .open(segment_path(root, flushed))
                .unwrap();
            let at = flushed % CONFIG.log_segment_size;
            let len = (CONFIG.log_segment_size - at).min(6_000) as usize;
            file.write_all_at(&random_bytes(len, flushed), at).unwrap();
            flushed
        }
        Damage::TornRecord => {
            let torn = unflushed[0].at;
            let half = torn.offset + u64::from(torn.size) / 2;
            zero(
                root,
                half,
                CONFIG.log_segment_size - half % CONFIG.log_segment_size,
            );
            remove_segments_after(root, torn.offset);
            torn.offset
        }
        Damage::ZeroedMiddlePage => {
            let mid = unflushed[unflushed.len() / 2].at.offset;
            let page = mid - mid % 4096;
            zero(root, page, 4096);
            first_broken(&sent, page, page + 4096)
        }
    };
    assert!(end >= flushed, "the damage is after the flushed end");
    let kept: Vec<Sent> = sent.iter().copied().filter(|x| x.at.offset < end).collect();
    let gone: Vec<u64> = sent[kept.len()..].iter().map(|x| x.i).collect();
    assert!(kept.len() >= flushed_count && !gone.is_empty());

    let (mut store, report) = open(root);
    assert!(report.crashed, "{damage:?}: the abort marker was found");
    assert_eq!(report.log.end, end, "{damage:?}: log end");
    assert!(
        report.log.cut,
        "{damage:?}: the bytes after the end were cut"
    );
    assert_eq!(store.engine().log().max_offset(), end);
    verify(&store, &kept, &gone);
    let mut sent = kept;
    append_more_and_check(&mut store, &mut sent, 10_000, 400);
    verify(&store, &sent, &gone);
    store.close().unwrap();

    let (store, report) = open(root);
    assert!(!report.crashed);
    verify(&store, &sent, &gone);
    store.close().unwrap();
}

/// Where recovery must end when `[from, to)` was zeroed: at the first record, or the
/// blank tail of a segment, that the zeroed bytes touch.
fn first_broken(sent: &[Sent], from: u64, to: u64) -> u64 {
    let size = CONFIG.log_segment_size;
    for (k, x) in sent.iter().enumerate() {
        let rec_end = x.at.offset + u64::from(x.at.size);
        if x.at.offset < to && rec_end > from {
            return x.at.offset;
        }
        let seg_end = x.at.offset - x.at.offset % size + size;
        let next = sent.get(k + 1).map_or(u64::MAX, |n| n.at.offset);
        if next >= seg_end && rec_end < seg_end && rec_end < to && seg_end > from {
            return rec_end; // the blank tail was zeroed
        }
    }
    panic!("zeroed range touches no record");
}

fn zero(root: &Path, offset: u64, len: u64) {
    let file = File::options()
        .write(true)
        .open(segment_path(root, offset))
        .unwrap();
    file.write_all_at(&vec![0u8; len as usize], offset % CONFIG.log_segment_size)
        .unwrap();
}

fn remove_segments_after(root: &Path, offset: u64) {
    let keep = segment_path(root, offset);
    for entry in fs::read_dir(root.join("commitlog")).unwrap() {
        let path = entry.unwrap().path();
        if path > keep {
            fs::remove_file(path).unwrap();
        }
    }
}

/// Deterministic noise (xorshift64*), so a failure reproduces.
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn crash_then_random_bytes_after_flushed_end_keeps_every_flushed_message() {
    crash_damage_and_recover(Damage::RandomAfterFlushed);
}

#[test]
fn crash_then_torn_record_is_cut_and_flushed_messages_kept() {
    crash_damage_and_recover(Damage::TornRecord);
}

#[test]
fn crash_then_zeroed_middle_page_cuts_the_log_at_the_first_broken_record() {
    crash_damage_and_recover(Damage::ZeroedMiddlePage);
}

/// Messages per flush in the child: each flush acknowledges a group, as group commit does.
const CHILD_GROUP: u64 = 4;
/// Kill rounds, and acknowledged messages each round waits for before it kills the child.
const KILL_AFTER_ACKS: [u64; 3] = [300, 700, 500];
/// Bound on the child's work should the parent never kill it.
const CHILD_MAX_MESSAGES: u64 = 200_000;
/// Set in the child to the number of the first message it appends.
const KILL_CHILD_START_ENV: &str = "TERN_FS_RECOVERY_KILL_START";

/// Set in the child when its log is written through the file (`Writes::Through`).
const KILL_CHILD_THROUGH_ENV: &str = "TERN_FS_RECOVERY_KILL_THROUGH";

/// Not a test on its own: the child half of `acknowledged_messages_survive_kill_9`. It
/// opens the store (recovering it after the previous kill), appends messages from the
/// given start, flushes every group, and prints `ack <i> <offset> <size> <queue offset>`
/// for each message of a flushed group, dispatching and checkpointing now and then as a
/// broker would, until it is killed.
#[test]
fn kill_9_child() {
    let (Ok(root), Ok(start)) = (
        std::env::var(KILL_CHILD_ENV),
        std::env::var(KILL_CHILD_START_ENV),
    ) else {
        return;
    };
    let start: u64 = start.parse().unwrap();
    let writes = match std::env::var_os(KILL_CHILD_THROUGH_ENV) {
        Some(_) => Writes::Through,
        None => Writes::Mapped,
    };
    let (mut store, _) = open_writing(Path::new(&root), writes);
    let mut out = std::io::stdout().lock();
    let mut group = Vec::new();
    for i in start..start + CHILD_MAX_MESSAGES {
        group.push(put(&mut store, i));
        if group.len() as u64 == CHILD_GROUP {
            store.engine_mut().flush_log().unwrap();
            for x in group.drain(..) {
                writeln!(
                    out,
                    "ack {} {} {} {}",
                    x.i, x.at.offset, x.at.size, x.queue_offset
                )
                .unwrap();
            }
            out.flush().unwrap();
        }
        if i % 16 == 15 {
            store.dispatch(&mut |_| {}).unwrap();
        }
        if i % 250 == 249 {
            store.engine_mut().checkpoint().unwrap();
        }
    }
}

/// Runs the child on `root` from message `start`, SIGKILLs it once `acks` messages are
/// acknowledged, and returns the acknowledged messages.
fn run_child_and_kill(root: &Path, start: u64, acks: u64, writes: Writes) -> Vec<Sent> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "kill_9_child", "--nocapture", "--test-threads=1"])
        .env(KILL_CHILD_ENV, root)
        .env(KILL_CHILD_START_ENV, start.to_string())
        .stdout(Stdio::piped());
    if writes == Writes::Through {
        command.env(KILL_CHILD_THROUGH_ENV, "1");
    }
    let mut child = command.spawn().unwrap();
    let mut acked = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while (acked.len() as u64) < acks {
        let line = lines
            .next()
            .expect("child exited before it was killed")
            .unwrap();
        let Some(rest) = line.strip_prefix("ack ") else {
            continue;
        };
        let f: Vec<u64> = rest.split(' ').map(|s| s.parse().unwrap()).collect();
        acked.push(Sent {
            i: f[0],
            at: Appended {
                offset: f[1],
                size: f[2] as u32,
            },
            queue_offset: f[3],
        });
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    acked
}

/// Every record in the log, front to back, as message `n` for the `n`th record: the
/// children append messages 0, 1, 2, ... so position is identity.
fn scan_log(store: &FsStore) -> Vec<Sent> {
    let mut all = Vec::new();
    let log = store.engine().log();
    let mut pos = log.min_offset();
    while pos < log.max_offset() {
        match log.slot_at(pos).unwrap() {
            Slot::Record(size) => {
                let q = log
                    .with_record(pos, size, &mut [], |v| Ok(v?.queue_offset()))
                    .unwrap();
                all.push(Sent {
                    i: all.len() as u64,
                    at: Appended { offset: pos, size },
                    queue_offset: q as u64,
                });
                pos += u64::from(size);
            }
            Slot::Skip(next) => pos = next,
            Slot::End => break,
        }
    }
    all
}

#[test]
fn acknowledged_messages_survive_kill_9() {
    kill_9_rounds(Writes::Mapped);
}

/// The log written with `pwrite` (as under SYNC_FLUSH): a record's body and its head are
/// two system calls, and a kill between them leaves no record that parses.
#[test]
fn acknowledged_messages_written_through_the_file_survive_kill_9() {
    kill_9_rounds(Writes::Through);
}

fn kill_9_rounds(writes: Writes) {
    let tmp = tempfile::tempdir().unwrap();
    let mut acked = Vec::new();
    let mut start = 0;
    for acks in KILL_AFTER_ACKS {
        acked.extend(run_child_and_kill(tmp.path(), start, acks, writes));
        let (store, report) = open(tmp.path());
        assert!(report.crashed);
        for x in &acked {
            check_record(&store, x);
            let m = msg(x.i);
            let q = store.engine().queue(m.topic, m.queue_id).expect("queue");
            let e = q
                .get(x.queue_offset)
                .unwrap()
                .expect("acked message in its queue");
            assert_eq!(e.physical_offset, x.at.offset);
        }
        // What followed the acknowledged messages (written, not flushed when killed) is
        // kept or cut whole, never garbage: the log is messages 0, 1, 2, ... in order.
        let all = scan_log(&store);
        assert!(all.len() >= acked.len());
        verify(&store, &all, &[]);
        start = all.len() as u64;
        drop(store); // as a crash again: the next child recovers too
    }
    let (mut store, _) = open_writing(tmp.path(), writes);
    let mut all = scan_log(&store);
    append_more_and_check(&mut store, &mut all, start, 100);
    verify(&store, &all, &[]);
    store.close().unwrap();
}
