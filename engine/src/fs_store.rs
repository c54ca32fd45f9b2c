//! [`FsStore`]: the [`Engine`] on files, as the broker opens it.
//!
//! The engine does the storage work (append, dispatch, recovery); this module only wires
//! it to a store directory: the lock and abort marker ([`StoreDir`]), the commit log and
//! index folders ([`FileDirectory`]), a queue table that makes and finds
//! `consumequeue/<topic>/<queue>/` folders ([`FsQueues`]), and the mapped checkpoint page.
//! Whether the last run crashed is the abort marker's answer, passed to the engine's
//! recovery as `crashed`.
//!
//! The broker calls the engine's operations itself ([`FsStore::engine_mut`]: `put`,
//! `put_batch`, `dispatch`, `flush_log`, `checkpoint`, `delete_before`, `queue`, `log`),
//! so this layer adds nothing to the append path. Engine errors are small and `Copy`
//! and carry no path; [`FsStore::error`] turns one into an [`FsStoreError`] that names the
//! store (or the segment, when the error says which) for an operator.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_engine::Error;
use tern_engine::error::Corruption;
use tern_engine::store::{Engine, OpenReport, StoreConfig};

use crate::directory::{
    FileDirectory, INDEX_NAME_DIGITS, OFFSET_NAME_DIGITS, Reclaim, segment_name,
};
use crate::error::{FsError, FsOp, StoreError};
use crate::fs_queues::FsQueues;
use crate::layout::StoreLayout;
use crate::mapped::{Advised, MappedFile, Writes};
use crate::prealloc::NextSegment;
use crate::reader::SegmentFiles;
use crate::spare::Spares;
use crate::store::StoreDir;

/// The engine over files: commit log and index folders, the queue table, and the
/// mapped checkpoint page.
pub type FileEngine = Engine<FileDirectory, FileDirectory, FsQueues, MappedFile>;

/// An engine error with the media's error of this crate.
pub type EngineError = Error<FsError>;

/// Record scratch passed to the engine. Every segment is a mapping, so the engine reads
/// records in place and never copies into scratch: an empty one is enough.
const NO_SCRATCH: usize = 0;

/// An open store on files, held by one process.
///
/// Dropping it without [`FsStore::close`] is a crash as far as the next open is concerned:
/// the abort marker stays and the next open runs the full recovery. Nothing written is
/// lost by that (the page cache keeps it); only what was never flushed is at risk from
/// power loss.
#[derive(Debug)]
pub struct FsStore {
    /// The engine over this store's files.
    engine: FileEngine,
    /// Lock and abort marker, released and removed by `close`.
    dir: StoreDir,
    /// The commit log's segment files, for reading without the store's lock.
    log_files: SegmentFiles,
    /// The index files, for queries without the store's lock.
    index_files: SegmentFiles,
    /// The commit log's next segment, made ahead by the owner's task.
    next_segment: Arc<NextSegment>,
    /// Segments retention removed, deleted by [`FsStore::reclaim`] outside the owner's
    /// lock.
    reclaim: Reclaim,
    /// Queue and index files made ahead (see [`Spares`]).
    spares: Spares,
}

impl FsStore {
    /// Opens (creating if needed) the store at `root` and recovers it.
    ///
    /// Takes the store's lock (fails with [`StoreError::Locked`] inside
    /// [`FsStoreError::Dir`] while another open holds it), then opens the commit log
    /// (20-digit names, sequential access), the consume queues present, the index (17-digit
    /// names, random access) and the checkpoint, and runs the engine's recovery, full if
    /// the abort marker says the last run did not close.
    pub fn open(root: &Path, config: StoreConfig) -> Result<(Self, OpenReport), FsStoreError> {
        check_config(root, &config)?;
        let dir = StoreDir::open(root)?;
        let reclaim = Reclaim::default();
        let spares = Spares::open(&dir.layout().root().join("spare"))?;
        let mut log = dir.commitlog()?;
        let log_files = log.files();
        let next_segment = log.prepare_ahead();
        log.remove_later(reclaim.clone());
        let mut index = dir.index()?;
        let index_files = index.files();
        index.remove_later(reclaim.clone());
        index.use_spares(spares.clone());
        let checkpoint = dir.checkpoint_media()?;
        let queues = FsQueues::new(dir.layout().clone(), reclaim.clone(), spares.clone());
        let crashed = dir.abort_existed();
        let opened = Engine::open(
            config,
            log,
            index,
            queues,
            checkpoint,
            crashed,
            &mut [0u8; NO_SCRATCH],
        );
        match opened {
            Ok((engine, report)) => {
                let store = FsStore {
                    engine,
                    dir,
                    log_files,
                    index_files,
                    next_segment,
                    reclaim,
                    spares,
                };
                store.advise_tails();
                Ok((store, report))
            }
            Err(error) => Err(engine_error(dir.layout(), &config, "open", error)),
        }
    }

    /// Closes cleanly: dispatches what is left, flushes log, queues and index, writes the
    /// checkpoint with the log's end (so the next open skips the scan), then removes the
    /// abort marker and releases the lock.
    pub fn close(self) -> Result<(), FsStoreError> {
        let FsStore {
            engine: store,
            dir,
            reclaim,
            spares,
            ..
        } = self;
        if let Err(e) = spares.sync_dirty() {
            return Err(FsStoreError::Dir(StoreError::io(dir.layout().root(), e)));
        }
        let config = *store.config();
        match store.close(&mut [0u8; NO_SCRATCH]) {
            // The parts are unmapped here, before the abort marker goes.
            Ok(parts) => drop(parts),
            Err(error) => return Err(engine_error(dir.layout(), &config, "close", error)),
        }
        if let Err(e) = reclaim.run() {
            // Whole older segments left behind are deleted by the next retention pass.
            log::warn!(
                "{}: deleting removed segments: {e}",
                dir.layout().root().display()
            );
        }
        Ok(dir.close()?)
    }

    /// Closes cleanly in place, for an owner that cannot give the store up (it is shared):
    /// seals the engine (checkpoint with the log's end) and removes the abort marker. The
    /// lock stays until the store is dropped. Append nothing afterwards.
    pub fn seal(&mut self) -> Result<(), FsStoreError> {
        if let Err(e) = self.spares.sync_dirty() {
            return Err(FsStoreError::Dir(StoreError::io(self.root(), e)));
        }
        let config = *self.engine.config();
        if let Err(error) = self.engine.seal(&mut [0u8; NO_SCRATCH]) {
            return Err(engine_error(self.dir.layout(), &config, "close", error));
        }
        Ok(self.dir.remove_abort()?)
    }

    /// Handles on the commit-log segment files holding `[from, to)`, each with the log
    /// offset its file starts at, so a flusher can fdatasync them without holding the
    /// store (fdatasync writes back pages dirtied through the mapping too; follow with
    /// `log_mut().mark_flushed(to)`) and a warmer can read pages ahead of the writer.
    /// Segments not created yet are left out.
    pub fn log_files(&self, from: u64, to: u64) -> Result<Vec<(u64, std::fs::File)>, FsStoreError> {
        let log = self.engine.log();
        let size = log.segment_size();
        let mut files = Vec::new();
        let mut base = from - from % size;
        while base < to {
            if let Some(media) = log.segment_media(base) {
                let file = media.file().try_clone().map_err(|e| {
                    FsStoreError::Dir(StoreError::io(self.root(), FsError::io(FsOp::Open, &e)))
                })?;
                files.push((base, file));
            }
            base += size;
        }
        Ok(files)
    }

    /// Writes the commit log with `pwrite` from now on, its mappings read-only (see
    /// [`Writes::Through`]): for a store whose every append is followed by a sync
    /// (SYNC_FLUSH).
    pub fn write_log_through(&mut self) {
        self.engine.log_mut().dir_mut().set_writes(Writes::Through);
    }

    /// The commit log's segment files, for reading published bytes without holding the
    /// store (see [`SegmentFiles`]).
    pub fn log_segment_files(&self) -> SegmentFiles {
        self.log_files.clone()
    }

    /// The index files, keyed by base stamp, for queries without holding the store (see
    /// [`SegmentFiles`]).
    pub fn index_files(&self) -> SegmentFiles {
        self.index_files.clone()
    }

    /// Makes the commit-log segment at `base` ahead of need (blocking disk work: run it
    /// on a task of its own, not under the store's lock); the log adopts it when it rolls
    /// there. Does nothing when it is made already.
    ///
    /// `generation` is `next.generation()` read before the log end `base` was picked
    /// from (see [`FsStore::truncate_log`]).
    pub fn prepare_log_segment(
        root: &Path,
        (next, generation): (&NextSegment, u64),
        (base, len): (u64, u64),
        warm_bytes: u64,
    ) -> Result<(), FsStoreError> {
        let dir = StoreLayout::new(root).commitlog_dir();
        let made = FileDirectory::prepare(
            &dir,
            OFFSET_NAME_DIGITS,
            (next, generation),
            (base, len),
            warm_bytes,
        );
        made.map_err(|e| {
            FsStoreError::Dir(StoreError::io(
                &dir.join(segment_name(base, OFFSET_NAME_DIGITS).unwrap_or_default()),
                e,
            ))
        })
    }

    /// The segments removed (by `delete_before`) but not yet deleted: run it without
    /// holding the store (see [`Reclaim`]). `close` runs it too.
    pub fn reclaim(&self) -> Reclaim {
        self.reclaim.clone()
    }

    /// The pool of queue and index files made ahead: the owner's task fills it
    /// (`make`), and its checkpoint syncs the folders spares went into (`sync_dirty`)
    /// before it claims their entries.
    pub fn spares(&self) -> Spares {
        self.spares.clone()
    }

    /// The hand-off through which [`FsStore::prepare_log_segment`] offers segments.
    pub fn next_log_segment(&self) -> Arc<NextSegment> {
        self.next_segment.clone()
    }

    /// The engine, for reads: `log()`, `queue(topic, id)`, `index()`.
    pub fn engine(&self) -> &FileEngine {
        &self.engine
    }

    /// The engine, for writes: `put`, `put_batch`, `dispatch`, `flush_log`,
    /// `checkpoint`, `delete_before`. Scratch for `dispatch` may be empty (`&mut []`):
    /// segments are mappings, read in place.
    pub fn engine_mut(&mut self) -> &mut FileEngine {
        &mut self.engine
    }

    /// Dispatches at most `max_records` of the records appended since the last dispatch
    /// (one bounded reput pass), none ending past `below`, telling `on_record` about each.
    pub fn dispatch_some(
        &mut self,
        max_records: u64,
        below: u64,
        on_record: &mut dyn FnMut(&tern_engine::dispatch::DispatchRecord<'_>),
    ) -> Result<tern_engine::store::Dispatched, FsStoreError> {
        self.engine
            .dispatch_some(&mut [0u8; NO_SCRATCH], max_records, below, on_record)
            .map_err(|e| self.error("dispatch", e))
    }

    /// Dispatches every record appended since the last dispatch to its queue and the
    /// index (the reput step), telling `on_record` about each. Returns how many.
    pub fn dispatch(
        &mut self,
        on_record: &mut dyn FnMut(&tern_engine::dispatch::DispatchRecord<'_>),
    ) -> Result<u64, FsStoreError> {
        self.engine
            .dispatch(&mut [0u8; NO_SCRATCH], on_record)
            .map_err(|e| self.error("dispatch", e))
    }

    /// Cuts the log at `offset` and everything that points past it (the engine's
    /// [`Engine::truncate_log`], which says what a crash leaves), with this store's files:
    ///
    /// - what was appended is dispatched first and the folders spare files went into are
    ///   synced, so the engine's closing checkpoint claims no entry in a file whose name
    ///   is not durable;
    /// - then the engine cuts, flushes and checkpoints;
    /// - then the segment made ahead ([`NextSegment`]) is forgotten and every commit-log
    ///   file past the new last segment removed: the next open would find it past a gap.
    ///
    /// The owner must have moved the log end its preparing task reads to `offset` before
    /// calling: a task that reads the generation afterwards then picks its base from the
    /// new end. Runs under the owner's lock; a rare operation.
    pub fn truncate_log(
        &mut self,
        offset: u64,
    ) -> Result<tern_engine::store::Truncated, FsStoreError> {
        let scratch = &mut [0u8; NO_SCRATCH];
        self.engine
            .dispatch(scratch, &mut |_| {})
            .map_err(|e| self.error("truncate", e))?;
        if let Err(e) = self.spares.sync_dirty() {
            return Err(FsStoreError::Dir(StoreError::io(self.root(), e)));
        }
        let done = self
            .engine
            .truncate_log(offset, scratch)
            .map_err(|e| self.error("truncate", e))?;
        let log = self.engine.log();
        let size = log.segment_size();
        let last = log
            .segment_span()
            .map_or(offset - offset % size, |(_, last)| last);
        let dir = self.dir.layout().commitlog_dir();
        let mut swept = Ok(0);
        self.next_segment
            .invalidate(|| swept = FileDirectory::remove_past(&dir, OFFSET_NAME_DIGITS, last));
        swept.map_err(|e| FsStoreError::Dir(StoreError::io(&dir, e)))?;
        // The cut moved the ends back into parts mapped for reading.
        self.advise_tails();
        Ok(done)
    }

    /// Advises the log's last segment from its end on, and each queue's last file whole,
    /// as parts to be written (`MappedFile::appending_from`, `Access::past_the_end`): they
    /// were mapped for reading what they held (recovery's scan), or held more before a
    /// cut. A file made later is mapped so from the start.
    fn advise_tails(&self) {
        self.engine
            .log()
            .tail(&mut |m, r| m.appending_from(r.start, Advised::FromEnd));
        self.engine.queues().advise_tails();
    }

    /// The store's paths.
    pub fn layout(&self) -> &StoreLayout {
        self.dir.layout()
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        self.dir.layout().root()
    }

    /// The store directory (disk usage, queue listing).
    pub fn dir(&self) -> &StoreDir {
        &self.dir
    }

    /// Explains an engine error of operation `op` (`"put"`, `"flush"`, ...) on this store:
    /// names the segment file when the error says which, else the store's root.
    pub fn error(&self, op: &'static str, error: EngineError) -> FsStoreError {
        engine_error(self.dir.layout(), self.engine.config(), op, error)
    }
}

/// Refuses geometry the engine would reject with a panic (it asserts its geometry).
fn check_config(root: &Path, c: &StoreConfig) -> Result<(), FsStoreError> {
    let reason = if c.log_segment_size <= 2 * tern_engine::commitlog::BLANK_RESERVE {
        "commit-log segment size must be larger than 16 bytes"
    } else if c.queue_entries_per_file == 0
        || c.queue_entries_per_file
            .checked_mul(tern_engine::consumequeue::ENTRY_SIZE)
            .is_none()
    {
        "consume-queue files must hold at least one entry"
    } else if c.index.slots == 0 || c.index.entries < 2 {
        "index files need at least one slot and two entries"
    } else {
        return Ok(());
    };
    Err(FsStoreError::Config {
        root: root.to_path_buf(),
        reason,
    })
}

fn engine_error(
    layout: &StoreLayout,
    config: &StoreConfig,
    op: &'static str,
    error: EngineError,
) -> FsStoreError {
    let segment = |dir: PathBuf, base: u64, digits: u8| match segment_name(base, digits) {
        Some(name) => dir.join(name),
        None => dir,
    };
    let path = match error {
        Error::Corrupt(Corruption::Record { offset, .. }) => {
            let base = offset - offset % config.log_segment_size;
            segment(layout.commitlog_dir(), base, OFFSET_NAME_DIGITS)
        }
        Error::Corrupt(Corruption::IndexFile { base }) => {
            segment(layout.index_dir(), base, INDEX_NAME_DIGITS)
        }
        _ => layout.root().to_path_buf(),
    };
    FsStoreError::Engine { path, op, error }
}

/// A store operation failed; the message names the file or the store.
#[derive(Debug)]
pub enum FsStoreError {
    /// Opening or closing the store directory failed (lock held, folder not writable).
    Dir(StoreError),
    /// The geometry asked for cannot work.
    Config {
        /// The store's root.
        root: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The engine failed.
    Engine {
        /// The segment concerned when the error names one, else the store's root.
        path: PathBuf,
        /// The operation (`"open"`, `"put"`, `"flush"`, ...).
        op: &'static str,
        /// The engine's error, for callers that act on its kind.
        error: EngineError,
    },
}

impl FsStoreError {
    /// The file error inside, if any (to tell "disk full" from other failures).
    pub fn fs_error(&self) -> Option<FsError> {
        match self {
            FsStoreError::Dir(e) => e.fs_error(),
            FsStoreError::Engine {
                error: Error::Media(e),
                ..
            } => Some(*e),
            _ => None,
        }
    }
}

impl From<StoreError> for FsStoreError {
    fn from(e: StoreError) -> Self {
        FsStoreError::Dir(e)
    }
}

impl fmt::Display for FsStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FsStoreError::Dir(e) => e.fmt(f),
            FsStoreError::Config { root, reason } => write!(f, "{}: {reason}", root.display()),
            FsStoreError::Engine { path, op, error } => {
                write!(f, "{}: {op}: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for FsStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FsStoreError::Dir(e) => Some(e),
            // The engine's error; a media error's `FsError` is its source in turn.
            FsStoreError::Engine { error, .. } => Some(error),
            FsStoreError::Config { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_record_error_names_its_segment_file() {
        let layout = StoreLayout::new("/s");
        let config = StoreConfig {
            log_segment_size: 1024,
            ..StoreConfig::SERVER
        };
        let error = Error::Corrupt(Corruption::Record {
            offset: 2100,
            error: tern_engine::record::RecordError::Truncated,
        });
        let text = engine_error(&layout, &config, "dispatch", error).to_string();
        assert!(
            text.starts_with("/s/commitlog/00000000000000002048: dispatch: corrupt"),
            "{text}"
        );
    }

    #[test]
    fn geometry_the_engine_would_reject_is_an_error_not_a_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            log_segment_size: 8,
            ..StoreConfig::SERVER
        };
        let error = FsStore::open(tmp.path(), config).unwrap_err();
        assert!(matches!(error, FsStoreError::Config { .. }), "{error}");
    }
}
