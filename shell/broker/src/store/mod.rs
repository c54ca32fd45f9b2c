//! The store service: the engine on files, with the tasks that follow it.
//!
//! One lock, the append lock, guards the engine's writers: appends, dispatch (reput), and
//! the bookkeeping of flushes and checkpoints. Nothing else takes it, and it is private to
//! this module, so the rule is the compiler's: readers go through [`read`], which copies
//! published bytes from the segment files without it.
//!
//! - appends run on the request's task, under the lock, and return where the record went;
//!   the next commit-log segment is made ahead by a task of its own ([`tasks`]), so an
//!   append only switches mappings;
//! - the reput task dispatches new records to consume queues and the index in bounded
//!   batches, publishes the queues' new bounds, then wakes pulls held on those queues;
//! - the group-commit thread ([`group_commit`]) makes the log durable: periodically for
//!   ASYNC_FLUSH, and for SYNC_FLUSH as soon as a sender waits, with one fdatasync serving
//!   every waiter below the new watermark, run outside the lock;
//! - the checkpoint task flushes queues and index and records how far recovery can trust
//!   them.
//!
//! A failed flush fails the store ([`StoreService::fail`]): Linux reports a write-back
//! error once, so a retry would "succeed" for data that never reached the disk. From then
//! on every sender that waits for durability gets an error, writes are refused, and only
//! a restart (whose recovery re-verifies the tail) brings the store back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;
use tern_shell::sync::MutexExt;

use event_listener::{Event, EventListener};
use tern_engine::index::{IndexConfig, IndexQuery, MAX_QUERY_HOPS};
use tern_engine::record::MessageIn;
use tern_engine::store::{StoreConfig, Stored};
use tern_engine_fs::fs_store::{FsStore, FsStoreError};
use tern_engine_fs::{NextSegment, SegmentFiles};
use tern_shell::runtime;

use crate::config::{BrokerConfig, FlushDiskType};

mod delete;
mod error;
mod group_commit;
mod index_read;
mod maintain;
mod mapping;
mod raw_log;
mod read;
mod tasks;
mod truncate;
mod visible;

pub use error::{CloseError, EntryReadError, LogReadError, PutError, RemoveError};
use index_read::{IndexReadError, IndexView};
pub use maintain::QueueFacts;
pub use raw_log::LogRecord;
pub use read::{MAX_RECORD_READ, WouldBlock};
use read::{QueueView, QueueViews};
pub use truncate::TruncateError;

/// Most bytes one pull answer carries (RocketMQ's `maxTransferBytesOnMessageInMemory`).
pub const MAX_PULL_BYTES: usize = 256 * 1024;
/// Most messages one pull answer carries.
pub const MAX_PULL_MSGS: u32 = 32;
/// Most consume-queue entries a pull looks at when a filter skips messages.
const MAX_FILTER_SCAN: u64 = 800;
/// How far past the log end [`StoreService::run_warm`] keeps pages cached: about 40 ms of
/// appends at 400 MB/s, refilled when half is used.
const WARM_AHEAD: u64 = 16 << 20;

/// [`StoreService::set_follower`]: only the replication stream appends.
const FOLLOWER: u8 = 1;
/// [`StoreService::set_follower`]: only local puts append.
const LEADER: u8 = 2;

/// How a flush wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Durability {
    /// On disk (or the policy does not wait).
    Durable,
    /// Stored, but not on disk within `syncFlushTimeout`.
    FlushTimeout,
    /// Stored, but no slave acknowledged it within `syncFlushTimeout` (SYNC_MASTER).
    SlaveTimeout,
    /// Stored, but no slave is connected or in sync (SYNC_MASTER).
    SlaveNotAvailable,
    /// A flush failed: the record may not be on disk, and never will be by this run.
    Failed(Arc<str>),
}

impl Durability {
    /// The send response code RocketMQ answers with: the message is stored in every case.
    pub fn code(&self) -> tern_shell::ResponseCode {
        use tern_shell::ResponseCode;
        match self {
            Durability::Durable => ResponseCode::Success,
            Durability::FlushTimeout => ResponseCode::FlushDiskTimeout,
            Durability::SlaveTimeout => ResponseCode::FlushSlaveTimeout,
            Durability::SlaveNotAvailable => ResponseCode::SlaveNotAvailable,
            // Not FLUSH_DISK_TIMEOUT, which clients take as "stored, flush pending": this
            // flush will never happen. An error makes the client retry elsewhere.
            Durability::Failed(_) => ResponseCode::SystemError,
        }
    }

    /// The remark for an answer that is not SUCCESS.
    pub fn remark(&self) -> Option<String> {
        match self {
            Durability::Failed(why) => Some(format!(
                "the message may not be on disk: {why}; the broker refuses writes until it is restarted"
            )),
            _ => None,
        }
    }
}

/// Keeps a stored record (its bytes as in the log) in a pull: the SQL92 filter.
pub type RecordFilter<'a> = &'a dyn Fn(&[u8]) -> bool;

/// The outcome of reading a queue for a pull.
#[derive(Debug, Default)]
pub struct Pulled {
    /// Records found, back to back, as stored.
    pub body: Vec<u8>,
    /// How many records are in `body`.
    pub count: u32,
    /// Where the next pull should start.
    pub next: u64,
    /// Queue minimum offset.
    pub min: u64,
    /// Queue maximum offset.
    pub max: u64,
    /// Entries were scanned but every one was filtered out.
    pub all_filtered: bool,
    /// The log offset of the last entry scanned, taken or filtered out (RocketMQ's
    /// `maxPhyOffsetPulling`): how far behind the log's end this reader is.
    pub last_physical: Option<u64>,
}

/// The store and its watermarks, shared by processors and tasks.
#[derive(Debug)]
pub struct StoreService {
    /// The append lock (see the module docs). Private: only this module's named
    /// operations take it.
    store: Mutex<FsStore>,
    /// The store's root folder.
    root: PathBuf,
    /// The engine's geometry.
    geometry: StoreConfig,
    /// The commit log's segment files, for lock-free reads.
    log_files: SegmentFiles,
    /// The next commit-log segment, made ahead of the log by [`Self::run_prepare`].
    next_segment: Arc<NextSegment>,
    /// Each consume queue's files and published bounds, for lock-free reads.
    views: QueueViews,
    /// The index files and their published headers, for queries without the lock.
    index_view: IndexView,
    /// Segments retention removed, deleted after the lock is released.
    reclaim: tern_engine_fs::directory::Reclaim,
    /// Queue and index files made ahead by [`Self::run_prepare`].
    spares: tern_engine_fs::Spares,
    flush_type: FlushDiskType,
    /// `warmMapedFileEnable`: SYNC_FLUSH writes zeros ahead ([`Self::populate_ahead`]).
    warm_ahead: bool,
    sync_flush_timeout: Duration,
    flush_interval: Duration,
    /// Everything below is durable.
    flushed: AtomicU64,
    /// Log end as of the last append: everything below is published to readers.
    written: AtomicU64,
    /// Oldest log offset held (retention moves it).
    log_min: AtomicU64,
    /// Log offset up to which records are in queues and index.
    dispatched: AtomicU64,
    /// The confirm offset: reput dispatches no record that ends past it; `u64::MAX` for
    /// no bound ([`visible`]).
    confirm: AtomicU64,
    /// How far the last reput pass that stopped for want of records (at the log's end
    /// or at the confirm offset) got: every record ending below it is dispatched.
    reached: AtomicU64,
    /// Wakes the group-commit thread (a sync sender is waiting).
    commit: Arc<group_commit::Doorbell>,
    /// Signalled after each flush.
    flush_done: Event,
    /// Wakes the reput task (something was appended).
    appended: Event,
    /// Signalled after each reput pass.
    dispatch_done: Event,
    /// Wakes the checkpoint task before its period: reput waits for an index flush.
    checkpoint_wanted: Event,
    /// Signalled after each checkpoint attempt.
    checkpoint_done: Event,
    /// Wakes the warm and prepare tasks: the log end passed `warm_below`, or rolled.
    warm_wanted: Event,
    /// Log offset past which the warm task should top up the cached pages ahead.
    warm_below: AtomicU64,
    /// Set while the disk is past the refuse watermark.
    disk_full: AtomicBool,
    /// Log offset at which writes stop until the owner moves it (the edge gateway's
    /// forwarded offset plus its budget); `u64::MAX` for none.
    write_limit: AtomicU64,
    /// Log offset below which the mapping's pages were released
    /// ([`Self::release_behind`]).
    released: AtomicU64,
    /// Log offset below which the mapping's pages were populated ahead of the end
    /// ([`Self::populate_ahead`]).
    populated: AtomicU64,
    /// Bytes of log the last flush round synced, 0 when it found none: under ASYNC_FLUSH
    /// about what one flush interval appends, which sizes the window
    /// [`Self::populate_ahead`] keeps.
    last_flush_bytes: AtomicU64,
    /// Set once the store is sealed at shutdown: nothing more may be appended.
    sealed: AtomicBool,
    /// Controller mode's guard on who appends ([`Self::set_follower`]): 0 anyone
    /// (classic roles), [`FOLLOWER`] only the replication stream, [`LEADER`] only local
    /// puts. Checked under the append lock, so a round of a master-only service still
    /// running when the role changed cannot slip a record of its own into the replicated
    /// log, nor a late replicated frame land in a new master's term.
    writer: std::sync::atomic::AtomicU8,
    /// Set once a flush failed: why. Never cleared; a restart recovers.
    failed: OnceLock<Arc<str>>,
    /// Taken shared by each flush and checkpoint for their whole run, exclusively by a
    /// truncation ([`truncate`]): none of them is in flight across a cut.
    sync_gate: std::sync::RwLock<()>,
    /// Tells lock-free readers that a truncation ran while they read ([`truncate`]).
    cut_fence: truncate::CutFence,
    /// Records appended since start (runtime info).
    pub put_count: AtomicU64,
    /// Reput passes that failed since start (runtime info: `reputErrors`).
    reput_errors: AtomicU64,
    /// How long each commit-log flush took, ms (`tern_storage_flush_latency`).
    pub flush_latency: crate::metrics::Buckets<6>,
}

impl StoreService {
    /// Opens the store under `config.store_root` and recovers it.
    pub fn open(config: &BrokerConfig) -> Result<Arc<Self>, FsStoreError> {
        let geometry = StoreConfig {
            log_segment_size: config.commit_log_segment_bytes,
            queue_entries_per_file: config.consume_queue_entries,
            index: IndexConfig {
                slots: config.index_slots,
                entries: config.index_entries,
            },
            delay_levels: config.delay_levels,
        };
        let started = Instant::now();
        let (mut store, report) = FsStore::open(&config.store_root, geometry)?;
        // An index roll's flush runs in the checkpoint, outside the lock (run_reput).
        store.engine_mut().defer_index_rolls(true);
        if config.flush_disk_type == FlushDiskType::Sync {
            // Every round's writeback would write-protect the pages appended through a
            // mapping, one TLB shootdown a page (see `Writes::Through`).
            store.write_log_through();
        }
        log::info!(
            "store {} opened in {:?}: {}, log end {}, {} records re-dispatched",
            config.store_root.display(),
            started.elapsed(),
            if report.crashed {
                "recovered after a crash"
            } else {
                "clean"
            },
            store.engine().log().max_offset(),
            report.redispatched,
        );
        let log = store.engine().log();
        let (end, min) = (log.max_offset(), log.min_offset());
        let dispatched = store.engine().dispatched_offset();
        let views = QueueViews::default();
        for (topic, queue_id) in store.engine().queues().keys() {
            if let (Some(q), Some(files)) = (
                store.engine().queue(&topic, queue_id),
                store.engine().queues().files_of(&topic, queue_id),
            ) {
                views.insert(
                    &topic,
                    queue_id,
                    QueueView::new(files, q.min_offset(), q.max_offset()),
                );
            }
        }
        let index_view = IndexView::new(store.index_files(), geometry.index);
        let service = Arc::new(Self {
            root: config.store_root.clone(),
            geometry,
            log_files: store.log_segment_files(),
            next_segment: store.next_log_segment(),
            reclaim: store.reclaim(),
            spares: store.spares(),
            store: Mutex::new(store),
            views,
            index_view,
            flush_type: config.flush_disk_type,
            warm_ahead: config.warm_mapped_file,
            sync_flush_timeout: config.sync_flush_timeout,
            flush_interval: config.flush_interval,
            flushed: AtomicU64::new(end),
            written: AtomicU64::new(end),
            log_min: AtomicU64::new(min),
            dispatched: AtomicU64::new(dispatched),
            confirm: AtomicU64::new(u64::MAX),
            reached: AtomicU64::new(dispatched),
            commit: Arc::default(),
            flush_done: Event::new(),
            appended: Event::new(),
            dispatch_done: Event::new(),
            checkpoint_wanted: Event::new(),
            checkpoint_done: Event::new(),
            warm_wanted: Event::new(),
            warm_below: AtomicU64::new(0),
            disk_full: AtomicBool::new(false),
            write_limit: AtomicU64::new(u64::MAX),
            released: AtomicU64::new(0),
            populated: AtomicU64::new(0),
            last_flush_bytes: AtomicU64::new(0),
            sealed: AtomicBool::new(false),
            writer: std::sync::atomic::AtomicU8::new(0),
            failed: OnceLock::new(),
            sync_gate: std::sync::RwLock::new(()),
            cut_fence: truncate::CutFence::default(),
            put_count: AtomicU64::new(0),
            flush_latency: crate::metrics::Buckets::new(&crate::metrics::LATENCY_BUCKETS_MS),
            reput_errors: AtomicU64::new(0),
        });
        service.publish_index(&service.lock());
        Ok(service)
    }

    /// The store, locked: appends, dispatch and flush bookkeeping only. A hold longer than
    /// [`SLOW_HOLD`] is logged with what held it.
    fn lock(&self) -> MutexGuard<'_, FsStore> {
        // A panic while holding the lock leaves the store as the engine left it; the
        // engine's state is consistent between calls, so keep serving.
        self.store.guard()
    }

    /// Fails the store: logs `why` (the first time only), refuses every later write and
    /// answers every sender waiting for durability with an error.
    pub fn fail(&self, why: impl std::fmt::Display) {
        let why = why.to_string();
        if self.failed.set(Arc::from(why.as_str())).is_ok() {
            log::error!(
                "{why}: the store is failed: writes are refused and SYNC_FLUSH senders get \
                 errors until the broker is restarted (recovery re-verifies the log's tail)"
            );
            self.lock().engine_mut().mark_failed();
        }
        self.flush_done.notify(usize::MAX);
    }

    /// Why the store failed, if it did.
    pub fn failure(&self) -> Option<Arc<str>> {
        self.failed.get().cloned()
    }

    /// Refuses or accepts writes (the retention task watches the disk).
    pub fn set_disk_full(&self, full: bool) {
        if self.disk_full.swap(full, Ordering::Relaxed) != full {
            if full {
                log::error!("disk use past the hard watermark: refusing writes");
            } else {
                log::warn!("disk use back under the hard watermark: accepting writes");
            }
        }
    }

    /// Whether writes are refused.
    pub fn disk_full(&self) -> bool {
        self.disk_full.load(Ordering::Relaxed)
    }

    /// Stops writes once the log end reaches `limit` (`u64::MAX`: never), checked by
    /// every append: the edge gateway keeps its unforwarded backlog to a budget.
    pub fn set_write_limit(&self, limit: u64) {
        let end = self.written.load(Ordering::Acquire);
        let was = self.write_limit.swap(limit, Ordering::AcqRel);
        match (end >= was, end >= limit) {
            (false, true) => log::warn!("backlog over its budget: refusing writes"),
            (true, false) => log::info!("backlog back under its budget: accepting writes"),
            _ => {}
        }
    }

    fn check_put(&self) -> Result<(), PutError> {
        if let Some(why) = self.failure() {
            Err(PutError::Failed(why))
        } else if self.disk_full() {
            Err(PutError::DiskFull)
        } else if self.written.load(Ordering::Acquire) >= self.write_limit.load(Ordering::Acquire) {
            Err(PutError::OverBudget)
        } else {
            Ok(())
        }
    }

    fn map_err(&self, store: &FsStore, e: tern_engine_fs::fs_store::EngineError) -> PutError {
        match e {
            tern_engine::Error::TooLarge => {
                PutError::Illegal("it is larger than a commit log segment can hold".into())
            }
            tern_engine::Error::Record(r) => PutError::Illegal(r.to_string()),
            tern_engine::Error::Media(m) if m.is_no_space() => PutError::DiskFull,
            tern_engine::Error::FlushFailed => PutError::Failed(
                self.failure()
                    .unwrap_or_else(|| Arc::from("a flush failed earlier")),
            ),
            e => PutError::Store(store.error("put", e)),
        }
    }

    /// Runs `write` under the append lock, unless the store is sealed, then publishes the
    /// new log end and wakes the tasks that follow it.
    fn append<T>(
        &self,
        records: u64,
        write: impl FnOnce(&mut FsStore) -> Result<T, tern_engine_fs::fs_store::EngineError>,
    ) -> Result<T, PutError> {
        self.check_put()?;
        let out = {
            let mut s = self.lock();
            // Checked under the lock `close` seals with: a put racing shutdown either
            // lands before the seal (and is covered by it) or is refused.
            if self.sealed.load(Ordering::Acquire) {
                return Err(PutError::ShuttingDown);
            }
            // Replicated appends count no records of their own.
            match (self.writer.load(Ordering::Acquire), records > 0) {
                (FOLLOWER, true) => {
                    return Err(PutError::Refused(
                        tern_shell::ResponseCode::ServiceNotAvailable,
                        "this broker is a slave: its log is its master's".into(),
                    ));
                }
                (LEADER, false) => {
                    return Err(PutError::Refused(
                        tern_shell::ResponseCode::ServiceNotAvailable,
                        "this broker is the master now: it takes no replicated log".into(),
                    ));
                }
                _ => {}
            }
            let held = Instant::now();
            let r = write(&mut s).map_err(|e| self.map_err(&s, e))?;
            // Release: a reader that sees the new end sees the bytes below it.
            self.written
                .store(s.engine().log().max_offset(), Ordering::Release);
            note_slow_hold("append", held);
            r
        };
        self.put_count.fetch_add(records, Ordering::Relaxed);
        self.appended.notify(usize::MAX);
        self.wake_warmer();
        Ok(out)
    }

    /// Controller mode: whether the log takes local puts only (a master's).
    pub(crate) fn leads(&self) -> bool {
        self.writer.load(Ordering::Acquire) == LEADER
    }

    /// Controller mode: the log follows a master's (`true`) or takes local puts. Taken
    /// under the append lock, so when it returns no local put is under way.
    pub fn set_follower(&self, on: bool) {
        let _s = self.lock();
        self.writer
            .store(if on { FOLLOWER } else { LEADER }, Ordering::Release);
    }

    /// Appends one message as it is; returns where it went. Durability is awaited
    /// separately. (Delay levels are the caller's: `BrokerCtx::put`.)
    pub fn put(&self, msg: &MessageIn<'_>) -> Result<Stored, PutError> {
        // Hashed before the lock, as RocketMQ does before its putMessageLock.
        let crc = tern_engine::hash::body_crc(msg.body);
        self.append(1, |s| s.engine_mut().put_with_crc(msg, crc, now_ms()))
    }

    /// Appends a batch to one queue; returns where each record went.
    pub fn put_batch(&self, msgs: &[MessageIn<'_>]) -> Result<Vec<Stored>, PutError> {
        let crcs: Vec<i32> = msgs
            .iter()
            .map(|m| tern_engine::hash::body_crc(m.body))
            .collect();
        let crc = |i: usize, _: &MessageIn<'_>| crcs[i];
        let mut out = Vec::with_capacity(msgs.len());
        self.append(msgs.len() as u64, |s| {
            s.engine_mut()
                .put_batch_with(msgs, &crc, now_ms(), &mut |st| out.push(st))
        })?;
        Ok(out)
    }

    /// Called after each append: wakes the warm task when the log end passed its mark.
    fn wake_warmer(&self) {
        if self.written.load(Ordering::Acquire) >= self.warm_below.load(Ordering::Acquire) {
            self.warm_wanted.notify(usize::MAX);
        }
    }

    /// Counters for GET_BROKER_RUNTIME_INFO, RocketMQ's keys where it has them.
    pub fn runtime_stats(&self, t: &mut std::collections::BTreeMap<String, String>) {
        let end = self.written.load(Ordering::Acquire);
        let mut put = |k: &str, v: String| {
            t.insert(k.to_owned(), v);
        };
        put(
            "commitLogMinOffset",
            self.log_min.load(Ordering::Acquire).to_string(),
        );
        put("commitLogMaxOffset", end.to_string());
        put(
            "dispatchBehindBytes",
            end.saturating_sub(self.dispatched_offset()).to_string(),
        );
        put("confirmOffset", self.confirm_offset().to_string());
        put(
            "flushedOffset",
            self.flushed.load(Ordering::Acquire).to_string(),
        );
        put(
            "reputErrors",
            self.reput_errors.load(Ordering::Relaxed).to_string(),
        );
        put(
            "storeFailed",
            self.failure().map_or_else(String::new, |w| w.to_string()),
        );
    }

    /// The newest index file's last update as published: (store time, log offset), as
    /// QUERY_MESSAGE's response header reports them.
    pub fn index_end(&self) -> (i64, i64) {
        self.index_view.end()
    }

    /// Log offsets of records indexed under `topic#key` stored in `[begin, end]`, newest
    /// first, at most `max`, from the published index without the lock (see
    /// `index_read`): at most [`MAX_QUERY_HOPS`] entries and [`QUERY_TIME`] (then what was
    /// found is the answer). The records are read by the caller.
    pub fn query_index(
        &self,
        topic: &str,
        key: &str,
        max: usize,
        begin: i64,
        end: i64,
    ) -> Vec<u64> {
        let mut offsets = Vec::new();
        // Offsets found across a truncation may name records past the cut: none then.
        let Some(ticket) = self.cut_fence.enter() else {
            return offsets;
        };
        let mut q = IndexQuery::new(topic, key, max, begin, end);
        let reader = self
            .index_view
            .reader(&self.dispatch_done, Instant::now() + QUERY_TIME);
        // One step covers the whole bound: the hops are counted over the query.
        match q.step(&reader, MAX_QUERY_HOPS, &mut |o| offsets.push(o)) {
            Ok(_) | Err(IndexReadError::Read(tern_engine_fs::ReadError::Gone)) => {}
            Err(IndexReadError::TimedOut) => log::debug!(
                "index query {topic}#{key} stopped after {QUERY_TIME:?} with {} offset(s)",
                offsets.len()
            ),
            Err(e) => log::warn!("index query {topic}#{key}: {e}"),
        }
        if !self.cut_fence.unchanged(ticket) {
            offsets.clear();
        }
        offsets
    }

    /// Publishes the index files' headers to readers (after dispatch or retention changed
    /// them, under the lock).
    fn publish_index(&self, s: &FsStore) {
        if let Err(e) = self.index_view.publish(s) {
            log::warn!("index headers not published: {e}");
        }
    }

    /// Flushes everything and closes the store cleanly in place (checkpoint with the end,
    /// abort marker removed). Appends are refused from then on; a request still in flight
    /// gets "shutting down" rather than a record the checkpoint does not cover. A failed
    /// store is not sealed: the next start must recover it as after a crash.
    pub fn close(&self) -> Result<(), CloseError> {
        // Its last round first (it takes the lock): every sender still waiting answered.
        self.commit.stop();
        let mut s = self.lock();
        self.sealed.store(true, Ordering::Release);
        if let Some(why) = self.failure() {
            return Err(CloseError::Failed(why));
        }
        s.seal().map_err(CloseError::Seal)
    }
}

/// Longest a query by key walks in all (RocketMQ has no bound; the engine bounds hops).
const QUERY_TIME: Duration = Duration::from_millis(500);

/// Appends that held the lock longer than this are logged (RocketMQ warns past 500 ms in
/// its put lock; a disk stall inside the lock is what this finds).
const SLOW_HOLD: Duration = Duration::from_millis(100);

fn note_slow_hold(what: &str, since: Instant) {
    let held = since.elapsed();
    if held >= SLOW_HOLD {
        log::warn!("the store lock was held {held:?} by {what}");
    }
}

/// Waits for `appended` (a listener taken before the caller's last look at the log), for
/// shutdown, or the caller's next tick ([`APPENDED_TICK`]), whichever comes first.
async fn until_appended(
    appended: EventListener,
    tick: &mut runtime::Ticker,
    shutdown: &runtime::Shutdown,
) {
    runtime::race(appended, runtime::race(tick.tick(), shutdown.wait())).await;
}

/// How often a task waiting in [`until_appended`] looks again though nothing woke it.
const APPENDED_TICK: Duration = Duration::from_millis(200);

/// A message to queue 0 of `T`, for the store's tests.
#[cfg(test)]
pub(crate) fn test_message<'a>(body: &'a [u8], properties: &'a [u8]) -> MessageIn<'a> {
    tern_engine::testkit::message("T", 0, body, properties)
}
