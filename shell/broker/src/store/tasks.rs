//! The tasks that follow the store: checkpoint, reput, warm, and the one that makes the
//! next segment (the flush is a thread of its own: [`super::group_commit`]). Each takes
//! the append lock only for memory work and does its disk work (fdatasync, fadvise, file
//! creation) on the blocking pool without it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tern_engine::store::Dispatched;
use tern_engine_fs::fs_store::{FsStore, FsStoreError};
use tern_engine_fs::sync;
use tern_shell::runtime;
use tern_shell::sync::RwLockExt;

use super::error::SyncError;
use super::read::QueueView;
use super::{APPENDED_TICK, StoreService, WARM_AHEAD, note_slow_hold, until_appended};

/// Records one reput pass dispatches under one hold of the lock: about 100 µs of
/// work, so an append waits at most that long behind dispatch.
const REPUT_BATCH: u64 = 256;

/// Most spare consume-queue files kept ready: a new topic's queues take one each.
const SPARE_QUEUE_FILES: usize = 8;
/// Spare index files kept ready (one roll at a time).
const SPARE_INDEX_FILES: usize = 1;

/// The first pause after a failed reput pass; it doubles up to [`REPUT_BACKOFF_MAX`].
const REPUT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const REPUT_BACKOFF_MAX: Duration = Duration::from_secs(5);

impl StoreService {
    /// One checkpoint: under the lock, the engine names what it must make durable and
    /// the files are taken; outside it, they are fdatasynced; under it again, the engine
    /// records the result and writes the checkpoint page, which is synced outside it too
    /// before retention may rely on it.
    fn checkpoint_once(&self) -> Result<(), SyncError> {
        if self.failure().is_some() {
            return Ok(());
        }
        // No truncation while this runs (see `truncate`); flushes may.
        let _gate = self.sync_gate.read_guard();
        let mut files = Vec::new();
        let plan = {
            let mut s = self.lock();
            let held = Instant::now();
            let plan = s
                .engine_mut()
                .checkpoint_begin(&mut |part, media, range| {
                    if !range.is_empty() {
                        files.push((part, media.shared_file()));
                    }
                })
                .map_err(|e| s.error("checkpoint", e))?;
            note_slow_hold("checkpoint (begin)", held);
            plan
        };
        // New queue and index files came from spares by rename: their names become
        // durable here, before the checkpoint claims their entries.
        self.spares
            .sync_dirty()
            .map_err(|error| SyncError::Folder {
                root: self.root.clone(),
                error,
            })?;
        for (part, file) in &files {
            sync::fdatasync(file).map_err(|error| SyncError::Part {
                root: self.root.clone(),
                part: *part,
                error,
            })?;
        }
        // The record is written under the lock and synced outside it, like the rest.
        let (written, flushed, page) = {
            let mut s = self.lock();
            let held = Instant::now();
            let r = s.engine_mut().checkpoint_write(plan);
            note_slow_hold("checkpoint (write)", held);
            let written = r.map_err(|e| s.error("checkpoint", e))?;
            let flushed = s.engine().log().flushed_offset();
            (
                written,
                flushed,
                s.engine().checkpoint_media().shared_file(),
            )
        };
        // The log's flushed offset moved with the plan's regions, already durable.
        self.flushed.fetch_max(flushed, Ordering::AcqRel);
        self.flush_done.notify(usize::MAX);
        sync::fdatasync(&page).map_err(|error| SyncError::CheckpointFile {
            root: self.root.clone(),
            error,
        })?;
        self.lock().engine_mut().checkpoint_synced(written);
        Ok(())
    }

    /// The checkpoint task: queues, index and checkpoint made durable every `period`,
    /// and at once when reput waits for an index file's flush before a roll.
    pub async fn run_checkpoint(self: Arc<Self>, shutdown: runtime::Shutdown, period: Duration) {
        while !shutdown.is_triggered() {
            let wanted = self.checkpoint_wanted.listen();
            let _ = runtime::race(
                async {
                    let _ = runtime::timeout(period, wanted).await;
                },
                shutdown.wait(),
            )
            .await;
            if shutdown.is_triggered() {
                break;
            }
            let me = Arc::clone(&self);
            if let Err(e) = runtime::spawn_blocking(move || me.checkpoint_once()).await {
                self.fail(e);
            }
            self.checkpoint_done.notify(usize::MAX);
        }
    }

    /// One reput pass: dispatches at most [`REPUT_BATCH`] records, publishes the bounds
    /// of the queues they went to and notes them in `touched`. Says whether more records
    /// wait, and whether the pass stopped for an index flush.
    fn reput_once(&self, touched: &mut Vec<(String, i32)>) -> Result<Dispatched, FsStoreError> {
        let mut s = self.lock();
        let held = Instant::now();
        let from = touched.len();
        let below = self.dispatch_bound();
        let r = s.dispatch_some(REPUT_BATCH, below, &mut |rec| {
            if rec.goes_to_queue()
                && !touched
                    .iter()
                    .any(|(t, q)| t == rec.topic && *q == rec.queue_id)
            {
                touched.push((rec.topic.to_owned(), rec.queue_id));
            }
        });
        // Publish what was dispatched even if the pass stopped on an error part-way.
        for (topic, queue_id) in &touched[from..] {
            self.publish_queue(&s, topic, *queue_id);
        }
        // Before the dispatched offset: a query that waited for it must find the keys.
        self.publish_index(&s);
        let dispatched = s.engine().dispatched_offset();
        self.dispatched.store(dispatched, Ordering::Release);
        // Before a flush reaches them (`release_behind`), in chunks: one `madvise`
        // per [`super::mapping::RELEASE_CHUNK`] of log.
        self.release_behind(&s, dispatched, super::mapping::RELEASE_CHUNK);
        // Before `dispatch_done` wakes anyone: a pass with nothing more it may do says
        // how far that is, the bound it stopped at or the end it reached.
        match &r {
            Ok(d) if d.limited => self.note_reached(below),
            Ok(d) if !d.more && !d.index_flush => self.note_reached(dispatched),
            _ => {}
        }
        note_slow_hold("reput", held);
        drop(s);
        // A hold of its own, so an append waits behind one or the other, not both.
        self.populate_ahead();
        r
    }

    /// Publishes the bounds of (topic, queue id) to readers, making its view if new.
    pub(super) fn publish_queue(&self, s: &FsStore, topic: &str, queue_id: i32) {
        let Some(q) = s.engine().queue(topic, queue_id) else {
            return;
        };
        let (min, max) = (q.min_offset(), q.max_offset());
        match self.views.get(topic, queue_id) {
            Some(view) => view.publish(min, max),
            None => {
                if let Some(files) = s.engine().queues().files_of(topic, queue_id) {
                    self.views
                        .insert(topic, queue_id, QueueView::new(files, min, max));
                }
            }
        }
    }

    /// The reput task: dispatches new records in bounded passes, yielding between them,
    /// then tells `wake` which queues grew. A failing pass backs off (doubling, bounded)
    /// and is counted (`reputErrors` in the runtime info) instead of spinning: sends
    /// still answer while it retries.
    pub async fn run_reput(
        self: Arc<Self>,
        shutdown: runtime::Shutdown,
        wake: impl Fn(&str, i32) + Send + Sync + 'static,
    ) {
        let mut touched: Vec<(String, i32)> = Vec::new();
        let mut backoff = REPUT_BACKOFF_MIN;
        let mut tick = runtime::Ticker::new(APPENDED_TICK);
        while !shutdown.is_triggered() {
            let listener = self.appended.listen();
            let pass = if self.dispatched_offset() < self.written.load(Ordering::Acquire) {
                self.reput_once(&mut touched)
            } else {
                Ok(Dispatched::default())
            };
            self.dispatch_done.notify(usize::MAX);
            for (t, q) in touched.drain(..) {
                wake(&t, q);
            }
            match pass {
                Ok(d) if d.index_flush => {
                    // The next record rolls the index: the checkpoint flushes the full
                    // file outside the lock first, so the roll's own flush, under it,
                    // has nothing left to write. Dispatch waits; senders do not.
                    backoff = REPUT_BACKOFF_MIN;
                    let done = self.checkpoint_done.listen();
                    self.checkpoint_wanted.notify(usize::MAX);
                    let _ = runtime::race(
                        async {
                            let _ = runtime::timeout(Duration::from_secs(1), done).await;
                        },
                        shutdown.wait(),
                    )
                    .await;
                }
                Ok(d) if d.more => {
                    backoff = REPUT_BACKOFF_MIN;
                    runtime::yield_now().await;
                }
                Ok(_) => {
                    backoff = REPUT_BACKOFF_MIN;
                    until_appended(listener, &mut tick, &shutdown).await;
                }
                Err(e) => {
                    let n = self.reput_errors.fetch_add(1, Ordering::Relaxed) + 1;
                    // The pause bounds the log lines too: at most one every
                    // REPUT_BACKOFF_MAX once it stops growing.
                    log::error!("reput failed ({n} so far), retrying in {backoff:?}: {e}");
                    let _ = runtime::race(runtime::sleep(backoff), shutdown.wait()).await;
                    backoff = (backoff * 2).min(REPUT_BACKOFF_MAX);
                }
            }
        }
    }

    /// Tops the spare queue and index files up (see `tern_engine_fs::Spares`); true
    /// when it made one (the caller comes back for more).
    async fn refill_spares(self: &Arc<Self>) -> bool {
        // At most one log segment's worth of disk in spares of each kind: a gateway
        // with 16 MiB segments keeps two 6 MB queue files, a server eight.
        let segment = self.geometry.log_segment_size;
        let queue_file =
            self.geometry.queue_entries_per_file * tern_engine::consumequeue::ENTRY_SIZE;
        let index_file = self.geometry.index.file_size();
        let wants = [
            (
                queue_file,
                ((segment / queue_file.max(1)) as usize).clamp(1, SPARE_QUEUE_FILES),
            ),
            (
                index_file,
                if index_file <= segment {
                    SPARE_INDEX_FILES
                } else {
                    0
                },
            ),
        ];
        for (len, want) in wants {
            if self.spares.ready(len) < want {
                let spares = self.spares.clone();
                if let Err(e) = runtime::spawn_blocking(move || spares.make(len)).await {
                    log::warn!("making a spare {len}-byte file failed: {e}");
                    return false;
                }
                return true;
            }
        }
        false
    }

    /// The prepare task: keeps the commit log's next segment made ahead of need, so no
    /// append creates a file (RocketMQ's AllocateMappedFileService), and spare queue and
    /// index files for dispatch. Woken with the warm task; checks every second too.
    pub async fn run_prepare(self: Arc<Self>, shutdown: runtime::Shutdown) {
        let size = self.geometry.log_segment_size;
        while !shutdown.is_triggered() {
            let listener = self.warm_wanted.listen();
            // Before the end: a truncation moves the end back, then the generation on,
            // so a base picked from an end read before it is refused (FsStore).
            let generation = self.next_segment.generation();
            let end = self.written.load(Ordering::Acquire);
            // The segment the log will make next: the one after the active segment, or
            // the active one itself when the log ended exactly on a boundary. Nothing for
            // an empty log: a new slave starts at its master's segment, and a file made
            // for another base would break the next open's contiguity check.
            let active = end - end % size;
            let next = if self.log_files.file(active).is_some() {
                active + size
            } else {
                active
            };
            if !self.log_is_empty()
                && self.log_files.file(next).is_none()
                && !self.next_segment.is_prepared(next)
            {
                let me = self.clone();
                let made = runtime::spawn_blocking(move || {
                    FsStore::prepare_log_segment(
                        &me.root,
                        (&me.next_segment, generation),
                        (next, size),
                        WARM_AHEAD,
                    )
                })
                .await;
                if let Err(e) = made {
                    if self.log_files.file(next).is_some() {
                        // The log rolled into it before this task got there and made it
                        // inline; the rename refused to replace it (see engine's
                        // prealloc). Not a fault: the task fell behind the log.
                        log::info!(
                            "commit-log segment {next} was made by the append that reached it first: {e}"
                        );
                        continue;
                    }
                    // Appends make it themselves then; nothing is lost but time.
                    log::warn!("making the next commit-log segment ahead failed: {e}");
                    let _ = runtime::race(runtime::sleep(Duration::from_secs(1)), shutdown.wait())
                        .await;
                }
                continue;
            }
            if self.refill_spares().await {
                continue;
            }
            runtime::race(
                async {
                    let _ = runtime::timeout(Duration::from_secs(1), listener).await;
                },
                shutdown.wait(),
            )
            .await;
        }
    }

    /// The warm task: keeps the [`WARM_AHEAD`] bytes past the log end in the page cache.
    ///
    /// An append into a page not yet cached faults (or, written with `pwrite` under
    /// SYNC_FLUSH, finds no page), and the kernel reads it in first
    /// (zero-filling the preallocated extent) while the appender holds the store: every
    /// sender waits behind it, which showed as the p99 of sends and as the broker's
    /// largest cost in batch runs. Reading the pages in ahead of time, here and outside
    /// the store lock, leaves appends a cheap minor fault.
    pub async fn run_warm(self: Arc<Self>, shutdown: runtime::Shutdown) {
        let mut warmed = 0u64;
        let mut tick = runtime::Ticker::new(APPENDED_TICK);
        while !shutdown.is_triggered() {
            let listener = self.warm_wanted.listen();
            let end = self.written.load(Ordering::Acquire);
            if warmed > end + WARM_AHEAD {
                // The log was truncated: warm from its new end.
                warmed = end;
            }
            let before = warmed;
            if warmed < end + WARM_AHEAD / 2 {
                let from = warmed.max(end);
                let to = end + WARM_AHEAD;
                let me = self.clone();
                match runtime::spawn_blocking(move || me.warm(from, to)).await {
                    Ok(covered) => warmed = covered,
                    Err(e) => {
                        // Only a hint: appends fault the pages in themselves.
                        log::debug!("warming the commit log ahead failed: fadvise: {e}");
                        warmed = to;
                    }
                }
            }
            // Appends wake this task once half the warmed bytes are used, not on every
            // message; while it cannot get ahead (the next segment does not exist yet),
            // on the next append.
            let next = if warmed > end + WARM_AHEAD / 2 {
                warmed - WARM_AHEAD / 2
            } else {
                end + 1
            };
            self.warm_below.store(next, Ordering::Release);
            let short = warmed > before && warmed < end + WARM_AHEAD / 2;
            if !short && self.written.load(Ordering::Acquire) < next {
                until_appended(listener, &mut tick, &shutdown).await;
            }
        }
    }

    /// Reads log bytes `[from, to)` of existing segments into the page cache; returns
    /// the offset cached up to (`from` when the segment is not created yet).
    fn warm(&self, from: u64, to: u64) -> Result<u64, rustix::io::Errno> {
        let size = self.geometry.log_segment_size;
        let mut covered = from;
        for (base, file) in self.log_files.files_from(from - from % size) {
            if base >= to || base > covered {
                break;
            }
            let start = from.max(base) - base;
            let end = to.min(base + size) - base;
            let Some(len) = std::num::NonZeroU64::new(end.saturating_sub(start)) else {
                continue;
            };
            rustix::fs::fadvise(&*file, start, Some(len), rustix::fs::Advice::WillNeed)?;
            covered = base + end;
        }
        Ok(covered)
    }
}
