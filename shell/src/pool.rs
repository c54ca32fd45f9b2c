//! Connections by address, reused across calls (clients talk to a few name servers and
//! brokers; brokers talk to name servers). A closed connection is replaced on next use.
//!
//! Connecting happens outside the pool's lock, in a task of its own: a slow or dead
//! address delays only its own callers. Callers that ask for an address while it is
//! being connected wait for that one attempt and share its outcome, connection or error,
//! so one address never gets two connections or a queue of serial retries.

use crate::sync::MutexExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::connection::{Connection, ConnectionConfig, NoProcessor, Processor, RemotingError};
use crate::frame::RemotingCommand;
use crate::runtime;

/// A pool of connections keyed by `ip:port`; requests from peers go to `P`.
#[derive(Debug)]
pub struct ConnectionPool<P: Processor = NoProcessor> {
    /// Held only to look up or swap entries, never across an `.await`.
    conns: Arc<Mutex<HashMap<String, Entry>>>,
    config: ConnectionConfig,
    connect_timeout: Duration,
    processor: Arc<P>,
}

/// One address's state.
#[derive(Debug, Clone)]
enum Entry {
    /// Connected (possibly closed since; replaced on next use).
    Ready(Connection),
    /// A connect is under way; its outcome is published in the cell.
    Connecting(Arc<Attempt>),
}

/// One connect attempt, shared by every caller that asked while it ran.
#[derive(Debug, Default)]
struct Attempt {
    outcome: async_lock::OnceCell<Result<Connection, RemotingError>>,
}

impl ConnectionPool<NoProcessor> {
    /// A pool whose connections refuse requests from peers.
    pub fn new(config: ConnectionConfig, connect_timeout: Duration) -> Self {
        Self::with_processor(config, connect_timeout, Arc::new(NoProcessor))
    }
}

impl<P: Processor> ConnectionPool<P> {
    /// A pool whose connections hand peer requests to `processor`.
    pub fn with_processor(
        config: ConnectionConfig,
        connect_timeout: Duration,
        processor: Arc<P>,
    ) -> Self {
        Self {
            conns: Arc::default(),
            config,
            connect_timeout,
            processor,
        }
    }

    /// The open connection to `addr`, connecting if there is none (or it closed).
    ///
    /// Waits at most the connect timeout, and only for `addr`. A caller that gives up
    /// early (its own timeout) does not cancel the attempt the others wait on.
    pub async fn get(&self, addr: &str) -> Result<Connection, RemotingError> {
        let attempt = {
            let mut conns = self.conns.guard();
            match conns.get(addr) {
                Some(Entry::Ready(c)) if !c.is_closed() => return Ok(c.clone()),
                Some(Entry::Connecting(a)) => a.clone(),
                _ => {
                    let a = Arc::new(Attempt::default());
                    conns.insert(addr.to_owned(), Entry::Connecting(a.clone()));
                    runtime::spawn(connect(
                        self.conns.clone(),
                        addr.to_owned(),
                        a.clone(),
                        self.config.clone(),
                        self.connect_timeout,
                        self.processor.clone(),
                    ));
                    a
                }
            }
        };
        attempt.outcome.wait().await.clone()
    }

    /// Sends `cmd` to `addr` and waits for the response.
    pub async fn invoke(
        &self,
        addr: &str,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.invoke_mut(addr, &mut cmd, timeout).await
    }

    /// [`Self::invoke`] with the command left to the caller, to send again (see
    /// [`Connection::request_mut`]).
    pub async fn invoke_mut(
        &self,
        addr: &str,
        cmd: &mut RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.get(addr).await?.request_mut(cmd, timeout).await
    }

    /// Sends `cmd` to `addr` oneway.
    pub async fn invoke_oneway(
        &self,
        addr: &str,
        cmd: RemotingCommand,
    ) -> Result<(), RemotingError> {
        self.get(addr).await?.oneway(cmd).await
    }

    /// Closes and forgets the connection to `addr`. A connect under way is abandoned:
    /// when it finishes, its callers get [`RemotingError::Closed`] and the connection, if
    /// made, is closed; the next [`Self::get`] starts afresh.
    pub async fn close(&self, addr: &str) {
        let entry = self.conns.guard().remove(addr);
        if let Some(Entry::Ready(c)) = entry {
            c.close();
        }
    }

    /// Closes every connection (and abandons connects under way, as [`Self::close`]).
    pub async fn close_all(&self) {
        let entries: Vec<Entry> = self.conns.guard().drain().map(|(_, e)| e).collect();
        for e in entries {
            if let Entry::Ready(c) = e {
                c.close();
            }
        }
    }
}

/// Connects `addr` for `attempt`, publishes the outcome in the pool (if the attempt is
/// still the address's entry) and to its waiters.
async fn connect<P: Processor>(
    conns: Arc<Mutex<HashMap<String, Entry>>>,
    addr: String,
    attempt: Arc<Attempt>,
    config: ConnectionConfig,
    connect_timeout: Duration,
    processor: Arc<P>,
) {
    let mut outcome = Connection::connect_with(&addr, config, connect_timeout, processor).await;
    {
        let mut conns = conns.guard();
        let current =
            matches!(conns.get(&addr), Some(Entry::Connecting(a)) if Arc::ptr_eq(a, &attempt));
        match (&outcome, current) {
            (Ok(c), true) => {
                conns.insert(addr.clone(), Entry::Ready(c.clone()));
            }
            (Err(_), true) => {
                // Nothing cached: the next caller tries again.
                conns.remove(&addr);
            }
            (Ok(c), false) => {
                // Closed (close or close_all) while connecting: keep it closed.
                c.close();
                outcome = Err(RemotingError::Closed);
            }
            (Err(_), false) => {}
        }
    }
    // The only writer of this cell, so it cannot be full already.
    let _ = attempt.outcome.set(outcome).await;
}
