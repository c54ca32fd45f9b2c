//! Timer messages in the crash simulation (`docs/design/timers.md` §7 "crash_sim"): timer
//! puts classified by [`classify`] on a simulated clock, recall markers, clock steps,
//! rounds of the engine's [`TimerDriver`] storing its copies in the simulated store,
//! timer checkpoints, and the wheel, timer log and checkpoint on fault-injecting media
//! that crash with the store's.
//!
//! Once the clock has passed every due time, the model checks:
//! 1. every timer message whose record survived, not recalled, was delivered;
//! 2. no copy was stored before its due time (checked as it is stored);
//! 3. a recall whose marker was filed before its slot was read is never delivered;
//! 4. copies carry `TIMER_OUT_MS` (and the enqueue and dequeue times) and no `REAL_*`,
//!    and a recall marker is never delivered.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use tern_engine::Error;
use tern_engine::faulty::{FaultPlan, FaultyMedia};
use tern_engine::properties::{self, Properties, key};
use tern_engine::ram::{RamDir, RamError};
use tern_engine::record::{MessageIn, RecordView};
use tern_engine::testkit::{RamTimerParts, timer_parts};
use tern_engine::timer::driver::{Failure, Put, QueueEntry, Refusal, Unreadable};
use tern_engine::timer::log::UNIT_SIZE;
use tern_engine::timer::{
    TIMER_TOPIC, Timer, TimerConfig, TimerDriver, TimerRules, TimerSink, TimerSource, Timing,
    classify,
};

use crate::support::{Rng, Sent, TOPICS, TestEngine, dispatch_all};
use crate::{Model, stats};

pub const PRECISION: i64 = 1_000;
/// 256 slots: a 196 s reach behind the clock at recovery, past any case's run.
const SLOTS: u32 = 256;
/// A 6-slot roll window under delays of up to 20 s: most long timers roll once or twice.
pub const CFG: TimerConfig = TimerConfig {
    slots: SLOTS,
    precision_ms: PRECISION,
    roll_window_ms: 6 * PRECISION,
    log_segment_size: TIMER_SEG,
};
const RULES: TimerRules = TimerRules {
    precision_ms: PRECISION,
    max_delay_ms: 20_000,
};
const TIMER_SEG: u64 = 64 * UNIT_SIZE + 16;
const TIMER_SEGS: usize = 48;

pub type TimerDir<'a> = RamDir<'a, TIMER_SEGS>;
pub type Driver<'a> = TimerDriver<FaultyMedia<'a>, TimerDir<'a>, FaultyMedia<'a>>;
pub type TimerParts<'a> = RamTimerParts<'a, TIMER_SEGS>;

/// The timer's buffers, each twice its media (current and durable image).
pub struct TimerArena {
    wheel: Vec<u8>,
    checkpoint: Vec<u8>,
    log: Vec<Vec<u8>>,
}

impl TimerArena {
    pub fn new() -> Self {
        TimerArena {
            wheel: vec![0u8; 2 * SLOTS as usize * 32],
            checkpoint: vec![0u8; 2 * 4096],
            log: (0..TIMER_SEGS)
                .map(|_| vec![0u8; 2 * TIMER_SEG as usize])
                .collect(),
        }
    }

    /// An empty wheel, log and checkpoint over these buffers.
    pub fn parts<'a>(&'a mut self, plan: &'a FaultPlan) -> TimerParts<'a> {
        timer_parts(
            plan,
            SLOTS,
            &mut self.wheel,
            &mut self.log,
            &mut self.checkpoint,
        )
        .unwrap()
    }
}

/// Opens (recovers) the timer against the store's log end at the clock's time.
pub fn open(parts: TimerParts<'_>, log_end: u64, now: i64, seed: u64) -> Driver<'_> {
    let (w, d, c) = parts;
    let (t, rec) = Timer::open(w, d, c, CFG, log_end, now)
        .unwrap_or_else(|e| panic!("seed {seed}: timer recovery failed: {e:?}"));
    stats::add(&stats::TIMER_LOG_CUTS, u64::from(rec.log.cut_at.is_some()));
    assert_eq!(rec.skipped_slots, 0, "seed {seed}: no slot is skipped");
    TimerDriver::new(t)
}

/// What the simulation knows of timers beyond [`Model::sent`].
pub struct TimerModel {
    /// The simulated clock, ms; it only moves forward, across crashes too.
    pub clock: i64,
    /// The due time asked for, per `UNIQ_KEY` of each timer message put; in key order, so
    /// that the pending timer a recall picks depends on the seed alone, not on the
    /// process's hash seed: a replayed case is the same case.
    due: BTreeMap<String, i64>,
    /// The latest due time put.
    max_due: i64,
    /// Numbers the timer messages' `UNIQ_KEY`s, across crashes.
    next_id: u64,
    /// Log offsets of marker records (first leg or roll leg) known filed in the wheel
    /// before their slot was read.
    in_time: HashSet<u64>,
}

impl TimerModel {
    pub fn new(clock: i64) -> Self {
        TimerModel {
            clock,
            due: BTreeMap::new(),
            max_due: clock,
            next_id: 0,
            in_time: HashSet::new(),
        }
    }

    /// The log was cut at `end` by a crash: what was there is forgotten.
    pub fn truncate(&mut self, end: u64) {
        self.in_time.retain(|&o| o < end);
    }
}

fn prop<'a>(s: &'a Sent, k: &str) -> Option<&'a str> {
    properties::get(&s.props, k)
}

/// `props` without `drop`, with `add` after the rest (RocketMQ appends new keys).
fn props_with(props: &[u8], drop: &[&str], add: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    let kept =
        Properties::new(props).filter(|(k, _)| !drop.contains(k) && !add.iter().any(|a| a.0 == *k));
    for (k, v) in kept.chain(add.iter().copied()) {
        out.extend_from_slice(k.as_bytes());
        out.push(1);
        out.extend_from_slice(v.as_bytes());
        out.push(2);
    }
    out
}

fn static_topic(t: &str) -> Option<&'static str> {
    TOPICS
        .iter()
        .chain([&TIMER_TOPIC])
        .find(|x| **x == t)
        .copied()
}

/// One timer operation.
pub fn op(
    store: &mut TestEngine<'_>,
    driver: &mut Driver<'_>,
    rng: &mut Rng,
    model: &mut Model,
    tm: &mut TimerModel,
) -> Result<(), Error<RamError>> {
    match rng.below(10) {
        0..=3 => put(store, rng, model, tm),
        4..=5 => {
            tm.clock += rng.below(3 * PRECISION as u64) as i64;
            Ok(())
        }
        _ => {
            if rng.chance(50) {
                dispatch_all(store)?;
            }
            round(store, driver, model, tm, rng.chance(30))
        }
    }
}

/// Puts a timer message, a message asking for a past time (stored as it is), or a
/// recall marker for a pending timer at least two slots from due.
fn put(
    store: &mut TestEngine<'_>,
    rng: &mut Rng,
    model: &mut Model,
    tm: &mut TimerModel,
) -> Result<(), Error<RamError>> {
    let now = tm.clock;
    tm.next_id += 1;
    let uniq = format!("T{:08}", tm.next_id);
    let target = if rng.chance(25) {
        let open: Vec<(&String, &i64)> = tm
            .due
            .iter()
            .filter(|(_, d)| **d >= now + 2 * PRECISION)
            .collect();
        (!open.is_empty()).then(|| {
            let (u, d) = open[rng.below(open.len() as u64) as usize];
            (u.clone(), *d)
        })
    } else {
        None
    };
    let topic = TOPICS[rng.below(3) as usize];
    let mut pairs: Vec<(String, String)> = vec![(key::UNIQ_KEY.into(), uniq.clone())];
    let due = if let Some((u, d)) = &target {
        // The handle's `TIMER_OUT_MS + 1`: the marker is due in its target's slot.
        pairs.push((key::TIMER_DELIVER_MS.into(), d.to_string()));
        pairs.push((key::TIMER_DEL_UNIQKEY.into(), format!("{topic}+{u}")));
        *d
    } else {
        // A quarter due within a slot or two: these often reach a slot already read
        // (filed after their record became durable) and are delivered at once.
        let delay = if rng.chance(25) {
            rng.below(1_500) as i64
        } else {
            rng.below(20_000) as i64 - 1_500
        };
        match rng.below(3) {
            0 => {
                pairs.push((key::TIMER_DELAY_MS.into(), delay.to_string()));
                now + delay
            }
            1 => {
                let s = delay / 1000;
                pairs.push((key::TIMER_DELAY_SEC.into(), s.to_string()));
                now + s * 1000
            }
            _ => {
                pairs.push((key::TIMER_DELIVER_MS.into(), (now + delay).to_string()));
                now + delay
            }
        }
    };
    // A marker names its target's topic; the target's topic is in its key.
    let topic = match &target {
        Some((u, _)) => {
            let t = model
                .sent
                .iter()
                .find(|s| prop(s, key::UNIQ_KEY) == Some(u.as_str()))
                .and_then(|s| prop(s, key::REAL_TOPIC).and_then(static_topic));
            match t {
                Some(t) => {
                    pairs.last_mut().unwrap().1 = format!("{t}+{u}");
                    t
                }
                // Its record was lost in a crash: recall something else another time.
                None => return Ok(()),
            }
        }
        None => topic,
    };
    let mut props: Vec<u8> = Vec::new();
    for (k, v) in &pairs {
        props.extend_from_slice(k.as_bytes());
        props.push(1);
        props.extend_from_slice(v.as_bytes());
        props.push(2);
    }
    let queue_id = rng.below(2) as i32;
    let (topic, queue_id, props) = match classify(&props, 0, topic, now, &RULES) {
        Ok(Timing::Timer { slot_ms }) => {
            let (out, qid) = (slot_ms.to_string(), queue_id.to_string());
            let p = props_with(
                &props,
                &[],
                &[
                    (key::TIMER_OUT_MS, &out),
                    (key::REAL_TOPIC, topic),
                    (key::REAL_QID, &qid),
                ],
            );
            if target.is_none() {
                tm.due.insert(uniq, due);
            }
            tm.max_due = tm.max_due.max(due);
            stats::add(&stats::TIMERS_PUT, 1);
            (TIMER_TOPIC, 0, p)
        }
        Ok(Timing::DueNow) => (topic, queue_id, props),
        other => panic!("a timer put classified {other:?}"),
    };
    let body: Vec<u8> = (0..rng.below(48)).map(|_| rng.next() as u8).collect();
    let mut s = Sent {
        topic,
        queue_id,
        body,
        props,
        key: None,
        offset: 0,
        queue_offset: 0,
    };
    crate::support::put(store, &mut s, now)?;
    model.sent.push(s);
    Ok(())
}

/// A driver round at the clock's time, storing its copies in `store`.
pub fn round(
    store: &mut TestEngine<'_>,
    driver: &mut Driver<'_>,
    model: &mut Model,
    tm: &mut TimerModel,
    checkpoint_due: bool,
) -> Result<(), Error<RamError>> {
    let host = Host {
        store: RefCell::new(store),
        sent: RefCell::new(&mut model.sent),
        due: &tm.due,
        clock: tm.clock,
        failed: RefCell::new(None),
    };
    let done = driver.round(&Source(&host), &mut Sink(&host), tm.clock, checkpoint_due);
    if let Some(e) = host.failed.take() {
        return Err(e);
    }
    let r = done.map_err(|f| match f {
        Failure::File(e)
        | Failure::SyncLog(e)
        | Failure::ReadSlot(_, e)
        | Failure::Checkpoint(e) => e,
    })?;
    stats::add(&stats::TIMER_CHECKPOINTS, u64::from(r.checkpointed));
    // Markers the driver passed over while their slot was not yet read are in the wheel
    // (their units synced before the round ended).
    let filed_below = driver.timer().queue_offset();
    for s in model.sent.iter().filter(|s| s.topic == TIMER_TOPIC) {
        if s.queue_offset >= filed_below || prop(s, key::TIMER_DEL_UNIQKEY).is_none() {
            continue;
        }
        let out: i64 = prop(s, key::TIMER_OUT_MS).unwrap().parse().unwrap();
        if tm.clock < out + PRECISION {
            tm.in_time.insert(s.offset);
        }
    }
    Ok(())
}

/// Moves the clock a slot at a time past every due time, flushing and running rounds,
/// until every timer-queue entry is filed and every slot due is read.
pub fn drain(
    store: &mut TestEngine<'_>,
    driver: &mut Driver<'_>,
    model: &mut Model,
    tm: &mut TimerModel,
    seed: u64,
) {
    let end = tm.max_due + 2 * PRECISION;
    for i in 0.. {
        let mut step = |store: &mut TestEngine<'_>, model: &mut Model, tm: &mut TimerModel| {
            dispatch_all(store)?;
            model.flushed = store.flush_log()?;
            round(store, driver, model, tm, i % 4 == 0)
        };
        step(store, model, tm).unwrap_or_else(|e| panic!("seed {seed}: draining the timer: {e:?}"));
        let queued = store.queue(TIMER_TOPIC, 0).map_or(0, |q| q.max_offset());
        let idle = driver.timer().queue_offset() >= queued
            && store.dispatched_offset() == store.log().max_offset();
        if tm.clock >= end && idle {
            return;
        }
        assert!(i < 10_000, "seed {seed}: the timer does not drain");
        tm.clock += PRECISION / 2;
    }
}

/// The driver's view of the store, and where its copies go. The driver reads a record
/// and stores its copy in one go, so the record is copied out first.
struct Host<'s, 'a> {
    store: RefCell<&'s mut TestEngine<'a>>,
    sent: RefCell<&'s mut Vec<Sent>>,
    due: &'s BTreeMap<String, i64>,
    clock: i64,
    /// The store refused a copy: the round ends with it.
    failed: RefCell<Option<Error<RamError>>>,
}

struct Source<'h, 's, 'a>(&'h Host<'s, 'a>);

impl TimerSource for Source<'_, '_, '_> {
    fn queue_bounds(&self) -> (u64, u64) {
        let st = self.0.store.borrow();
        st.queue(TIMER_TOPIC, 0)
            .map_or((0, 0), |q| (q.min_offset(), q.max_offset()))
    }

    fn queue_entry(&self, q: u64) -> Result<Option<QueueEntry>, Unreadable> {
        let st = self.0.store.borrow();
        let Some(cq) = st.queue(TIMER_TOPIC, 0) else {
            return Ok(None);
        };
        match cq.get(q) {
            Ok(e) => Ok(e.map(|e| QueueEntry {
                offset: e.physical_offset,
                size: e.size,
            })),
            Err(_) => Err(Unreadable),
        }
    }

    fn with_record(&self, offset: u64, size: u32, f: &mut dyn FnMut(&[u8])) -> bool {
        let bytes = {
            let st = self.0.store.borrow();
            if offset < st.log().min_offset() {
                return false;
            }
            st.log().with_record(offset, size, &mut [], |v| {
                Ok(v.ok().map(|v| v.bytes().to_vec()))
            })
        };
        match bytes {
            Ok(Some(b)) => {
                f(&b);
                true
            }
            _ => false,
        }
    }

    fn durable_end(&self) -> u64 {
        self.0.store.borrow().log().flushed_offset()
    }

    fn log_end(&self) -> u64 {
        self.0.store.borrow().log().max_offset()
    }
}

struct Sink<'h, 's, 'a>(&'h Host<'s, 'a>);

impl TimerSink for Sink<'_, '_, '_> {
    fn store(&mut self, record: &[u8], put: Put) -> Result<u64, Refusal> {
        let h = self.0;
        let v = RecordView::parse(record).map_err(|_| Refusal::Drop)?;
        let props = v.properties();
        let uniq = properties::get(props, key::UNIQ_KEY).unwrap_or("");
        let (topic, queue_id, new_props) = match put {
            Put::Roll => {
                stats::add(&stats::TIMER_ROLLS, 1);
                let times = properties::get(props, key::TIMER_ROLL_TIMES)
                    .map_or(0, |t| t.parse::<u32>().unwrap())
                    + 1;
                let times = times.to_string();
                let p = props_with(props, &[], &[(key::TIMER_ROLL_TIMES, &times)]);
                (TIMER_TOPIC, 0, p)
            }
            Put::Deliver {
                enqueued_ms,
                now_ms,
            } => {
                assert!(
                    properties::get(props, key::TIMER_DEL_UNIQKEY).is_none(),
                    "a recall marker ({uniq}) is delivered"
                );
                if let Some(&due) = h.due.get(uniq) {
                    assert!(
                        h.clock >= due,
                        "{uniq} delivered at {} before its due time {due}",
                        h.clock
                    );
                }
                let real = properties::get(props, key::REAL_TOPIC).and_then(static_topic);
                let qid = properties::get(props, key::REAL_QID).and_then(|q| q.parse().ok());
                let (Some(real), Some(qid)) = (real, qid) else {
                    return Err(Refusal::Drop);
                };
                let (enq, deq) = (enqueued_ms.to_string(), now_ms.to_string());
                let p = props_with(
                    props,
                    &[key::REAL_TOPIC, key::REAL_QID],
                    &[(key::TIMER_ENQUEUE_MS, &enq), (key::TIMER_DEQUEUE_MS, &deq)],
                );
                (real, qid, p)
            }
        };
        let msg = MessageIn::restored(&v, topic, queue_id, &new_props);
        let stored = h.store.borrow_mut().put(&msg, h.clock);
        match stored {
            Ok(st) => {
                h.sent.borrow_mut().push(Sent {
                    topic,
                    queue_id,
                    body: v.body().to_vec(),
                    props: new_props,
                    key: None,
                    offset: st.at.offset,
                    queue_offset: st.queue_offset,
                });
                Ok(st.at.offset + u64::from(st.at.size))
            }
            Err(e) => {
                *h.failed.borrow_mut() = Some(e);
                Err(Refusal::Later)
            }
        }
    }
}

/// The checks of the module docs over what the final log holds (`sent` after the last
/// recovery and a clean reopen); `min_offset` is where retention left the log.
pub fn check(model: &Model, tm: &TimerModel, seed: u64) {
    let sent = &model.sent;
    let mut copies: HashMap<&str, usize> = HashMap::new();
    // The newest surviving record of each marker, by the key it names.
    let mut markers: HashMap<&str, &Sent> = HashMap::new();
    for s in sent {
        let Some(uniq) = prop(s, key::UNIQ_KEY) else {
            continue;
        };
        if s.topic == TIMER_TOPIC {
            if let Some(k) = prop(s, key::TIMER_DEL_UNIQKEY) {
                markers.insert(k, s);
            }
            continue;
        }
        if prop(s, key::TIMER_OUT_MS).is_none() {
            continue;
        }
        // 4. What a copy carries.
        for k in [key::TIMER_ENQUEUE_MS, key::TIMER_DEQUEUE_MS] {
            assert!(
                prop(s, k).is_some(),
                "seed {seed}: copy of {uniq} without {k}"
            );
        }
        for k in [key::REAL_TOPIC, key::REAL_QID] {
            assert!(prop(s, k).is_none(), "seed {seed}: copy of {uniq} with {k}");
        }
        *copies.entry(uniq).or_default() += 1;
    }
    for s in sent.iter().filter(|s| s.topic == TIMER_TOPIC) {
        let uniq = prop(s, key::UNIQ_KEY).unwrap();
        if prop(s, key::TIMER_ROLL_TIMES).is_some()
            || prop(s, key::TIMER_DEL_UNIQKEY).is_some()
            || s.offset < model.min_offset
        {
            // A leg, a marker, or a timer whose record retention took (allowed to be lost).
            continue;
        }
        let n = copies.get(uniq).copied().unwrap_or(0);
        let real = prop(s, key::REAL_TOPIC).unwrap();
        match markers.get(format!("{real}+{uniq}").as_str()) {
            Some(m) if m.offset >= model.min_offset && tm.in_time.contains(&m.offset) => {
                // 3.
                assert_eq!(
                    n, 0,
                    "seed {seed}: {uniq} was recalled in time but delivered"
                );
                stats::add(&stats::RECALLS_CHECKED, 1);
            }
            // A marker that came too late, or was lost: delivered or not.
            Some(_) => {}
            None => {
                // 1.
                assert!(
                    n > 0,
                    "seed {seed}: timer {uniq} (due {:?}, record at {}) never delivered",
                    tm.due.get(uniq),
                    s.offset
                );
                stats::add(&stats::TIMERS_CHECKED, 1);
                stats::add(&stats::TIMER_REPEATS, n as u64 - 1);
            }
        }
    }
}

/// The last timer checkpoint, once the store made every copy durable (a clean stop).
pub fn close(store: &mut TestEngine<'_>, driver: &mut Driver<'_>) -> Result<(), Error<RamError>> {
    let end = store.flush_log()?;
    driver.close(end).map_err(|f| match f {
        Failure::File(e)
        | Failure::SyncLog(e)
        | Failure::ReadSlot(_, e)
        | Failure::Checkpoint(e) => e,
    })
}
