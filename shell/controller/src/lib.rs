//! Tern's controller: RocketMQ 5's controller mode (RIP-44) on openraft. A small Raft
//! group holds which replica of each broker-set is master, the SyncStateSet and their
//! epochs; brokers register, heartbeat and are told their role; when a master goes
//! silent the leader elects a member of its SyncStateSet (docs/design/controller.md).
//!
//! * [`state`]: the replicated state and the commands that change it.
//! * [`raft`]: openraft's storage, network and runtime.
//! * [`processor`] / `replicas`: request codes → operations, leader-only ones serialized.
//! * [`heartbeat`], [`elect`]: liveness and who becomes master.
//! * [`config`]: `controller.conf` keys.
#![forbid(unsafe_code)]

pub mod config;
pub mod elect;
pub mod heartbeat;
pub mod processor;
pub mod raft;
mod replicas;
pub mod state;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_shell::pool::ConnectionPool;
use tern_shell::runtime::{self, JoinHandle, Shutdown};
use tern_shell::{Bound, ConnectionConfig, Server, ServerConfig};

pub use config::ControllerConfig;
use processor::{ControllerProcessor, Inner};
use raft::RaftNode;

/// How long a connect to a peer or a broker may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the controller could not start.
#[derive(Debug)]
pub enum StartError {
    /// A port could not be bound.
    Bind {
        /// What we tried to bind.
        addr: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The Raft store could not be opened or the node not started.
    Raft(std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bind { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            Self::Raft(e) => write!(f, "cannot start the controller's Raft node: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A running controller node. Stop it with [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct Controller {
    servers: Vec<Server>,
    inner: Arc<Inner>,
    stop: Shutdown,
    tasks: Vec<JoinHandle<()>>,
}

/// `0.0.0.0:<port of addr>`: a peer address is served on every interface, as RocketMQ's.
fn any_interface(addr: &str) -> String {
    let port = addr.rsplit_once(':').map_or("0", |(_, p)| p);
    format!("0.0.0.0:{port}")
}

async fn bind(addr: String) -> Result<Bound, StartError> {
    Bound::bind(&addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })
}

impl Controller {
    /// Binds this node's peer port (and `listenPort` when set), opens the Raft store and
    /// starts serving, expiring heartbeats and watching for masters to replace.
    pub async fn start(config: ControllerConfig) -> Result<Self, StartError> {
        let mut bound = vec![bind(any_interface(config.self_addr())).await?];
        if let Some(port) = config.listen_port {
            bound.push(bind(format!("0.0.0.0:{port}")).await?);
        }
        let pool = Arc::new(ConnectionPool::new(
            ConnectionConfig::default(),
            CONNECT_TIMEOUT,
        ));
        let raft = RaftNode::start(
            &config.store_path,
            config.self_id,
            config.peers.clone(),
            config.timing,
            pool,
        )
        .await
        .map_err(StartError::Raft)?;
        let brokers = ConnectionPool::new(ConnectionConfig::default(), CONNECT_TIMEOUT);
        let inner = Arc::new(Inner::new(config, raft, brokers));
        let processor = Arc::new(ControllerProcessor {
            inner: inner.clone(),
        });
        let servers: Vec<Server> = bound
            .into_iter()
            .map(|b| b.serve(ServerConfig::default(), processor.clone()))
            .collect();
        let stop = Shutdown::new();
        let tasks = vec![
            runtime::spawn(expire_loop(inner.clone(), stop.clone())),
            runtime::spawn(master_scan_loop(inner.clone(), stop.clone())),
        ];
        log::info!(
            "controller n{} serving on {} (group {})",
            inner.config.self_id,
            servers[0].local_addr(),
            inner.config.group
        );
        Ok(Self {
            servers,
            inner,
            stop,
            tasks,
        })
    }

    /// The peer port's bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.servers[0].local_addr()
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &ControllerConfig {
        &self.inner.config
    }

    /// Stops the scans, drains the connections and stops the Raft node.
    pub async fn shutdown(self) {
        self.stop.trigger();
        for t in self.tasks {
            t.await;
        }
        for s in self.servers {
            s.shutdown().await;
        }
        self.inner.brokers.close_all().await;
        self.inner.raft.shutdown().await;
        log::info!("controller stopped");
    }
}

/// Every `scanNotActiveBrokerInterval`: brokers silent past their timeout are inactive.
async fn expire_loop(inner: Arc<Inner>, stop: Shutdown) {
    while !stop
        .sleep(inner.config.scan_not_active_broker_interval)
        .await
    {
        let gone = inner.heartbeats.expire(Instant::now());
        inner.on_inactive(gone);
    }
}

/// Every `scanInactiveMasterInterval`, on the leader: a set whose master is not alive
/// but that has a live replica gets an election.
async fn master_scan_loop(inner: Arc<Inner>, stop: Shutdown) {
    while !stop.sleep(inner.config.scan_inactive_master_interval).await {
        let now = Instant::now();
        if !inner.raft.is_leader() {
            continue;
        }
        // A node that just started has heard from nobody yet: a master it has not heard
        // from may be alive. One whose connection it saw close is dead (a leader that
        // took over mid-election: the master died while this node followed).
        let warm = now.duration_since(inner.started) >= heartbeat::DEFAULT_TIMEOUT;
        let names: Vec<String> = inner.raft.shared().read(|m| {
            m.sets()
                .filter(|(name, s)| {
                    let master_alive = s
                        .master
                        .is_some_and(|id| inner.heartbeats.alive(name, id, now).is_some());
                    let master_closed = s
                        .master
                        .is_some_and(|id| inner.heartbeats.seen_closed(name, id));
                    let any_alive = s
                        .replicas
                        .keys()
                        .any(|&id| inner.heartbeats.alive(name, id, now).is_some());
                    !master_alive && any_alive && (warm || master_closed)
                })
                .map(|(name, _)| name.to_owned())
                .collect()
        });
        for name in names {
            inner.start_election(name);
        }
    }
}
