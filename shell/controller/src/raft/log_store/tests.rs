use std::io::Write;

use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload};

use super::*;
use crate::raft::machine::StateMachine;
use crate::state::Command;

struct Fresh;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Fresh {
    async fn build(&self) -> StorageResult<(tempfile::TempDir, LogStore, StateMachine)> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(&e))?;
        let log = LogStore::open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        let sm = StateMachine::open(dir.path()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

/// openraft's own conformance suite for log stores and state machines.
#[test]
fn passes_openraft_storage_suite() {
    Suite::test_all(Fresh).unwrap();
}

fn entry(term: u64, index: u64, cmd: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
        payload: EntryPayload::Normal(cmd),
    }
}

fn noop(index: u64) -> Entry<TypeConfig> {
    entry(1, index, Command::Noop)
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    // Waits for the flush callback, as openraft does before counting the entries.
    openraft::storage::RaftLogStorageExt::blocking_append(log, entries)
        .await
        .unwrap();
}

async fn indexes(log: &mut LogStore) -> Vec<u64> {
    log.try_get_log_entries(..)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect()
}

#[test]
fn entries_survive_a_reopen_and_a_torn_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        append(&mut log, (1..=5).map(noop).collect()).await;
        log.truncate(LogId::new(CommittedLeaderId::new(1, 0), 4))
            .await
            .unwrap();
        append(
            &mut log,
            vec![entry(
                2,
                4,
                Command::Clean {
                    name: "b".into(),
                    ids: None,
                },
            )],
        )
        .await;
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
    });
    // A crash mid-append: half a record after the last whole one.
    let path = dir.path().join("log.tern");
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&[0, 0, 0, 40, 1, 2, 3]).unwrap();
    drop(f);
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
        let e = log.try_get_log_entries(4..5).await.unwrap();
        assert_eq!(e[0].log_id.leader_id.term, 2);
        // The cut tail is gone from the file: appending goes on from the good prefix.
        append(&mut log, vec![entry(2, 5, Command::Noop)]).await;
    });
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5]);
    });
}

#[test]
fn a_damaged_record_ends_the_log_there() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        append(&mut log, (1..=3).map(noop).collect()).await;
    });
    let path = dir.path().join("log.tern");
    let mut bytes = std::fs::read(&path).unwrap();
    let second = {
        let first_len = u32::from_be_bytes(bytes[0..4].try_into().unwrap()) as usize;
        RECORD_HEADER + first_len
    };
    bytes[second + RECORD_HEADER] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1]);
    });
}

#[test]
fn purged_entries_stay_purged_and_the_file_is_rewritten_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let n = REWRITE_AFTER_PURGED as u64 + 10;
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        append(&mut log, (1..=n).map(noop).collect()).await;
        log.purge(LogId::new(CommittedLeaderId::new(1, 0), n - 3))
            .await
            .unwrap();
        assert_eq!(indexes(&mut log).await, vec![n - 2, n - 1, n]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(n - 3));
        assert_eq!(state.last_log_id.map(|l| l.index), Some(n));
        append(&mut log, vec![noop(n + 1)]).await;
    });
    let size = std::fs::metadata(dir.path().join("log.tern"))
        .unwrap()
        .len();
    assert!(
        size < 200,
        "the rewritten log holds 4 entries, not {size} bytes"
    );
    run(async {
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![n - 2, n - 1, n, n + 1]);
    });
}

proptest::proptest! {
    /// Whatever bytes a crash or a bad disk leaves, opening reads a prefix of whole
    /// records and never panics; a valid log with garbage after it keeps every record.
    #[test]
    fn any_bytes_decode_to_a_prefix_of_whole_records(
        n in 0u64..6,
        garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
    ) {
        let mut bytes = Vec::new();
        for i in 1..=n {
            bytes.extend_from_slice(&encode_record(&noop(i)).unwrap());
        }
        let good = bytes.len();
        bytes.extend_from_slice(&garbage);
        let (records, len) = decode_records(&bytes);
        proptest::prop_assert!(len <= bytes.len());
        proptest::prop_assert!(records.len() as u64 >= n && len >= good);
        let (alone, _) = decode_records(&garbage);
        proptest::prop_assert!(alone.len() <= garbage.len() / RECORD_HEADER);
    }
}
