//! The check service (RocketMQ's `TransactionalMessageCheckService`): every
//! `transactionCheckInterval` it walks the half queue from its progress offset and, for
//! each half message without an op record that is older than `transactionTimeOut` (or its
//! own `CHECK_IMMUNITY_TIME_IN_SECONDS`), asks one live producer of its group about it
//! (CHECK_TRANSACTION_STATE, oneway).
//!
//! Before asking, the half is re-stored at the end of the half queue with
//! `TRANSACTION_CHECK_TIMES` one higher, and the old copy gets an op record: the count is
//! then durable, the progress can move past the old copy, and the producer's answer
//! names the new copy. Copies stored during a round end that round's walk, so each
//! transaction is asked about at most once per round. After `transactionCheckMax`
//! unanswered checks the half is moved to `TRANS_CHECK_MAX_TIME_TOPIC`.

use std::sync::Arc;
use std::time::Duration;

use tern_engine::record::{MessageIn, RecordView, StoreStamp};
use tern_shell::RemotingCommand;
use tern_shell::code::RequestCode;
use tern_shell::headers::CheckTransactionStateRequestHeader;
use tern_shell::message::offset_msg_id;
use tern_shell::runtime::{self, now_ms};

use super::half::{self, CHECK_MAX_TOPIC, HALF_TOPIC, HalfInfo};
use super::{State, Transactions, read_queue_record, stored_end, write_op};
use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::topics::{PERM_READ, PERM_WRITE};
use tern_engine::properties::key;

/// Half messages looked at per round (RocketMQ bounds a round by time instead).
const MAX_HALVES_PER_ROUND: usize = 100_000;
/// How long writing one check-back to a producer may take.
const CHECK_SEND_TIMEOUT: Duration = Duration::from_secs(3);
/// Steps of the walk per trip to a blocking thread.
const STEPS_PER_BATCH: usize = 256;

/// The service: until shutdown, a round every `transactionCheckInterval`. Progress is
/// saved after every round and once more on the way out.
pub async fn run(ctx: Arc<BrokerCtx>) {
    ctx.transactions.load(&ctx);
    let interval = ctx.config.transaction_check_interval;
    while !ctx.shutdown.is_triggered() {
        let _ = runtime::race(runtime::sleep(interval), ctx.shutdown.wait()).await;
        if ctx.shutdown.is_triggered() {
            break;
        }
        if ctx.role.get() != BrokerRole::Slave {
            round(&ctx).await;
        }
    }
    ctx.transactions.save_progress(&ctx);
}

/// One walk over the half queue. The walk runs on a blocking thread, a batch of steps at
/// a time: a step reads a half message that has waited out the check interval (its
/// pages are likely cold) and may query the index under the state lock, which would
/// hold up every request an executor thread serves. Only the check-backs are sent here.
pub async fn round(ctx: &Arc<BrokerCtx>) {
    let started = now_ms();
    let c = ctx.clone();
    runtime::spawn_blocking(move || c.transactions.refresh_ops(&c)).await;
    let mut asked = 0usize;
    let mut stepped = 0usize;
    while stepped < MAX_HALVES_PER_ROUND && !ctx.shutdown.is_triggered() {
        let budget = STEPS_PER_BATCH.min(MAX_HALVES_PER_ROUND - stepped);
        let c = ctx.clone();
        let batch =
            runtime::spawn_blocking(move || c.transactions.steps(&c, started, budget)).await;
        stepped += batch.steps;
        for check in batch.checks {
            asked += 1;
            send_check(ctx, check).await;
        }
        if batch.stopped {
            break;
        }
    }
    ctx.transactions.save_progress(ctx);
    if asked > 0 {
        let (h, o) = ctx.transactions.progress();
        log::info!(
            "transaction check: asked about {asked} half messages; progress half {h}, op {o}"
        );
    }
}

/// What a batch of steps did.
struct Batch {
    /// Steps taken.
    steps: usize,
    /// Check-backs to send, in the order of their half messages.
    checks: Vec<CheckRequest>,
    /// The walk has nothing more to do this round.
    stopped: bool,
}

/// What one step of the walk decided.
enum Step {
    /// Moved past one half message.
    Next,
    /// Nothing more to do this round.
    Stop,
    /// Moved past one half message; ask its producer group.
    Check(CheckRequest),
}

/// A check-back to send.
struct CheckRequest {
    group: String,
    uniq: String,
    cmd: RemotingCommand,
}

impl Transactions {
    /// Up to `budget` steps of the walk (blocking: see [`round`]).
    fn steps(&self, ctx: &BrokerCtx, round_started: i64, budget: usize) -> Batch {
        let mut batch = Batch {
            steps: 0,
            checks: Vec::new(),
            stopped: false,
        };
        while batch.steps < budget {
            if ctx.shutdown.is_triggered() {
                batch.stopped = true;
                break;
            }
            batch.steps += 1;
            match self.step(ctx, round_started) {
                Step::Next => {}
                Step::Stop => {
                    batch.stopped = true;
                    break;
                }
                Step::Check(c) => batch.checks.push(c),
            }
        }
        batch
    }

    /// Looks at the half message at the progress offset and deals with it. Runs under the
    /// state lock, so a verdict arriving meanwhile is either seen here or sees this.
    fn step(&self, ctx: &BrokerCtx, round_started: i64) -> Step {
        let mut st = self.lock();
        let i = st.half_progress;
        let (min, max) = ctx.store.queue_bounds(HALF_TOPIC, 0);
        if i < min {
            // Retention deleted the oldest half messages.
            st.half_progress = min;
            return Step::Next;
        }
        if i >= max {
            return Step::Stop;
        }
        if st.done.remove(&i) {
            st.half_progress = i + 1;
            return Step::Next;
        }
        if !st.ops_caught_up {
            return Step::Stop;
        }
        let Some(bytes) = read_queue_record(ctx, HALF_TOPIC, i) else {
            log::error!("half message {i} unreadable: skipped");
            st.half_progress = i + 1;
            return Step::Next;
        };
        let Ok(view) = RecordView::parse(&bytes) else {
            st.half_progress = i + 1;
            return Step::Next;
        };
        let info = match half::half_info(&view) {
            Ok(info) => info,
            Err(e) => {
                log::error!("half queue entry {i} skipped: {e}");
                st.half_progress = i + 1;
                return Step::Next;
            }
        };
        // Stored during this round (a copy made by this walk, or a new send): later.
        if view.store_timestamp() >= round_started {
            return Step::Stop;
        }
        self.decide(&mut st, ctx, i, &view, &info)
    }

    fn decide(
        &self,
        st: &mut State,
        ctx: &BrokerCtx,
        i: u64,
        view: &RecordView<'_>,
        info: &HalfInfo<'_>,
    ) -> Step {
        let now = now_ms();
        let born_age = now - view.born_timestamp();
        // A producer clock ahead of ours: count from when the broker stored it.
        let age = if born_age < 0 {
            now - view.store_timestamp()
        } else {
            born_age
        };
        let timeout = ctx.config.transaction_timeout.as_millis() as i64;
        if age <= half::immunity_ms(info, timeout) {
            if info.immunity_secs.is_none() {
                // Later halves are younger still.
                return Step::Stop;
            }
            // A half with its own immunity must not hold the queue for that long: park a
            // copy at the end, counting no check (RocketMQ's `putImmunityMsgBackToHalfQueue`).
            let orig = info.prepared_queue_offset.unwrap_or(i).to_string();
            let set = [(key::TRAN_PREPARED_QUEUE_OFFSET, orig.as_str())];
            return match self.replace(st, ctx, i, view, &set) {
                Some(_) => Step::Next,
                None => Step::Stop,
            };
        }
        if super::committed_already(st, ctx, info.real_topic, info.uniq) {
            // Committed, but the op record was lost (a crash between the two writes) or
            // belongs to a copy the producer answered for late.
            return match write_op(st, ctx, i) {
                Ok(_) => {
                    st.half_progress = i + 1;
                    Step::Next
                }
                Err(e) => {
                    log::error!("op record for committed half {i}: {e}");
                    Step::Stop
                }
            };
        }
        let reserved_hours = ctx.live.file_reserved_hours();
        let reserved_ms = (reserved_hours as i64).saturating_mul(3_600_000);
        if info.check_times >= ctx.config.transaction_check_max {
            let why = format!("asked {} times without an answer", info.check_times);
            return self.discard(st, ctx, i, view, info, &why);
        }
        if born_age > reserved_ms {
            // RocketMQ's `needSkip`: its log segment is due for deletion anyway.
            let why = format!("older than fileReservedTime ({reserved_hours} h)");
            return self.discard(st, ctx, i, view, info, &why);
        }
        let checks = (info.check_times + 1).to_string();
        let set = [(key::TRANSACTION_CHECK_TIMES, checks.as_str())];
        let Some(copy) = self.replace(st, ctx, i, view, &set) else {
            return Step::Stop;
        };
        let Some(group) = info.group else {
            log::warn!("half message {i} has no PGROUP: nobody to ask about it");
            return Step::Next;
        };
        let uniq = info.uniq.unwrap_or_default().to_owned();
        match check_request(ctx, view, info, &copy, &uniq) {
            Some(cmd) => Step::Check(CheckRequest {
                group: group.to_owned(),
                uniq,
                cmd,
            }),
            None => Step::Next,
        }
    }

    /// Stores a copy of half `i` at the end of the half queue with `set` applied, then
    /// resolves `i` with an op record (in that order: a crash between them leaves two
    /// copies, never none) and moves past it. `None` if the copy could not be stored.
    fn replace(
        &self,
        st: &mut State,
        ctx: &BrokerCtx,
        i: u64,
        view: &RecordView<'_>,
        set: &[(&str, &str)],
    ) -> Option<Replaced> {
        let props = half::rewrite_properties(view.properties(), &[], set);
        let msg = half::copy_message(view, HALF_TOPIC, 0, &props);
        let stored = match ctx.put(&msg).map(|p| p.stored) {
            Ok(s) => s,
            Err(e) => {
                log::error!("re-storing half message {i}: {e}");
                return None;
            }
        };
        if let Err(e) = write_op(st, ctx, i) {
            log::error!("op record for replaced half {i}: {e}");
        }
        st.half_progress = i + 1;
        Some(Replaced {
            queue_offset: stored.queue_offset,
            offset: stored.at.offset,
            properties: props,
        })
    }

    /// Gives up on half `i`: a copy to `TRANS_CHECK_MAX_TIME_TOPIC` for the operator, then
    /// the op record.
    fn discard(
        &self,
        st: &mut State,
        ctx: &BrokerCtx,
        i: u64,
        view: &RecordView<'_>,
        info: &HalfInfo<'_>,
        why: &str,
    ) -> Step {
        if ctx.topics.get(CHECK_MAX_TOPIC).is_none() {
            ctx.topics
                .ensure(CHECK_MAX_TOPIC, 1, PERM_READ | PERM_WRITE);
            ctx.request_registration();
        }
        let msg = half::copy_message(view, CHECK_MAX_TOPIC, 0, view.properties());
        match ctx.put(&msg).map(|p| p.stored) {
            Ok(s) => log::warn!(
                "transaction {} of group {} for {} {why}: moved to {CHECK_MAX_TOPIC} (log end {})",
                info.uniq.unwrap_or("?"),
                info.group.unwrap_or("?"),
                info.real_topic,
                stored_end(&s)
            ),
            Err(e) => {
                log::error!("moving half message {i} to {CHECK_MAX_TOPIC}: {e}");
                return Step::Stop;
            }
        }
        if let Err(e) = write_op(st, ctx, i) {
            log::error!("op record for discarded half {i}: {e}");
        }
        st.half_progress = i + 1;
        Step::Next
    }
}

/// Where a re-stored half went.
struct Replaced {
    queue_offset: u64,
    offset: u64,
    properties: Vec<u8>,
}

/// CHECK_TRANSACTION_STATE for the copy: the header names the copy, the body is the copy
/// re-encoded with its real topic and queue (what Java's `sendCheckMessage` sends).
fn check_request(
    ctx: &BrokerCtx,
    view: &RecordView<'_>,
    info: &HalfInfo<'_>,
    copy: &Replaced,
    uniq: &str,
) -> Option<RemotingCommand> {
    let msg = MessageIn {
        topic: info.real_topic,
        queue_id: info.real_qid,
        ..half::copy_message(view, HALF_TOPIC, 0, &copy.properties)
    };
    let mut body = vec![0u8; msg.encoded_len().ok()?];
    let stamp = StoreStamp {
        queue_offset: copy.queue_offset as i64,
        physical_offset: copy.offset as i64,
        store_timestamp: now_ms(),
    };
    msg.encode(stamp, &mut body).ok()?;
    let id = (!uniq.is_empty()).then(|| uniq.to_owned());
    let header = CheckTransactionStateRequestHeader {
        tran_state_table_offset: copy.queue_offset as i64,
        commit_log_offset: copy.offset as i64,
        msg_id: id.clone(),
        transaction_id: id,
        offset_msg_id: Some(offset_msg_id(ctx.store_host, copy.offset as i64)),
        topic: Some(info.real_topic.to_owned()),
    };
    Some(
        RemotingCommand::request(RequestCode::CheckTransactionState, &header)
            .with_body(body)
            .oneway(),
    )
}

/// Sends a check-back to one live producer of the group: the one heard from last, then
/// the others if writing to it fails.
async fn send_check(ctx: &BrokerCtx, c: CheckRequest) {
    let mut members = ctx.clients.producer_members(&c.group);
    members.retain(|m| !m.conn.is_closed());
    members.sort_by_key(|m| std::cmp::Reverse(m.last_seen));
    for m in members {
        match runtime::timeout(CHECK_SEND_TIMEOUT, m.conn.oneway(c.cmd.clone())).await {
            Ok(Ok(())) => {
                log::debug!("asked {} about transaction {}", m.client_id, c.uniq);
                return;
            }
            Ok(Err(e)) => log::warn!("check-back to {} failed: {e}", m.client_id),
            Err(_) => log::warn!("check-back to {} timed out", m.client_id),
        }
    }
    log::warn!(
        "no producer of group {} online to ask about transaction {}",
        c.group,
        c.uniq
    );
}
