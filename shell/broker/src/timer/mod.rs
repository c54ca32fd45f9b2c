//! Timer messages (RocketMQ 5): a message due at any ms, waiting in `rmq_sys_wheel_timer`
//! and filed in the engine's wheel until then. See `docs/design/timers.md`.
//!
//! - On the way in, [`BrokerCtx::put`] asks [`message::inbound`]: a message with
//!   `TIMER_DELAY_SEC` / `TIMER_DELAY_MS` / `TIMER_DELIVER_MS` due later is stored in the
//!   timer topic with `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID`.
//! - [`run`], one task, files each timer-topic entry in the wheel ([`round`]'s enqueue)
//!   and, once a slot's time has passed, stores each of its messages again in its real
//!   topic (dequeue). Both happen in one task so "this slot is being read" cannot race a
//!   unit filed into it. Each round runs on the blocking pool: filing writes mapped pages
//!   and syncs the timer log.
//!
//! Why nothing is lost and nothing is early:
//! - **Durable source.** Only entries whose record is durable are filed, so a unit never
//!   points at a commit-log tail a power cut can take.
//! - **Log before wheel.** Units are synced before the wheel links them (the engine's
//!   `Timer::flush_log`).
//! - **Durable progress.** The checkpoint records the slot being read, the place in it,
//!   and the timer-queue entries handled, as they were when the store's log ended at
//!   some offset; it is written only once the log is durable past that offset, so the
//!   copies it counts as delivered are on disk. A crash repeats deliveries since the
//!   last checkpoint, never skips one. An entry due on arrival is delivered at once and
//!   counted as handled only once that copy is durable.
//! - **Never early.** Slot `T` holds due times in `(T, T + precision]` and is read once
//!   the clock passes `T + precision`; at most one precision late, as RocketMQ.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use event_listener::Event;
use tern_engine::consumequeue::Entry;
use tern_engine::record::MessageIn;
use tern_engine::timer::{Filing, SlotUnit, TIMER_TOPIC};
use tern_engine_fs::StoreLayout;
use tern_engine_fs::timer_files::{FsTimer, open_timer};
use tern_shell::runtime::{self, now_ms};

use crate::BrokerCtx;
use crate::store::{PutError, StoreService};

pub mod message;
pub mod recall;
pub mod settings;

pub use settings::TimerSettings;

/// Most timer-queue entries filed per round (one log sync covers them).
const ENQUEUE_BATCH: usize = tern_engine::timer::state::MAX_STAGED;
/// Units read per walk step.
const WALK_CHUNK: usize = 256;
/// Most units delivered per round, so shutdown and filing get their turn.
const DELIVER_BUDGET: usize = 2_048;
/// Most empty slots skipped per round while catching up after a stop.
const EMPTY_SLOT_BUDGET: usize = 10_000;
/// Most units one slot's recall scan reads (a slot larger than this has its later
/// recall markers ignored, logged).
const RECALL_SCAN_LIMIT: usize = 1 << 20;
/// How soon to look again for entries whose records are not durable yet.
const DURABLE_POLL: Duration = Duration::from_millis(50);
/// Longest sleep between rounds (wall-clock jumps, missed wakes).
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// Pause after a delivery the store refused for now (disk full, store failed).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The timer, shared by the task, the put path, recall and admin requests.
#[derive(Debug)]
pub struct TimerService {
    settings: TimerSettings,
    /// The wheel and the task's place in it; the task holds it while it runs a round.
    state: Mutex<Option<State>>,
    /// Wakes the task: a timer-topic entry was dispatched.
    wake: Event,
    /// Why the timer stopped (a failed sync), if it did.
    failed: OnceLock<String>,
    stats: Stats,
}

/// Counters and gauges for GET_BROKER_RUNTIME_INFO and the logs.
#[derive(Debug, Default)]
struct Stats {
    read_time_ms: AtomicI64,
    queue_offset: AtomicU64,
    filed: AtomicU64,
    delivered: AtomicU64,
    rolled: AtomicU64,
    recalled: AtomicU64,
    dropped: AtomicU64,
}

/// The task's state between rounds.
#[derive(Debug)]
struct State {
    timer: FsTimer,
    /// The slot being read (or next to read).
    read_time: i64,
    /// The next unit of it to deliver; `None` from its newest.
    resume: Option<u64>,
    /// The slot's walk has begun (its newest unit was taken): entries for it from now on
    /// are delivered directly rather than filed behind the walk.
    reading: bool,
    /// Keys the slot's recall markers name; `None` until they are read (again after a
    /// restart, which may resume a walk halfway).
    recalled: Option<HashSet<String>>,
    /// The next timer-queue entry to look at.
    next_entry: u64,
    /// Entries handled without filing, not yet counted in the engine (their copies are
    /// not durable yet): the last one, and the log end after its copy.
    passed: Option<(u64, u64)>,
    /// Progress to checkpoint once the log is durable past the offset beside it.
    pending: Option<(Progress, u64)>,
    next_checkpoint: Instant,
}

/// Delivery and filing progress, as a checkpoint records it.
#[derive(Clone, Copy, Debug)]
struct Progress {
    read_time: i64,
    resume: Option<u64>,
    queue_offset: u64,
}

impl TimerService {
    /// Opens the timer of the store at `root`, recovered against the store's log end (a
    /// slave and a broker with `timerWheelEnable=false` run none).
    pub fn open(
        settings: TimerSettings,
        root: &std::path::Path,
        store: &StoreService,
        run: bool,
    ) -> Result<Self, String> {
        let state = if run && settings.enabled {
            let now = now_ms();
            let started = Instant::now();
            let (timer, rec) = open_timer(
                &StoreLayout::new(root),
                settings.engine(),
                store.log_end(),
                now,
            )
            .map_err(|e| format!("opening the timer: {e}"))?;
            let (read_time, resume) = timer.resume_point();
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
            let next_entry = timer.queue_offset();
            Some(State {
                timer,
                read_time,
                resume,
                reading: resume.is_some(),
                recalled: None,
                next_entry,
                passed: None,
                pending: None,
                next_checkpoint: Instant::now() + settings.flush_interval,
            })
        } else {
            None
        };
        let svc = TimerService {
            settings,
            state: Mutex::new(state),
            wake: Event::new(),
            failed: OnceLock::new(),
            stats: Stats::default(),
        };
        if let Some(s) = svc.lock().as_ref() {
            svc.stats.read_time_ms.store(s.read_time, Ordering::Relaxed);
            svc.stats
                .queue_offset
                .store(s.timer.queue_offset(), Ordering::Relaxed);
        }
        Ok(svc)
    }

    /// The settings.
    pub fn settings(&self) -> &TimerSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<State>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reput dispatched an entry to `topic`: wakes the task for the timer topic.
    pub fn dispatched(&self, topic: &str) {
        if topic == TIMER_TOPIC {
            self.wake.notify(1);
        }
    }

    /// Checkpoints what was done, after the store closed (every copy is durable now).
    pub fn close(&self) {
        if let Some(s) = self.lock().as_mut() {
            if self.failed.get().is_none() {
                let q = s.timer.queue_offset();
                if let Err(e) = s.timer.checkpoint(s.read_time, s.resume, q) {
                    log::error!("timer: the last checkpoint failed: {e:?}");
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
    while !ctx.shutdown.is_triggered() {
        // Listen before the round: an entry dispatched during it is not missed.
        let woken = ctx.timer.wake.listen();
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

/// One round: file what arrived, deliver what is due, checkpoint what is durable.
fn round(ctx: &BrokerCtx, st: &mut State) -> Next {
    let now = now_ms();
    let mut next = now + MAX_SLEEP.as_millis() as i64;
    match enqueue(ctx, st, now) {
        Ok(Backlog::None) => {}
        Ok(Backlog::More) => next = now,
        Ok(Backlog::NotDurable) => next = next.min(now + DURABLE_POLL.as_millis() as i64),
        Err(why) => return Next::Failed(why),
    }
    match deliver(ctx, st, now) {
        Ok(at) => next = next.min(at),
        Err(why) => return Next::Failed(why),
    }
    if let Err(why) = checkpoint(ctx, st) {
        return Next::Failed(why);
    }
    let stats = &ctx.timer.stats;
    stats.read_time_ms.store(st.read_time, Ordering::Relaxed);
    stats
        .queue_offset
        .store(st.timer.queue_offset(), Ordering::Relaxed);
    Next::At(next)
}

/// What is left to file after a round's enqueue.
enum Backlog {
    None,
    More,
    /// Entries whose records are not durable yet.
    NotDurable,
}

/// Files up to [`ENQUEUE_BATCH`] timer-queue entries from where filing stands.
fn enqueue(ctx: &BrokerCtx, st: &mut State, now: i64) -> Result<Backlog, String> {
    settle_passed(ctx, st);
    let (min, max) = ctx.store.queue_bounds(TIMER_TOPIC, 0);
    if st.next_entry < min {
        log::warn!(
            "timer: entries {}..{min} of {TIMER_TOPIC} were deleted before they were filed",
            st.next_entry
        );
        st.next_entry = min;
    }
    let durable = ctx.store.durable_end();
    let precision = ctx.timer.settings.precision_ms;
    let mut filed = 0;
    let mut backlog = Backlog::None;
    while st.next_entry < max {
        if filed == ENQUEUE_BATCH {
            backlog = Backlog::More;
            break;
        }
        let q = st.next_entry;
        let entry = match ctx.store.queue_entry(TIMER_TOPIC, 0, q) {
            Ok(Some(e)) => e,
            Ok(None) => {
                pass(st, q, 0);
                continue;
            }
            Err(e) => {
                log::warn!("timer: {e}; retrying");
                backlog = Backlog::NotDurable;
                break;
            }
        };
        if entry.physical_offset + u64::from(entry.size) > durable {
            backlog = Backlog::NotDurable;
            break;
        }
        let Some(bytes) = ctx.store.record_of(entry) else {
            log::warn!("timer: the record of {TIMER_TOPIC} entry {q} is gone (retention)");
            ctx.timer.stats.dropped.fetch_add(1, Ordering::Relaxed);
            pass(st, q, 0);
            continue;
        };
        let Some(rec) = message::TimerRecord::parse(&bytes) else {
            log::error!("timer: {TIMER_TOPIC} entry {q} is not a timer message; dropped");
            ctx.timer.stats.dropped.fetch_add(1, Ordering::Relaxed);
            pass(st, q, 0);
            continue;
        };
        // A slot already read, or being read (its walk took its newest unit): too late
        // to file into it, so it is due now.
        let behind_walk = rec.out_ms < st.read_time || (rec.out_ms == st.read_time && st.reading);
        if behind_walk {
            if rec.recalls.is_some() {
                // RocketMQ refuses a marker that comes too late: the message went.
                ctx.timer.stats.dropped.fetch_add(1, Ordering::Relaxed);
                pass(st, q, 0);
                continue;
            }
            match put_copy(ctx, &rec, None, i64::MAX, now) {
                Ok(end) => pass(st, q, end),
                Err(Refusal::Drop(why)) => {
                    log::error!("timer: {TIMER_TOPIC} entry {q} cannot be delivered: {why}");
                    ctx.timer.stats.dropped.fetch_add(1, Ordering::Relaxed);
                    pass(st, q, 0);
                }
                Err(Refusal::Later(why)) => {
                    log::warn!(
                        "timer: delivering {TIMER_TOPIC} entry {q} failed ({why}); retrying"
                    );
                    backlog = Backlog::NotDurable;
                    break;
                }
            }
            continue;
        }
        // Filing after a direct delivery waits for that copy: recovery resumes after the
        // newest filed unit, so it must not pass over a copy a power cut could take.
        if !settle_passed(ctx, st) {
            backlog = Backlog::NotDurable;
            break;
        }
        let filing = Filing {
            slot_ms: rec.out_ms.div_euclid(precision) * precision,
            phy_offset: entry.physical_offset,
            phy_size: entry.size,
            queue_offset: q,
            topic_hash: rec.topic_hash(),
            recall: rec.recalls.is_some(),
        };
        st.timer
            .file(filing, now)
            .map_err(|e| format!("filing a timer: {e:?}"))?;
        st.next_entry = q + 1;
        filed += 1;
    }
    if filed > 0 {
        // One sync for the batch, then the wheel links it (log before wheel).
        st.timer
            .flush_log()
            .map_err(|e| format!("syncing the timer log: {e:?}"))?;
        ctx.timer
            .stats
            .filed
            .fetch_add(filed as u64, Ordering::Relaxed);
    }
    settle_passed(ctx, st);
    Ok(backlog)
}

/// Entry `q` was handled without filing; `end` is the log end its copy needs durable
/// (0: no copy).
fn pass(st: &mut State, q: u64, end: u64) {
    st.next_entry = q + 1;
    let end = st.passed.map_or(end, |(_, e)| e.max(end));
    st.passed = Some((q, end));
}

/// Counts the passed entries in the engine once their copies are durable; whether none
/// is left waiting.
fn settle_passed(ctx: &BrokerCtx, st: &mut State) -> bool {
    match st.passed {
        None => true,
        Some((q, end)) if ctx.store.durable_end() >= end => {
            st.timer.passed(q);
            st.passed = None;
            true
        }
        Some(_) => false,
    }
}

/// Why a copy was not stored.
enum Refusal {
    /// Never storable: drop it (logged).
    Drop(String),
    /// Not now (disk full, store failed, shutting down): try again later.
    Later(String),
}

/// Stores the copy of `rec` due now (or, for a `roll` unit, its next leg in the timer
/// topic); returns the log end past it.
fn put_copy(
    ctx: &BrokerCtx,
    rec: &message::TimerRecord<'_>,
    unit: Option<&SlotUnit>,
    enqueued_ms: i64,
    now: i64,
) -> Result<u64, Refusal> {
    let stored = if unit.is_some_and(|u| u.roll) {
        let props = rec.rolled_properties();
        ctx.store
            .put(&MessageIn::restored(&rec.view, TIMER_TOPIC, 0, &props))
    } else {
        let copy = rec.delivered(enqueued_ms, now).map_err(Refusal::Drop)?;
        ctx.store.put(&copy.message(&rec.view))
    };
    match stored {
        Ok(s) => Ok(s.at.offset + u64::from(s.at.size)),
        Err(PutError::Illegal(why) | PutError::Refused(_, why)) => Err(Refusal::Drop(why)),
        Err(e) => Err(Refusal::Later(format!("{e:?}"))),
    }
}

/// Delivers the slots whose time has passed, up to the round's budgets; returns when to
/// look again.
fn deliver(ctx: &BrokerCtx, st: &mut State, now: i64) -> Result<i64, String> {
    let precision = ctx.timer.settings.precision_ms;
    let mut budget = DELIVER_BUDGET;
    let mut empty = 0;
    let mut units = [SlotUnit::default(); WALK_CHUNK];
    while st.read_time + precision <= now {
        if budget == 0 || empty == EMPTY_SLOT_BUDGET {
            return Ok(now);
        }
        if st.recalled.is_none() {
            // From here on the slot's newest unit is taken: nothing more is filed into it.
            st.reading = true;
            st.recalled = Some(recall_keys(ctx, st)?);
        }
        let (n, next) = st
            .timer
            .slot_units(st.read_time, st.resume, &mut units)
            .map_err(|e| format!("reading timer slot {}: {e:?}", st.read_time))?;
        if n == 0 && st.resume.is_none() {
            empty += 1;
        }
        for u in &units[..n] {
            budget = budget.saturating_sub(1);
            if u.recall {
                continue;
            }
            match deliver_unit(ctx, st, u, now) {
                Ok(()) => {}
                Err(why) => {
                    // Resume at this unit after the pause.
                    st.resume = Some(u.pos);
                    log::warn!("timer: delivery failed ({why}); retrying");
                    return Ok(now + RETRY_PAUSE.as_millis() as i64);
                }
            }
        }
        match next {
            Some(pos) => st.resume = Some(pos),
            None => {
                st.read_time += precision;
                st.resume = None;
                st.reading = false;
                st.recalled = None;
            }
        }
    }
    Ok(st.read_time + precision)
}

/// Delivers one unit's message, unless it was recalled or its record is gone.
fn deliver_unit(ctx: &BrokerCtx, st: &mut State, u: &SlotUnit, now: i64) -> Result<(), String> {
    let stats = &ctx.timer.stats;
    let entry = Entry {
        physical_offset: u.phy_offset,
        size: u.phy_size,
        tag_code: 0,
    };
    let Some(bytes) = ctx.store.record_of(entry) else {
        log::warn!(
            "timer: the record at {} of slot {} is gone (retention)",
            u.phy_offset,
            st.read_time
        );
        stats.dropped.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    };
    let Some(rec) = message::TimerRecord::parse(&bytes) else {
        log::error!(
            "timer: the record at {} is not a timer message; dropped",
            u.phy_offset
        );
        stats.dropped.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    };
    let recalled = st.recalled.as_ref().is_some_and(|keys| {
        !keys.is_empty() && rec.recall_key().is_some_and(|k| keys.contains(&k))
    });
    if recalled {
        stats.recalled.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    match put_copy(ctx, &rec, Some(u), u.enqueued_ms, now) {
        Ok(_) => {
            let counter = if u.roll {
                &stats.rolled
            } else {
                &stats.delivered
            };
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(Refusal::Drop(why)) => {
            log::error!(
                "timer: the message at {} cannot be delivered: {why}",
                u.phy_offset
            );
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        Err(Refusal::Later(why)) => Err(why),
    }
}

/// The keys the recall markers of the slot being read name (RocketMQ reads a slot's
/// markers before its messages).
fn recall_keys(ctx: &BrokerCtx, st: &State) -> Result<HashSet<String>, String> {
    let mut keys = HashSet::new();
    let mut units = [SlotUnit::default(); WALK_CHUNK];
    let mut from = None;
    let mut seen = 0;
    loop {
        let (n, next) = st
            .timer
            .slot_units(st.read_time, from, &mut units)
            .map_err(|e| format!("reading timer slot {}: {e:?}", st.read_time))?;
        for u in units[..n].iter().filter(|u| u.recall) {
            let entry = Entry {
                physical_offset: u.phy_offset,
                size: u.phy_size,
                tag_code: 0,
            };
            let key = ctx.store.record_of(entry).and_then(|b| {
                message::TimerRecord::parse(&b).and_then(|r| r.recalls.map(str::to_owned))
            });
            keys.extend(key);
        }
        seen += n;
        match next {
            Some(p) if seen < RECALL_SCAN_LIMIT => from = Some(p),
            Some(_) => {
                log::warn!(
                    "timer: slot {} holds over {RECALL_SCAN_LIMIT} units; recalls past them \
                     are not applied",
                    st.read_time
                );
                return Ok(keys);
            }
            None => return Ok(keys),
        }
    }
}

/// Takes a progress snapshot every `timerFlushIntervalMs`, and writes it once the log is
/// durable past the copies it counts.
fn checkpoint(ctx: &BrokerCtx, st: &mut State) -> Result<(), String> {
    if st.pending.is_none() && Instant::now() >= st.next_checkpoint {
        let p = Progress {
            read_time: st.read_time,
            resume: st.resume,
            queue_offset: st.timer.queue_offset(),
        };
        st.pending = Some((p, ctx.store.log_end()));
    }
    if let Some((p, end)) = st.pending {
        if ctx.store.durable_end() >= end {
            st.timer
                .checkpoint(p.read_time, p.resume, p.queue_offset)
                .map_err(|e| format!("writing the timer checkpoint: {e:?}"))?;
            st.pending = None;
            st.next_checkpoint = Instant::now() + ctx.timer.settings.flush_interval;
        }
    }
    Ok(())
}
