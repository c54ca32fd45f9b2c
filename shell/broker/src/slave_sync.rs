//! A slave's copy of its master's metadata (RocketMQ 4.x's `SlaveSynchronize`): the topic
//! table, consumer offsets, delay-level progress and subscription groups. The commit log
//! itself is replicated elsewhere (HA); this copy is what lets consumers that fail over
//! to the slave resume where they were and find the same topics and groups.
//!
//! Each table is fetched and applied on its own, in Java's order, so a master that fails
//! one request still updates the others. Apply steps never await: a sync cancelled at
//! shutdown leaves each table either as it was or fully copied.
//!
//! What the slave takes, as Java does:
//! - topics and groups: the master's whole table and data version, when the version
//!   differs from the slave's or the slave changed its table since the last copy (topics
//!   keep the slave's system topics the master lacks);
//! - consumer offsets: every `topic@group` the master has replaces the slave's, others
//!   stay;
//! - delay offsets: the master's table replaces the slave's.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tern_shell::body::{
    ConsumerOffsetSerializeWrapper, DelayOffsetSerializeWrapper, SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
};
use tern_shell::code::RequestCode;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RemotingError, ResponseCode};

use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::register::ErrorAnswer;

/// Period between two syncs (RocketMQ 4.9's `handleSlaveSynchronize`).
pub const SYNC_PERIOD: Duration = Duration::from_secs(10);
/// How long one request to the master may take (RocketMQ's `BrokerOuterAPI` uses 3 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long connecting to the master may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why one table was not copied; each names the request it came from.
#[derive(Debug)]
pub enum SyncError {
    /// The request failed on the connection (which is closed, so the next one dials).
    Remoting(RequestCode, RemotingError),
    /// The master answered the request with an error.
    Refused(RequestCode, ErrorAnswer),
    /// The master's body is not what the request returns: why.
    Body(RequestCode, String),
    /// The master's delay offsets arrived but could not be saved here.
    DelayOffsetsNotSaved,
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Remoting(request, e) => write!(f, "{request:?}: {e}"),
            Self::Refused(request, answer) => write!(f, "{request:?}: {answer}"),
            Self::Body(request, why) => write!(f, "{request:?}: {why}"),
            Self::DelayOffsetsNotSaved => {
                f.write_str("delay offsets from the master could not be saved")
            }
        }
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Remoting(_, e) => Some(e),
            Self::Refused(_, answer) => Some(answer),
            Self::Body(..) | Self::DelayOffsetsNotSaved => None,
        }
    }
}

/// Copies the master's four tables once. Every table is attempted; the first failure is
/// returned (each is also logged) and leaves that table as it was.
pub async fn sync_once(ctx: &BrokerCtx, master_addr: &str) -> Result<(), SyncError> {
    let results = [
        sync_topics(ctx, master_addr).await,
        sync_consumer_offsets(ctx, master_addr).await,
        sync_delay_offsets(ctx, master_addr).await,
        sync_groups(ctx, master_addr).await,
        sync_timer_progress(ctx, master_addr).await,
    ];
    let mut first = Ok(());
    for r in results {
        if let Err(e) = r {
            log::warn!("slave sync from {master_addr}: {e}");
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// The slave's sync task: at start and then every [`SYNC_PERIOD`] until shutdown, from
/// whatever address `master` gives at that moment (`None`: the master is not known yet,
/// skip the round). Returns at once on a master.
pub async fn run(ctx: Arc<BrokerCtx>, master: impl Fn() -> Option<String> + Send + 'static) {
    if ctx.role.get() != BrokerRole::Slave {
        return;
    }
    while !ctx.shutdown.is_triggered() {
        let pause = if let Some(addr) = master() {
            // Errors are logged by `sync_once`; the next round retries. Shutdown does not
            // wait for a master that is slow to answer.
            let _ = runtime::race(
                async {
                    let _ = sync_once(&ctx, &addr).await;
                },
                ctx.shutdown.wait(),
            )
            .await;
            SYNC_PERIOD
        } else {
            // The next registration answer names the master: look again soon.
            Duration::from_secs(1)
        };
        let _ = runtime::race(runtime::sleep(pause), ctx.shutdown.wait()).await;
    }
}

async fn sync_topics(ctx: &BrokerCtx, addr: &str) -> Result<(), SyncError> {
    let w: TopicConfigSerializeWrapper = fetch(ctx, addr, RequestCode::GetAllTopicConfig).await?;
    if ctx.topics.replace_from_master(w) {
        log::info!("topic table updated from master {addr}");
    }
    ctx.topics.persisted().await;
    Ok(())
}

async fn sync_consumer_offsets(ctx: &BrokerCtx, addr: &str) -> Result<(), SyncError> {
    let w: ConsumerOffsetSerializeWrapper =
        fetch(ctx, addr, RequestCode::GetAllConsumerOffset).await?;
    ctx.offsets.put_all(offset_table(w));
    ctx.offsets.persist();
    ctx.offsets.persisted().await;
    Ok(())
}

async fn sync_delay_offsets(ctx: &BrokerCtx, addr: &str) -> Result<(), SyncError> {
    let w: DelayOffsetSerializeWrapper = fetch(ctx, addr, RequestCode::GetAllDelayOffset).await?;
    if ctx.schedule.offsets().replace_from_master(w) {
        Ok(())
    } else {
        Err(SyncError::DelayOffsetsNotSaved)
    }
}

async fn sync_groups(ctx: &BrokerCtx, addr: &str) -> Result<(), SyncError> {
    let w: SubscriptionGroupWrapper =
        fetch(ctx, addr, RequestCode::GetAllSubscriptionGroupConfig).await?;
    if ctx.groups.replace_from_master(w) {
        log::info!("subscription groups updated from master {addr}");
    }
    ctx.groups.persisted().await;
    Ok(())
}

/// In controller mode, where this replica may be promoted: the master's timer checkpoint
/// (RocketMQ's `syncTimerCheckPoint`), kept by the timer for the promotion.
async fn sync_timer_progress(ctx: &BrokerCtx, addr: &str) -> Result<(), SyncError> {
    if ctx.controller.is_none() {
        return Ok(());
    }
    let code = RequestCode::GetTimerCheckPoint;
    let resp = ask(ctx, addr, code).await?;
    if resp.response_code() != ResponseCode::Success {
        // No checkpoint there yet (a timer that has not run a flush interval): nothing
        // to take over.
        return Ok(());
    }
    let c = crate::timer::progress::decode(&resp.body)
        .ok_or_else(|| SyncError::Body(code, "the body is not a timer checkpoint".into()))?;
    ctx.timer.note_master_progress(c, ctx.store.log_end());
    Ok(())
}

/// The wire table's queue ids as `i32`; an id out of range cannot name a queue and is
/// dropped.
fn offset_table(w: ConsumerOffsetSerializeWrapper) -> BTreeMap<String, BTreeMap<i32, i64>> {
    w.offset_table
        .into_iter()
        .map(|(key, queues)| {
            let queues = queues
                .0
                .into_iter()
                .filter_map(|(q, o)| Some((i32::try_from(q).ok()?, o)))
                .collect();
            (key, queues)
        })
        .collect()
}

/// Sends `code` (no header) to the master; its answer.
async fn ask(ctx: &BrokerCtx, addr: &str, code: RequestCode) -> Result<RemotingCommand, SyncError> {
    let req = ctx.signed(RemotingCommand::request_code(code));
    match ctx.master_conn.invoke(addr, req, REQUEST_TIMEOUT).await {
        Ok(r) => Ok(r),
        Err(e) => {
            // A timed-out connection may be wedged: the next request dials afresh.
            ctx.master_conn.close(addr).await;
            Err(SyncError::Remoting(code, e))
        }
    }
}

/// Sends `code` (no header) to the master and decodes a SUCCESS answer's JSON body.
async fn fetch<T: DeserializeOwned>(
    ctx: &BrokerCtx,
    addr: &str,
    code: RequestCode,
) -> Result<T, SyncError> {
    let resp = ask(ctx, addr, code).await?;
    if resp.response_code() != ResponseCode::Success {
        return Err(SyncError::Refused(code, ErrorAnswer::of(&resp)));
    }
    tern_shell::body::from_json(&resp.body)
        .map_err(|e| SyncError::Body(code, format!("bad body: {e}")))
}
