//! Delay levels: delayed messages wait in `SCHEDULE_TOPIC_XXXX` and are moved to their
//! real topic when due (RocketMQ's `ScheduleMessageService`).
//!
//! - On the way in, the store service rewrites every message with `DELAY` > 0 for the
//!   schedule topic, queue level − 1 ([`message::to_schedule`]); dispatch then writes each
//!   entry's tag code as its delivery time (`tern_engine::delay`), so what is due is known
//!   from the 20-byte consume-queue entries alone.
//! - [`run`] follows each level's queue from its offset in [`offsets::DelayOffsets`]. An
//!   entry that is due is read, stored again in its real topic and queue
//!   ([`message::Restored`]), and the level's offset moves past it.
//!
//! Why one task that sleeps until the next due time, rather than RocketMQ's timer per
//! level polling every 100 ms: within a level every message has the same delay and
//! entries are in store-time order, so a level's first undelivered entry is its next due
//! one. The task delivers what is due, then sleeps until the earliest head over all
//! levels. Reput tells it ([`ScheduleService::dispatched`]) when a new entry arrives that
//! could be due before that, which can only happen for a level that was empty or has a
//! shorter delay: a few comparisons per dispatch, no polling. The sleep is capped at
//! [`MAX_SLEEP`] as a guard against wall-clock jumps (delivery times are wall-clock).
//!
//! Delivery is at-least-once: offsets are saved only once the copies they count are
//! durable ([`offsets`]), so a crash may repeat deliveries made since the last save but
//! never loses one. At shutdown the task stops between two deliveries, and the broker
//! saves the offsets after the store is closed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use event_listener::Event;
use tern_engine::delay::{DelayLevels, MAX_LEVELS, SCHEDULE_TOPIC};
use tern_engine::record::RecordView;
use tern_shell::Answer;
use tern_shell::runtime::{self, now_ms};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::store::{PutError, StoreService};

pub mod message;
pub mod offsets;

pub use message::to_schedule;

/// Longest the task sleeps without looking at the queues again.
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// How often offsets are saved (when they moved and the log is durable past them).
const SAVE_INTERVAL: Duration = Duration::from_secs(1);
/// Most messages one level delivers before the task looks at the other levels and at
/// shutdown again.
const MAX_BATCH: u32 = 64;
/// Pause before retrying a level whose delivery failed (disk full, store error).
const RETRY_PAUSE_MS: i64 = 1_000;

/// Schedule state shared by the task, the store's reput and admin requests.
#[derive(Debug)]
pub struct ScheduleService {
    levels: DelayLevels,
    offsets: offsets::DelayOffsets,
    /// Wakes the task: an entry arrived that may be due before it planned to look.
    wake: Event,
    /// Wall-clock ms the task sleeps until; `i64::MAX` while it is reading the queues,
    /// so any entry dispatched meanwhile makes it look once more.
    sleeping_until: AtomicI64,
}

impl ScheduleService {
    /// The service for the store at `store_root` with `levels`.
    pub fn new(store_root: &Path, levels: DelayLevels) -> Self {
        Self {
            levels,
            offsets: offsets::DelayOffsets::load(store_root),
            wake: Event::new(),
            sleeping_until: AtomicI64::new(i64::MAX),
        }
    }

    /// Delivery progress per level.
    pub fn offsets(&self) -> &offsets::DelayOffsets {
        &self.offsets
    }

    /// Reput dispatched new entries to `topic`/`queue_id`: wakes the task if one of them
    /// may be due before it looks again (the estimate, now + the level's delay, is never
    /// earlier than the entry's store time + delay).
    pub fn dispatched(&self, topic: &str, queue_id: i32) {
        if topic != SCHEDULE_TOPIC {
            return;
        }
        let delay = self.level_delay_ms(queue_id.saturating_add(1));
        if now_ms().saturating_add(delay) < self.sleeping_until.load(Ordering::Acquire) {
            self.wake.notify(1);
        }
    }

    /// The delay of `level`; a level past the table (a queue left by a longer table in an
    /// earlier run) is served with the last level's.
    fn level_delay_ms(&self, level: i32) -> i64 {
        self.levels
            .delay_ms(self.levels.clamp(level))
            .unwrap_or_default()
    }

    /// RocketMQ's `scheduleMessageOffset_<level>` = `"<offset>,<max offset>"` entries of
    /// GET_BROKER_RUNTIME_INFO.
    pub fn runtime_stats(&self, store: &StoreService, out: &mut BTreeMap<String, String>) {
        for (level, offset) in self.offsets.table() {
            let (_, max) = store.queue_bounds(SCHEDULE_TOPIC, level - 1);
            out.insert(
                format!("scheduleMessageOffset_{level}"),
                format!("{offset},{max}"),
            );
        }
    }
}

/// When an entry with `tag_code` (its delivery time) is due, at `now`, for a level whose
/// delay is `delay_ms`. A time further ahead than one whole delay cannot be right (the
/// clock went back since, or the entry is not a delayed message's): it is due now, as
/// RocketMQ's `correctDeliverTimestamp` decides.
pub fn due_at(tag_code: i64, now: i64, delay_ms: i64) -> i64 {
    if tag_code > now.saturating_add(delay_ms) {
        now
    } else {
        tag_code
    }
}

/// GET_ALL_DELAY_OFFSET: the offset table as RocketMQ's slaves and tools read it.
pub fn all_delay_offsets(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&ctx.schedule.offsets.wrapper())))
}

/// Where one level's delivery stands.
#[derive(Debug)]
struct Cursor {
    level: i32,
    /// Next schedule-queue offset to deliver.
    offset: u64,
    /// Wall-clock ms before which a failed delivery is not retried.
    retry_at: i64,
}

/// What the first undelivered entry of a level asks for.
enum Head {
    /// Nothing left to deliver.
    CaughtUp,
    /// Due at this wall-clock ms.
    NotDue(i64),
    /// Due: the record's bytes.
    Due(Vec<u8>),
    /// The entry is unusable or its record gone: move past it.
    Skip,
    /// The queue cannot be read now.
    Retry,
}

/// The schedule task: delivers due messages until shutdown (see the module docs), while
/// this broker is a master. A slave's store follows its master's, deliveries included
/// (RocketMQ runs the schedule service on masters only); in controller mode a replica
/// promoted to master starts it then, from the saved offsets, and stops it when it
/// becomes a slave again.
pub async fn run(ctx: Arc<BrokerCtx>) {
    while crate::role::until_master(&ctx).await {
        deliver_while_master(&ctx).await;
    }
}

async fn deliver_while_master(ctx: &Arc<BrokerCtx>) {
    let svc = &ctx.schedule;
    let mut cursors = start(ctx);
    let mut next_save = Instant::now() + SAVE_INTERVAL;
    while !ctx.shutdown.is_triggered() && !ctx.role.is_slave() {
        // Listen before looking: an entry dispatched while the queues are read is not
        // missed, whatever the order.
        let woken = svc.wake.listen();
        svc.sleeping_until.store(i64::MAX, Ordering::Release);
        let now = now_ms();
        let mut next = now.saturating_add(MAX_SLEEP.as_millis() as i64);
        for c in &mut cursors {
            if ctx.shutdown.is_triggered() {
                return;
            }
            if let Some(at) = deliver_level(ctx, c, now) {
                next = next.min(at);
            }
        }
        if Instant::now() >= next_save {
            let (end, flushed) = (ctx.store.log_end(), ctx.store.durable_end());
            svc.offsets.save_when_durable(end, flushed);
            next_save = Instant::now() + SAVE_INTERVAL;
        }
        svc.sleeping_until.store(next, Ordering::Release);
        // At least a millisecond, so a backlog being delivered leaves the executor to
        // others between rounds.
        let wait_ms = next
            .saturating_sub(now_ms())
            .clamp(1, MAX_SLEEP.as_millis() as i64);
        let _ = runtime::race(
            async {
                let _ = runtime::timeout(Duration::from_millis(wait_ms as u64), woken).await;
            },
            ctx.shutdown.wait(),
        )
        .await;
    }
}

/// The levels to serve, each from its saved offset kept within its queue.
fn start(ctx: &BrokerCtx) -> Vec<Cursor> {
    let svc = &ctx.schedule;
    let levels = svc.levels.len();
    // Queues past the table, left by a longer `messageDelayLevel`, are served too (with
    // the last level's delay) so their messages are not stranded.
    let existing = (levels..MAX_LEVELS)
        .rev()
        .find(|&q| ctx.store.queue_bounds(SCHEDULE_TOPIC, q as i32).1 > 0)
        .map_or(0, |q| q + 1);
    let served = levels.max(existing);
    if existing > levels {
        log::warn!(
            "{SCHEDULE_TOPIC} has queues up to {existing} but messageDelayLevel has {levels} \
             levels: the extra queues are delivered with the last level's delay"
        );
    }
    grow_schedule_topic(ctx, served as i32);
    (1..=served as i32)
        .map(|level| {
            let (min, max) = ctx.store.queue_bounds(SCHEDULE_TOPIC, level - 1);
            let saved = svc.offsets.get(level);
            let offset = saved.map_or(0, |o| o.max(0) as u64).clamp(min, max);
            if saved.is_some_and(|s| s != offset as i64) {
                log::warn!(
                    "delay level {level}: saved offset {saved:?} outside its queue [{min}, {max}], \
                     continuing at {offset}"
                );
            }
            svc.offsets.set(level, offset as i64);
            Cursor {
                level,
                offset,
                retry_at: 0,
            }
        })
        .collect()
}

/// Makes the schedule topic's configuration show every served level's queue (it is
/// created with RocketMQ's 18).
fn grow_schedule_topic(ctx: &BrokerCtx, queues: i32) {
    if let Some(mut t) = ctx.topics.get(SCHEDULE_TOPIC) {
        if t.write_queue_nums < queues || t.read_queue_nums < queues {
            t.read_queue_nums = t.read_queue_nums.max(queues);
            t.write_queue_nums = t.write_queue_nums.max(queues);
            ctx.topics.upsert(t);
        }
    }
}

/// Delivers the due messages of one level, at most [`MAX_BATCH`]. Returns when to look
/// at it again (`None`: when a new entry arrives).
fn deliver_level(ctx: &BrokerCtx, c: &mut Cursor, now: i64) -> Option<i64> {
    if now < c.retry_at {
        return Some(c.retry_at);
    }
    let delay = ctx.schedule.level_delay_ms(c.level);
    for _ in 0..MAX_BATCH {
        let bytes = match head(ctx, c, now, delay) {
            Head::CaughtUp => return None,
            Head::NotDue(at) => return Some(at),
            Head::Retry => {
                c.retry_at = now + RETRY_PAUSE_MS;
                return Some(c.retry_at);
            }
            Head::Skip => {
                advance(ctx, c);
                continue;
            }
            Head::Due(bytes) => bytes,
        };
        match deliver(ctx, c, &bytes) {
            Ok(()) => advance(ctx, c),
            Err(PutError::Illegal(why)) => {
                log::error!(
                    "delay level {}: message at offset {} cannot be stored, dropped: {why}",
                    c.level,
                    c.offset
                );
                advance(ctx, c);
            }
            Err(e) => {
                log::warn!(
                    "delay level {}: delivery at offset {} failed, retrying: {e}",
                    c.level,
                    c.offset
                );
                c.retry_at = now + RETRY_PAUSE_MS;
                return Some(c.retry_at);
            }
        }
    }
    // More may be due: come back at once.
    Some(now)
}

fn advance(ctx: &BrokerCtx, c: &mut Cursor) {
    c.offset += 1;
    ctx.schedule.offsets.set(c.level, c.offset as i64);
}

/// Reads the level's first undelivered entry and, when due, a copy of its record.
fn head(ctx: &BrokerCtx, c: &mut Cursor, now: i64, delay: i64) -> Head {
    let (min, max) = ctx.store.queue_bounds(SCHEDULE_TOPIC, c.level - 1);
    if c.offset < min {
        log::warn!(
            "delay level {}: entries {}..{} were deleted before delivery",
            c.level,
            c.offset,
            min
        );
        c.offset = min;
        ctx.schedule.offsets.set(c.level, c.offset as i64);
    }
    let entry = match ctx.store.queue_entry(SCHEDULE_TOPIC, c.level - 1, c.offset) {
        Ok(Some(e)) => e,
        Ok(None) if c.offset >= max => return Head::CaughtUp,
        Ok(None) => return Head::Skip,
        Err(e) => {
            log::error!("delay level {}: {e}", c.level);
            return Head::Retry;
        }
    };
    let due = due_at(entry.tag_code, now, delay);
    if due > now {
        return Head::NotDue(due);
    }
    match ctx.store.record_of(entry) {
        Some(bytes) => Head::Due(bytes),
        // Below the log's start: retention deleted it.
        _ => {
            log::warn!(
                "delay level {}: the record of entry {} is gone (retention)",
                c.level,
                c.offset
            );
            Head::Skip
        }
    }
}

/// Stores the record in its real topic and queue.
fn deliver(ctx: &BrokerCtx, c: &Cursor, bytes: &[u8]) -> Result<(), PutError> {
    let view = RecordView::parse(bytes).map_err(|e| PutError::Illegal(e.to_string()))?;
    let restored = message::Restored::from_view(&view).map_err(|why| {
        PutError::Illegal(format!("not a delayed message ({why}) in {SCHEDULE_TOPIC}"))
    })?;
    let stored = ctx.store.put(&restored.message(&view))?;
    log::trace!(
        "delay level {}: entry {} delivered to {}/{} at {}",
        c.level,
        c.offset,
        restored.topic,
        restored.queue_id,
        stored.queue_offset
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_due_at_its_delivery_time() {
        assert_eq!(
            due_at(5_000, 1_000, 2_000),
            1_000,
            "further than one delay: now"
        );
        assert_eq!(due_at(3_000, 1_000, 2_000), 3_000, "one delay ahead: kept");
        assert_eq!(due_at(2_500, 1_000, 2_000), 2_500);
        assert_eq!(due_at(900, 1_000, 2_000), 900, "past: due");
        assert_eq!(due_at(0, 1_000, 2_000), 0, "no time (a tag hash of 0): due");
        assert_eq!(due_at(i64::MAX, i64::MAX - 1, 10), i64::MAX);
    }
}
