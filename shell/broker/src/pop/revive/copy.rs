//! The retry copy of one popped message its checkpoint did not see acked in time: what
//! the revive service stores in the pop retry topic (or the DLQ), and why it could not.

use tern_engine::properties::{self, key};
use tern_engine::record::{MessageIn, RecordError, RecordView};
use tern_shell::pop::{FIRST_POP_TIME, POP_CK, PopCheckPoint, is_retry_topic};

use crate::BrokerCtx;
use crate::processor::send::host;
use crate::store::{EntryReadError, PutError};

/// Default `retryMaxTimes` of a group the table does not hold.
const DEFAULT_MAX_RECONSUME: i32 = 16;

/// Why a message's retry copy was not stored; the revive is tried again later.
#[derive(Debug)]
pub(super) enum ReviveError {
    /// The checkpoint's queue entry could not be read.
    Entry(EntryReadError),
    /// The record the entry points at is not a message.
    Unreadable(RecordError),
    /// The store refused or failed the copy.
    Put(PutError),
}

impl std::fmt::Display for ReviveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReviveError::Entry(e) => e.fmt(f),
            ReviveError::Unreadable(e) => write!(f, "the message is unreadable: {e}"),
            ReviveError::Put(e) => write!(f, "the retry copy was not stored: {e}"),
        }
    }
}

impl std::error::Error for ReviveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReviveError::Entry(e) => Some(e),
            ReviveError::Unreadable(e) => Some(e),
            ReviveError::Put(e) => Some(e),
        }
    }
}

impl From<EntryReadError> for ReviveError {
    fn from(e: EntryReadError) -> Self {
        ReviveError::Entry(e)
    }
}

impl From<RecordError> for ReviveError {
    fn from(e: RecordError) -> Self {
        ReviveError::Unreadable(e)
    }
}

impl From<PutError> for ReviveError {
    fn from(e: PutError) -> Self {
        ReviveError::Put(e)
    }
}

/// Stores the retry copy of the message at `offset` of the checkpoint's queue. A
/// message gone (retention) counts as done.
pub(super) fn revive_one(
    ctx: &BrokerCtx,
    ck: &PopCheckPoint,
    offset: i64,
) -> Result<(), ReviveError> {
    if ctx.topics.get(&ck.topic).is_none() {
        // The topic was deleted: nothing to revive.
        return Ok(());
    }
    let Some(entry) = ctx
        .store
        .queue_entry(&ck.topic, ck.queue_id, offset.max(0) as u64)?
    else {
        return Ok(());
    };
    let Some(bytes) = ctx.store.record_of(entry) else {
        return Ok(());
    };
    let view = RecordView::parse(&bytes)?;
    let reconsume = view.reconsume_times().saturating_add(1);
    let max = ctx
        .groups
        .get(&ck.cid)
        .map_or(DEFAULT_MAX_RECONSUME, |g| g.retry_max_times);
    let target = if ctx.config.pop.pop_revive_to_dlq && reconsume > max {
        format!("%DLQ%{}", ck.cid)
    } else if is_retry_topic(&ck.topic) {
        ck.topic.clone()
    } else {
        ctx.config.pop.retry_topic(&ck.topic, &ck.cid)
    };
    if ctx.topics.get(&target).is_none() {
        ctx.topics.ensure(&target, 1, 6);
        ctx.request_registration();
    }
    let mut props = Vec::with_capacity(view.properties().len() + 32);
    for (n, v) in properties::Properties::new(view.properties()) {
        // A copy is visible at once: no delay or timer, and no stale handle.
        if n == key::DELAY || n.starts_with("TIMER_") || n == POP_CK || n == FIRST_POP_TIME {
            continue;
        }
        props.extend_from_slice(n.as_bytes());
        props.push(properties::NAME_VALUE_SEPARATOR);
        props.extend_from_slice(v.as_bytes());
        props.push(properties::PROPERTY_SEPARATOR);
    }
    let first = properties::get(view.properties(), FIRST_POP_TIME)
        .filter(|_| view.reconsume_times() > 0)
        .map_or_else(|| ck.pop_time.to_string(), str::to_owned);
    props = crate::schedule::message::with_properties(&props, &[(FIRST_POP_TIME, &first)]);
    let me = host(ctx.store_host);
    ctx.store.put(&MessageIn {
        topic: &target,
        queue_id: 0,
        flag: view.flag(),
        sys_flag: view.sys_flag(),
        born_timestamp: view.born_timestamp(),
        born_host: me,
        store_host: me,
        reconsume_times: reconsume,
        prepared_transaction_offset: 0,
        body: view.body(),
        properties: &props,
    })?;
    Ok(())
}
