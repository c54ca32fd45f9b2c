//! The revive service (`PopReviveService`): reads each revive queue in order, pairs
//! checkpoints with their acks, and once a checkpoint's revive time has passed stores a
//! copy of each unacked message in the pop retry topic (`%RETRY%<group>_<topic>`,
//! queue 0) with reconsumeTimes + 1, where the group's next POP finds it.
//!
//! No timer wheel: records are in pop order, so unresolved checkpoints wait in memory
//! (at most `popMaxPendingCk`), ordered by revive time, and the service waits on the
//! wall clock. A checkpoint is revived only once the queue was read to its end at a time
//! at least a second past its revive time, with everything appended before that time
//! dispatched: every ack a client got an answer for before the revive time has then
//! been seen. After a restart the table is rebuilt by reading from the saved progress.
//!
//! Progress per revive queue is a consumer offset of group `CID_RMQ_SYS_REVIVE_GROUP`
//! on the revive topic, in RocketMQ's meaning (the last record fully dealt with): the
//! record before the oldest checkpoint still pending. It is committed only once the log
//! is durable past every copy revived before it was taken, so a crash repeats revives
//! (a duplicate RocketMQ allows), never skips one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use tern_engine::properties::{self, key};
use tern_engine::record::RecordView;
use tern_shell::pop::{ACK_TAG, AckMsg, BATCH_ACK_TAG, CK_TAG, PopCheckPoint, REVIVE_GROUP};
use tern_shell::runtime::{self, now_ms};

use super::records::{ensure_revive_topic, revive_topic};
use crate::BrokerCtx;

mod copy;

use copy::revive_one;

/// A checkpoint is revived this long after its revive time at the earliest, so acks
/// answered just before it are read first (RocketMQ waits 2 s past the last ack seen).
const ACK_MARGIN_MS: i64 = 1_000;
/// Records read per revive queue per pass.
const MAX_READ_PER_PASS: u64 = 4_096;
/// Copies stored per pass, all queues.
const MAX_REVIVES_PER_PASS: usize = 1_024;
/// Back-off after a failed revive put: 10 s, doubling, at most 2 h (RocketMQ's
/// `rePutCK` schedule is 10, 20, 30, 60, 120 … 7200 s).
const RETRY_BASE_MS: i64 = 10_000;
const RETRY_MAX_MS: i64 = 7_200_000;
/// Longest wait for reput to pass the log's end noted at the start of a pass.
const DISPATCH_WAIT: Duration = Duration::from_secs(1);

/// Revive progress waiting to be durable, per revive queue.
#[derive(Debug, Default)]
pub struct Progress {
    inner: Mutex<HashMap<i32, Noted>>,
}

#[derive(Debug, Clone, Copy)]
struct Noted {
    /// The offset to commit.
    value: i64,
    /// The log's end when it was noted: every copy it counts ends below.
    log_end: u64,
    committed: bool,
}

impl Progress {
    fn note(&self, rq: i32, value: i64, log_end: u64) {
        let mut m = self.inner.guard();
        let n = m.entry(rq).or_insert(Noted {
            value,
            log_end,
            committed: false,
        });
        if n.value != value {
            *n = Noted {
                value,
                log_end,
                committed: false,
            };
        }
    }

    /// Commits each queue's noted progress once the log is durable past it (`all`:
    /// whatever is noted, for after the store's clean close).
    pub fn commit_durable(&self, ctx: &BrokerCtx, all: bool) {
        let durable = ctx.store.durable_end();
        let topic = revive_topic(ctx);
        let mut m = self.inner.guard();
        for (rq, n) in m.iter_mut() {
            if !n.committed && (all || n.log_end <= durable) {
                ctx.offsets.commit(REVIVE_GROUP, &topic, *rq, n.value);
                n.committed = true;
            }
        }
    }
}

#[derive(Debug)]
struct Pending {
    ck: PopCheckPoint,
    /// Bit i: message i is acked or revived.
    done: u32,
    attempts: u32,
    retry_at: i64,
}

impl Pending {
    fn all_done(&self) -> bool {
        let n = u32::from(self.ck.num);
        self.done.count_ones() >= n
    }
}

/// One revive queue's state.
#[derive(Debug)]
struct Queue {
    rq: i32,
    /// Next revive-queue offset to read.
    scan: u64,
    /// (revive time, revive-queue offset) → checkpoint.
    pending: BTreeMap<(i64, u64), Pending>,
    /// Merge key → the pending checkpoints with it, in read order. Usually one; two when
    /// a CHANGE_MESSAGE_INVISIBLETIME's checkpoint was written in the millisecond of the
    /// POP it replaces (same start offset, same pop time): the ack of the old handle
    /// must then resolve the old checkpoint, not overwrite the new one's entry.
    by_key: HashMap<String, Vec<(i64, u64)>>,
    offsets: BTreeSet<u64>,
    /// The last time at which the queue was read to its end with the log dispatched.
    caught_up_at: i64,
}

impl Queue {
    /// Holds checkpoint `ck`, read at revive-queue offset `n`, until acked or revived.
    fn hold(&mut self, n: u64, ck: PopCheckPoint) {
        let at = (ck.revive_time(), n);
        self.by_key.entry(ck.merge_key()).or_default().push(at);
        self.offsets.insert(n);
        self.pending.insert(
            at,
            Pending {
                ck,
                done: 0,
                attempts: 0,
                retry_at: 0,
            },
        );
    }

    /// Marks what `a` acks in the first checkpoint of its key that still waits for one
    /// of its offsets; true when that resolved the checkpoint. An ack with no such
    /// checkpoint was resolved already (or its checkpoint never stored).
    fn ack(&mut self, a: &AckMsg) -> bool {
        let key = a.merge_key();
        let offsets = a.offsets();
        let Some(ats) = self.by_key.get(&key) else {
            return false;
        };
        let waiting = |p: &Pending| {
            offsets
                .iter()
                .filter_map(|o| p.ck.index_of(*o))
                .any(|i| p.done & (1 << i) == 0)
        };
        let Some(at) = ats
            .iter()
            .copied()
            .find(|at| self.pending.get(at).is_some_and(waiting))
        else {
            return false;
        };
        let Some(p) = self.pending.get_mut(&at) else {
            return false;
        };
        for i in offsets.iter().filter_map(|o| p.ck.index_of(*o)) {
            p.done |= 1 << i;
        }
        if !p.all_done() {
            return false;
        }
        self.release(at);
        true
    }

    /// Drops the checkpoint at `at`: acked or revived, progress may pass it.
    fn release(&mut self, at: (i64, u64)) {
        let Some(p) = self.pending.remove(&at) else {
            return;
        };
        self.offsets.remove(&at.1);
        let key = p.ck.merge_key();
        if let Some(ats) = self.by_key.get_mut(&key) {
            ats.retain(|x| *x != at);
            if ats.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

/// Popped messages neither acked nor revived yet, per (topic, group): RocketMQ's
/// `PopInflightMessageCounter`, read by the inflight gauge. As fresh as the last round
/// (`reviveInterval`); an ack counts once the revive service has read it.
/// Names are copied once per (topic, group), not once per checkpoint: a round may hold
/// `popMaxPendingCk` of them.
fn inflight(queues: &[Queue]) -> super::InflightCounts {
    let mut out = super::InflightCounts::new();
    for p in queues.iter().flat_map(|q| q.pending.values()) {
        let open = u64::from(u32::from(p.ck.num).saturating_sub(p.done.count_ones()));
        if open == 0 {
            continue;
        }
        let groups = match out.get_mut(p.ck.topic.as_str()) {
            Some(g) => g,
            None => out.entry(p.ck.topic.clone()).or_default(),
        };
        match groups.get_mut(p.ck.cid.as_str()) {
            Some(n) => *n += open,
            None => {
                groups.insert(p.ck.cid.clone(), open);
            }
        }
    }
    out
}

/// The revive task: runs until shutdown while this broker is a master (in controller
/// mode from each promotion, from the saved revive offsets).
pub async fn run(ctx: Arc<BrokerCtx>) {
    while crate::role::until_master(&ctx).await {
        revive_while_master(&ctx).await;
    }
}

async fn revive_while_master(ctx: &Arc<BrokerCtx>) {
    let ctx = ctx.clone();
    ensure_revive_topic(&ctx);
    let topic = revive_topic(&ctx);
    let mut queues: Vec<Queue> = (0..ctx.config.pop.revive_queue_num)
        .map(|rq| {
            let (min, _) = ctx.store.queue_bounds(&topic, rq);
            let saved = ctx.offsets.query(REVIVE_GROUP, &topic, rq);
            Queue {
                rq,
                scan: saved
                    .map_or(0, |o| o.saturating_add(1).max(0) as u64)
                    .max(min),
                pending: BTreeMap::new(),
                by_key: HashMap::new(),
                offsets: BTreeSet::new(),
                caught_up_at: 0,
            }
        })
        .collect();
    while !ctx.shutdown.is_triggered() && !ctx.role.is_slave() {
        let t0 = now_ms();
        let end0 = ctx.store.log_end();
        // Waited for, not sampled: under a steady send load reput is always a little
        // behind the log's end, but it passes `end0` soon, and then every record
        // appended before `t0` is in its queue.
        let dispatched = ctx.store.await_dispatched(end0, DISPATCH_WAIT).await;
        let total: usize = queues.iter().map(|q| q.pending.len()).sum();
        let mut room = ctx.config.pop.pop_max_pending_ck.saturating_sub(total);
        let mut budget = MAX_REVIVES_PER_PASS;
        let mut next_due = i64::MAX;
        for q in &mut queues {
            read(&ctx, &topic, q, dispatched, t0, &mut room).await;
            let full = room == 0;
            revive(&ctx, q, full, &mut budget);
            if let Some(((rt, _), _)) = q.pending.iter().next() {
                next_due = next_due.min(rt.saturating_add(ACK_MARGIN_MS));
            }
            let value = q
                .offsets
                .iter()
                .next()
                .map_or(q.scan as i64 - 1, |o| *o as i64 - 1);
            ctx.pop.progress.note(q.rq, value, ctx.store.log_end());
        }
        ctx.pop.progress.commit_durable(&ctx, false);
        ctx.pop.set_inflight(inflight(&queues));
        let interval = ctx.config.pop.revive_interval.as_millis() as i64;
        let wait = if budget == 0 {
            1
        } else {
            next_due.saturating_sub(now_ms()).clamp(10, interval)
        };
        let _ = runtime::race(
            runtime::sleep(Duration::from_millis(wait as u64)),
            ctx.shutdown.wait(),
        )
        .await;
    }
}

/// Reads a revive queue from `scan` to its end (bounded).
async fn read(
    ctx: &BrokerCtx,
    topic: &str,
    q: &mut Queue,
    dispatched: bool,
    t0: i64,
    room: &mut usize,
) {
    let (min, max) = ctx.store.queue_bounds(topic, q.rq);
    q.scan = q.scan.max(min);
    let stop = max.min(q.scan + MAX_READ_PER_PASS);
    while q.scan < stop {
        if q.scan % 256 == 0 {
            runtime::yield_now().await;
        }
        let n = q.scan;
        let bytes = match ctx.store.queue_entry(topic, q.rq, n) {
            Ok(Some(e)) => ctx.store.record_of(e),
            Ok(None) => None,
            Err(e) => {
                log::warn!("revive queue {}@{n}: {e}; read again later", q.rq);
                return;
            }
        };
        let Some(bytes) = bytes else {
            q.scan += 1;
            continue;
        };
        let Ok(view) = RecordView::parse(&bytes) else {
            q.scan += 1;
            continue;
        };
        match properties::get(view.properties(), key::TAGS) {
            Some(CK_TAG) => match PopCheckPoint::parse(view.body()) {
                Ok(ck) => {
                    if *room == 0 {
                        // Full: read on once some are revived.
                        return;
                    }
                    *room -= 1;
                    q.hold(n, ck);
                }
                Err(e) => log::warn!(
                    "revive queue {}@{n}: checkpoint unreadable ({e}); skipped",
                    q.rq
                ),
            },
            Some(ACK_TAG | BATCH_ACK_TAG) => match AckMsg::parse(view.body()) {
                Ok(a) => {
                    if q.ack(&a) {
                        *room += 1;
                    }
                }
                Err(e) => log::warn!("revive queue {}@{n}: ack unreadable ({e}); skipped", q.rq),
            },
            other => log::warn!("revive queue {}@{n}: record tagged {other:?} skipped", q.rq),
        }
        q.scan += 1;
    }
    if dispatched && q.scan >= max {
        q.caught_up_at = t0;
    }
}

/// Revives due checkpoints of one queue.
fn revive(ctx: &BrokerCtx, q: &mut Queue, full: bool, budget: &mut usize) {
    let now = now_ms();
    // While reading is stopped by the bound, the clock alone decides, so the table
    // drains (acks not read yet then cause duplicates).
    let horizon = if full { now } else { q.caught_up_at };
    let due: Vec<(i64, u64)> = q
        .pending
        .range(..(horizon - ACK_MARGIN_MS + 1, 0))
        .map(|(k, _)| *k)
        .collect();
    for at in due {
        if *budget == 0 {
            return;
        }
        let Some(p) = q.pending.get_mut(&at) else {
            continue;
        };
        if p.retry_at > now {
            continue;
        }
        for i in 0..usize::from(p.ck.num) {
            if p.done & (1 << i) != 0 {
                continue;
            }
            if *budget == 0 {
                return;
            }
            match revive_one(ctx, &p.ck, p.ck.offset_of(i)) {
                Ok(()) => {
                    p.done |= 1 << i;
                    *budget -= 1;
                }
                Err(e) => {
                    p.attempts += 1;
                    let wait = (RETRY_BASE_MS << p.attempts.min(10)).min(RETRY_MAX_MS);
                    p.retry_at = now + wait;
                    log::warn!(
                        "revive of {}/{}@{} for {} failed ({e}); retried in {} s",
                        p.ck.topic,
                        p.ck.queue_id,
                        p.ck.offset_of(i),
                        p.ck.cid,
                        wait / 1000
                    );
                    break;
                }
            }
        }
        if p.all_done() {
            q.release(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> Queue {
        Queue {
            rq: 0,
            scan: 0,
            pending: BTreeMap::new(),
            by_key: HashMap::new(),
            offsets: BTreeSet::new(),
            caught_up_at: 0,
        }
    }

    fn ck(start: i64, pop_time: i64, invisible: i64, diffs: &[i32]) -> PopCheckPoint {
        PopCheckPoint {
            start_offset: start,
            pop_time,
            invisible_time: invisible,
            num: diffs.len() as u8,
            queue_id: 1,
            topic: "T".into(),
            cid: "G".into(),
            queue_offset_diff: Some(diffs.to_vec()),
            broker_name: "broker-a".into(),
            ..PopCheckPoint::default()
        }
    }

    fn ack(start: i64, pop_time: i64, offset: i64) -> AckMsg {
        AckMsg {
            ack_offset: offset,
            start_offset: start,
            consumer_group: "G".into(),
            topic: "T".into(),
            queue_id: 1,
            pop_time,
            broker_name: "broker-a".into(),
            ack_offset_list: None,
        }
    }

    #[test]
    fn an_ack_resolves_the_old_checkpoint_when_its_replacement_shares_its_key() {
        // POP at t=100 (5 s), then CHANGE_MESSAGE_INVISIBLETIME in the same millisecond
        // (10 s): the same merge key twice; the ack of the old handle follows.
        let mut q = queue();
        q.hold(0, ck(7, 100, 5_000, &[0]));
        q.hold(1, ck(7, 100, 10_000, &[0]));
        assert!(q.ack(&ack(7, 100, 7)), "the old checkpoint is resolved");
        let left: Vec<_> = q.pending.keys().copied().collect();
        assert_eq!(left, vec![(10_100, 1)], "the 10 s checkpoint still waits");
        assert_eq!(q.offsets.iter().copied().collect::<Vec<_>>(), vec![1]);
        // The new handle's ack resolves the second; a third ack finds nothing.
        assert!(q.ack(&ack(7, 100, 7)));
        assert!(q.pending.is_empty() && q.by_key.is_empty() && q.offsets.is_empty());
        assert!(!q.ack(&ack(7, 100, 7)));
    }

    #[test]
    fn acks_of_a_batch_resolve_it_once_all_arrived() {
        let mut q = queue();
        q.hold(4, ck(10, 100, 5_000, &[0, 2, 3]));
        assert!(!q.ack(&ack(10, 100, 12)));
        assert!(!q.ack(&ack(10, 100, 12)), "a repeated ack changes nothing");
        assert!(!q.ack(&ack(10, 100, 99)), "an offset the checkpoint lacks");
        assert!(!q.ack(&ack(10, 101, 10)), "another pop time is another key");
        assert!(!q.ack(&ack(10, 100, 10)));
        assert!(q.ack(&ack(10, 100, 13)));
        assert!(q.pending.is_empty() && q.by_key.is_empty());
    }
}
