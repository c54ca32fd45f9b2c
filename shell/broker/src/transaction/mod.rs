//! Transactional messages (wire-protocol.md §6.7), kept the way RocketMQ keeps them so a
//! store stays readable by its tools: everything is derived from the log.
//!
//! - A half message is stored in [`half::HALF_TOPIC`] queue 0 (send path).
//! - END_TRANSACTION ([`end`]) commits (a copy in the real topic with sysFlag COMMIT) or
//!   rolls back, then writes an op record naming the half's queue offset.
//! - The check service ([`check`]) walks the half queue from its progress offset, skips
//!   halves with op records, and asks the producer group about old unresolved ones
//!   (CHECK_TRANSACTION_STATE), re-storing each asked half with one more check counted.
//! - Progress in both queues is a consumer offset of [`SYS_GROUP`], persisted with the
//!   other offsets; the set of resolved halves ahead of it is rebuilt from op records.
//!
//! Exactly-once commit: a commit is refused as a duplicate when a COMMIT record with the
//! same transaction id (UNIQ_KEY) already exists in the real topic, found through the
//! index (or, for one not yet dispatched, in [`State::recent_commits`]). That covers a
//! check-back answer racing the producer's own END_TRANSACTION, a late END_TRANSACTION for
//! a copy the check service has already replaced, and a crash between the commit record
//! and its op record. Records are written in an order that a crash between them can only
//! repeat work, never lose it: the commit (or the re-stored copy) first, the op record
//! last.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use tern_shell::sync::MutexExt;

use tern_engine::properties::{self, key};
use tern_engine::record::{RecordView, SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK};
use tern_engine::store::Stored;

use crate::BrokerCtx;
use crate::processor::send::host;
use crate::store::{LogReadError, MAX_RECORD_READ, PutError};

pub mod check;
pub mod end;
pub mod half;

use half::{HALF_TOPIC, HalfInfo, OP_TOPIC};

/// The consumer group whose offsets are the check service's progress (RocketMQ's
/// `CID_RMQ_SYS_TRANS`).
pub const SYS_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// Op records read under one hold of the state lock.
const OP_READ_CHUNK: u64 = 1024;
/// Op records read per round; a backlog beyond it is read over the next rounds.
const MAX_OPS_PER_ROUND: u64 = 200_000;
/// Index hits looked at when searching for an earlier commit of a transaction.
const MAX_COMMIT_LOOKUPS: usize = 32;
/// Most unresolved half messages read per metrics scrape to count them by topic.
pub const MAX_COUNTED_HALVES: u64 = 10_000;
/// Slack over `maxMessageSize` for a record's fixed part, topic and properties.
const RECORD_OVERHEAD: usize = 64 * 1024;

/// The check service's progress and what it knows about the half queue ahead of it.
#[derive(Debug, Default)]
struct State {
    /// Set once progress was read from the offsets table.
    loaded: bool,
    /// Next half queue offset to look at; everything below is resolved or replaced.
    half_progress: u64,
    /// Next op queue offset to read.
    op_read: u64,
    /// Whether every op record in the queue was read (else no half is checked back: it
    /// might be resolved by an op not read yet).
    ops_caught_up: bool,
    /// Half queue offsets at or past `half_progress` that have an op record.
    done: BTreeSet<u64>,
    /// Op queue offset → highest half offset it names, for ops naming halves at or past
    /// `half_progress`: the op progress is the first of them.
    op_refs: BTreeMap<u64, u64>,
    /// Transaction id → end of its commit record, for commits the index may not have yet
    /// (reput runs behind appends); dropped once dispatched.
    recent_commits: HashMap<String, u64>,
    /// Progress as last written to the offsets table.
    saved: Option<(u64, u64)>,
}

/// The broker's transaction bookkeeping; one per broker, in [`BrokerCtx`].
#[derive(Debug, Default)]
pub struct Transactions {
    state: Mutex<State>,
}

/// What a commit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// False when the transaction had been committed before (nothing new delivered).
    pub stored: bool,
    /// Log end after the records written: durable once the log is flushed past it.
    pub end: u64,
}

impl Transactions {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent; a panic elsewhere must not stop
        // transactions.
        self.state.guard()
    }

    /// Reads the progress offsets (once; the check service calls it before its first
    /// round). Offsets past the queues' ends (a log cut after a crash) are clamped.
    pub fn load(&self, ctx: &BrokerCtx) {
        let mut st = self.lock();
        if st.loaded {
            return;
        }
        let (hmin, hmax) = ctx.store.queue_bounds(HALF_TOPIC, 0);
        let (omin, omax) = ctx.store.queue_bounds(OP_TOPIC, 0);
        let saved = |topic| {
            ctx.offsets
                .query(SYS_GROUP, topic, 0)
                .map(|o| o.max(0) as u64)
        };
        st.half_progress = saved(HALF_TOPIC).unwrap_or(hmin).clamp(hmin, hmax);
        st.op_read = saved(OP_TOPIC).unwrap_or(omin).clamp(omin, omax);
        let h = st.half_progress;
        st.done = st.done.split_off(&h);
        st.loaded = true;
        log::info!(
            "transactions: half queue from {h} of {hmax}, op queue from {} of {omax}",
            st.op_read
        );
    }

    /// Unresolved half messages by real topic (RocketMQ's `rocketmq_half_messages`):
    /// those at or past the check service's progress with no op record, the first
    /// [`MAX_COUNTED_HALVES`] of them. `None` until the op queue was read to its end
    /// (before that, a resolved half could be counted). Derived from the log, so it is
    /// right after a restart too.
    pub fn half_counts(&self, ctx: &BrokerCtx) -> Option<BTreeMap<String, u64>> {
        let (from, done) = {
            let st = self.lock();
            if !st.loaded || !st.ops_caught_up {
                return None;
            }
            (st.half_progress, st.done.clone())
        };
        let (_, max) = ctx.store.queue_bounds(HALF_TOPIC, 0);
        let mut out = BTreeMap::new();
        for i in from..max.min(from.saturating_add(MAX_COUNTED_HALVES)) {
            if done.contains(&i) {
                continue;
            }
            let Some(bytes) = read_queue_record(ctx, HALF_TOPIC, i) else {
                continue;
            };
            let Ok(view) = RecordView::parse(&bytes) else {
                continue;
            };
            if let Ok(info) = half::half_info(&view) {
                *out.entry(info.real_topic.to_owned()).or_default() += 1;
            }
        }
        Some(out)
    }

    /// `(half progress, op progress)`: the offsets persisted for [`SYS_GROUP`].
    pub fn progress(&self) -> (u64, u64) {
        let st = self.lock();
        (st.half_progress, op_progress(&st))
    }

    /// Commits the half message `view` (verified by the caller): stores its copy in the
    /// real topic unless this transaction was committed already, then writes the op.
    pub fn commit(
        &self,
        ctx: &BrokerCtx,
        view: &RecordView<'_>,
        info: &HalfInfo<'_>,
    ) -> Result<Committed, PutError> {
        let mut st = self.lock();
        let already = committed_already(&mut st, ctx, info.real_topic, info.uniq);
        let mut end = 0;
        if already {
            log::info!(
                "transaction {} of {} already committed: not delivering it again",
                info.uniq.unwrap_or("?"),
                info.real_topic
            );
        } else {
            let props = half::commit_properties(view.properties());
            let half_offset = view.physical_offset().max(0) as u64;
            let msg = half::commit_message(view, info, &props, half_offset, host(ctx.store_host));
            let stored = ctx.put(&msg)?.stored;
            end = stored_end(&stored);
            if let Some(uniq) = info.uniq {
                st.recent_commits.insert(uniq.to_owned(), end);
            }
        }
        match write_op(&mut st, ctx, view.queue_offset().max(0) as u64) {
            Ok(s) => end = end.max(stored_end(&s)),
            // The commit stands: the check service finds it by its key and resolves the
            // half then, without asking the producer.
            Err(e) if !already => log::error!("op record after a commit failed: {e}"),
            Err(e) => return Err(e),
        }
        Ok(Committed {
            stored: !already,
            end,
        })
    }

    /// Rolls back the half message at `half_queue_offset`: only the op record.
    pub fn rollback(&self, ctx: &BrokerCtx, half_queue_offset: u64) -> Result<u64, PutError> {
        let mut st = self.lock();
        write_op(&mut st, ctx, half_queue_offset).map(|s| stored_end(&s))
    }

    /// Reads op records past `op_read` into `done` (bounded per call).
    fn refresh_ops(&self, ctx: &BrokerCtx) {
        let mut read = 0;
        loop {
            let mut st = self.lock();
            let (min, max) = ctx.store.queue_bounds(OP_TOPIC, 0);
            st.op_read = st.op_read.max(min);
            if st.op_read >= max {
                st.ops_caught_up = true;
                return;
            }
            if read >= MAX_OPS_PER_ROUND {
                st.ops_caught_up = false;
                return;
            }
            let to = max.min(st.op_read + OP_READ_CHUNK);
            for n in st.op_read..to {
                let Some(bytes) = read_queue_record(ctx, OP_TOPIC, n) else {
                    log::warn!("op record {n} unreadable: skipped");
                    continue;
                };
                let Ok(view) = RecordView::parse(&bytes) else {
                    continue;
                };
                let offsets = half::op_offsets(&view);
                let h = st.half_progress;
                let ahead: Vec<u64> = offsets.into_iter().filter(|o| *o >= h).collect();
                if let Some(top) = ahead.iter().max() {
                    st.op_refs.insert(n, *top);
                }
                st.done.extend(ahead);
            }
            read += to - st.op_read;
            st.op_read = to;
        }
    }

    /// Writes progress to the offsets table when it moved. The half offset goes first: a
    /// persist between the two commits then pairs a new half offset with an old op
    /// offset, which only re-reads ops.
    fn save_progress(&self, ctx: &BrokerCtx) {
        let mut st = self.lock();
        let h = st.half_progress;
        st.done = st.done.split_off(&h);
        st.op_refs.retain(|_, top| *top >= h);
        let o = op_progress(&st);
        if st.saved != Some((h, o)) {
            ctx.offsets.commit(SYS_GROUP, HALF_TOPIC, 0, h as i64);
            ctx.offsets.commit(SYS_GROUP, OP_TOPIC, 0, o as i64);
            st.saved = Some((h, o));
        }
    }
}

fn op_progress(st: &State) -> u64 {
    st.op_refs
        .iter()
        .find(|(_, top)| **top >= st.half_progress)
        .map_or(st.op_read, |(n, _)| *n)
}

fn stored_end(s: &Stored) -> u64 {
    s.at.offset + u64::from(s.at.size)
}

/// Writes an op record resolving the half at `half_queue_offset`.
fn write_op(st: &mut State, ctx: &BrokerCtx, half_queue_offset: u64) -> Result<Stored, PutError> {
    let body = half::op_body(&[half_queue_offset]);
    let props = half::op_properties();
    let msg = ctx.own_record(OP_TOPIC, 0, &body, &props);
    let stored = ctx.put(&msg)?.stored;
    if half_queue_offset >= st.half_progress {
        st.done.insert(half_queue_offset);
    }
    Ok(stored)
}

/// Whether a COMMIT record of transaction `uniq` is already in `real_topic`.
fn committed_already(
    st: &mut State,
    ctx: &BrokerCtx,
    real_topic: &str,
    uniq: Option<&str>,
) -> bool {
    // Without an id a transaction cannot be recognised; RocketMQ does not try either.
    let Some(uniq) = uniq else {
        return false;
    };
    let dispatched = ctx.store.dispatched_offset();
    st.recent_commits.retain(|_, end| *end > dispatched);
    if st.recent_commits.contains_key(uniq) {
        return true;
    }
    let hits = ctx
        .store
        .query_index(real_topic, uniq, MAX_COMMIT_LOOKUPS, 0, i64::MAX);
    hits.into_iter().any(|off| {
        let Ok(bytes) = ctx.store.record_at(off) else {
            return false;
        };
        RecordView::parse(&bytes).is_ok_and(|v| {
            v.topic() == real_topic.as_bytes()
                && v.sys_flag() & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT
                && properties::get(v.properties(), key::UNIQ_KEY) == Some(uniq)
        })
    })
}

/// The record at commit-log offset `offset`, checked: it starts a record, parses, says it
/// is stored there, and its body CRC holds. Errors say why, for the peer's remark.
pub async fn read_record_at(ctx: &BrokerCtx, offset: u64) -> Result<Vec<u8>, LogReadError> {
    let (min, end, _) = ctx.store.log_span();
    if offset < min || offset >= end {
        return Err(LogReadError::Outside { offset, min, end });
    }
    let largest = (ctx.config.max_message_size + RECORD_OVERHEAD).min(MAX_RECORD_READ as usize);
    let bytes = ctx
        .store
        .record_at_off_executor(offset, largest as u32)
        .await?;
    let view =
        RecordView::parse(&bytes).map_err(|error| LogReadError::Unreadable { offset, error })?;
    if view.physical_offset() != offset as i64 {
        return Err(LogReadError::NoRecord { offset });
    }
    view.verify_crc()
        .map_err(|error| LogReadError::Damaged { offset, error })?;
    Ok(bytes)
}

/// The record the entry at `n` of `topic` queue 0 points to.
fn read_queue_record(ctx: &BrokerCtx, topic: &str, n: u64) -> Option<Vec<u8>> {
    let entry = ctx.store.queue_entry(topic, 0, n).ok()??;
    ctx.store.record_of(entry)
}

/// The commit-log offset the half queue's entry `n` points to, if dispatched.
fn half_entry_offset(ctx: &BrokerCtx, n: u64) -> Option<u64> {
    let entry = ctx.store.queue_entry(HALF_TOPIC, 0, n).ok()??;
    Some(entry.physical_offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_progress_stops_at_the_first_op_naming_a_half_still_ahead() {
        let mut st = State {
            half_progress: 11,
            op_read: 9,
            ..State::default()
        };
        assert_eq!(
            op_progress(&st),
            9,
            "no pending op: everything read is done"
        );
        st.op_refs = BTreeMap::from([(5, 10), (6, 3), (7, 12), (8, 11)]);
        assert_eq!(op_progress(&st), 7);
        st.half_progress = 13;
        assert_eq!(op_progress(&st), 9);
    }
}
