//! The controller group's Raft, on openraft 0.9: the type configuration, the node and
//! the tokio runtime openraft needs (docs/design/controller.md §11.2).
//!
//! openraft's core runs on tokio. The node owns a runtime of one worker thread
//! (`tern-raft`) for it; everything else stays on Tern's runtime. Calls into the `Raft`
//! handle are spawned onto that runtime and awaited from anywhere, so request handlers on
//! async-std never need a tokio context.

pub mod log_store;
pub mod machine;
pub mod network;

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{self, Cursor};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, RaftMetrics, ServerState};
use serde::Serialize;
use tern_shell::pool::ConnectionPool;
use tern_shell::runtime;
use tern_shell::sync::MutexExt;

use crate::state::{Command, Outcome};
use log_store::LogStore;
use machine::{Shared, StateMachine};
use network::Network;

openraft::declare_raft_types!(
    /// The controller's Raft types: commands in, outcomes out, node ids `k` of `n<k>`.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Raft timing (Tern's keys; openraft's 50/150-300 ms defaults elect spuriously on a
/// loaded two-core machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Leader heartbeat period.
    pub heartbeat: Duration,
    /// Election timeout, lower bound.
    pub election_min: Duration,
    /// Election timeout, upper bound.
    pub election_max: Duration,
}

/// Why a write was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// This node is not the leader.
    NotLeader,
    /// Raft failed (shutting down, storage failed) or took too long.
    Failed(String),
}

/// A running Raft node.
pub struct RaftNode {
    id: u64,
    raft: openraft::Raft<TypeConfig>,
    shared: Arc<Shared>,
    rt: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
}

impl std::fmt::Debug for RaftNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftNode").field("id", &self.id).finish()
    }
}

/// Longest a write waits for its entry to be applied (RocketMQ's `WAIT_TIMEOUT_OUT`).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

impl RaftNode {
    /// Opens the log and state in `dir` and starts the node; a pristine node initializes
    /// the group with `peers` (every node does: with the same members that is safe).
    pub async fn start(
        dir: &Path,
        id: u64,
        peers: BTreeMap<u64, String>,
        timing: Timing,
        pool: Arc<ConnectionPool>,
    ) -> io::Result<Self> {
        let config = openraft::Config {
            cluster_name: "tern-controller".into(),
            heartbeat_interval: timing.heartbeat.as_millis() as u64,
            election_timeout_min: timing.election_min.as_millis() as u64,
            election_timeout_max: timing.election_max.as_millis() as u64,
            // Chunks well under the remoting frame limit.
            snapshot_max_chunk_size: 1 << 20,
            ..Default::default()
        }
        .validate()
        .map_err(|e| io::Error::other(format!("Raft timing: {e}")))?;
        let log = LogStore::open(&dir.join("raft"))?;
        let machine = StateMachine::open(&dir.join("raft"))?;
        let shared = machine.shared();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tern-raft")
            .enable_time()
            .build()?;
        let handle = rt.handle().clone();
        let network = Network::new(pool);
        let raft = handle
            .spawn(openraft::Raft::new(
                id,
                Arc::new(config),
                network,
                log,
                machine,
            ))
            .await
            .map_err(io::Error::other)?
            .map_err(|e| io::Error::other(format!("Raft: {e}")))?;
        let members: BTreeMap<u64, BasicNode> = peers
            .into_iter()
            .map(|(k, addr)| (k, BasicNode { addr }))
            .collect();
        let r = raft.clone();
        let init = handle
            .spawn(async move { r.initialize(members).await })
            .await
            .map_err(io::Error::other)?;
        match init {
            Ok(()) => log::info!("controller: n{id} initialized the group"),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                log::info!("controller: n{id} rejoins the group from its log")
            }
            Err(e) => return Err(io::Error::other(format!("Raft initialize: {e}"))),
        }
        Ok(Self {
            id,
            raft,
            shared,
            rt: Mutex::new(Some(rt)),
            handle,
        })
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The applied state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// What the node knows now (leader, term, applied position).
    pub fn metrics(&self) -> RaftMetrics<u64, BasicNode> {
        self.raft.metrics().borrow().clone()
    }

    /// True when this node leads.
    pub fn is_leader(&self) -> bool {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.id)
    }

    /// Runs `f` with the Raft handle on the Raft runtime.
    async fn on_raft<F, Fut, T>(&self, f: F) -> Result<T, WriteError>
    where
        F: FnOnce(openraft::Raft<TypeConfig>) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.handle
            .spawn(f(self.raft.clone()))
            .await
            .map_err(|e| WriteError::Failed(format!("the Raft runtime: {e}")))
    }

    /// Proposes `cmd` and waits (at most [`WRITE_TIMEOUT`]) until it is applied here.
    /// A leader cut off from its quorum never commits; the caller gets an error rather
    /// than holding the leader's turn for good (the entry may still commit later, and its
    /// apply re-checks what it was decided on).
    pub async fn write(&self, cmd: Command) -> Result<Outcome, WriteError> {
        let written = runtime::timeout(
            WRITE_TIMEOUT,
            self.on_raft(|raft| async move { raft.client_write(cmd).await }),
        )
        .await
        .map_err(|_| WriteError::Failed(format!("not committed within {WRITE_TIMEOUT:?}")))??;
        match written {
            Ok(resp) => Ok(resp.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(WriteError::NotLeader)
            }
            Err(e) => Err(WriteError::Failed(e.to_string())),
        }
    }

    /// Confirms with a quorum that this node still leads and has applied everything
    /// committed before now (a read index), for reads that must not be stale.
    pub async fn confirm_leader(&self) -> Result<(), WriteError> {
        let confirmed = runtime::timeout(
            WRITE_TIMEOUT,
            self.on_raft(|raft| async move { raft.ensure_linearizable().await.map(|_| ()) }),
        )
        .await
        .map_err(|_| {
            WriteError::Failed(format!("leadership not confirmed within {WRITE_TIMEOUT:?}"))
        })??;
        match confirmed {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(_)) => Err(WriteError::NotLeader),
            Err(e) => Err(WriteError::Failed(e.to_string())),
        }
    }

    /// Serves a Raft RPC from a peer: `code` names it, `body` is its postcard request;
    /// the answer is the postcard `Result`.
    pub async fn serve_rpc(
        &self,
        code: tern_shell::RequestCode,
        body: &[u8],
    ) -> Result<Vec<u8>, String> {
        use tern_shell::RequestCode as C;
        fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
            postcard::to_stdvec(v).map_err(|e| e.to_string())
        }
        let bad = |e: postcard::Error| format!("undecodable Raft request: {e}");
        match code {
            C::RaftAppendEntries => {
                let rpc = postcard::from_bytes(body).map_err(bad)?;
                let r = self
                    .on_raft(|raft| async move { raft.append_entries(rpc).await })
                    .await;
                encode(&r.map_err(|e| format!("{e:?}"))?)
            }
            C::RaftVote => {
                let rpc = postcard::from_bytes(body).map_err(bad)?;
                let r = self
                    .on_raft(|raft| async move { raft.vote(rpc).await })
                    .await;
                encode(&r.map_err(|e| format!("{e:?}"))?)
            }
            C::RaftInstallSnapshot => {
                let rpc = postcard::from_bytes(body).map_err(bad)?;
                let r = self
                    .on_raft(|raft| async move { raft.install_snapshot(rpc).await })
                    .await;
                encode(&r.map_err(|e| format!("{e:?}"))?)
            }
            other => Err(format!("request {} is not a Raft RPC", other.raw())),
        }
    }

    /// Stops the node and its runtime.
    pub async fn shutdown(&self) {
        let _ = self
            .on_raft(|raft| async move { raft.shutdown().await })
            .await;
        let rt = self.rt.guard().take();
        if let Some(rt) = rt {
            // Dropping a runtime joins its threads: not on an executor thread.
            runtime::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(2))).await;
        }
    }
}
