//! The group-commit thread: RocketMQ's `GroupCommitService`, a thread of its own that
//! fdatasyncs the log and wakes the senders waiting on it.
//!
//! Why a thread and not a task: a task must hand each fdatasync to the blocking pool and
//! be woken when it returns, so every group commit crossed three threads (the task's
//! worker, a blocking thread, the worker again) before the first sender could be woken;
//! under SYNC_FLUSH with one sender that was 7 context switches a message. Here a sender
//! rings the [`Doorbell`] (a syscall only when the thread sleeps), the thread syncs and
//! wakes the waiters itself.
//!
//! The thread holds the store weakly and parks between rounds: for SYNC_FLUSH until a
//! sender rings or 10 ms pass (records nobody waits for, such as internal topics', are
//! still made durable soon), for ASYNC_FLUSH every `flushIntervalCommitLog`. A round syncs
//! whatever was written when it started; what arrives during the sync rings again and is
//! covered by the next round, one fdatasync for every sender below the new watermark.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tern_engine_fs::sync;
use tern_shell::runtime;
use tern_shell::sync::{MutexExt, RwLockExt};

use super::error::SyncError;
use super::{Durability, StoreService};
use crate::config::FlushDiskType;

/// How often a SYNC_FLUSH store flushes when no sender rings.
const SYNC_PERIOD: Duration = Duration::from_millis(10);

/// Tells the group-commit thread that a sender waits. Ringing a bell already rung costs
/// one atomic swap; ringing a sleeping thread's costs one futex wake (`Thread::unpark`
/// makes no syscall when the thread is not parked).
#[derive(Debug, Default)]
pub(super) struct Doorbell {
    rung: AtomicBool,
    stop: AtomicBool,
    /// Set after the thread's last round: nobody makes the log durable any more.
    stopped: AtomicBool,
    thread: OnceLock<Thread>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Doorbell {
    /// Asks for a flush round (no effect before the thread started).
    pub(super) fn ring(&self) {
        if !self.rung.swap(true, Ordering::AcqRel)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }

    /// Whether the thread made its last round: a sender must not wait for another.
    pub(super) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Ends the thread after one last round, which answers every sender waiting then;
    /// returns when it has ended. (The store's close, before the seal.)
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let Some(handle) = self.handle.guard().take() else {
            return;
        };
        handle.thread().unpark();
        if handle.join().is_err() {
            log::error!("the group-commit thread panicked");
        }
    }

    /// On the thread: waits until rung, stopped or `period` passed; clears the bell.
    fn wait(&self, period: Duration) {
        if !self.rung.swap(false, Ordering::AcqRel) && !self.stopping() {
            // A ring between the swap and here left the park token: this returns at once.
            std::thread::park_timeout(period);
            // A swap, not a store: the ringer's append happens-before the round that
            // follows.
            self.rung.swap(false, Ordering::AcqRel);
        }
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// Starts the thread for `store` (one per store); [`StoreService::close`] stops it.
fn start(store: &Arc<StoreService>) -> std::io::Result<()> {
    let weak = Arc::downgrade(store);
    let bell = Arc::clone(&store.commit);
    let period = match store.flush_type {
        FlushDiskType::Sync => SYNC_PERIOD,
        FlushDiskType::Async => store.flush_interval,
    };
    let handle = std::thread::Builder::new()
        .name("tern-flush".into())
        .spawn(move || run(weak, bell, period))?;
    assert!(
        store.commit.thread.set(handle.thread().clone()).is_ok(),
        "a store has one group-commit thread"
    );
    *store.commit.handle.guard() = Some(handle);
    Ok(())
}

fn run(store: Weak<StoreService>, bell: Arc<Doorbell>, period: Duration) {
    while !bell.stopping() {
        // Not held while parked: a store dropped without a close ends the thread.
        let Some(me) = store.upgrade() else { break };
        me.flush_round();
        drop(me);
        bell.wait(period);
    }
    // The last round: what was appended before the stop is made durable and its senders
    // answered; a sender after it sees `stopped` and does not wait.
    let me = store.upgrade();
    if let Some(me) = &me {
        me.flush_round();
    }
    bell.stopped.store(true, Ordering::Release);
    if let Some(me) = &me {
        me.flush_done.notify(usize::MAX);
    }
}

impl StoreService {
    /// Waits until the log is durable up to `end` when the policy says senders wait.
    pub async fn await_durable(&self, end: u64) -> Durability {
        if self.flush_type == FlushDiskType::Async {
            return Durability::Durable;
        }
        let deadline = Instant::now() + self.sync_flush_timeout;
        loop {
            let listener = self.flush_done.listen();
            // Checked before the watermark: what a failed flush covered is never called
            // durable, even if a later flush moved the watermark.
            if let Some(why) = self.failure() {
                return Durability::Failed(why);
            }
            if self.flushed.load(Ordering::Acquire) >= end {
                return Durability::Durable;
            }
            if Instant::now() >= deadline {
                return Durability::FlushTimeout;
            }
            self.commit.ring();
            if self.commit.stopped() {
                // Closing: no round will come; what the last one covered is durable.
                return if self.flushed.load(Ordering::Acquire) >= end {
                    Durability::Durable
                } else {
                    Durability::FlushTimeout
                };
            }
            // No timer per sender: the flush service wakes every waiter often enough to
            // see its deadline pass (`group_commit::watchdog_period`).
            listener.await;
        }
    }

    /// [`Self::flush_once`], a panic in it failing the store (else the thread would end
    /// and every SYNC_FLUSH sender wait out its timeout, for ever).
    fn flush_round(&self) {
        let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.flush_once()));
        if round.is_err() {
            self.fail("the group-commit thread panicked during a flush");
        }
    }

    /// One group-commit round: syncs the log up to its end as of now and wakes waiters.
    /// The store lock is held only to read the range and to record the result; appends
    /// go on during the fdatasync. A failed fdatasync fails the store
    /// ([`StoreService::fail`]): never retried.
    fn flush_once(&self) {
        if self.failure().is_none() {
            if self.flushed.load(Ordering::Acquire) < self.written.load(Ordering::Acquire) {
                if let Err(e) = self.sync_round() {
                    self.fail(e);
                }
            } else {
                // Nothing to flush (a quiet moment): the pages SYNC_FLUSH rounds left
                // for a chunk go now, so a quiet store keeps none of its log mapped.
                self.last_flush_bytes.store(0, Ordering::Release);
                if self.unreleased(u64::MAX, 0).is_some() {
                    self.release_behind(&self.lock(), u64::MAX, 0);
                }
            }
        }
        self.flush_done.notify(usize::MAX);
    }

    fn sync_round(&self) -> Result<(), SyncError> {
        // No truncation while this flush runs (see `truncate`): it would make `to`
        // name bytes written after the cut, and the watermark read below stale.
        let _gate = self.sync_gate.read_guard();
        let (from, to, rewinds) = {
            let s = self.lock();
            let (from, to) = s.engine().log().unflushed();
            // Pages reput has passed leave the mapping before the fdatasync writes them
            // back: one TLB shootdown for the range, not one per page. A periodic round
            // (ASYNC_FLUSH) takes whatever reput left; a SYNC_FLUSH round comes per
            // burst of sends, and its pages were written with `pwrite` and mapped only
            // read-only by reput (no shootdown at writeback), so they wait for a chunk:
            // the release is for the resident set there.
            let chunk = match self.flush_type {
                FlushDiskType::Sync => super::mapping::RELEASE_CHUNK,
                FlushDiskType::Async => 0,
            };
            self.release_behind(&s, to, chunk);
            (from, to, s.engine().log().rewinds())
        };
        self.last_flush_bytes.store(to - from, Ordering::Release);
        let started = Instant::now();
        self.sync_log(from, to)?;
        self.flush_latency
            .observe(started.elapsed().as_millis() as u64);
        let mut s = self.lock();
        // The end moved back meanwhile (a replica's reset): the range synced may not
        // cover what is there now.
        if s.engine().log().rewinds() == rewinds {
            s.engine_mut().log_mut().mark_flushed(to);
        }
        let flushed = s.engine().log().flushed_offset();
        drop(s);
        // Under the gate: a truncation cannot move the watermark back in between.
        self.flushed.fetch_max(flushed, Ordering::AcqRel);
        Ok(())
    }

    /// fdatasyncs the log segments holding `[from, to)`, without the lock.
    fn sync_log(&self, from: u64, to: u64) -> Result<(), SyncError> {
        let size = self.geometry.log_segment_size;
        for (base, file) in self.log_files.files_from(from - from % size) {
            if base >= to {
                break;
            }
            sync::fdatasync(&file).map_err(|error| SyncError::Segment {
                path: self.segment_path(base),
                error,
            })?;
        }
        Ok(())
    }

    fn segment_path(&self, base: u64) -> std::path::PathBuf {
        let name = tern_engine_fs::directory::segment_name(
            base,
            tern_engine_fs::directory::OFFSET_NAME_DIGITS,
        )
        .unwrap_or_default();
        let dir = tern_engine_fs::StoreLayout::new(&self.root).commitlog_dir();
        dir.join(name)
    }

    /// The flush service until `shutdown`: starts the group-commit thread, and for
    /// SYNC_FLUSH wakes the waiting senders every [`watchdog_period`] so each can check
    /// its `syncFlushTimeout` (an fdatasync that hangs cannot wake them; a timer per
    /// sender would cost a reactor interruption per message). The thread outlives this
    /// task: sends still draining after `shutdown` are made durable and answered until
    /// [`StoreService::close`] stops it.
    pub async fn run_flush(self: Arc<Self>, shutdown: runtime::Shutdown) {
        if let Err(e) = start(&self) {
            self.fail(format!("cannot start the group-commit thread: {e}"));
            return;
        }
        if self.flush_type == FlushDiskType::Sync {
            let mut tick = runtime::Ticker::new(watchdog_period(self.sync_flush_timeout));
            while !shutdown.is_triggered() {
                runtime::race(tick.tick(), shutdown.wait()).await;
                self.flush_done.notify(usize::MAX);
            }
        }
    }
}

/// How often waiting senders re-check their deadline: a quarter of the timeout, within
/// 1 ms..1 s, so a sender is answered at most that late.
fn watchdog_period(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1))
}
