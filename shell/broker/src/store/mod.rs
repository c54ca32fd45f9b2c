//! The store service: the engine on files behind one lock, with the tasks that follow it.
//!
//! - appends run on the request's task, under the lock, and return where the record went;
//! - the reput task dispatches new records to consume queues and the index, then wakes
//!   pulls held on those queues;
//! - the flush task makes the log durable: periodically for ASYNC_FLUSH, and for
//!   SYNC_FLUSH as soon as a sender waits, with one fdatasync serving every waiter below
//!   the new watermark (group commit);
//! - the checkpoint task flushes queues and index and records how far recovery can trust
//!   them.
//!
//! The lock is a plain mutex held only for memory work or one flush; nothing awaits while
//! holding it. Blocking work (flushes) runs on the blocking pool.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tern_shell::runtime::now_ms;

use event_listener::{Event, EventListener};
use tern_engine::consumequeue::Entry;
use tern_engine::delay::DelayLevels;
use tern_engine::index::IndexConfig;
use tern_engine::record::MessageIn;
use tern_engine::store::{StoreConfig, Stored};
use tern_engine_fs::fs_store::{FsStore, FsStoreError};
use tern_shell::runtime;

use crate::config::{BrokerConfig, FlushDiskType};

mod raw_log;

pub use raw_log::LogRecord;

/// Most bytes one pull answer carries (RocketMQ's `maxTransferBytesOnMessageInMemory`).
pub const MAX_PULL_BYTES: usize = 256 * 1024;
/// Most messages one pull answer carries.
pub const MAX_PULL_MSGS: u32 = 32;
/// Most consume-queue entries a pull looks at when a filter skips messages.
const MAX_FILTER_SCAN: u64 = 800;
/// How far past the log end [`StoreService::run_warm`] keeps pages cached: about 40 ms of
/// appends at 400 MB/s, refilled when half is used.
const WARM_AHEAD: u64 = 16 << 20;

/// Why an append failed.
#[derive(Debug)]
pub enum PutError {
    /// Writes are refused: the disk is past its hard watermark.
    DiskFull,
    /// Writes are refused: what is stored but not yet taken away (an edge gateway's
    /// unforwarded backlog) is over its budget.
    OverBudget,
    /// The message cannot be stored (too large for a segment, bad layout).
    Illegal(String),
    /// The broker is shutting down and the store is sealed.
    ShuttingDown,
    /// The store failed.
    Store(FsStoreError),
}

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
}

impl Durability {
    /// The send response code RocketMQ answers with: the message is stored in every case.
    pub fn code(self) -> tern_shell::ResponseCode {
        use tern_shell::ResponseCode;
        match self {
            Durability::Durable => ResponseCode::Success,
            Durability::FlushTimeout => ResponseCode::FlushDiskTimeout,
            Durability::SlaveTimeout => ResponseCode::FlushSlaveTimeout,
            Durability::SlaveNotAvailable => ResponseCode::SlaveNotAvailable,
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
}

/// The store and its watermarks, shared by processors and tasks.
#[derive(Debug)]
pub struct StoreService {
    store: Mutex<FsStore>,
    flush_type: FlushDiskType,
    sync_flush_timeout: Duration,
    flush_interval: Duration,
    /// Everything below is durable.
    flushed: AtomicU64,
    /// Log end as of the last append.
    written: AtomicU64,
    /// Wakes the flush task (a sync sender is waiting).
    flush_wanted: Event,
    /// Signalled after each flush.
    flush_done: Event,
    /// Wakes the reput task (something was appended).
    appended: Event,
    /// Wakes the warm task: the log end passed `warm_below`.
    warm_wanted: Event,
    /// Log offset past which the warm task should top up the cached pages ahead.
    warm_below: AtomicU64,
    /// Set while the disk is past the refuse watermark.
    disk_full: AtomicBool,
    /// Log offset at which writes stop until the owner moves it (the edge gateway's
    /// forwarded offset plus its budget); `u64::MAX` for none.
    write_limit: AtomicU64,
    /// Set once the store is sealed at shutdown: nothing more may be appended.
    sealed: AtomicBool,
    /// Records appended since start (runtime info).
    pub put_count: AtomicU64,
    /// Delay levels: messages asking for one are stored in the schedule topic.
    delay_levels: DelayLevels,
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
        let (store, report) = FsStore::open(&config.store_root, geometry)?;
        log::info!(
            "store {} opened in {:?}: {}, log end {}, {} records re-dispatched",
            config.store_root.display(),
            started.elapsed(),
            if report.crashed {
                "recovered after a crash"
            } else {
                "clean"
            },
            store.store().log().max_offset(),
            report.redispatched,
        );
        let end = store.store().log().max_offset();
        Ok(Arc::new(Self {
            store: Mutex::new(store),
            flush_type: config.flush_disk_type,
            sync_flush_timeout: config.sync_flush_timeout,
            flush_interval: config.flush_interval,
            flushed: AtomicU64::new(end),
            written: AtomicU64::new(end),
            flush_wanted: Event::new(),
            flush_done: Event::new(),
            appended: Event::new(),
            warm_wanted: Event::new(),
            warm_below: AtomicU64::new(0),
            disk_full: AtomicBool::new(false),
            write_limit: AtomicU64::new(u64::MAX),
            sealed: AtomicBool::new(false),
            put_count: AtomicU64::new(0),
            delay_levels: config.delay_levels,
        }))
    }

    /// The store, locked. Hold it only for memory work.
    pub fn lock(&self) -> MutexGuard<'_, FsStore> {
        // A panic while holding the lock leaves the store as the engine left it; the
        // engine's state is consistent between calls, so keep serving.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
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
        if self.disk_full() {
            Err(PutError::DiskFull)
        } else if self.written.load(Ordering::Acquire) >= self.write_limit.load(Ordering::Acquire) {
            Err(PutError::OverBudget)
        } else {
            Ok(())
        }
    }

    fn map_err(store: &FsStore, e: tern_engine_fs::fs_store::EngineError) -> PutError {
        match e {
            tern_engine::Error::TooLarge | tern_engine::Error::Record(_) => {
                PutError::Illegal(format!("{e:?}"))
            }
            tern_engine::Error::Media(m) if m.is_no_space() => PutError::DiskFull,
            e => PutError::Store(store.error("put", e)),
        }
    }

    /// Appends one message; returns where it went. Durability is awaited separately.
    ///
    /// A message with a delay level goes to the schedule topic instead, here rather than
    /// in each processor (as RocketMQ does it in its store), so sends, send-backs and
    /// transaction commits all get it.
    pub fn put(&self, msg: &MessageIn<'_>) -> Result<Stored, PutError> {
        self.check_put()?;
        let scheduled =
            crate::schedule::to_schedule(msg, &self.delay_levels).map_err(PutError::Illegal)?;
        let msg = &scheduled.as_ref().map_or(*msg, |s| s.message(msg));
        let stored = {
            let mut s = self.lock();
            // Checked under the lock `close` seals with: a put racing shutdown either
            // lands before the seal (and is covered by it) or is refused.
            if self.sealed.load(Ordering::Acquire) {
                return Err(PutError::ShuttingDown);
            }
            let r = s.store_mut().put(msg, now_ms());
            let r = r.map_err(|e| Self::map_err(&s, e))?;
            self.written
                .store(s.store().log().max_offset(), Ordering::Release);
            r
        };
        self.put_count.fetch_add(1, Ordering::Relaxed);
        self.appended.notify(usize::MAX);
        self.wake_warmer();
        Ok(stored)
    }

    /// Appends a batch to one queue; returns where each record went.
    pub fn put_batch(&self, msgs: &[MessageIn<'_>]) -> Result<Vec<Stored>, PutError> {
        self.check_put()?;
        // RocketMQ refuses delayed messages in a batch (one batch, one queue).
        for m in msgs {
            if crate::schedule::message::wanted_level(m)
                .map_err(PutError::Illegal)?
                .is_some()
            {
                return Err(PutError::Illegal(
                    "delayed messages cannot be sent in a batch".into(),
                ));
            }
        }
        let mut out = Vec::with_capacity(msgs.len());
        {
            let mut s = self.lock();
            if self.sealed.load(Ordering::Acquire) {
                return Err(PutError::ShuttingDown);
            }
            let r = s
                .store_mut()
                .put_batch(msgs, now_ms(), &mut |st| out.push(st));
            r.map_err(|e| Self::map_err(&s, e))?;
            self.written
                .store(s.store().log().max_offset(), Ordering::Release);
        }
        self.put_count
            .fetch_add(msgs.len() as u64, Ordering::Relaxed);
        self.appended.notify(usize::MAX);
        self.wake_warmer();
        Ok(out)
    }

    /// Waits until the log is durable up to `end` when the policy says senders wait.
    pub async fn await_durable(&self, end: u64) -> Durability {
        if self.flush_type == FlushDiskType::Async {
            return Durability::Durable;
        }
        let deadline = Instant::now() + self.sync_flush_timeout;
        loop {
            let listener = self.flush_done.listen();
            if self.flushed.load(Ordering::Acquire) >= end {
                return Durability::Durable;
            }
            self.flush_wanted.notify(1);
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || runtime::timeout(left, listener).await.is_err() {
                return if self.flushed.load(Ordering::Acquire) >= end {
                    Durability::Durable
                } else {
                    Durability::FlushTimeout
                };
            }
        }
    }

    /// Flushes the log once and wakes waiters. The store lock is held only to read the
    /// range and to record the result: the fdatasync itself runs on the blocking pool
    /// while appends go on, and the next flush covers what they added (group commit).
    async fn flush_once(self: &Arc<Self>) {
        if self.flushed.load(Ordering::Acquire) >= self.written.load(Ordering::Acquire) {
            return;
        }
        let me = Arc::clone(self);
        let result = async_std::task::spawn_blocking(move || {
            let (to, files) = {
                let s = me.lock();
                let (from, to) = s.store().log().unflushed();
                (to, s.log_files(from, to).map_err(|e| e.to_string())?)
            };
            for (_, f) in &files {
                rustix::fs::fdatasync(f)
                    .map_err(|e| format!("fdatasync of the commit log: {e}"))?;
            }
            let mut s = me.lock();
            s.store_mut().log_mut().mark_flushed(to);
            Ok::<u64, String>(s.store().log().flushed_offset())
        })
        .await;
        match result {
            Ok(flushed) => {
                self.flushed.fetch_max(flushed, Ordering::AcqRel);
            }
            Err(e) => log::error!("flush failed: {e}"),
        }
        self.flush_done.notify(usize::MAX);
    }

    /// The flush task: until `shutdown`, flush when asked (sync) or every interval.
    pub async fn run_flush(self: Arc<Self>, shutdown: runtime::Shutdown) {
        // The listener for the next round is registered before each flush starts: a
        // sender that asks while a flush runs must not be lost (event-listener drops a
        // notification nobody listens to), or it would wait out the whole timer.
        let mut wanted = self.flush_wanted.listen();
        while !shutdown.is_triggered() {
            let wait = match self.flush_type {
                FlushDiskType::Sync => Duration::from_millis(10),
                FlushDiskType::Async => self.flush_interval,
            };
            let _ = runtime::race(
                async { runtime::timeout(wait, &mut wanted).await.ok() },
                async {
                    shutdown.wait().await;
                    None
                },
            )
            .await;
            wanted = self.flush_wanted.listen();
            self.flush_once().await;
        }
    }

    /// The reput task: dispatches new records, then tells `wake` which queues grew.
    pub async fn run_reput(
        self: Arc<Self>,
        shutdown: runtime::Shutdown,
        wake: impl Fn(&str, i32) + Send + Sync + 'static,
    ) {
        let mut touched: Vec<(String, i32)> = Vec::new();
        while !shutdown.is_triggered() {
            let listener = self.appended.listen();
            let done = {
                let mut s = self.lock();
                let end = s.store().log().max_offset();
                if s.store().dispatched_offset() < end {
                    let r = s.dispatch(&mut |rec| {
                        if rec.goes_to_queue()
                            && !touched
                                .iter()
                                .any(|(t, q)| t == rec.topic && *q == rec.queue_id)
                        {
                            touched.push((rec.topic.to_owned(), rec.queue_id));
                        }
                    });
                    if let Err(e) = r {
                        log::error!("reput failed: {e}");
                    }
                    false
                } else {
                    true
                }
            };
            for (t, q) in touched.drain(..) {
                wake(&t, q);
            }
            if done {
                until_appended(listener, &shutdown).await;
            }
        }
    }

    /// The warm task: keeps the [`WARM_AHEAD`] bytes past the log end in the page cache.
    ///
    /// An append into a page not yet cached faults, and the kernel reads it in first
    /// (zero-filling the preallocated extent) while the appender holds the store: every
    /// sender waits behind it, which showed as the p99 of sends and as the broker's
    /// largest cost in batch runs. Reading the pages in ahead of time, here and outside
    /// the store lock, leaves appends a cheap minor fault.
    pub async fn run_warm(self: Arc<Self>, shutdown: runtime::Shutdown) {
        let mut warmed = 0u64;
        while !shutdown.is_triggered() {
            let listener = self.warm_wanted.listen();
            let end = self.written.load(Ordering::Acquire);
            let before = warmed;
            if warmed < end + WARM_AHEAD / 2 {
                let from = warmed.max(end);
                let to = end + WARM_AHEAD;
                let me = self.clone();
                match async_std::task::spawn_blocking(move || me.warm(from, to)).await {
                    Ok(covered) => warmed = covered,
                    Err(e) => {
                        // Only a hint: appends fault the pages in themselves.
                        log::debug!("warming the commit log ahead failed: {e}");
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
                until_appended(listener, &shutdown).await;
            }
        }
    }

    /// Called after each append: wakes the warm task when the log end passed its mark.
    fn wake_warmer(&self) {
        if self.written.load(Ordering::Acquire) >= self.warm_below.load(Ordering::Acquire) {
            self.warm_wanted.notify(1);
        }
    }

    /// Reads log bytes `[from, to)` of existing segments into the page cache; returns
    /// the offset cached up to (`from` when the segment is not created yet).
    fn warm(&self, from: u64, to: u64) -> Result<u64, String> {
        let (files, size) = {
            let s = self.lock();
            let files = s.log_files(from, to).map_err(|e| e.to_string())?;
            (files, s.store().log().segment_size())
        };
        let mut covered = from;
        for (base, file) in files {
            let start = from.max(base) - base;
            let end = to.min(base + size) - base;
            let Some(len) = std::num::NonZeroU64::new(end.saturating_sub(start)) else {
                continue;
            };
            rustix::fs::fadvise(&file, start, Some(len), rustix::fs::Advice::WillNeed)
                .map_err(|e| format!("fadvise: {e}"))?;
            covered = base + end;
        }
        Ok(covered)
    }

    /// The checkpoint task: queues, index and checkpoint made durable every `period`.
    pub async fn run_checkpoint(self: Arc<Self>, shutdown: runtime::Shutdown, period: Duration) {
        while !shutdown.is_triggered() {
            let _ = runtime::race(runtime::sleep(period), shutdown.wait()).await;
            if shutdown.is_triggered() {
                break;
            }
            let me = Arc::clone(&self);
            let r = async_std::task::spawn_blocking(move || {
                let mut s = me.lock();
                let r = s.store_mut().checkpoint();
                let flushed = s.store().log().flushed_offset();
                (r.map_err(|e| s.error("checkpoint", e)), flushed)
            })
            .await;
            match r {
                (Ok(()), flushed) => {
                    self.flushed.fetch_max(flushed, Ordering::AcqRel);
                    self.flush_done.notify(usize::MAX);
                }
                (Err(e), _) => log::error!("checkpoint failed: {e}"),
            }
        }
    }

    /// Reads up to `max_msgs` records of a queue from `offset` whose tag code passes
    /// `filter` and whose stored bytes pass `record_filter` (SQL92 on properties),
    /// bounded by [`MAX_PULL_BYTES`].
    pub fn read_queue(
        &self,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max_msgs: u32,
        filter: Option<&dyn Fn(i64) -> bool>,
        record_filter: Option<RecordFilter<'_>>,
    ) -> Option<Pulled> {
        let s = self.lock();
        let store = s.store();
        let queue = store.queue(topic, queue_id)?;
        let (min, max) = (queue.min_offset(), queue.max_offset());
        let mut out = Pulled {
            min,
            max,
            next: offset,
            ..Pulled::default()
        };
        if offset < min || offset >= max {
            return Some(out);
        }
        let log = store.log();
        let want = max_msgs.clamp(1, MAX_PULL_MSGS);
        let mut matched = 0u32;
        let mut last_taken = None;
        let mut byte_stop = false;
        let scanned_to = queue.scan(
            offset,
            MAX_FILTER_SCAN.max(u64::from(want)),
            filter,
            &mut |n, e: Entry| {
                // Records below the log's start were deleted by retention: skip.
                let Ok(Some(bytes)) = log.slice(e.physical_offset, e.size as usize) else {
                    return true;
                };
                if record_filter.is_some_and(|keep| !keep(bytes)) {
                    return true;
                }
                if out.body.len() + bytes.len() > MAX_PULL_BYTES && matched > 0 {
                    byte_stop = true;
                    return false;
                }
                out.body.extend_from_slice(bytes);
                matched += 1;
                last_taken = Some(n);
                matched < want
            },
        );
        let scanned_to = match scanned_to {
            Ok(n) => n,
            Err(e) => {
                log::error!("reading {topic}/{queue_id} at {offset}: {e:?}");
                return Some(out);
            }
        };
        out.count = matched;
        // Stopping for size leaves the entry that did not fit for the next pull.
        out.next = match last_taken {
            Some(n) if byte_stop => n + 1,
            _ => scanned_to,
        };
        out.all_filtered = matched == 0 && scanned_to > offset;
        Some(out)
    }

    /// Min and max offsets of a queue; `(0, 0)` for a queue never written.
    pub fn queue_bounds(&self, topic: &str, queue_id: i32) -> (u64, u64) {
        let s = self.lock();
        s.store()
            .queue(topic, queue_id)
            .map_or((0, 0), |q| (q.min_offset(), q.max_offset()))
    }

    /// Flushes everything and closes the store cleanly in place (checkpoint with the end,
    /// abort marker removed). Appends are refused from then on; a request still in flight
    /// gets "shutting down" rather than a record the checkpoint does not cover.
    pub fn close(&self) -> Result<(), String> {
        let mut s = self.lock();
        self.sealed.store(true, Ordering::Release);
        s.seal().map_err(|e| e.to_string())
    }
}

/// Waits for `appended` (a listener taken before the caller's last look at the log), for
/// shutdown, or 200 ms, whichever comes first.
async fn until_appended(appended: EventListener, shutdown: &runtime::Shutdown) {
    runtime::race(
        async {
            let _ = runtime::timeout(Duration::from_millis(200), appended).await;
        },
        shutdown.wait(),
    )
    .await;
}
