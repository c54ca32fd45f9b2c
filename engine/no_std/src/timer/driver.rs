//! The task that drives a [`Timer`]: it files timer-queue entries in the wheel, delivers
//! the slots whose time has passed, and checkpoints what is durable. The owner (the
//! broker's timer task, the crash simulation) gives it a [`TimerSource`] to read the
//! store and a [`TimerSink`] to store copies, and runs [`TimerDriver::round`] again at
//! the time it names. See `docs/design/timers.md` §7.
//!
//! Filing and delivery run in one driver so "this slot is being read" cannot race a unit
//! filed into it. Why nothing is lost and nothing is early:
//! - **Durable source.** Only entries whose record is durable are filed, so a unit never
//!   points at a commit-log tail a power cut can take.
//! - **Log before wheel.** Units are synced before the wheel links them
//!   ([`Timer::flush_log`]).
//! - **Durable progress.** The checkpoint records the slot being read, the place in it,
//!   and the timer-queue entries handled, as they were when the store's log ended at
//!   some offset; it is written only once the log is durable past that offset, so the
//!   copies it counts as delivered are on disk. A crash repeats deliveries since the
//!   last checkpoint, never skips one. An entry due on arrival is delivered at once and
//!   counted as handled only once that copy is durable.
//! - **Never early.** Slot `T` holds due times in `(T, T + precision]` and is read once
//!   the clock passes `T + precision`; at most one precision late, as RocketMQ.
//!
//! No heap: a slot's recall markers are kept as 64-bit hashes of the keys they name, at
//! most [`MAX_RECALLS_PER_SLOT`] of them.

use heapless::Vec;

pub use super::owner::{
    DriverStats, Event, Failure, Put, QueueEntry, Refusal, Round, TimerSink, TimerSource,
    Unreadable,
};
use super::state::{Filing, MAX_STAGED, SlotUnit, Timer};
use crate::hash::java_string_hash;
use crate::media::{Directory, Media};
use crate::properties::{self, key};
use crate::record::RecordView;

/// Most timer-queue entries filed per round (one log sync covers them).
pub const ENQUEUE_BATCH: usize = MAX_STAGED;
/// Units read per walk step: the resume point moves per step.
const WALK_CHUNK: usize = 64;
/// Most units delivered per round, so shutdown and filing get their turn.
pub const DELIVER_BUDGET: usize = 2_048;
/// Most empty slots skipped per round while catching up after a stop.
pub const EMPTY_SLOT_BUDGET: usize = 10_000;
/// Most units one slot's recall scan reads (a slot larger than this has its later
/// recall markers ignored, reported).
pub const RECALL_SCAN_LIMIT: usize = 1 << 20;
/// Most recall markers applied per slot; markers past them are ignored (reported) and
/// their targets delivered. RocketMQ keeps them in an unbounded set; 1,024 recalls due
/// in one precision (1 s) is far past any use seen.
pub const MAX_RECALLS_PER_SLOT: usize = 1_024;
/// How soon to look again for entries whose records are not durable yet, ms.
pub const DURABLE_POLL_MS: i64 = 50;
/// Longest wait between rounds, ms (wall-clock jumps, missed wakes).
pub const MAX_SLEEP_MS: i64 = 1_000;
/// Pause after a delivery the store refused for now (disk full, store failed), ms.
pub const RETRY_PAUSE_MS: i64 = 1_000;

/// Delivery and filing progress, as a checkpoint records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Progress {
    read_time: i64,
    resume: Option<u64>,
    queue_offset: u64,
}

/// What is left to file after a round's enqueue.
enum Backlog {
    None,
    More,
    /// Entries whose records are not durable yet, or that cannot be read or delivered now.
    NotDurable,
}

/// A timer record's fields the driver decides on.
struct Parsed {
    out_ms: i64,
    topic_hash: i32,
    /// For a recall marker, the hash of the key it names (`TIMER_DEL_UNIQKEY`).
    recalls: Option<u64>,
    /// The hash of the key a recall of it names, when it has a `UNIQ_KEY`.
    key: Option<u64>,
}

fn parse(bytes: &[u8]) -> Option<Parsed> {
    let props = RecordView::parse(bytes).ok()?.properties();
    let out_ms = properties::get(props, key::TIMER_OUT_MS)?.parse().ok()?;
    let topic = properties::get(props, key::REAL_TOPIC)?;
    let recalls = properties::get(props, key::TIMER_DEL_UNIQKEY).map(|k| key_hash(&[k]));
    let key = properties::get(props, key::UNIQ_KEY).map(|u| key_hash(&[topic, "+", u]));
    Some(Parsed {
        out_ms,
        topic_hash: java_string_hash(topic),
        recalls,
        key,
    })
}

/// FNV-1a, 64 bits, over the parts as one string: the key a recall marker names is
/// `REAL_TOPIC + "+" + UNIQ_KEY` (RocketMQ's `buildDeleteKey`), hashed without being
/// built. Two keys in one slot collide with odds about n²/2⁶⁵ (1 in 3.5·10¹³ at 1,024
/// markers against 1,000 messages): then a message not recalled is dropped as if it was.
fn key_hash(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The keys a slot's recall markers name, sorted.
type RecallKeys = Vec<u64, MAX_RECALLS_PER_SLOT>;

/// Drives a [`Timer`] (see the module docs).
#[derive(Debug)]
pub struct TimerDriver<W: Media, D: Directory<Error = W::Error>, C: Media<Error = W::Error>> {
    timer: Timer<W, D, C>,
    precision: i64,
    /// The slot being read (or next to read).
    read_time: i64,
    /// The next unit of it to deliver; `None` from its newest.
    resume: Option<u64>,
    /// The slot's walk has begun (its newest unit was taken): entries for it from now on
    /// are delivered directly rather than filed behind the walk.
    reading: bool,
    /// Keys the slot's recall markers name; `None` until they are read (again after a
    /// restart, which may resume a walk halfway).
    recalled: Option<RecallKeys>,
    /// The recall keys of one slot already read, for entries that reach it late.
    late: Option<(i64, RecallKeys)>,
    /// The next timer-queue entry to look at.
    next_entry: u64,
    /// Entries handled without filing, not yet counted in the engine (their copies are
    /// not durable yet): the last one, and the log end after its copy.
    passed: Option<(u64, u64)>,
    /// Progress to checkpoint once the log is durable past the offset beside it.
    pending: Option<(Progress, u64)>,
    /// The last progress checkpointed.
    checkpointed: Option<Checkpointed>,
    /// Taken over from an old master ([`TimerDriver::adopt`]): timer-queue entries below
    /// the offset whose slot is before the time were delivered there.
    adopted: Option<(u64, i64)>,
    stats: DriverStats,
}

/// Delivery and filing progress a checkpoint recorded, for a replica that may take over
/// ([`TimerDriver::checkpointed`], [`TimerDriver::adopt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpointed {
    /// Slots before this were delivered (RocketMQ `lastReadTimeMs`).
    pub read_time: i64,
    /// Timer-queue entries below this were filed or handled (`lastTimerQueueOffset`).
    pub queue_offset: u64,
    /// Every copy those deliveries stored lies below this commit-log offset.
    pub log_end: u64,
}

type Res<T, E> = Result<T, Failure<E>>;

impl<W: Media, D: Directory<Error = W::Error>, C: Media<Error = W::Error>> TimerDriver<W, D, C> {
    /// Drives `timer` from its recovered resume point.
    pub fn new(timer: Timer<W, D, C>) -> Self {
        let (read_time, resume) = timer.resume_point();
        TimerDriver {
            precision: timer.config().precision_ms.max(1),
            read_time,
            resume,
            reading: resume.is_some(),
            recalled: None,
            late: None,
            next_entry: timer.queue_offset(),
            passed: None,
            pending: None,
            checkpointed: None,
            adopted: None,
            stats: DriverStats::default(),
            timer,
        }
    }

    /// The progress of the last checkpoint this driver wrote, for a slave to take over
    /// from (RocketMQ's GET_TIMER_CHECK_POINT).
    pub fn checkpointed(&self) -> Option<Checkpointed> {
        self.checkpointed
    }

    /// A replica promoted to master takes over delivery from its old master's checkpoint
    /// `c` (RocketMQ's slave adopts the master's `lastReadTimeMs`), which the caller
    /// checked its log holds the copies of (`c.log_end` at most its log end): the slots
    /// before `c.read_time` were delivered there, so delivery here starts at it, and
    /// timer-queue entries below `c.queue_offset` that are due before it need nothing
    /// more. Never moves delivery back.
    pub fn adopt(&mut self, c: Checkpointed) {
        let read_time = c.read_time.div_euclid(self.precision) * self.precision;
        if read_time > self.read_time {
            self.read_time = read_time;
            self.resume = None;
            self.reading = false;
            self.recalled = None;
            self.late = None;
        }
        self.adopted = Some((c.queue_offset, read_time));
    }

    /// The timer.
    pub fn timer(&self) -> &Timer<W, D, C> {
        &self.timer
    }

    /// The timer, for retention ([`Timer::delete_before`]).
    pub fn timer_mut(&mut self) -> &mut Timer<W, D, C> {
        &mut self.timer
    }

    /// Gives the timer back (its parts, for a simulated crash).
    pub fn into_timer(self) -> Timer<W, D, C> {
        self.timer
    }

    /// The slot being read (or next to read).
    pub fn read_time(&self) -> i64 {
        self.read_time
    }

    /// The counts so far.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// One round at `now_ms`: file what arrived, deliver what is due, checkpoint what is
    /// durable. `checkpoint_due` says a new progress snapshot is wanted (the owner's
    /// `timerFlushIntervalMs` passed); it is written once the copies it counts are.
    pub fn round(
        &mut self,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
        now_ms: i64,
        checkpoint_due: bool,
    ) -> Res<Round, W::Error> {
        let mut next = now_ms + MAX_SLEEP_MS;
        match self.enqueue(src, sink, now_ms)? {
            Backlog::None => {}
            Backlog::More => next = now_ms,
            Backlog::NotDurable => next = next.min(now_ms + DURABLE_POLL_MS),
        }
        next = next.min(self.deliver(src, sink, now_ms)?);
        let checkpointed = self.checkpoint(src, checkpoint_due)?;
        Ok(Round {
            next_ms: next,
            checkpointed,
        })
    }

    /// The last checkpoint, once the store is closed and durable below `durable_end` (its
    /// log end): the live progress, the entries delivered directly included (left
    /// unsettled, they were filed and delivered again after a clean restart).
    pub fn close(&mut self, durable_end: u64) -> Res<(), W::Error> {
        self.settle(durable_end);
        let q = self.timer.queue_offset();
        self.timer
            .checkpoint(self.read_time, self.resume, q)
            .map_err(Failure::Checkpoint)
    }

    /// Files up to [`ENQUEUE_BATCH`] timer-queue entries from where filing stands.
    fn enqueue(
        &mut self,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
        now: i64,
    ) -> Res<Backlog, W::Error> {
        self.settle_passed(src);
        let (min, max) = src.queue_bounds();
        if self.next_entry < min {
            sink.note(Event::EntriesDeleted {
                from: self.next_entry,
                to: min,
            });
            // Nothing is left to do for them: counted as handled, so the checkpoint does
            // not send the next start back to them.
            self.pass(min - 1, 0);
        }
        let durable = src.durable_end();
        let mut filed = 0;
        let mut backlog = Backlog::None;
        while self.next_entry < max {
            if filed == ENQUEUE_BATCH {
                backlog = Backlog::More;
                break;
            }
            let q = self.next_entry;
            let entry = match src.queue_entry(q) {
                Ok(Some(e)) => e,
                Ok(None) => {
                    self.pass(q, 0);
                    continue;
                }
                Err(Unreadable) => {
                    backlog = Backlog::NotDurable;
                    break;
                }
            };
            if entry.offset + u64::from(entry.size) > durable {
                backlog = Backlog::NotDurable;
                break;
            }
            let mut step = None;
            src.with_record(entry.offset, entry.size, &mut |bytes| {
                step = Some(self.enqueue_record(src, sink, q, entry, bytes, now));
            });
            let step = match step {
                Some(s) => s?,
                None => {
                    sink.note(Event::RecordGone {
                        offset: entry.offset,
                    });
                    self.drop_entry(q)
                }
            };
            match step {
                Step::Next => {}
                Step::Filed(f) => {
                    self.timer.file(f, now).map_err(Failure::File)?;
                    self.next_entry = q + 1;
                    filed += 1;
                }
                Step::Wait => {
                    backlog = Backlog::NotDurable;
                    break;
                }
            }
        }
        if filed > 0 {
            // One sync for the batch, then the wheel links it (log before wheel).
            self.timer.flush_log().map_err(Failure::SyncLog)?;
            self.stats.filed += filed as u64;
        }
        self.settle_passed(src);
        Ok(backlog)
    }

    /// Decides what entry `q`, whose record is `bytes`, comes to.
    fn enqueue_record(
        &mut self,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
        q: u64,
        entry: QueueEntry,
        bytes: &[u8],
        now: i64,
    ) -> Res<Step, W::Error> {
        let Some(rec) = parse(bytes) else {
            sink.note(Event::NotTimer {
                offset: entry.offset,
            });
            return Ok(self.drop_entry(q));
        };
        let slot_ms = rec.out_ms.div_euclid(self.precision) * self.precision;
        match self.adopted {
            // The old master filed it and delivered its slot: nothing more to do here.
            Some((below, before)) if q < below && slot_ms < before => {
                self.pass(q, 0);
                return Ok(Step::Next);
            }
            Some((below, _)) if q >= below => self.adopted = None,
            _ => {}
        }
        // A slot already read, or being read (its walk took its newest unit): too late
        // to file into it, so it is due now. The slot is compared, not TIMER_OUT_MS (the
        // put path writes them equal): a time off the grid would otherwise be filed into
        // the slot being walked, behind the walk.
        let behind_walk = slot_ms < self.read_time || (slot_ms == self.read_time && self.reading);
        if behind_walk {
            if rec.recalls.is_some() {
                // RocketMQ refuses a marker that comes too late: the message went.
                return Ok(self.drop_entry(q));
            }
            // A message reaching its slot late (a roll leg or an entry repeated after a
            // crash, one filed while the walk ran) is still recalled by the markers that
            // reached the slot in time: they are in the wheel. RocketMQ delivers it.
            if self.recalled_late(slot_ms, rec.key, src, sink)? {
                self.stats.recalled += 1;
                self.pass(q, 0);
                return Ok(Step::Next);
            }
            let put = Put::Deliver {
                enqueued_ms: i64::MAX,
                now_ms: now,
            };
            return Ok(match sink.store(bytes, put) {
                Ok(end) => {
                    self.stats.delivered += 1;
                    self.pass(q, end);
                    Step::Next
                }
                Err(Refusal::Drop) => self.drop_entry(q),
                Err(Refusal::Later) => Step::Wait,
            });
        }
        // Filing after a direct delivery waits for that copy: recovery resumes after the
        // newest filed unit, so it must not pass over a copy a power cut could take.
        if !self.settle_passed(src) {
            return Ok(Step::Wait);
        }
        Ok(Step::Filed(Filing {
            slot_ms,
            phy_offset: entry.offset,
            phy_size: entry.size,
            queue_offset: q,
            topic_hash: rec.topic_hash,
            recall: rec.recalls.is_some(),
        }))
    }

    /// Whether a marker in the wheel's slot `slot_ms` (read, or being read) names `key`.
    /// The slot being read has its keys at hand once its walk began; another slot's are
    /// read from the wheel and kept for the next late entry (entries come in arrival
    /// order, so a burst of late ones tends to share a slot), since nothing more is filed
    /// into a slot once its walk began.
    fn recalled_late(
        &mut self,
        slot_ms: i64,
        key: Option<u64>,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
    ) -> Res<bool, W::Error> {
        let Some(key) = key else {
            return Ok(false);
        };
        let names = |keys: &RecallKeys| keys.binary_search(&key).is_ok();
        if let Some(keys) = &self.recalled {
            if slot_ms == self.read_time {
                return Ok(names(keys));
            }
        }
        if let Some((s, keys)) = &self.late {
            if *s == slot_ms {
                return Ok(names(keys));
            }
        }
        let keys = self.recall_keys(slot_ms, src, sink)?;
        let hit = names(&keys);
        self.late = Some((slot_ms, keys));
        Ok(hit)
    }

    /// Entry `q` is dropped (counted): filing goes on after it.
    fn drop_entry(&mut self, q: u64) -> Step {
        self.stats.dropped += 1;
        self.pass(q, 0);
        Step::Next
    }

    /// Entry `q` was handled without filing; `end` is the log end its copy needs durable
    /// (0: no copy).
    fn pass(&mut self, q: u64, end: u64) {
        self.next_entry = q + 1;
        let end = self.passed.map_or(end, |(_, e)| e.max(end));
        self.passed = Some((q, end));
    }

    /// Counts the passed entries in the engine once their copies are durable; whether none
    /// is left waiting.
    fn settle_passed(&mut self, src: &impl TimerSource) -> bool {
        self.settle(src.durable_end())
    }

    fn settle(&mut self, durable_end: u64) -> bool {
        match self.passed {
            None => true,
            Some((q, end)) if durable_end >= end => {
                self.timer.passed(q);
                self.passed = None;
                true
            }
            Some(_) => false,
        }
    }

    /// Delivers the slots whose time has passed, up to the round's budgets; returns when to
    /// look again.
    fn deliver(
        &mut self,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
        now: i64,
    ) -> Res<i64, W::Error> {
        let mut budget = DELIVER_BUDGET;
        let mut empty = 0;
        let mut units = [SlotUnit::default(); WALK_CHUNK];
        while self.read_time + self.precision <= now {
            if budget == 0 || empty == EMPTY_SLOT_BUDGET {
                return Ok(now);
            }
            if self.recalled.is_none() {
                // From here on the slot's newest unit is taken: nothing more is filed into it.
                self.reading = true;
                self.recalled = Some(self.recall_keys(self.read_time, src, sink)?);
            }
            let (n, next) = self
                .timer
                .slot_units(self.read_time, self.resume, &mut units)
                .map_err(|e| Failure::ReadSlot(self.read_time, e))?;
            if n == 0 && self.resume.is_none() {
                empty += 1;
            }
            for u in &units[..n] {
                budget = budget.saturating_sub(1);
                // A marker in its own slot was applied above. One filed a roll window
                // short of its slot goes on like any roll leg, or the recall of a timer
                // due farther than a window out would be lost here (RocketMQ sends
                // DELETE|ROLL units to its normal stack the same way).
                if u.recall && !u.roll {
                    continue;
                }
                if let Err(Refusal::Later) = self.deliver_unit(src, sink, u, now) {
                    // Resume at this unit after the pause.
                    self.resume = Some(u.pos);
                    return Ok(now + RETRY_PAUSE_MS);
                }
            }
            match next {
                Some(pos) => self.resume = Some(pos),
                None => {
                    self.read_time += self.precision;
                    self.resume = None;
                    self.reading = false;
                    self.recalled = None;
                }
            }
        }
        Ok(self.read_time + self.precision)
    }

    /// Delivers one unit's message, unless it was recalled or its record is gone; only
    /// a refusal for now ([`Refusal::Later`]) comes back.
    fn deliver_unit(
        &mut self,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
        u: &SlotUnit,
        now: i64,
    ) -> Result<(), Refusal> {
        let mut result = Ok(());
        let found = src.with_record(u.phy_offset, u.phy_size, &mut |bytes| {
            let Some(rec) = parse(bytes) else {
                sink.note(Event::NotTimer {
                    offset: u.phy_offset,
                });
                self.stats.dropped += 1;
                return;
            };
            let recalled = self.recalled.as_ref().is_some_and(|keys| {
                !keys.is_empty() && rec.key.is_some_and(|k| keys.binary_search(&k).is_ok())
            });
            if recalled {
                self.stats.recalled += 1;
                return;
            }
            let put = if u.roll {
                Put::Roll
            } else {
                Put::Deliver {
                    enqueued_ms: u.enqueued_ms,
                    now_ms: now,
                }
            };
            match sink.store(bytes, put) {
                Ok(_) if u.roll => self.stats.rolled += 1,
                Ok(_) => self.stats.delivered += 1,
                Err(Refusal::Drop) => self.stats.dropped += 1,
                Err(Refusal::Later) => result = Err(Refusal::Later),
            }
        });
        if !found {
            sink.note(Event::RecordGone {
                offset: u.phy_offset,
            });
            self.stats.dropped += 1;
        }
        result
    }

    /// The keys the recall markers of the slot at `slot_ms` name (RocketMQ reads a slot's
    /// markers before its messages), sorted.
    fn recall_keys(
        &self,
        slot_ms: i64,
        src: &impl TimerSource,
        sink: &mut impl TimerSink,
    ) -> Res<RecallKeys, W::Error> {
        let mut keys = RecallKeys::new();
        let mut units = [SlotUnit::default(); WALK_CHUNK];
        let mut from = None;
        let mut seen = 0;
        let mut cut = false;
        loop {
            let (n, next) = self
                .timer
                .slot_units(slot_ms, from, &mut units)
                .map_err(|e| Failure::ReadSlot(slot_ms, e))?;
            // A rolled marker is only passing through this slot: its key applies in its
            // own slot, after its last leg.
            for u in units[..n].iter().filter(|u| u.recall && !u.roll) {
                src.with_record(u.phy_offset, u.phy_size, &mut |b| {
                    if let Some(k) = parse(b).and_then(|r| r.recalls) {
                        cut |= keys.push(k).is_err();
                    }
                });
            }
            seen += n;
            match next {
                Some(p) if seen < RECALL_SCAN_LIMIT => from = Some(p),
                Some(_) => {
                    cut = true;
                    break;
                }
                None => break,
            }
        }
        if cut {
            sink.note(Event::RecallsCut { slot_ms });
        }
        keys.sort_unstable();
        Ok(keys)
    }

    /// Takes a progress snapshot when `due`, and writes it once the log is durable past
    /// the copies it counts; whether it wrote one.
    fn checkpoint(&mut self, src: &impl TimerSource, due: bool) -> Res<bool, W::Error> {
        if self.pending.is_none() && due {
            let p = Progress {
                read_time: self.read_time,
                resume: self.resume,
                queue_offset: self.timer.queue_offset(),
            };
            self.pending = Some((p, src.log_end()));
        }
        if let Some((p, end)) = self.pending {
            if src.durable_end() >= end {
                self.timer
                    .checkpoint(p.read_time, p.resume, p.queue_offset)
                    .map_err(Failure::Checkpoint)?;
                self.checkpointed = Some(Checkpointed {
                    read_time: p.read_time,
                    queue_offset: p.queue_offset,
                    log_end: end,
                });
                self.pending = None;
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// What filing decided for one entry.
enum Step {
    /// Handled without filing.
    Next,
    /// To be filed.
    Filed(Filing),
    /// Not now: filing stops for this round.
    Wait,
}
