//! Connections by address, reused across calls (clients talk to a few name servers and
//! brokers; brokers talk to name servers). A closed connection is replaced on next use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::connection::{Connection, ConnectionConfig, NoProcessor, Processor, RemotingError};
use crate::frame::RemotingCommand;

/// A pool of connections keyed by `ip:port`; requests from peers go to `P`.
#[derive(Debug)]
pub struct ConnectionPool<P: Processor = NoProcessor> {
    conns: async_lock::Mutex<HashMap<String, Connection>>,
    config: ConnectionConfig,
    connect_timeout: Duration,
    processor: Arc<P>,
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
            conns: async_lock::Mutex::new(HashMap::new()),
            config,
            connect_timeout,
            processor,
        }
    }

    /// The open connection to `addr`, connecting if there is none (or it closed).
    ///
    /// Connects happen under the pool lock, so concurrent callers for one address share a
    /// single connection; a slow connect delays other addresses by at most the timeout.
    pub async fn get(&self, addr: &str) -> Result<Connection, RemotingError> {
        let mut conns = self.conns.lock().await;
        if let Some(c) = conns.get(addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let c = Connection::connect_with(
            addr,
            self.config.clone(),
            self.connect_timeout,
            self.processor.clone(),
        )
        .await?;
        conns.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    /// Sends `cmd` to `addr` and waits for the response.
    pub async fn invoke(
        &self,
        addr: &str,
        cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.get(addr).await?.request(cmd, timeout).await
    }

    /// Sends `cmd` to `addr` oneway.
    pub async fn invoke_oneway(
        &self,
        addr: &str,
        cmd: RemotingCommand,
    ) -> Result<(), RemotingError> {
        self.get(addr).await?.oneway(cmd).await
    }

    /// Closes and forgets the connection to `addr`.
    pub async fn close(&self, addr: &str) {
        if let Some(c) = self.conns.lock().await.remove(addr) {
            c.close();
        }
    }

    /// Closes every connection.
    pub async fn close_all(&self) {
        for (_, c) in self.conns.lock().await.drain() {
            c.close();
        }
    }
}
