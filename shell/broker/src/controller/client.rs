//! The broker's calls to the controller group: requests go to the leader, found with
//! CONTROLLER_GET_METADATA_INFO (1005); heartbeats go to every controller, so that any
//! node that becomes leader already knows which brokers live.
//!
//! On CONTROLLER_NOT_LEADER (2007) or a failed connection the leader is looked up again
//! at once over every address (RocketMQ waits for its next 10 s refresh).

use std::sync::Mutex;
use std::time::Duration;

use tern_shell::code::RequestCode;
use tern_shell::headers::GetMetaDataResponseHeader;
use tern_shell::sync::MutexExt;
use tern_shell::{ConnectionPool, RemotingCommand, ResponseCode};

use super::ControllerError;

/// How long one controller call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The controllers of `controllerAddr` and the leader among them.
#[derive(Debug)]
pub struct ControllerClient {
    addrs: Vec<String>,
    leader: Mutex<Option<String>>,
    pool: ConnectionPool,
}

impl ControllerClient {
    /// A client of `addrs`, connecting as `pool` says (TLS, timeouts).
    pub fn new(addrs: Vec<String>, pool: ConnectionPool) -> Self {
        Self {
            addrs,
            leader: Mutex::new(None),
            pool,
        }
    }

    /// Every controller's address.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The leader's address: the cached one, or found by asking every controller.
    pub async fn leader(&self) -> Result<String, ControllerError> {
        if let Some(l) = self.leader.guard().clone() {
            return Ok(l);
        }
        let mut why = Vec::new();
        for addr in &self.addrs {
            let req = RemotingCommand::request_code(RequestCode::ControllerGetMetadataInfo);
            match self.pool.invoke(addr, req, CALL_TIMEOUT).await {
                Ok(resp) if resp.response_code() == ResponseCode::Success => {
                    match resp.decode_header::<GetMetaDataResponseHeader>() {
                        Ok(h) => {
                            let leader = if h.is_leader == Some(true) {
                                Some(addr.clone())
                            } else {
                                h.controller_leader_address.filter(|a| !a.is_empty())
                            };
                            if let Some(l) = leader {
                                *self.leader.guard() = Some(l.clone());
                                return Ok(l);
                            }
                            why.push(format!("{addr}: no leader elected"));
                        }
                        Err(e) => why.push(format!("{addr}: {e}")),
                    }
                }
                Ok(resp) => why.push(ControllerError::refused(addr.as_str(), &resp).to_string()),
                Err(e) => {
                    why.push(format!("{addr}: {e}"));
                    self.pool.close(addr).await;
                }
            }
        }
        Err(ControllerError::NoLeader(why))
    }

    /// Sends `req` to the leader and returns its answer, whatever its code; looks the
    /// leader up again and retries once when the one asked no longer leads.
    pub async fn call(&self, req: RemotingCommand) -> Result<RemotingCommand, ControllerError> {
        let mut tries = 0;
        loop {
            let leader = self.leader().await?;
            let failed = match self.pool.invoke(&leader, req.clone(), CALL_TIMEOUT).await {
                Ok(resp) if resp.response_code() == ResponseCode::ControllerNotLeader => {
                    self.forget(&leader);
                    ControllerError::NotLeader(leader)
                }
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    self.forget(&leader);
                    self.pool.close(&leader).await;
                    ControllerError::Remoting(leader, e)
                }
            };
            tries += 1;
            if tries == 2 {
                return Err(failed);
            }
        }
    }

    /// Sends `req` oneway to every controller (heartbeats).
    pub async fn send_to_all(&self, req: &RemotingCommand) {
        for addr in &self.addrs {
            if let Err(e) = self.pool.invoke_oneway(addr, req.clone()).await {
                log::debug!("heartbeat to controller {addr}: {e}");
                self.pool.close(addr).await;
            }
        }
    }

    fn forget(&self, leader: &str) {
        let mut l = self.leader.guard();
        if l.as_deref() == Some(leader) {
            *l = None;
        }
    }

    /// Closes every connection (shutdown).
    pub async fn close(&self) {
        self.pool.close_all().await;
    }
}
