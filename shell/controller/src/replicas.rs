//! The leader's operations on broker-sets (RocketMQ's `ReplicasInfoManager`, with its
//! checks in its order and its codes, docs/design/controller.md §3): each validates
//! against the applied state and the heartbeat table, proposes a [`Command`], and answers
//! from the outcome of its apply, which re-checks what the decision was made on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_shell::body::{
    BrokerMemberGroup, BrokerReplicasInfo, ElectMasterResponseBody, NumKeyMap, ReplicaIdentity,
    ReplicasInfo, SyncStateSet, from_json, to_json,
};
use tern_shell::headers::{
    AlterSyncStateSetRequestHeader, AlterSyncStateSetResponseHeader, ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader, CleanControllerBrokerDataRequestHeader, ElectMasterRequestHeader,
    ElectMasterResponseHeader, FromExtFields, GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader,
    NotifyBrokerRoleChangedRequestHeader, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode, runtime};

use crate::elect;
use crate::processor::{Inner, fail};
use crate::state::{BrokerSet, Command, FIRST_BROKER_ID, Outcome};

/// Broker-set names one CONTROLLER_GET_SYNC_STATE_DATA may ask for.
pub const MAX_NAMES_PER_QUERY: usize = 4096;

/// How long a NOTIFY_BROKER_ROLE_CHANGED may take (RocketMQ's 3 s).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);

fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, ResponseCode::Success)
}

fn header<H: FromExtFields>(req: &RemotingCommand) -> Result<H, RemotingCommand> {
    req.decode_header()
        .map_err(|e| fail(req, ResponseCode::SystemError, e.to_string()))
}

fn sss_body(set: &BrokerSet) -> Vec<u8> {
    to_json(&SyncStateSet {
        sync_state_set: set.sync_state_set.iter().copied().collect(),
        sync_state_set_epoch: set.sync_state_set_epoch,
    })
}

/// Serves a leader-only request.
pub(crate) async fn serve(inner: &Arc<Inner>, req: &RemotingCommand) -> RemotingCommand {
    let turn = match inner.leader_turn(req).await {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let read = matches!(
        req.request_code_enum(),
        RequestCode::ControllerGetNextBrokerId
            | RequestCode::ControllerGetReplicaInfo
            | RequestCode::ControllerGetSyncStateData
    );
    if read && inner.config.process_read_event {
        if let Err(e) = inner.raft.confirm_leader().await {
            return inner.write_refusal(req, e);
        }
    }
    let answer = match req.request_code_enum() {
        RequestCode::ControllerApplyBrokerId => apply_broker_id(inner, req).await,
        RequestCode::ControllerGetNextBrokerId => next_broker_id(inner, req),
        RequestCode::ControllerRegisterBroker => register(inner, req).await,
        RequestCode::ControllerGetReplicaInfo => replica_info(inner, req),
        RequestCode::ControllerGetSyncStateData => sync_state_data(inner, req),
        RequestCode::ControllerAlterSyncStateSet => alter_sync_state_set(inner, req).await,
        RequestCode::ControllerElectMaster => elect_master(inner, req).await,
        RequestCode::CleanBrokerData => clean(inner, req).await,
        _ => Ok(tern_shell::connection::not_supported(req)),
    };
    drop(turn);
    answer.unwrap_or_else(|refusal| refusal)
}

type Reply = Result<RemotingCommand, RemotingCommand>;

/// Proposes `cmd`; a refusal by apply becomes the answer.
async fn propose(
    inner: &Inner,
    req: &RemotingCommand,
    cmd: Command,
) -> Result<(), RemotingCommand> {
    match inner.raft.write(cmd).await {
        Ok(Outcome::Done) => Ok(()),
        Ok(Outcome::Refused { code, remark }) => {
            Err(fail(req, ResponseCode::from_raw(code), remark))
        }
        Err(e) => Err(inner.write_refusal(req, e)),
    }
}

async fn apply_broker_id(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: ApplyBrokerIdRequestHeader = header(req)?;
    let cluster = h.cluster_name.clone().unwrap_or_default();
    let addr = h
        .register_check_code
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();
    let taken = inner.raft.shared().read(|m| match m.set(&h.broker_name) {
        None => h.applied_broker_id != FIRST_BROKER_ID,
        Some(s) => s
            .replicas
            .get(&h.applied_broker_id)
            .is_some_and(|r| r.check_code != h.register_check_code),
    });
    if taken {
        return Err(fail(
            req,
            ResponseCode::ControllerBrokerIdInvalid,
            format!(
                "Fail to apply brokerId: {} in broker-set: {}",
                h.applied_broker_id, h.broker_name
            ),
        ));
    }
    propose(
        inner,
        req,
        Command::ApplyBrokerId {
            cluster: cluster.clone(),
            name: h.broker_name.clone(),
            id: h.applied_broker_id,
            addr,
            check_code: h.register_check_code,
        },
    )
    .await?;
    Ok(ok(req).with_header(&ApplyBrokerIdResponseHeader {
        cluster_name: Some(cluster),
        broker_name: Some(h.broker_name),
    }))
}

fn next_broker_id(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: GetNextBrokerIdRequestHeader = header(req)?;
    let next = inner
        .raft
        .shared()
        .read(|m| m.next_broker_id(&h.broker_name));
    Ok(ok(req).with_header(&GetNextBrokerIdResponseHeader {
        cluster_name: h.cluster_name,
        broker_name: Some(h.broker_name),
        next_broker_id: Some(next),
    }))
}

async fn register(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: RegisterBrokerToControllerRequestHeader = header(req)?;
    let stored = inner.raft.shared().read(|m| {
        m.set(&h.broker_name)
            .and_then(|s| s.replicas.get(&h.broker_id))
            .map(|r| r.addr.clone())
    });
    let Some(stored) = stored else {
        return Err(fail(
            req,
            ResponseCode::ControllerBrokerNeedToBeRegistered,
            format!(
                "broker {} id {} has not applied for its id",
                h.broker_name, h.broker_id
            ),
        ));
    };
    if stored != h.broker_address {
        propose(
            inner,
            req,
            Command::UpdateAddr {
                name: h.broker_name.clone(),
                id: h.broker_id,
                addr: h.broker_address.clone(),
            },
        )
        .await?;
    }
    let now = Instant::now();
    let (mut resp, body) = inner.raft.shared().read(|m| {
        let set = m.set(&h.broker_name);
        let mut resp = RegisterBrokerToControllerResponseHeader {
            cluster_name: h.cluster_name.clone(),
            broker_name: Some(h.broker_name.clone()),
            ..Default::default()
        };
        if let Some(s) = set {
            let live = s
                .master
                .filter(|&id| inner.heartbeats.alive(&h.broker_name, id, now).is_some());
            if let Some(id) = live {
                resp.master_broker_id = Some(id);
                resp.master_address = s.master_addr().map(str::to_owned);
                resp.master_epoch = Some(s.master_epoch);
                resp.sync_state_set_epoch = Some(s.sync_state_set_epoch);
            }
        }
        (resp, set.map(sss_body).unwrap_or_default())
    });
    if resp.cluster_name.is_none() {
        resp.cluster_name = inner
            .raft
            .shared()
            .read(|m| m.set(&h.broker_name).map(|s| s.cluster.clone()));
    }
    Ok(ok(req).with_header(&resp).with_body(body))
}

fn replica_info(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: GetReplicaInfoRequestHeader = header(req)?;
    inner.raft.shared().read(|m| {
        let Some(s) = m.set(&h.broker_name) else {
            return Err(fail(
                req,
                ResponseCode::ControllerBrokerMetadataNotExist,
                "Broker metadata is not existed",
            ));
        };
        Ok(ok(req)
            .with_header(&GetReplicaInfoResponseHeader {
                master_broker_id: s.master,
                master_address: s.master_addr().map(str::to_owned),
                master_epoch: Some(s.master_epoch),
            })
            .with_body(sss_body(s)))
    })
}

fn sync_state_data(inner: &Inner, req: &RemotingCommand) -> Reply {
    let names: Vec<String> = match req.body.as_slice() {
        b if !b.is_empty() => from_json(b)
            .map_err(|e| fail(req, ResponseCode::SystemError, format!("broker names: {e}")))?,
        _ => {
            return Err(fail(
                req,
                ResponseCode::SystemError,
                "the body must list broker names",
            ));
        }
    };
    if names.len() > MAX_NAMES_PER_QUERY {
        return Err(fail(
            req,
            ResponseCode::SystemError,
            format!("at most {MAX_NAMES_PER_QUERY} broker names per request"),
        ));
    }
    let now = Instant::now();
    let info = inner.raft.shared().read(|m| {
        let mut info = BrokerReplicasInfo::default();
        for name in names {
            let Some(s) = m.set(&name) else { continue };
            let mut entry = ReplicasInfo {
                master_broker_id: s.master,
                master_address: s.master_addr().unwrap_or_default().to_owned(),
                master_epoch: s.master_epoch,
                sync_state_set_epoch: s.sync_state_set_epoch,
                ..Default::default()
            };
            for (&id, r) in &s.replicas {
                let replica = ReplicaIdentity {
                    broker_name: name.clone(),
                    broker_id: id,
                    broker_address: r.addr.clone(),
                    alive: inner.heartbeats.alive(&name, id, now).is_some(),
                };
                if s.sync_state_set.contains(&id) {
                    entry.in_sync_replicas.push(replica);
                } else {
                    entry.not_in_sync_replicas.push(replica);
                }
            }
            info.replicas_info_table.insert(name, entry);
        }
        info
    });
    Ok(ok(req).with_body(to_json(&info)))
}

async fn alter_sync_state_set(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: AlterSyncStateSetRequestHeader = header(req)?;
    let proposed: SyncStateSet = from_json(&req.body).map_err(|e| {
        fail(
            req,
            ResponseCode::SystemError,
            format!("sync state set: {e}"),
        )
    })?;
    let members: BTreeSet<i64> = proposed.sync_state_set.iter().copied().collect();
    let now = Instant::now();
    let failed = ResponseCode::ControllerAlterSyncStateSetFailed;
    inner.raft.shared().read(|m| {
        let Some(s) = m.set(&h.broker_name) else {
            return Err(fail(req, failed, "Broker metadata is not existed"));
        };
        if s.sync_state_set == members {
            return Err(fail(req, failed, "The newSyncStateSet is equal with current syncStateSet"));
        }
        if s.master != Some(h.master_broker_id) {
            return Err(fail(
                req,
                ResponseCode::ControllerInvalidMaster,
                format!("Rejecting alter syncStateSet request because the current leader is:{:?}, not {}", s.master, h.master_broker_id),
            ));
        }
        if s.master_epoch != h.master_epoch {
            return Err(fail(
                req,
                ResponseCode::ControllerFencedMasterEpoch,
                format!("Rejecting alter syncStateSet request because the current master epoch is:{}, not {}", s.master_epoch, h.master_epoch),
            ));
        }
        if s.sync_state_set_epoch != proposed.sync_state_set_epoch {
            return Err(fail(
                req,
                ResponseCode::ControllerFencedSyncStateSetEpoch,
                format!("Rejecting alter syncStateSet request because the current syncStateSet epoch is:{}, not {}", s.sync_state_set_epoch, proposed.sync_state_set_epoch),
            ));
        }
        for id in &members {
            if !s.replicas.contains_key(id) {
                return Err(fail(
                    req,
                    ResponseCode::ControllerInvalidReplicas,
                    format!("Rejecting alter syncStateSet request because the replicas {id} don't exist"),
                ));
            }
            if inner.heartbeats.alive(&h.broker_name, *id, now).is_none() {
                return Err(fail(
                    req,
                    ResponseCode::ControllerBrokerNotAlive,
                    format!("Rejecting alter syncStateSet request because the replicas {id} don't alive"),
                ));
            }
        }
        if !members.contains(&h.master_broker_id) {
            return Err(fail(req, failed, "Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin leader"));
        }
        Ok(())
    })?;
    propose(
        inner,
        req,
        Command::AlterSyncStateSet {
            name: h.broker_name.clone(),
            members: members.clone(),
            master: h.master_broker_id,
            master_epoch: h.master_epoch,
            sync_state_set_epoch: proposed.sync_state_set_epoch,
        },
    )
    .await?;
    let epoch = proposed.sync_state_set_epoch + 1;
    Ok(ok(req)
        .with_header(&AlterSyncStateSetResponseHeader {
            new_sync_state_set_epoch: epoch,
        })
        .with_body(to_json(&SyncStateSet {
            sync_state_set: members.into_iter().collect(),
            sync_state_set_epoch: epoch,
        })))
}

/// Who asked for an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// A broker, for itself (it becomes master outright in a new set).
    Broker(i64),
    /// An operator (mqadmin electMaster): exactly this broker or nobody.
    Admin(i64),
    /// The controller, after the master went silent.
    Controller,
}

async fn elect_master(inner: &Arc<Inner>, req: &RemotingCommand) -> Reply {
    let h: ElectMasterRequestHeader = header(req)?;
    let trigger = match (
        h.broker_id.filter(|&id| id >= 0),
        h.designate_elect.unwrap_or(false),
    ) {
        (Some(id), true) => Trigger::Admin(id),
        (Some(id), false) => Trigger::Broker(id),
        (None, _) => Trigger::Controller,
    };
    elect_in(inner, req, &h.broker_name, trigger).await
}

/// The election itself, inside the leader's turn.
async fn elect_in(
    inner: &Arc<Inner>,
    req: &RemotingCommand,
    name: &str,
    trigger: Trigger,
) -> Reply {
    let now = Instant::now();
    let decision = inner.raft.shared().read(|m| {
        let Some(s) = m.set(name) else {
            return Err(fail(
                req,
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("Broker {name} has not been registered"),
            ));
        };
        let chosen = match trigger {
            Trigger::Broker(id) if s.master_epoch == 0 && s.replicas.contains_key(&id) => Some(id),
            Trigger::Broker(_) | Trigger::Controller => elect::elect(
                name,
                s,
                &inner.heartbeats,
                inner.config.enable_elect_unclean_master,
                None,
                now,
            ),
            Trigger::Admin(id) => elect::elect(
                name,
                s,
                &inner.heartbeats,
                inner.config.enable_elect_unclean_master,
                Some(id),
                now,
            ),
        };
        Ok((chosen, s.clone()))
    })?;
    let (chosen, set) = decision;
    match chosen {
        Some(id) if set.master == Some(id) => {
            let body = ElectMasterResponseBody {
                broker_member_group: None,
                sync_state_set: set.sync_state_set.iter().copied().collect(),
            };
            Err(fail(
                req,
                ResponseCode::ControllerMasterStillExist,
                "The old master is still alive",
            )
            .with_header(&master_header(&set))
            .with_body(to_json(&body)))
        }
        Some(id) => {
            propose(
                inner,
                req,
                Command::Elect {
                    name: name.to_owned(),
                    master: Some(id),
                    expect_master_epoch: set.master_epoch,
                },
            )
            .await?;
            let after = inner.raft.shared().read(|m| m.set(name).cloned());
            let Some(after) = after else {
                return Err(fail(
                    req,
                    ResponseCode::ControllerElectMasterFailed,
                    "the broker-set was removed",
                ));
            };
            log::info!(
                "controller: broker {name} id {id} elected master at epoch {}",
                after.master_epoch
            );
            if inner.config.notify_broker_role_changed {
                notify_role_changed(inner, name, &after);
            }
            let body = ElectMasterResponseBody {
                broker_member_group: Some(BrokerMemberGroup {
                    cluster: after.cluster.clone(),
                    broker_name: name.to_owned(),
                    broker_addrs: NumKeyMap(
                        after
                            .replicas
                            .iter()
                            .map(|(&id, r)| (id, r.addr.clone()))
                            .collect(),
                    ),
                }),
                sync_state_set: after.sync_state_set.iter().copied().collect(),
            };
            Ok(ok(req)
                .with_header(&master_header(&after))
                .with_body(to_json(&body)))
        }
        None if trigger == Trigger::Controller => {
            if set.master.is_some() {
                // The master is gone and nobody can take over: record that there is none,
                // so a stale master is fenced by the epoch when it returns.
                propose(
                    inner,
                    req,
                    Command::Elect {
                        name: name.to_owned(),
                        master: None,
                        expect_master_epoch: set.master_epoch,
                    },
                )
                .await?;
                log::warn!("controller: {name} has no live replica to elect; it has no master");
            }
            Err(fail(
                req,
                ResponseCode::ControllerMasterNotAvailable,
                "Failed to elect a new master",
            ))
        }
        None => Err(fail(
            req,
            ResponseCode::ControllerElectMasterFailed,
            "Failed to elect a new master",
        )),
    }
}

fn master_header(s: &BrokerSet) -> ElectMasterResponseHeader {
    ElectMasterResponseHeader {
        master_broker_id: s.master,
        master_address: s.master_addr().map(str::to_owned),
        master_epoch: Some(s.master_epoch),
        sync_state_set_epoch: Some(s.sync_state_set_epoch),
    }
}

/// An election the controller starts (the master went inactive, or the scan found a set
/// without a live master), with RocketMQ's retries.
pub(crate) async fn elect_by_controller(inner: &Arc<Inner>, name: &str) {
    let req = RemotingCommand::request_code(RequestCode::ControllerElectMaster);
    for attempt in 1..=inner.config.elect_master_max_retry_count.max(1) {
        let turn = match inner.leader_turn(&req).await {
            Ok(t) => t,
            Err(_) => return,
        };
        let result = elect_in(inner, &req, name, Trigger::Controller).await;
        drop(turn);
        match result {
            Ok(_) => return,
            Err(resp) => match resp.response_code() {
                ResponseCode::ControllerMasterStillExist
                | ResponseCode::ControllerMasterNotAvailable
                | ResponseCode::ControllerBrokerNeedToBeRegistered => return,
                _ => log::warn!(
                    "controller: election {attempt} for {name} failed: {}",
                    resp.remark.as_deref().unwrap_or("")
                ),
            },
        }
        runtime::sleep(Duration::from_secs(3)).await;
    }
}

/// Sends NOTIFY_BROKER_ROLE_CHANGED to every live replica of the set, in the background.
fn notify_role_changed(inner: &Arc<Inner>, name: &str, set: &BrokerSet) {
    let now = Instant::now();
    let header = NotifyBrokerRoleChangedRequestHeader {
        master_address: set.master_addr().map(str::to_owned),
        master_epoch: Some(set.master_epoch),
        sync_state_set_epoch: Some(set.sync_state_set_epoch),
        master_broker_id: set.master,
    };
    let body = sss_body(set);
    for &id in set.replicas.keys() {
        let Some(live) = inner.heartbeats.alive(name, id, now) else {
            continue;
        };
        let cmd = RemotingCommand::request(RequestCode::NotifyBrokerRoleChanged, &header)
            .with_body(body.clone());
        let me = inner.clone();
        drop(runtime::spawn(async move {
            let sent =
                runtime::timeout(NOTIFY_TIMEOUT, me.brokers.invoke_oneway(&live.addr, cmd)).await;
            if !matches!(sent, Ok(Ok(()))) {
                log::warn!("controller: could not notify {} of its role", live.addr);
            }
        }));
    }
}

async fn clean(inner: &Inner, req: &RemotingCommand) -> Reply {
    let h: CleanControllerBrokerDataRequestHeader = header(req)?;
    let invalid = ResponseCode::ControllerInvalidCleanBrokerMetadata;
    let living = h.is_clean_living_broker.unwrap_or(false);
    let ids: Option<Vec<i64>> = match h.broker_controller_ids_to_clean.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            text.split(';')
                .filter(|t| !t.trim().is_empty())
                .map(|t| t.trim().parse::<i64>())
                .collect::<Result<_, _>>()
                .map_err(|_| fail(req, invalid, format!("Please set the option <brokerControllerIdsToClean> according to the format: {text}")))?,
        ),
    };
    let now = Instant::now();
    inner.raft.shared().read(|m| {
        let Some(s) = m.set(&h.broker_name) else {
            return Err(fail(
                req,
                invalid,
                format!("Broker {} is not existed", h.broker_name),
            ));
        };
        if living {
            return Ok(());
        }
        match &ids {
            None if s.master.is_some() => Err(fail(
                req,
                invalid,
                format!(
                    "Broker {} has a master; name the replicas to clean",
                    h.broker_name
                ),
            )),
            None => Ok(()),
            Some(ids) => match ids
                .iter()
                .find(|&&id| inner.heartbeats.alive(&h.broker_name, id, now).is_some())
            {
                Some(id) => Err(fail(req, invalid, format!("broker {id} is still alive"))),
                None => Ok(()),
            },
        }
    })?;
    propose(
        inner,
        req,
        Command::Clean {
            name: h.broker_name,
            ids,
        },
    )
    .await?;
    Ok(ok(req))
}
