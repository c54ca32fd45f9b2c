//! Timer messages (RocketMQ 5): a message due at any ms, waiting in `rmq_sys_wheel_timer`
//! and filed in the engine's wheel until then. See `docs/design/timers.md`.
//!
//! - On the way in, [`BrokerCtx::put`] asks [`message::inbound`]: a message with
//!   `TIMER_DELAY_SEC` / `TIMER_DELAY_MS` / `TIMER_DELIVER_MS` due later is stored in the
//!   timer topic with `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID`.
//! - [`run`], one task, runs the engine's [`TimerDriver`]: it files each timer-topic
//!   entry in the wheel and, once a slot's time has passed, stores each of its messages
//!   again in its real topic. The driver holds the rules (durable source, log before
//!   wheel, durable progress, never early; see `tern_engine::timer::driver`); this task
//!   gives it the store to read (`StoreSource`) and to put copies into
//!   (`StoreSink`, which builds them as [`message::TimerRecord`] says), logs what it
//!   reports, and sleeps until the time it names. Each round runs on the blocking pool:
//!   filing writes mapped pages and syncs the timer log.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use event_listener::Event;
use tern_engine::consumequeue::Entry;
use tern_engine::record::MessageIn;
use tern_engine::timer::TIMER_TOPIC;
use tern_engine::timer::driver::{self, Checkpointed, Put, QueueEntry, Refusal, Unreadable};
use tern_engine::timer::{TimerDriver, TimerSink, TimerSource};
use tern_engine_fs::timer_files::{
    TimerOpenError, clear_timer, mark_timer_reset, open_timer, timer_reset_marked,
};
use tern_engine_fs::{FileDirectory, MappedFile, StoreError, StoreLayout};
use tern_shell::runtime::{self, now_ms};

use crate::BrokerCtx;
use crate::store::{PutError, StoreService};

pub mod message;
pub mod progress;
pub mod recall;
pub mod settings;

pub use settings::TimerSettings;

/// Longest sleep between rounds (wall-clock jumps, missed wakes).
const MAX_SLEEP: Duration = Duration::from_millis(driver::MAX_SLEEP_MS as u64);

/// The engine's driver over the broker's timer files (`tern_engine_fs::timer_files::FsTimer`).
type FsDriver = TimerDriver<MappedFile, FileDirectory, MappedFile>;

/// Why the timer could not be (re)made: the broker does not start, or (a rebuild after a
/// cut) the timer stops.
#[derive(Debug)]
pub enum TimerSetupError {
    /// Deleting the timer's files for a rebuild failed.
    Clear(StoreError),
    /// Opening the timer failed (a wheel of another geometry refuses the start).
    Open(TimerOpenError),
    /// Opening the timer again, empty, after a cut failed.
    Reopen(TimerOpenError),
}

impl std::fmt::Display for TimerSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimerSetupError::Clear(e) => write!(f, "clearing the timer: {e}"),
            TimerSetupError::Open(e) => write!(f, "opening the timer: {e}"),
            TimerSetupError::Reopen(e) => write!(f, "reopening the timer: {e}"),
        }
    }
}

impl std::error::Error for TimerSetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TimerSetupError::Clear(e) => Some(e),
            TimerSetupError::Open(e) | TimerSetupError::Reopen(e) => Some(e),
        }
    }
}

/// The timer, shared by the task, the put path, recall and admin requests.
#[derive(Debug)]
pub struct TimerService {
    settings: TimerSettings,
    /// The store's root, where the timer's files are.
    root: std::path::PathBuf,
    /// The wheel and the task's place in it; the task holds it while it runs a round.
    state: Mutex<Option<State>>,
    /// Wakes the task: a timer-topic entry was dispatched.
    wake: Event,
    /// Why the timer stopped (a failed sync), if it did.
    failed: OnceLock<String>,
    stats: Stats,
    /// Slave side: the newest checkpoint of the master whose copies this log holds.
    master_progress: Mutex<Option<Checkpointed>>,
}

/// Counters and gauges for GET_BROKER_RUNTIME_INFO and the logs, and the last checkpoint
/// for GET_TIMER_CHECK_POINT, copied from the driver after each round.
#[derive(Debug, Default)]
struct Stats {
    read_time_ms: AtomicI64,
    queue_offset: AtomicU64,
    filed: AtomicU64,
    delivered: AtomicU64,
    rolled: AtomicU64,
    recalled: AtomicU64,
    dropped: AtomicU64,
    /// The last checkpoint the task wrote (GET_TIMER_CHECK_POINT answers it).
    checkpointed: Mutex<Option<Checkpointed>>,
}

/// The task's state between rounds.
#[derive(Debug)]
struct State {
    driver: FsDriver,
    next_checkpoint: Instant,
}

impl TimerService {
    /// Opens the timer of the store at `root`, recovered against the store's log end (a
    /// slave and a broker with `timerWheelEnable=false` run none).
    pub fn open(
        settings: TimerSettings,
        root: &std::path::Path,
        store: &StoreService,
        run: bool,
    ) -> Result<Self, TimerSetupError> {
        let mut unavailable = None;
        let opened = if run && settings.enabled && !settings.pass_through {
            let started = Instant::now();
            let layout = StoreLayout::new(root);
            if timer_reset_marked(&layout) {
                // The log was cut under it (a replica rejoining a new master): its units
                // may name records the cut took. Rebuilt from the timer topic.
                log::warn!("timer: marked for a rebuild after a cut of the log: starting it empty");
                clear_timer(&layout).map_err(TimerSetupError::Clear)?;
            }
            match open_timer(&layout, settings.engine(), store.log_end(), now_ms()) {
                Ok(t) => Some((t, started)),
                // Another geometry is the operator's to settle: the wheel would file every
                // time under the wrong slot. RocketMQ refuses to start too.
                Err(
                    e @ TimerOpenError::Engine(tern_engine::Error::Corrupt(
                        tern_engine::error::Corruption::TimerWheelSize { .. },
                    )),
                ) => return Err(TimerSetupError::Open(e)),
                // A disk too full for the wheel, an unreadable file: the broker serves
                // without a timer rather than not at all; timer messages wait in their
                // topic until a restart finds the timer (nothing is lost).
                Err(e) => {
                    let why = TimerSetupError::Open(e).to_string();
                    log::error!(
                        "{why}: serving without a timer; timer messages wait in {TIMER_TOPIC} \
                         until the broker is restarted"
                    );
                    unavailable = Some(why);
                    None
                }
            }
        } else {
            None
        };
        let state = if let Some(((timer, rec), started)) = opened {
            let (read_time, _) = timer.resume_point();
            log::info!(
                "timer opened in {:?}: {} units in its log (cut at {:?}), {} relinked, reading \
                 from slot {read_time}{}",
                started.elapsed(),
                rec.log.units,
                rec.log.cut_at,
                rec.replayed,
                if rec.fresh { ", new" } else { "" },
            );
            if rec.skipped_slots > 0 {
                log::warn!(
                    "timer: the broker was down longer than the wheel's span; {} slots were \
                     skipped and what they held is not delivered",
                    rec.skipped_slots
                );
            }
            Some(State {
                driver: TimerDriver::new(timer),
                next_checkpoint: Instant::now() + settings.flush_interval,
            })
        } else {
            None
        };
        let svc = TimerService {
            settings,
            root: root.to_path_buf(),
            state: Mutex::new(state),
            wake: Event::new(),
            failed: OnceLock::new(),
            stats: Stats::default(),
            master_progress: Mutex::new(None),
        };
        if let Some(why) = unavailable {
            let _ = svc.failed.set(why);
        }
        if let Some(s) = svc.lock().as_ref() {
            svc.stats.show(&s.driver);
        }
        Ok(svc)
    }

    /// The settings.
    pub fn settings(&self) -> &TimerSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<State>> {
        self.state.guard()
    }

    /// The last checkpoint written here, if any.
    pub fn checkpointed(&self) -> Option<Checkpointed> {
        *self.stats.checkpointed.guard()
    }

    /// Slave side: notes the master's checkpoint `c`, kept only when this replica's log
    /// (ending at `log_end`) holds every copy it counts and it is newer than the one kept.
    pub fn note_master_progress(&self, c: Checkpointed, log_end: u64) {
        if c.log_end > log_end {
            return;
        }
        let mut kept = self.master_progress.guard();
        if kept.is_none_or(|k| (k.read_time, k.queue_offset) <= (c.read_time, c.queue_offset)) {
            *kept = Some(c);
        }
    }

    /// Forgets the master checkpoint kept: the log under it is being cut, and the copies
    /// it counts may go with the cut.
    pub fn forget_master_progress(&self) {
        *self.master_progress.guard() = None;
    }

    /// Reopens a timer marked for a rebuild empty (its files deleted): it files the timer
    /// topic again from its start, under the old master's checkpoint when it adopts one.
    fn rebuild(&self, state: State, store: &StoreService) -> Result<State, TimerSetupError> {
        drop(state);
        let layout = StoreLayout::new(&self.root);
        clear_timer(&layout).map_err(TimerSetupError::Clear)?;
        let (timer, _) = open_timer(&layout, self.settings.engine(), store.log_end(), now_ms())
            .map_err(TimerSetupError::Reopen)?;
        log::warn!("timer: rebuilt empty after a cut of the log; filing the timer topic again");
        Ok(State {
            driver: TimerDriver::new(timer),
            next_checkpoint: Instant::now() + self.settings.flush_interval,
        })
    }

    /// Reput dispatched an entry to `topic`: wakes the task for the timer topic.
    pub fn dispatched(&self, topic: &str) {
        if topic == TIMER_TOPIC {
            self.wake.notify(1);
        }
    }

    /// Checkpoints what was done, after the store closed (every copy is durable now).
    pub fn close(&self, store: &StoreService) {
        if let Some(s) = self.lock().as_mut() {
            if self.failed.get().is_none() {
                // Sealed: the whole log is durable.
                if let Err(e) = s.driver.close(store.log_end()) {
                    log::error!("timer: the last checkpoint failed: {e}");
                }
            }
        }
    }

    /// RocketMQ's `timer*` entries of GET_BROKER_RUNTIME_INFO, and Tern's counters.
    pub fn runtime_stats(
        &self,
        store: &StoreService,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        let s = &self.stats;
        let read = s.read_time_ms.load(Ordering::Relaxed);
        // 0 until a timer was opened.
        let behind = if read != 0 {
            (now_ms() - read - self.settings.precision_ms).max(0) / 1000
        } else {
            0
        };
        let (_, max) = store.queue_bounds(TIMER_TOPIC, 0);
        let offset_behind = max.saturating_sub(s.queue_offset.load(Ordering::Relaxed));
        out.insert("timerReadBehind".into(), behind.to_string());
        out.insert("timerOffsetBehind".into(), offset_behind.to_string());
        for (k, v) in [
            ("timerFiled", &s.filed),
            ("timerDelivered", &s.delivered),
            ("timerRolled", &s.rolled),
            ("timerRecalled", &s.recalled),
            ("timerDropped", &s.dropped),
        ] {
            out.insert(k.into(), v.load(Ordering::Relaxed).to_string());
        }
        if let Some(why) = self.failed.get() {
            out.insert("timerFailed".into(), why.clone());
        }
    }
}

impl Stats {
    fn show(&self, d: &FsDriver) {
        if let Some(c) = d.checkpointed() {
            *self.checkpointed.guard() = Some(c);
        }
        self.read_time_ms.store(d.read_time(), Ordering::Relaxed);
        self.queue_offset
            .store(d.timer().queue_offset(), Ordering::Relaxed);
        let n = d.stats();
        for (c, v) in [
            (&self.filed, n.filed),
            (&self.delivered, n.delivered),
            (&self.rolled, n.rolled),
            (&self.recalled, n.recalled),
            (&self.dropped, n.dropped),
        ] {
            c.store(v, Ordering::Relaxed);
        }
    }
}

/// Marks the timer of the store at `root` to be rebuilt before it runs again: called
/// before the log is cut under it (its units and filing place may name records the cut
/// takes). Blocking: a file and two folder syncs.
pub fn mark_for_rebuild(root: &std::path::Path) -> Result<(), StoreError> {
    mark_timer_reset(&StoreLayout::new(root))
}

/// What a round asks for next.
enum Next {
    /// Run again at this wall-clock ms.
    At(i64),
    /// The timer failed: stop.
    Failed(String),
}

/// The timer task: files and delivers until shutdown (see the module docs).
pub async fn run(ctx: Arc<BrokerCtx>) {
    let Some(mut state) = ctx.timer.lock().take() else {
        return;
    };
    let mut was_slave = false;
    while !ctx.shutdown.is_triggered() {
        // Listen before the round: an entry dispatched during it is not missed.
        let woken = ctx.timer.wake.listen();
        if !ctx.role.is_slave() && std::mem::take(&mut was_slave) {
            if timer_reset_marked(&StoreLayout::new(&ctx.timer.root)) {
                let c = ctx.clone();
                match runtime::spawn_blocking(move || c.timer.rebuild(state, &c.store)).await {
                    Ok(s) => state = s,
                    Err(why) => {
                        log::error!(
                            "{why}: the timer is stopped; timer messages wait in \
                             {TIMER_TOPIC} until the broker is restarted (nothing is lost)"
                        );
                        let _ = ctx.timer.failed.set(why.to_string());
                        return;
                    }
                }
            }
            // Promoted: delivery goes on from where the old master's checkpoint says.
            if let Some(c) = ctx.timer.master_progress.guard().take() {
                log::info!(
                    "timer: taking over from the old master's checkpoint: slots before {} \
                     delivered, {} timer-queue entries filed there",
                    c.read_time,
                    c.queue_offset
                );
                state.driver.adopt(c);
            }
        }
        if ctx.role.is_slave() {
            was_slave = true;
            // Controller mode: a replica runs its timer only while it is master (a
            // slave's log is its master's; the timer resumes from its own checkpoint
            // when this replica is promoted).
            let _ = runtime::race(
                async {
                    let _ = runtime::timeout(MAX_SLEEP.min(Duration::from_secs(1)), woken).await;
                },
                ctx.shutdown.wait(),
            )
            .await;
            continue;
        }
        let c = ctx.clone();
        let (back, next) = runtime::spawn_blocking(move || {
            let next = round(&c, &mut state);
            (state, next)
        })
        .await;
        state = back;
        let at = match next {
            Next::At(at) => at,
            Next::Failed(why) => {
                log::error!(
                    "{why}: the timer is stopped; timer messages wait in {TIMER_TOPIC} until \
                     the broker is restarted (nothing is lost)"
                );
                let _ = ctx.timer.failed.set(why);
                break;
            }
        };
        let wait = at.saturating_sub(now_ms()).max(0) as u64;
        if wait == 0 {
            runtime::yield_now().await;
            continue;
        }
        let wait = Duration::from_millis(wait).min(MAX_SLEEP);
        let _ = runtime::race(
            async {
                let _ = runtime::timeout(wait, woken).await;
            },
            ctx.shutdown.wait(),
        )
        .await;
    }
    *ctx.timer.lock() = Some(state);
}

/// One round of the driver: file what arrived, deliver what is due, checkpoint what is
/// durable (a snapshot every `timerFlushIntervalMs`).
fn round(ctx: &BrokerCtx, st: &mut State) -> Next {
    let due = Instant::now() >= st.next_checkpoint;
    let mut sink = StoreSink { ctx };
    let done = st
        .driver
        .round(&StoreSource(&ctx.store), &mut sink, now_ms(), due);
    ctx.timer.stats.show(&st.driver);
    match done {
        Ok(r) => {
            if r.checkpointed {
                st.next_checkpoint = Instant::now() + ctx.timer.settings.flush_interval;
            }
            Next::At(r.next_ms)
        }
        Err(f) => Next::Failed(f.to_string()),
    }
}

/// The store as the driver reads it: the timer topic's queue 0 and its records.
struct StoreSource<'a>(&'a StoreService);

impl TimerSource for StoreSource<'_> {
    fn queue_bounds(&self) -> (u64, u64) {
        self.0.queue_bounds(TIMER_TOPIC, 0)
    }

    fn queue_entry(&self, q: u64) -> Result<Option<QueueEntry>, Unreadable> {
        match self.0.queue_entry(TIMER_TOPIC, 0, q) {
            Ok(e) => Ok(e.map(|e| QueueEntry {
                offset: e.physical_offset,
                size: e.size,
            })),
            Err(e) => {
                log::warn!("timer: {e}; retrying");
                Err(Unreadable)
            }
        }
    }

    fn with_record(&self, offset: u64, size: u32, f: &mut dyn FnMut(&[u8])) -> bool {
        let entry = Entry {
            physical_offset: offset,
            size,
            tag_code: 0,
        };
        match self.0.record_of(entry) {
            Some(bytes) => {
                f(&bytes);
                true
            }
            None => false,
        }
    }

    fn durable_end(&self) -> u64 {
        self.0.durable_end()
    }

    fn log_end(&self) -> u64 {
        self.0.log_end()
    }
}

/// Stores the copies the driver asks for, built as RocketMQ's `convert` builds them, and
/// logs what it reports.
struct StoreSink<'a> {
    ctx: &'a BrokerCtx,
}

impl TimerSink for StoreSink<'_> {
    fn store(&mut self, record: &[u8], put: Put) -> Result<u64, Refusal> {
        let Some(rec) = message::TimerRecord::parse(record) else {
            // The driver parsed it already; a record it took for a timer message is one.
            log::error!("timer: a record handed for delivery is not a timer message; dropped");
            return Err(Refusal::Drop);
        };
        let at = rec.view.physical_offset();
        let stored = match put {
            Put::Roll => {
                let props = rec.rolled_properties();
                self.ctx
                    .store
                    .put(&MessageIn::restored(&rec.view, TIMER_TOPIC, 0, &props))
            }
            Put::Deliver {
                enqueued_ms,
                now_ms,
            } => match rec.delivered(enqueued_ms, now_ms) {
                Ok(copy) => self.ctx.store.put(&copy.message(&rec.view)),
                Err(why) => Err(PutError::Illegal(why.to_string())),
            },
        };
        match stored {
            Ok(s) => Ok(s.at.offset + u64::from(s.at.size)),
            Err(PutError::Illegal(why) | PutError::Refused(_, why)) => {
                log::error!("timer: the message at {at} cannot be delivered: {why}");
                Err(Refusal::Drop)
            }
            Err(e) => {
                log::warn!("timer: delivering the message at {at} failed ({e}); retrying");
                Err(Refusal::Later)
            }
        }
    }

    fn note(&mut self, event: driver::Event) {
        match event {
            driver::Event::EntriesDeleted { from, to } => log::warn!(
                "timer: entries {from}..{to} of {TIMER_TOPIC} were deleted before they were filed"
            ),
            driver::Event::RecordGone { offset } => {
                log::warn!("timer: the record at {offset} is gone (retention)")
            }
            driver::Event::NotTimer { offset } => {
                log::error!("timer: the record at {offset} is not a timer message; dropped")
            }
            driver::Event::RecallsCut { slot_ms } => log::warn!(
                "timer: slot {slot_ms} holds over {} units or {} recall markers; recalls past \
                 them are not applied",
                driver::RECALL_SCAN_LIMIT,
                driver::MAX_RECALLS_PER_SLOT
            ),
        }
    }
}
