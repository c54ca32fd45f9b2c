//! Raft traffic between controllers, over the remoting port each controller already
//! serves (as DLedger's RPCs share it): Tern-private request codes 52001-52003, the
//! openraft request as a postcard body, the answer `Result<response, RaftError>` as a
//! postcard body (docs/design/controller.md §11.3).

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftNetwork, RaftNetworkFactory};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tern_shell::connection::RemotingError;
use tern_shell::pool::ConnectionPool;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode, runtime};

use super::TypeConfig;

type NodeId = u64;

/// Makes a [`Peer`] per remote controller, all sharing one connection pool.
#[derive(Debug, Clone)]
pub struct Network {
    pool: Arc<ConnectionPool>,
}

impl Network {
    /// Connections from `pool`.
    pub fn new(pool: Arc<ConnectionPool>) -> Self {
        Self { pool }
    }
}

/// One remote controller.
#[derive(Debug)]
pub struct Peer {
    pool: Arc<ConnectionPool>,
    target: NodeId,
    addr: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            pool: self.pool.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// A failed call: why, as openraft classifies it.
enum CallError<E> {
    /// The peer could not be reached (openraft backs off).
    Unreachable(RemotingError),
    /// The exchange failed otherwise.
    Network(String),
    /// The peer's Raft answered with an error.
    Remote(E),
}

#[derive(Debug)]
struct Message(String);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

impl Peer {
    async fn call<Req: Serialize, Resp: DeserializeOwned, E: DeserializeOwned>(
        &self,
        code: RequestCode,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, CallError<E>> {
        let body = postcard::to_stdvec(req).map_err(|e| CallError::Network(e.to_string()))?;
        let cmd = RemotingCommand::request_code(code).with_body(body);
        let answer = runtime::timeout(ttl, self.pool.invoke(&self.addr, cmd, ttl)).await;
        let resp = match answer {
            Err(_) => return Err(CallError::Unreachable(RemotingError::Timeout)),
            Ok(Err(e)) => {
                if matches!(e, RemotingError::Connect { .. } | RemotingError::Closed) {
                    return Err(CallError::Unreachable(e));
                }
                return Err(CallError::Network(e.to_string()));
            }
            Ok(Ok(resp)) => resp,
        };
        if resp.response_code() != ResponseCode::Success {
            return Err(CallError::Network(format!(
                "controller {} answered {}: {}",
                self.addr,
                resp.code,
                resp.remark.as_deref().unwrap_or("")
            )));
        }
        match postcard::from_bytes::<Result<Resp, E>>(&resp.body) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(CallError::Remote(e)),
            Err(e) => Err(CallError::Network(format!(
                "controller {}: undecodable Raft answer: {e}",
                self.addr
            ))),
        }
    }

    fn rpc_error<E: Error>(&self, e: CallError<E>) -> RPCError<NodeId, BasicNode, E> {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(text) => RPCError::Network(NetworkError::new(&Message(text))),
            CallError::Remote(e) => RPCError::RemoteError(RemoteError::new(self.target, e)),
        }
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RequestCode::RaftAppendEntries, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(RequestCode::RaftInstallSnapshot, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(RequestCode::RaftVote, &rpc, option.hard_ttl())
            .await
            .map_err(|e| self.rpc_error(e))
    }
}
