//! The broker's side of controller mode (RocketMQ's `ReplicasManager`,
//! docs/design/controller.md §6): register with the controller group, heartbeat to every
//! controller, learn the role, and switch between master and slave while serving.
//!
//! Start: fenced (a slave that follows nobody, neither registered with the name servers
//! nor taking sends). The id comes from `brokerIdentity`, or is applied for (1012, then
//! 1013 with the temporary file written first so a crash in between retries the same
//! id). Then 1003, and the role loop: 1004 every `syncBrokerMetadataPeriod`, at once when
//! the controller pushes NOTIFY_BROKER_ROLE_CHANGED; a set without a master is asked to
//! elect this broker (1002). A master reports its SyncStateSet (1001) when the slaves
//! caught up with it change.
//!
//! Order on a switch (§11.6): to master, the epoch file gets `<epoch, log end>` durably
//! before the role lets a send in; to slave, the role refuses sends first, then the
//! replication follows the new master.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tern_shell::body::{ElectMasterResponseBody, SyncStateSet};
use tern_shell::body::{from_json, to_json};
use tern_shell::code::RequestCode;
use tern_shell::headers::BrokerHeartbeatRequestHeader;
use tern_shell::headers::{
    AlterSyncStateSetRequestHeader, AlterSyncStateSetResponseHeader, ApplyBrokerIdRequestHeader,
    ElectMasterRequestHeader, ElectMasterResponseHeader, GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
};
use tern_shell::runtime::{self, now_ms};
use tern_shell::{RemotingCommand, ResponseCode, ToExtFields};

use super::replica::Known;
use super::{ControllerError, ControllerMode, IdentityError};
use crate::BrokerCtx;
use crate::config::BrokerRole;

/// Pause before registering again after a failure.
const RETRY: Duration = Duration::from_secs(1);
/// Most ids applied for in one registration attempt (another broker may take each).
const MAX_APPLICATIONS: usize = 5;
/// How long a master waits for a slave joining the SyncStateSet to hold its log end.
const JOIN_WAIT: Duration = Duration::from_secs(2);
/// A slave that does not know its master's HA address yet registers this often.
const LEARN_HA_PERIOD: Duration = Duration::from_secs(1);

/// Runs until shutdown.
pub async fn run(ctx: Arc<BrokerCtx>, cm: Arc<ControllerMode>) {
    let id = loop {
        match register(&ctx, &cm).await {
            Ok(id) => break id,
            Err(e) => log::warn!("registering with the controllers: {e}"),
        }
        if pause(&ctx, RETRY).await {
            return;
        }
    };
    cm.replica.set_broker_id(id);
    log::info!(
        "registered with the controllers as broker id {id} of {}",
        ctx.config.broker_name
    );
    let heartbeats = runtime::spawn(heartbeats(ctx.clone(), cm.clone(), id));
    let checks = runtime::spawn(check_sync_state_set(ctx.clone(), cm.clone(), id));
    loop {
        let notified = cm.replica.notified.listen();
        if let Err(e) = sync_role(&ctx, &cm, id).await {
            log::warn!("learning the role from the controllers: {e}");
        }
        let mut period = ctx.config.controller.sync_broker_metadata_period;
        if ctx.role.is_slave() && !cm.replica.is_fenced() && ctx.ha.master().ha_addr.is_none() {
            // The name servers tell a slave its master's HA address in their answer.
            crate::register::register_all_now(&ctx).await;
            period = period.min(LEARN_HA_PERIOD);
        }
        let _ = runtime::race(
            async {
                let _ = runtime::timeout(period, notified).await;
            },
            ctx.shutdown.wait(),
        )
        .await;
        if ctx.shutdown.is_triggered() {
            break;
        }
    }
    heartbeats.await;
    checks.await;
    cm.client.close().await;
}

/// Sends the request `code` with header `h`, signed, to the controller leader.
async fn call(
    ctx: &BrokerCtx,
    cm: &ControllerMode,
    code: RequestCode,
    h: &impl ToExtFields,
) -> Result<RemotingCommand, ControllerError> {
    cm.client
        .call(ctx.signed(RemotingCommand::request(code, h)))
        .await
}

/// `resp` when it is SUCCESS; otherwise the controller refused `request` (RocketMQ's
/// name for it).
fn succeeded(request: &str, resp: RemotingCommand) -> Result<RemotingCommand, ControllerError> {
    if resp.response_code() == ResponseCode::Success {
        Ok(resp)
    } else {
        Err(ControllerError::refused(request, &resp))
    }
}

/// Sleeps `d` unless the broker stops first; true when it stops.
async fn pause(ctx: &BrokerCtx, d: Duration) -> bool {
    let _ = runtime::race(runtime::sleep(d), ctx.shutdown.wait()).await;
    ctx.shutdown.is_triggered()
}

/// The id (from `brokerIdentity`, or applied for), then CONTROLLER_REGISTER_BROKER.
async fn register(ctx: &Arc<BrokerCtx>, cm: &Arc<ControllerMode>) -> Result<i64, ControllerError> {
    let (cluster, name) = (&ctx.config.cluster_name, &ctx.config.broker_name);
    let id = match cm.replica.read_identity(cluster, name)? {
        Some(id) => id,
        None => apply_for_id(ctx, cm).await?,
    };
    let h = RegisterBrokerToControllerRequestHeader {
        cluster_name: Some(cluster.clone()),
        broker_name: name.clone(),
        broker_id: id,
        broker_address: ctx.store_host.to_string(),
        invoke_time: Some(now_ms() as i64),
    };
    let resp = call(ctx, cm, RequestCode::ControllerRegisterBroker, &h).await?;
    succeeded("CONTROLLER_REGISTER_BROKER", resp)?;
    Ok(id)
}

/// Applies for an id: the one a crash left in the temporary file first (same check
/// code, so the controller recognises the retry), else the controller's next ones.
async fn apply_for_id(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
) -> Result<i64, ControllerError> {
    let (cluster, name) = (&ctx.config.cluster_name, &ctx.config.broker_name);
    if let Some((id, code)) = cm.replica.read_temp_identity(cluster, name)? {
        if apply(ctx, cm, id, &code).await? {
            return Ok(id);
        }
    }
    for _ in 0..MAX_APPLICATIONS {
        let h = GetNextBrokerIdRequestHeader {
            cluster_name: Some(cluster.clone()),
            broker_name: name.clone(),
        };
        let resp = call(ctx, cm, RequestCode::ControllerGetNextBrokerId, &h).await?;
        let next = succeeded("CONTROLLER_GET_NEXT_BROKER_ID", resp)?
            .decode_header::<GetNextBrokerIdResponseHeader>()?
            .next_broker_id
            .ok_or_else(|| {
                ControllerError::Unusable("CONTROLLER_GET_NEXT_BROKER_ID answered no id".into())
            })?;
        let code = format!("{};{}", ctx.store_host, now_ms());
        let written = code.clone();
        blocking_write(ctx, cm, move |cm, c, n| {
            cm.replica.write_temp_identity(c, n, next, &written)
        })
        .await?;
        if apply(ctx, cm, next, &code).await? {
            return Ok(next);
        }
    }
    Err(ControllerError::Unusable(format!(
        "no broker id after {MAX_APPLICATIONS} applications (other brokers took each)"
    )))
}

/// CONTROLLER_APPLY_BROKER_ID for `id`: true once the id is ours and recorded.
async fn apply(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    id: i64,
    code: &str,
) -> Result<bool, ControllerError> {
    let h = ApplyBrokerIdRequestHeader {
        cluster_name: Some(ctx.config.cluster_name.clone()),
        broker_name: ctx.config.broker_name.clone(),
        applied_broker_id: id,
        register_check_code: code.to_owned(),
    };
    let resp = call(ctx, cm, RequestCode::ControllerApplyBrokerId, &h).await?;
    if resp.response_code() != ResponseCode::Success {
        log::info!(
            "{}",
            ControllerError::refused(format!("broker id {id} refused"), &resp)
        );
        cm.replica.drop_temp_identity();
        return Ok(false);
    }
    blocking_write(ctx, cm, move |cm, c, n| {
        cm.replica.confirm_identity(c, n, id)
    })
    .await?;
    Ok(true)
}

/// Runs a file write of the replica's on a blocking thread.
async fn blocking_write(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    f: impl FnOnce(&ControllerMode, &str, &str) -> Result<(), IdentityError> + Send + 'static,
) -> Result<(), ControllerError> {
    let (ctx, cm) = (ctx.clone(), cm.clone());
    runtime::spawn_blocking(move || f(&cm, &ctx.config.cluster_name, &ctx.config.broker_name))
        .await
        .map_err(ControllerError::Identity)
}

/// CONTROLLER_GET_REPLICA_INFO; an election of this broker when the set has no master;
/// then the switch the answer calls for.
async fn sync_role(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    id: i64,
) -> Result<(), ControllerError> {
    let h = GetReplicaInfoRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
    };
    let resp = call(ctx, cm, RequestCode::ControllerGetReplicaInfo, &h).await?;
    if resp.response_code() == ResponseCode::ControllerBrokerMetadataNotExist {
        // The controllers forgot this set (cleanBrokerMetadata): register again.
        register(ctx, cm).await?;
        return Ok(());
    }
    let resp = succeeded("CONTROLLER_GET_REPLICA_INFO", resp)?;
    let h = resp.decode_header::<GetReplicaInfoResponseHeader>()?;
    let set: SyncStateSet = from_json(&resp.body)?;
    let mut known = Known {
        master_id: h.master_broker_id.filter(|m| *m >= 0),
        master_addr: h.master_address.filter(|a| !a.is_empty()),
        master_epoch: h.master_epoch.unwrap_or(0),
        sync_state_set: set.sync_state_set,
        sync_state_set_epoch: set.sync_state_set_epoch,
    };
    if known.master_id.is_none() {
        known = elect_self(ctx, cm, id, known).await?;
    }
    switch(ctx, cm, id, known).await
}

/// CONTROLLER_ELECT_MASTER for this broker (a set without a master).
async fn elect_self(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    id: i64,
    known: Known,
) -> Result<Known, ControllerError> {
    let h = ElectMasterRequestHeader {
        cluster_name: Some(ctx.config.cluster_name.clone()),
        broker_name: ctx.config.broker_name.clone(),
        broker_id: Some(id),
        designate_elect: Some(false),
        invoke_time: Some(now_ms() as i64),
    };
    let resp = call(ctx, cm, RequestCode::ControllerElectMaster, &h).await?;
    if !matches!(
        resp.response_code(),
        ResponseCode::Success | ResponseCode::ControllerMasterStillExist
    ) {
        return Err(ControllerError::refused("CONTROLLER_ELECT_MASTER", &resp));
    }
    let h = resp.decode_header::<ElectMasterResponseHeader>()?;
    let body: Option<ElectMasterResponseBody> = from_json(&resp.body).ok();
    let set = body.map(|b| b.sync_state_set).filter(|s| !s.is_empty());
    Ok(Known {
        master_id: h.master_broker_id.filter(|m| *m >= 0),
        master_addr: h.master_address.filter(|a| !a.is_empty()),
        master_epoch: h.master_epoch.unwrap_or(known.master_epoch),
        sync_state_set_epoch: h.sync_state_set_epoch.unwrap_or(known.sync_state_set_epoch),
        sync_state_set: set.unwrap_or(known.sync_state_set),
    })
}

/// Becomes what `known` says, if that is not what this broker is already.
async fn switch(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    id: i64,
    known: Known,
) -> Result<(), ControllerError> {
    let before = cm.replica.known();
    let was_fenced = cm.replica.is_fenced();
    match (known.master_id, known.master_addr.clone()) {
        (Some(m), _) if m == id => {
            let last = cm.replica.last_epoch();
            if known.master_epoch < last {
                return Err(ControllerError::Unusable(format!(
                    "the controller names this broker master of epoch {}, older than its own \
                     epoch {last}",
                    known.master_epoch
                )));
            }
            if ctx.role.is_slave() || known.master_epoch > last {
                to_master(ctx, cm, known.master_epoch, &known.sync_state_set).await?;
            }
        }
        (Some(m), Some(addr)) => {
            if !ctx.role.is_slave()
                || was_fenced
                || before.master_id != Some(m)
                || before.master_epoch != known.master_epoch
            {
                to_slave(ctx, &addr, m, known.master_epoch);
            }
        }
        _ => {
            return Err(ControllerError::Unusable(
                "the controllers name no master for this set yet".into(),
            ));
        }
    }
    let registered_as_changed = was_fenced || before.master_id != known.master_id;
    cm.replica.set_known(known);
    ctx.update_confirm();
    if was_fenced {
        cm.replica.unfence();
    }
    if registered_as_changed {
        crate::register::register_all_now(ctx).await;
    }
    Ok(())
}

/// Takes the master role of `epoch`: replication from the old master stops, the new term
/// is recorded at the log's end, every record is dispatched, then sends are let in.
async fn to_master(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    epoch: i32,
    set: &[i64],
) -> Result<(), ControllerError> {
    ctx.ha.follow(None);
    // The follower may still be storing a frame: let it finish before reading the end.
    ctx.ha.await_follower_stopped(Duration::from_secs(10)).await;
    // From here no replicated frame lands (a late one is refused under the append lock),
    // so the end read next is where this term starts.
    ctx.store.set_follower(false);
    let end = ctx.store.log_end();
    if epoch > cm.replica.last_epoch() {
        let c = cm.clone();
        runtime::spawn_blocking(move || c.replica.begin_term(epoch, end)).await?;
    }
    // The controllers elect a master with a SyncStateSet of itself, so its whole log is
    // confirmed: what its old master had not confirmed is dispatched before sends come
    // in. The bound comes back as members rejoin the set (`update_confirm`). A master
    // named again with its old set (restarted before the controllers timed it out) has
    // its log, which recovery dispatched, confirmed, and nothing after it until the
    // members acknowledge it.
    let me = cm.replica.broker_id();
    let alone = set.iter().all(|id| Some(*id) == me);
    ctx.store.set_confirm(if alone { u64::MAX } else { end });
    ctx.store.await_caught_up(Duration::from_secs(5)).await;
    ctx.role.set(BrokerRole::SyncMaster);
    log::info!(
        "now master of {} (epoch {epoch}), its term starting at log offset {end}",
        ctx.config.broker_name
    );
    Ok(())
}

/// Takes the slave role under the master `master_id` at `addr`: sends are refused at
/// once, then the replication follows the new master once its HA address is known.
fn to_slave(ctx: &Arc<BrokerCtx>, addr: &str, master_id: i64, epoch: i32) {
    // Local appends stop first (one under way finishes before this returns): whatever
    // this log holds past the master's is cut by the replication handshake.
    ctx.store.set_follower(true);
    ctx.role.set(BrokerRole::Slave);
    ctx.ha.follow(Some(addr.to_owned()));
    log::info!(
        "now a slave of {} (epoch {epoch}): master {master_id} at {addr}",
        ctx.config.broker_name
    );
}

/// BROKER_HEARTBEAT (904) to every controller, every `brokerHeartbeatInterval`.
async fn heartbeats(ctx: Arc<BrokerCtx>, cm: Arc<ControllerMode>, id: i64) {
    let s = &ctx.config.controller;
    while !ctx.shutdown.is_triggered() {
        let end = ctx.store.log_end() as i64;
        let h = BrokerHeartbeatRequestHeader {
            cluster_name: ctx.config.cluster_name.clone(),
            broker_addr: ctx.store_host.to_string(),
            broker_name: ctx.config.broker_name.clone(),
            broker_id: Some(id),
            epoch: Some(cm.replica.last_epoch()),
            max_offset: Some(end),
            confirm_offset: Some(ctx.store.confirm_offset() as i64),
            heartbeat_timeout_mills: Some(s.heartbeat_timeout.as_millis() as i64),
            election_priority: Some(s.election_priority),
        };
        let req = ctx.signed(RemotingCommand::request(RequestCode::BrokerHeartbeat, &h));
        cm.client.send_to_all(&req).await;
        if pause(&ctx, s.heartbeat_interval).await {
            break;
        }
    }
}

/// A master's SyncStateSet upkeep: every `checkSyncStateSetPeriod`, and at once when a
/// slave connects, catches up or goes, the set of caught-up slaves (and this broker) is
/// proposed to the controller when it differs from the confirmed one.
async fn check_sync_state_set(ctx: Arc<BrokerCtx>, cm: Arc<ControllerMode>, id: i64) {
    let s = &ctx.config.controller;
    while !ctx.shutdown.is_triggered() {
        let moved = ctx.ha.listen_members();
        if !ctx.role.is_slave() && !cm.replica.is_fenced() {
            let known = cm.replica.known();
            let mut set: BTreeSet<i64> = ctx
                .ha
                .caught_up_members(s.max_time_slave_not_catchup)
                .into_iter()
                .collect();
            set.insert(id);
            let confirmed: BTreeSet<i64> = known.sync_state_set.iter().copied().collect();
            if set != confirmed && known.master_id == Some(id) {
                // Sends wait for the proposed members from now on; each newcomer must
                // then hold everything appended before, so every send answered before
                // the controller agrees is on it too (RocketMQ's join rule).
                cm.replica.set_proposed(set.iter().copied().collect());
                ctx.update_confirm();
                let joined: Vec<i64> = set.difference(&confirmed).copied().collect();
                let target = ctx.store.log_end();
                if holds(&ctx, &joined, target).await {
                    if let Err(e) = alter(&ctx, &cm, id, &known, set).await {
                        log::info!("proposing the SyncStateSet: {e}");
                    }
                }
                cm.replica.set_proposed(Vec::new());
                ctx.update_confirm();
            }
        }
        let _ = runtime::race(
            async {
                let _ = runtime::timeout(s.check_sync_state_set_period, moved).await;
            },
            ctx.shutdown.wait(),
        )
        .await;
    }
}

/// Waits (at most [`JOIN_WAIT`]) until every slave of `ids` acknowledged `target`.
async fn holds(ctx: &BrokerCtx, ids: &[i64], target: u64) -> bool {
    let deadline = std::time::Instant::now() + JOIN_WAIT;
    loop {
        let moved = ctx.ha.listen_members();
        if ids
            .iter()
            .all(|id| ctx.ha.member_offset(*id).is_some_and(|o| o >= target))
        {
            return true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || ctx.shutdown.is_triggered() {
            return false;
        }
        // Acknowledgements move the members' offsets without waking this listener:
        // bounded steps.
        let _ = runtime::timeout(left.min(Duration::from_millis(20)), moved).await;
    }
}

/// CONTROLLER_ALTER_SYNC_STATE_SET; the confirmed set is adopted.
async fn alter(
    ctx: &Arc<BrokerCtx>,
    cm: &Arc<ControllerMode>,
    id: i64,
    known: &Known,
    set: BTreeSet<i64>,
) -> Result<(), ControllerError> {
    let h = AlterSyncStateSetRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        master_broker_id: id,
        master_epoch: known.master_epoch,
        invoke_time: Some(now_ms() as i64),
    };
    let body = SyncStateSet {
        sync_state_set: set.iter().copied().collect(),
        sync_state_set_epoch: known.sync_state_set_epoch,
    };
    let req = RemotingCommand::request(RequestCode::ControllerAlterSyncStateSet, &h)
        .with_body(to_json(&body));
    let resp = cm.client.call(ctx.signed(req)).await?;
    if resp.response_code() != ResponseCode::Success {
        // A stale epoch: the next role sync brings the controller's view.
        cm.replica.notified.notify(1);
        return Err(ControllerError::refused(
            "CONTROLLER_ALTER_SYNC_STATE_SET",
            &resp,
        ));
    }
    let epoch = resp
        .decode_header::<AlterSyncStateSetResponseHeader>()?
        .new_sync_state_set_epoch;
    log::info!(
        "SyncStateSet of {} is now {:?} (epoch {epoch})",
        ctx.config.broker_name,
        set
    );
    cm.replica
        .set_sync_state_set(set.into_iter().collect(), epoch);
    ctx.update_confirm();
    Ok(())
}
