//! `StoreDir` over a real temp dir: folders, the lock (within a process and across
//! processes), the abort marker, the checkpoint page, and disk usage.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use tern_engine::checkpoint::Checkpoint;
use tern_engine::media::{Directory, Media};
use tern_engine_fs::{CHECKPOINT_LEN, StoreDir, StoreError};

/// Set in the child process that holds a store's lock for the cross-process test.
const CHILD_ENV: &str = "TERN_ENGINE_FS_LOCK_HOLDER";

#[test]
fn open_creates_rocketmq_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = StoreDir::open(&root).unwrap();
    for dir in ["commitlog", "consumequeue", "index", "config"] {
        assert!(root.join(dir).is_dir(), "{dir}");
    }
    assert!(root.join("lock").is_file());
    assert!(root.join("abort").is_file());
    store.close().unwrap();
}

#[test]
fn second_open_fails_naming_directory_and_holder_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let first = StoreDir::open(tmp.path()).unwrap();
    let error = StoreDir::open(tmp.path()).unwrap_err();
    let StoreError::Locked { dir, holder_pid } = &error else {
        panic!("expected Locked, got {error}");
    };
    assert_eq!(dir, tmp.path());
    assert_eq!(*holder_pid, Some(std::process::id()));
    let message = error.to_string();
    assert!(
        message.contains(&tmp.path().display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&std::process::id().to_string()),
        "{message}"
    );
    first.close().unwrap();
    StoreDir::open(tmp.path()).unwrap().close().unwrap();
}

/// Not a test on its own: the child half of
/// `open_in_another_process_fails_while_one_holds_the_store`. It opens the store named in
/// the environment, says "locked", and holds it until its stdin closes.
#[test]
fn lock_holder_child() {
    let Ok(root) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = StoreDir::open(std::path::Path::new(&root)).unwrap();
    println!("locked");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(store);
}

#[test]
fn open_in_another_process_fails_while_one_holds_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("locked") {
        line.clear();
        assert_ne!(
            stdout.read_line(&mut line).unwrap(),
            0,
            "child exited early"
        );
    }

    let error = StoreDir::open(tmp.path()).unwrap_err();
    match &error {
        StoreError::Locked { holder_pid, .. } => assert_eq!(*holder_pid, Some(child.id())),
        other => panic!("expected Locked, got {other}"),
    }

    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // The child released the lock by exiting (without closing: its abort marker stays).
    let store = StoreDir::open(tmp.path()).unwrap();
    assert!(store.abort_existed());
}

#[test]
fn abort_marker_tells_a_crash_from_a_clean_close() {
    let tmp = tempfile::tempdir().unwrap();
    let store = StoreDir::open(tmp.path()).unwrap();
    assert!(!store.abort_existed(), "a new store was not aborted");
    let pid = fs::read_to_string(tmp.path().join("abort")).unwrap();
    assert_eq!(pid.trim(), std::process::id().to_string());
    store.close().unwrap();
    assert!(!tmp.path().join("abort").exists());

    let store = StoreDir::open(tmp.path()).unwrap();
    assert!(!store.abort_existed(), "clean close then open");
    drop(store); // as a crash: no close

    let store = StoreDir::open(tmp.path()).unwrap();
    assert!(store.abort_existed(), "open after a crash");
    store.close().unwrap();
}

#[test]
fn checkpoint_round_trips_through_the_mapped_page() {
    let tmp = tempfile::tempdir().unwrap();
    let store = StoreDir::open(tmp.path()).unwrap();
    let mut media = store.checkpoint_media().unwrap();
    assert_eq!(media.len(), CHECKPOINT_LEN as u64);
    assert_eq!(
        Checkpoint::read(&media).unwrap(),
        None,
        "a new page is no checkpoint"
    );
    let c = Checkpoint {
        flushed_offset: 4096,
        dispatched_offset: 1000,
        clean_end: Some(4096),
        ..Default::default()
    };
    c.write(&mut media).unwrap();
    drop(media);
    store.close().unwrap();

    let store = StoreDir::open(tmp.path()).unwrap();
    let media = store.checkpoint_media().unwrap();
    assert_eq!(Checkpoint::read(&media).unwrap(), Some(c));
    assert_eq!(
        fs::metadata(tmp.path().join("checkpoint")).unwrap().len(),
        CHECKPOINT_LEN as u64
    );
    drop(media);
    store.close().unwrap();
}

#[test]
fn checkpoint_of_the_wrong_size_is_replaced_by_an_empty_page() {
    for len in [100, CHECKPOINT_LEN + 100] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("checkpoint");
        fs::write(&path, vec![9u8; len]).unwrap();
        let store = StoreDir::open(tmp.path()).unwrap();
        let media = store.checkpoint_media().unwrap();
        assert_eq!(Checkpoint::read(&media).unwrap(), None, "{len}");
        assert_eq!(fs::metadata(&path).unwrap().len(), CHECKPOINT_LEN as u64);
        drop(media);
        store.close().unwrap();
    }
}

#[test]
fn consume_queues_are_listed_for_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let store = StoreDir::open(tmp.path()).unwrap();
    for (topic, id) in [("TopicTest", 3), ("TopicTest", 0), ("%RETRY%g", 0)] {
        let mut queue = store.consume_queue(topic, id).unwrap();
        queue.create(0, 6_000).unwrap();
    }
    assert!(store.consume_queue("../escape", 0).is_err());
    store.close().unwrap();

    let store = StoreDir::open(tmp.path()).unwrap();
    assert_eq!(
        store.list_queues().unwrap(),
        vec![
            ("%RETRY%g".to_owned(), 0),
            ("TopicTest".to_owned(), 0),
            ("TopicTest".to_owned(), 3)
        ]
    );
    let mut queue = store.consume_queue("TopicTest", 3).unwrap();
    let mut bases = Vec::new();
    queue.scan(&mut |b| bases.push(b)).unwrap();
    assert_eq!(bases, vec![0]);
    assert!(
        tmp.path()
            .join("consumequeue/TopicTest/3/00000000000000000000")
            .is_file()
    );
}

#[test]
fn commitlog_and_index_folders_name_segments_by_their_widths() {
    let tmp = tempfile::tempdir().unwrap();
    let store = StoreDir::open(tmp.path()).unwrap();
    store
        .commitlog()
        .unwrap()
        .create(1_073_741_824, 64)
        .unwrap();
    store
        .index()
        .unwrap()
        .create(20_240_101_000_000_000, 64)
        .unwrap();
    assert!(tmp.path().join("commitlog/00000000001073741824").is_file());
    assert!(tmp.path().join("index/20240101000000000").is_file());
    let usage = store.disk_usage().unwrap();
    assert!(usage.total_bytes > 0);
}
