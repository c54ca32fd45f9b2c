//! Request codes → the controller's operations (RocketMQ's `ControllerRequestProcessor`,
//! docs/design/controller.md §1). Raft RPCs, heartbeats and GET_METADATA_INFO are served
//! by any node; every other code only by the leader, one at a time
//! ([`Inner::leader_turn`]), answered CONTROLLER_NOT_LEADER (2007) elsewhere.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use tern_shell::connection::not_supported;
use tern_shell::headers::{BrokerHeartbeatRequestHeader, GetMetaDataResponseHeader};
use tern_shell::pool::ConnectionPool;
use tern_shell::sync::MutexExt;
use tern_shell::{ConnectionCtx, Processor, RemotingCommand, RequestCode, ResponseCode, runtime};

use crate::config::ControllerConfig;
use crate::heartbeat::{BrokerKey, Heartbeats};
use crate::raft::{RaftNode, WriteError};
use crate::state::Command;

/// Requests waiting for the leader's turn beyond which SYSTEM_BUSY is answered
/// (RocketMQ's `EventScheduler` queue).
pub const MAX_QUEUED: usize = 1024;

/// What every connection's handler shares.
#[derive(Debug)]
pub(crate) struct Inner {
    pub config: ControllerConfig,
    pub raft: RaftNode,
    pub heartbeats: Heartbeats,
    /// One leader decision at a time: validate against the applied state, propose, wait
    /// for the apply, answer (RocketMQ's single scheduler thread).
    turn: async_lock::Mutex<()>,
    queued: AtomicUsize,
    /// The term in which this node, as leader, applied its first entry: until then its
    /// applied state may lag what earlier leaders committed.
    ready_term: AtomicU64,
    /// Connections with a close watcher.
    watched: Mutex<HashSet<u64>>,
    /// Broker-sets with an election under way from this node.
    electing: Mutex<HashSet<String>>,
    /// Connections to brokers (NOTIFY_BROKER_ROLE_CHANGED).
    pub brokers: ConnectionPool,
    /// When this node started: its heartbeat table is empty then, so a master not heard
    /// from yet is not taken for dead before a heartbeat timeout has passed.
    pub started: Instant,
}

/// Why the leader cannot serve a request now; already the answer.
pub(crate) type Refusal = RemotingCommand;

pub(crate) fn fail(
    req: &RemotingCommand,
    code: ResponseCode,
    remark: impl Into<String>,
) -> RemotingCommand {
    RemotingCommand::error_response(req, code, remark)
}

pub(crate) fn not_leader(req: &RemotingCommand) -> RemotingCommand {
    fail(
        req,
        ResponseCode::ControllerNotLeader,
        "The controller is not in leader state",
    )
}

/// Held while a leader decision runs.
pub(crate) struct Turn<'a> {
    _guard: async_lock::MutexGuard<'a, ()>,
}

impl Inner {
    pub fn new(config: ControllerConfig, raft: RaftNode, brokers: ConnectionPool) -> Self {
        Self {
            config,
            raft,
            heartbeats: Heartbeats::default(),
            turn: async_lock::Mutex::new(()),
            queued: AtomicUsize::new(0),
            ready_term: AtomicU64::new(0),
            watched: Mutex::new(HashSet::new()),
            electing: Mutex::new(HashSet::new()),
            brokers,
            started: Instant::now(),
        }
    }

    /// Waits for the leader's turn. Refused when this node does not lead, when too many
    /// wait, or when it leads but cannot apply its first entry of the term.
    pub async fn leader_turn(&self, req: &RemotingCommand) -> Result<Turn<'_>, Refusal> {
        if !self.raft.is_leader() {
            return Err(not_leader(req));
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(fail(
                req,
                ResponseCode::SystemBusy,
                "the controller has too many requests waiting",
            ));
        }
        let guard = self.turn.lock().await;
        self.queued.fetch_sub(1, Ordering::AcqRel);
        let term = self.raft.metrics().current_term;
        if !self.raft.is_leader() {
            return Err(not_leader(req));
        }
        if self.ready_term.load(Ordering::Acquire) != term {
            match self.raft.write(Command::Noop).await {
                Ok(_) => self.ready_term.store(term, Ordering::Release),
                Err(e) => return Err(self.write_refusal(req, e)),
            }
        }
        Ok(Turn { _guard: guard })
    }

    /// The answer to a write that failed.
    pub fn write_refusal(&self, req: &RemotingCommand, e: WriteError) -> RemotingCommand {
        match e {
            WriteError::NotLeader => not_leader(req),
            WriteError::Failed(why) => fail(req, ResponseCode::SystemError, why),
        }
    }

    /// Brokers that stopped heartbeating (or whose connection closed): a master among
    /// them gets a successor, when this node leads.
    pub fn on_inactive(self: &Arc<Self>, gone: Vec<BrokerKey>) {
        for (name, id) in gone {
            log::info!("controller: broker {name} id {id} is inactive");
            let was_master = self
                .raft
                .shared()
                .read(|m| m.set(&name).and_then(|s| s.master) == Some(id));
            if was_master && self.raft.is_leader() {
                self.start_election(name);
            }
        }
    }

    /// Elects a master for `name` in a task of its own, unless one is under way.
    pub fn start_election(self: &Arc<Self>, name: String) {
        if !self.electing.guard().insert(name.clone()) {
            return;
        }
        let me = self.clone();
        drop(runtime::spawn(async move {
            crate::replicas::elect_by_controller(&me, &name).await;
            me.electing.guard().remove(&name);
        }));
    }

    /// Records a heartbeat; a connection's close makes its brokers inactive at once.
    fn heartbeat(
        self: &Arc<Self>,
        conn: &ConnectionCtx,
        req: &RemotingCommand,
    ) -> Option<RemotingCommand> {
        let answer = |code, remark: &str| (!req.is_oneway()).then(|| fail(req, code, remark));
        let h: BrokerHeartbeatRequestHeader = match req.decode_header() {
            Ok(h) => h,
            Err(e) => return answer(ResponseCode::SystemError, &e.to_string()),
        };
        let Some(id) = h.broker_id else {
            return answer(
                ResponseCode::ControllerInvalidRequest,
                "Heart beat with empty brokerId",
            );
        };
        if !self.heartbeats.beat(&h, id, conn.id(), Instant::now()) {
            log::warn!(
                "controller: heartbeat table full, {} id {id} not tracked",
                h.broker_name
            );
        }
        if self.watched.guard().insert(conn.id()) {
            let (me, conn) = (self.clone(), conn.clone());
            drop(runtime::spawn(async move {
                conn.closed().await;
                me.watched.guard().remove(&conn.id());
                let gone = me.heartbeats.connection_closed(conn.id());
                me.on_inactive(gone);
            }));
        }
        (!req.is_oneway()).then(|| RemotingCommand::response_to(req, ResponseCode::Success))
    }

    /// GET_METADATA_INFO: the group as this node sees it.
    fn metadata(&self, req: &RemotingCommand) -> RemotingCommand {
        let m = self.raft.metrics();
        let leader = m.current_leader;
        let header = GetMetaDataResponseHeader {
            group: Some(self.config.group.clone()),
            controller_leader_id: leader.map(|k| format!("n{k}")),
            controller_leader_address: leader.and_then(|k| self.config.peers.get(&k).cloned()),
            is_leader: Some(self.raft.is_leader()),
            peers: Some(self.config.peers_text()),
        };
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(&header)
    }

    async fn raft_rpc(&self, req: &RemotingCommand) -> RemotingCommand {
        match self
            .raft
            .serve_rpc(req.request_code_enum(), &req.body)
            .await
        {
            Ok(answer) => {
                RemotingCommand::response_to(req, ResponseCode::Success).with_body(answer)
            }
            Err(why) => fail(req, ResponseCode::SystemError, why),
        }
    }
}

/// The controller's request processor.
#[derive(Debug, Clone)]
pub struct ControllerProcessor {
    pub(crate) inner: Arc<Inner>,
}

impl Processor for ControllerProcessor {
    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        use RequestCode as C;
        let inner = &self.inner;
        let answer = match req.request_code_enum() {
            C::RaftAppendEntries | C::RaftVote | C::RaftInstallSnapshot => {
                inner.raft_rpc(&req).await
            }
            C::BrokerHeartbeat => return inner.heartbeat(conn, &req),
            C::ControllerGetMetadataInfo => inner.metadata(&req),
            C::ControllerApplyBrokerId
            | C::ControllerGetNextBrokerId
            | C::ControllerRegisterBroker
            | C::ControllerGetReplicaInfo
            | C::ControllerGetSyncStateData
            | C::ControllerAlterSyncStateSet
            | C::ControllerElectMaster
            | C::CleanBrokerData => crate::replicas::serve(inner, &req).await,
            _ => not_supported(&req),
        };
        (!req.is_oneway()).then_some(answer)
    }

    fn is_quick(&self, req: &RemotingCommand) -> bool {
        matches!(
            req.request_code_enum(),
            RequestCode::BrokerHeartbeat | RequestCode::ControllerGetMetadataInfo
        )
    }
}
