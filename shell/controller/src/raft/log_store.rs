//! The Raft log on disk: `log.tern` holds the entries, `vote.tern` the vote and
//! `log-meta.tern` the committed and purged positions.
//!
//! `log.tern` is a run of records, each `[u32 BE payload length][u32 BE CRC32 of the
//! payload][postcard Entry]`, appended and fdatasync'ed before openraft is told the
//! entries are durable. Opening reads it whole (the controller's log is small: a few
//! entries per broker event, purged behind each snapshot) and cuts it at the first torn or
//! damaged record or gap in indexes: a record that was never synced was never
//! acknowledged to the leader, so dropping it is what Raft expects of a crash.
//! The vote and the positions are small values saved atomically (`tern_engine_fs::meta`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, LogId, OptionalSend, RaftLogId, RaftLogReader, StorageError, StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};
use tern_engine_fs::meta;
use tern_shell::runtime;
use tern_shell::sync::MutexExt;

use super::TypeConfig;

/// Bytes before each record's payload.
const RECORD_HEADER: usize = 8;

/// Largest entry written or read (docs/design/controller.md §11.7).
pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

/// Largest log file opened: far above what purging behind snapshots leaves.
const MAX_LOG_BYTES: u64 = 1 << 30;

/// Purged records leading the file before it is rewritten without them.
const REWRITE_AFTER_PURGED: usize = 1000;

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// What `log-meta.tern` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct LogMeta {
    committed: Option<LogId<NodeId>>,
    last_purged: Option<LogId<NodeId>>,
}

/// The log's state in memory; the file mirrors `entries`.
#[derive(Debug)]
struct Inner {
    /// Entries after the purge point, by index.
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    /// Index → offset of its record in the file.
    offsets: BTreeMap<u64, u64>,
    /// Where the next record goes.
    file_len: u64,
    /// Records in the file at or below the purge point.
    purged_in_file: usize,
    meta: LogMeta,
    vote: Option<Vote<NodeId>>,
    file: Arc<File>,
}

/// The log store openraft writes through; clones share it (one is the reader).
#[derive(Debug, Clone)]
pub struct LogStore {
    dir: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

fn io_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn encode_record(entry: &Entry<TypeConfig>) -> io::Result<Vec<u8>> {
    let payload = postcard::to_stdvec(entry).map_err(io_error)?;
    if payload.len() > MAX_ENTRY_BYTES {
        return Err(io_error(format!(
            "log entry {} is {} bytes, over {MAX_ENTRY_BYTES}",
            entry.log_id.index,
            payload.len()
        )));
    }
    let mut out = Vec::with_capacity(RECORD_HEADER + payload.len());
    // Bounded by MAX_ENTRY_BYTES above.
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The records of `bytes` up to the first bad one: (offset, entry) each, and the length
/// of the good prefix.
fn decode_records(bytes: &[u8]) -> (Vec<(u64, Entry<TypeConfig>)>, usize) {
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut prev: Option<u64> = None;
    while bytes.len() - at >= RECORD_HEADER {
        let len =
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_be_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        if len > MAX_ENTRY_BYTES || bytes.len() - at - RECORD_HEADER < len {
            break;
        }
        let payload = &bytes[at + RECORD_HEADER..at + RECORD_HEADER + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let Ok(entry) = postcard::from_bytes::<Entry<TypeConfig>>(payload) else {
            break;
        };
        // Appends after a truncation rewrite the tail, so indexes only ever go up by one.
        if prev.is_some_and(|p| entry.log_id.index != p + 1) {
            break;
        }
        prev = Some(entry.log_id.index);
        out.push((at as u64, entry));
        at += RECORD_HEADER + len;
    }
    (out, at)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, cutting a torn tail.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let meta: LogMeta = meta::load(&dir.join("log-meta.tern"))
            .map_err(io_error)?
            .unwrap_or_default();
        let vote: Option<Vote<NodeId>> = meta::load(&dir.join("vote.tern")).map_err(io_error)?;
        let path = dir.join("log.tern");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let size = file.metadata()?.len();
        if size > MAX_LOG_BYTES {
            return Err(io_error(format!(
                "{} is {size} bytes, over {MAX_LOG_BYTES}",
                path.display()
            )));
        }
        let mut bytes = vec![0u8; size as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let (records, good) = decode_records(&bytes);
        if (good as u64) < size {
            log::warn!(
                "{}: cutting {} bytes after the last whole record (a write the crash interrupted)",
                path.display(),
                size - good as u64
            );
            file.set_len(good as u64)?;
            file.sync_all()?;
        }
        let purged_to = meta.last_purged.map(|l| l.index);
        let mut inner = Inner {
            entries: BTreeMap::new(),
            offsets: BTreeMap::new(),
            file_len: good as u64,
            purged_in_file: 0,
            meta,
            vote,
            file: Arc::new(file),
        };
        for (offset, entry) in records {
            let index = entry.log_id.index;
            if purged_to.is_some_and(|p| index <= p) {
                inner.purged_in_file += 1;
                continue;
            }
            inner.offsets.insert(index, offset);
            inner.entries.insert(index, entry);
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn save_meta(&self, meta: LogMeta) -> impl std::future::Future<Output = io::Result<()>> {
        let path = self.dir.join("log-meta.tern");
        runtime::spawn_blocking(move || meta::save(&path, &meta).map_err(io_error))
    }

    /// Rewrites the file with only the entries after the purge point.
    fn rewrite(&self) -> io::Result<()> {
        let path = self.dir.join("log.tern");
        let mut inner = self.inner.guard();
        let mut bytes = Vec::new();
        let mut offsets = BTreeMap::new();
        for (index, entry) in &inner.entries {
            offsets.insert(*index, bytes.len() as u64);
            bytes.extend_from_slice(&encode_record(entry)?);
        }
        meta::replace_file(&path, &bytes).map_err(io_error)?;
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        inner.file = Arc::new(file);
        inner.offsets = offsets;
        inner.file_len = bytes.len() as u64;
        inner.purged_in_file = 0;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        let inner = self.inner.guard();
        Ok(inner.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let inner = self.inner.guard();
        let last_purged_log_id = inner.meta.last_purged;
        let last_log_id = inner
            .entries
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        let path = self.dir.join("vote.tern");
        let v = *vote;
        runtime::spawn_blocking(move || meta::save(&path, &v))
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        self.inner.guard().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        Ok(self.inner.guard().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> StorageResult<()> {
        let meta = {
            let mut inner = self.inner.guard();
            inner.meta.committed = committed;
            inner.meta.clone()
        };
        self.save_meta(meta)
            .await
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<NodeId>>> {
        Ok(self.inner.guard().meta.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let (file, at, bytes) = {
            let mut inner = self.inner.guard();
            let at = inner.file_len;
            let mut bytes = Vec::new();
            for entry in entries {
                let record = encode_record(&entry).map_err(|e| StorageIOError::write_logs(&e))?;
                let index = entry.log_id.index;
                inner.offsets.insert(index, at + bytes.len() as u64);
                inner.entries.insert(index, entry);
                bytes.extend_from_slice(&record);
            }
            inner.file_len = at + bytes.len() as u64;
            (inner.file.clone(), at, bytes)
        };
        // Readable now, durable when the callback says so: openraft counts an entry toward
        // the quorum only after the callback.
        let written = runtime::spawn_blocking(move || {
            file.write_all_at(&bytes, at)?;
            file.sync_data()
        })
        .await;
        if let Err(e) = &written {
            log::error!("controller: appending to the Raft log failed: {e}");
        }
        callback.log_io_completed(written);
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let (file, cut) = {
            let mut inner = self.inner.guard();
            let Some(&cut) = inner.offsets.get(&log_id.index) else {
                return Ok(());
            };
            inner.entries.split_off(&log_id.index);
            inner.offsets.split_off(&log_id.index);
            inner.file_len = cut;
            (inner.file.clone(), cut)
        };
        runtime::spawn_blocking(move || {
            file.set_len(cut)?;
            file.sync_all()
        })
        .await
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> StorageResult<()> {
        let (meta, rewrite) = {
            let mut inner = self.inner.guard();
            inner.meta.last_purged = Some(log_id);
            let kept = inner.entries.split_off(&(log_id.index + 1));
            inner.purged_in_file += inner.entries.len();
            inner.entries = kept;
            let kept_offsets = inner.offsets.split_off(&(log_id.index + 1));
            inner.offsets = kept_offsets;
            (
                inner.meta.clone(),
                inner.purged_in_file > REWRITE_AFTER_PURGED,
            )
        };
        self.save_meta(meta)
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        if rewrite {
            let me = self.clone();
            runtime::spawn_blocking(move || me.rewrite())
                .await
                .map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
