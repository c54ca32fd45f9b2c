//! Queries by key without the store's lock.
//!
//! Dispatch writes index entries and slots under the lock and, after each pass, publishes
//! every index file's header ([`IndexView::publish`], release). Entries below a published
//! header's `index_count` never change again, so a query copies them with `pread` like
//! any other published bytes, and the walk is the engine's own ([`IndexQuery::step`]).
//!
//! Slots are the exception: dispatch rewrites a slot whenever its bucket gets an entry.
//! A reader may see one that points past what was published (the entry may be half
//! written): it waits for the next publication, one reput pass at most. And `pread` may
//! copy byte by byte while dispatch stores the slot, so a slot may read torn: the entry
//! it names must belong to its bucket, or the slot is read again.
//!
//! A slot read after a publication never reads older than that publication (the slot was
//! stored before it), so a query misses nothing that was published when it began.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tern_shell::sync::RwLockExt;

use event_listener::{Event, Listener};
use tern_engine::index::{ENTRY_SIZE, IndexConfig, IndexSource};
use tern_engine::layout::{IndexEntry, IndexHeader};
use tern_engine_fs::fs_store::{EngineError, FsStore};
use tern_engine_fs::{ReadError, SegmentFiles};
use zerocopy::FromBytes;

/// Reads of a slot that names an entry outside its bucket before the index is called
/// inconsistent (a torn read happens once, not eight times in a row; rot stays).
const TORN_RETRIES: u32 = 8;

/// The index as readers see it: its files, and each file's header as of the last
/// publication, oldest first.
#[derive(Debug)]
pub(crate) struct IndexView {
    files: SegmentFiles,
    config: IndexConfig,
    heads: RwLock<Arc<[(u64, IndexHeader)]>>,
}

impl IndexView {
    pub(crate) fn new(files: SegmentFiles, config: IndexConfig) -> Self {
        Self {
            files,
            config,
            heads: RwLock::new(Arc::from(Vec::new())),
        }
    }

    /// Publishes the index's headers as `store` has them (under the store's lock, after
    /// the writes). On an error what was published stays: a reader of it may find files
    /// gone, never wrong bytes.
    pub(crate) fn publish(&self, store: &FsStore) -> Result<(), EngineError> {
        let mut heads = Vec::new();
        store
            .engine()
            .index()
            .for_each_file(&mut |base, h| heads.push((base, h)))?;
        *self.heads.write_guard() = Arc::from(heads);
        Ok(())
    }

    fn heads(&self) -> Arc<[(u64, IndexHeader)]> {
        self.heads.read_guard().clone()
    }

    /// The newest file's last update as published: (store time, log offset), or (0, -1).
    pub(crate) fn end(&self) -> (i64, i64) {
        self.heads().last().map_or((0, -1), |(_, h)| {
            (h.end_timestamp.get(), h.end_phy_offset.get())
        })
    }

    /// A reader for one query, giving up at `deadline`; `published` is signalled after
    /// each publication (the reader waits on it for a slot that points past it).
    pub(crate) fn reader<'a>(&'a self, published: &'a Event, deadline: Instant) -> IndexReader<'a> {
        IndexReader {
            view: self,
            published,
            heads: RefCell::new(self.heads()),
            deadline,
        }
    }
}

/// Why a query stopped before its end.
#[derive(Debug)]
pub(crate) enum IndexReadError {
    /// A read failed (a file retention removed is not one: the query ends there).
    Read(ReadError),
    /// The query's time ran out.
    TimedOut,
    /// A slot kept naming an entry of another bucket, or one past every publication.
    Inconsistent { base: u64 },
}

impl std::fmt::Display for IndexReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexReadError::Read(e) => write!(f, "reading an index file: {e}"),
            IndexReadError::TimedOut => f.write_str("out of time"),
            IndexReadError::Inconsistent { base } => {
                write!(
                    f,
                    "index file {base}: a slot names an entry outside its bucket"
                )
            }
        }
    }
}

impl std::error::Error for IndexReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IndexReadError::Read(e) => Some(e),
            IndexReadError::TimedOut | IndexReadError::Inconsistent { .. } => None,
        }
    }
}

/// One query's view of the published index (see the module docs).
pub(crate) struct IndexReader<'a> {
    view: &'a IndexView,
    published: &'a Event,
    heads: RefCell<Arc<[(u64, IndexHeader)]>>,
    deadline: Instant,
}

impl IndexReader<'_> {
    fn head_of(&self, base: u64) -> Option<IndexHeader> {
        let heads = self.heads.borrow();
        heads.iter().find(|(b, _)| *b == base).map(|(_, h)| *h)
    }

    fn read(&self, base: u64, at: u64, buf: &mut [u8]) -> Result<(), IndexReadError> {
        if Instant::now() >= self.deadline {
            return Err(IndexReadError::TimedOut);
        }
        self.view
            .files
            .read_in(base, at, buf)
            .map_err(IndexReadError::Read)
    }

    /// Waits for the next publication (at most until the deadline) and takes it.
    fn await_publication(&self) -> Result<(), IndexReadError> {
        let listener = self.published.listen();
        let mut now = self.view.heads();
        if Arc::ptr_eq(&now, &self.heads.borrow()) {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IndexReadError::TimedOut);
            }
            // A reput pass is short; the bound keeps a stalled reput from holding a
            // caller past its deadline.
            let _ = listener.wait_timeout(left.min(Duration::from_millis(50)));
            now = self.view.heads();
        }
        *self.heads.borrow_mut() = now;
        Ok(())
    }
}

impl IndexSource for IndexReader<'_> {
    type Error = IndexReadError;

    fn newest_file(&self) -> Option<u64> {
        self.heads.borrow().last().map(|(b, _)| *b)
    }

    fn older_file(&self, base: u64) -> Option<u64> {
        let heads = self.heads.borrow();
        let i = heads.iter().position(|(b, _)| *b == base)?;
        heads.get(i.checked_sub(1)?).map(|(b, _)| *b)
    }

    fn file_header(&self, base: u64) -> Result<Option<IndexHeader>, IndexReadError> {
        Ok(self.head_of(base))
    }

    fn slot(&self, base: u64, hash: i32) -> Result<u32, IndexReadError> {
        let config = self.view.config;
        let mut torn = 0;
        loop {
            let Some(head) = self.head_of(base) else {
                return Ok(0);
            };
            let mut b = [0u8; 4];
            self.read(base, config.slot_at(hash), &mut b)?;
            let n = u32::from_be_bytes(b);
            if n == 0 {
                return Ok(0);
            }
            if n >= config.entries {
                torn += 1;
            } else if n >= head.index_count.get() as u32 {
                // Stored by a pass not yet published.
                self.await_publication()?;
                continue;
            } else if config.slot_at(self.entry(base, n)?.key_hash.get()) == config.slot_at(hash) {
                return Ok(n);
            } else {
                torn += 1;
            }
            if torn >= TORN_RETRIES {
                return Err(IndexReadError::Inconsistent { base });
            }
        }
    }

    fn entry(&self, base: u64, n: u32) -> Result<IndexEntry, IndexReadError> {
        let mut b = [0u8; ENTRY_SIZE as usize];
        self.read(base, self.view.config.entry_at(n), &mut b)?;
        Ok(IndexEntry::read_from_bytes(&b).unwrap_or_else(|_| unreachable!("20 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;
    use tern_engine::index::IndexQuery;
    use tern_engine::properties::{append, key};
    use tern_engine::store::StoreConfig;

    const CONFIG: StoreConfig = StoreConfig {
        index: IndexConfig {
            slots: 4,
            entries: 64,
        },
        ..StoreConfig::SERVER
    };

    /// Puts `n` messages with KEYS `keys` and dispatches them; returns their log offsets.
    fn put(s: &mut FsStore, keys: &str, n: usize) -> Vec<u64> {
        let mut props = vec![0u8; 64];
        let mut len = 0;
        append(&mut props, &mut len, key::KEYS, keys).unwrap();
        let m = super::super::test_message(b"x", &props[..len]);
        let offsets = (0..n)
            .map(|_| s.engine_mut().put(&m, 1_700_000_000_000).unwrap().at.offset)
            .collect();
        s.dispatch(&mut |_| {}).unwrap();
        offsets
    }

    fn query(
        view: &IndexView,
        published: &Event,
        deadline: Instant,
    ) -> Result<Vec<u64>, IndexReadError> {
        let mut q = IndexQuery::new("T", "hot", 64, 0, i64::MAX);
        let mut found = Vec::new();
        q.step(&view.reader(published, deadline), u32::MAX, &mut |o| {
            found.push(o)
        })?;
        Ok(found)
    }

    #[test]
    fn a_slot_past_the_publication_waits_for_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = FsStore::open(dir.path(), CONFIG).unwrap();
        let view = IndexView::new(s.index_files(), CONFIG.index);
        let published = Event::new();
        let mut sent = put(&mut s, "hot", 3);
        view.publish(&s).unwrap();
        let soon = || Instant::now() + Duration::from_secs(5);
        let newest_first = |o: &[u64]| o.iter().rev().copied().collect::<Vec<_>>();
        assert_eq!(
            query(&view, &published, soon()).unwrap(),
            newest_first(&sent)
        );

        // Dispatched, not yet published: the slot names an entry past what readers have.
        sent.extend(put(&mut s, "hot", 3));
        let past = Instant::now();
        assert!(matches!(
            query(&view, &published, past),
            Err(IndexReadError::TimedOut)
        ));
        let started = Instant::now();
        let found = std::thread::scope(|t| {
            t.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                view.publish(&s).unwrap();
                published.notify(usize::MAX);
            });
            query(&view, &published, soon()).unwrap()
        });
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "waited for it"
        );
        assert_eq!(found, newest_first(&sent), "the whole chain, newest first");
    }

    #[test]
    fn a_slot_naming_another_buckets_entry_is_inconsistent() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = FsStore::open(dir.path(), CONFIG).unwrap();
        let view = IndexView::new(s.index_files(), CONFIG.index);
        let published = Event::new();
        put(&mut s, "hot", 2);
        // Another key, in another bucket than "hot": entry 3.
        let other = (0..100)
            .map(|i| format!("k{i}"))
            .find(|k| {
                let h = |k: &str| tern_engine::hash::index_key_hash(&["T", "#", k]);
                CONFIG.index.slot_at(h(k)) != CONFIG.index.slot_at(h("hot"))
            })
            .unwrap();
        put(&mut s, &other, 1);
        view.publish(&s).unwrap();
        // Rot: "hot"'s slot names entry 3.
        let base = s.index_files().files_from(0)[0].0;
        let file = s.index_files().file(base).unwrap();
        let slot = CONFIG
            .index
            .slot_at(tern_engine::hash::index_key_hash(&["T", "#", "hot"]));
        file.write_all_at(&3u32.to_be_bytes(), slot).unwrap();
        let r = query(&view, &published, Instant::now() + Duration::from_secs(5));
        assert!(
            matches!(r, Err(IndexReadError::Inconsistent { base: b }) if b == base),
            "{r:?}"
        );
    }
}
