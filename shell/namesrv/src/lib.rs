//! Tern's name server: brokers register here (with every name server; the name servers
//! never talk to each other), clients ask here which broker holds a topic's queues.
//!
//! * [`routes`]: the route table, broker liveness and expiry.
//! * [`kv`]: the persisted KV config (`kvConfig.json`).
//! * [`processor`]: request codes → table operations.
//! * [`config`]: `namesrv.conf` keys.
//!
//! [`NameServer::start`] runs one in-process: the `tern-namesrv` binary is a thin wrapper,
//! and the broker's standalone mode embeds one the same way.
#![forbid(unsafe_code)]

mod acl;
pub mod config;
pub mod kv;
mod metrics;
pub mod processor;
pub mod routes;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_shell::runtime::{self, JoinHandle, Shutdown};
use tern_shell::{ConnectionConfig, Server, ServerConfig};

pub use config::NamesrvConfig;
pub use processor::NamesrvProcessor;

use kv::{KvError, KvStore};
use processor::State;

/// Why the name server could not start.
#[derive(Debug)]
pub enum StartError {
    /// The KV file could not be loaded.
    Kv(KvError),
    /// `aclEnable=true` but the rules cannot be used.
    Acl(String),
    /// The listen address could not be bound.
    Bind {
        /// What we tried to bind.
        addr: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The TLS certificate, key or CA file cannot be used.
    Tls(String),
    /// The embedded controller (`enableControllerInNamesrv=true`) could not start.
    #[cfg(feature = "controller")]
    Controller(tern_controller::StartError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kv(e) => write!(f, "cannot load kv config: {e}"),
            Self::Acl(e) => f.write_str(e),
            Self::Bind { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            Self::Tls(e) => write!(f, "cannot serve TLS: {e}"),
            #[cfg(feature = "controller")]
            Self::Controller(e) => write!(f, "the embedded controller: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A running name server. Stop it with [`shutdown`](Self::shutdown); dropping it leaves it
/// running until the process exits.
#[derive(Debug)]
pub struct NameServer {
    server: Server,
    stop: Shutdown,
    scanner: JoinHandle<()>,
    state: Arc<State>,
    /// The Prometheus endpoint, with `metricsExporterType=PROM`.
    metrics: Option<tern_shell::http::HttpServer>,
    /// The controller node, with `enableControllerInNamesrv=true`.
    #[cfg(feature = "controller")]
    controller: Option<tern_controller::Controller>,
}

impl NameServer {
    /// Loads the KV store, binds `config.listen_addr()` and starts serving and expiring.
    pub async fn start(config: NamesrvConfig) -> Result<Self, StartError> {
        let kv = KvStore::open(&config.kv_config_path).map_err(StartError::Kv)?;
        // Its own port and state; it shares nothing with the name server but the process.
        #[cfg(feature = "controller")]
        let controller = match &config.controller {
            Some(c) => Some(
                tern_controller::Controller::start(c.clone())
                    .await
                    .map_err(StartError::Controller)?,
            ),
            None => None,
        };
        let addr = config.listen_addr();
        let server_config = ServerConfig {
            connection: ConnectionConfig {
                idle_timeout: Some(Duration::from_secs(
                    config.server_channel_max_idle_time_seconds,
                )),
                ..ConnectionConfig::default()
            },
            tls: tern_shell::tls::ServerTls::new(&config.tls).map_err(StartError::Tls)?,
            ..ServerConfig::default()
        };
        // The metrics endpoint takes the same TLS.
        let http_tls = server_config.tls.clone();
        let acl = config.acl.open().map_err(StartError::Acl)?;
        let state = Arc::new(State::new(config, kv, acl.clone()));
        let counted = Arc::new(metrics::NamesrvMetrics::default());
        let processor = Arc::new(metrics::Measured::new(
            NamesrvProcessor::new(state.clone()),
            counted.clone(),
        ));
        let server = Server::bind(&addr, server_config, processor)
            .await
            .map_err(|error| StartError::Bind { addr, error })?;
        let stop = Shutdown::new();
        let scanner = runtime::spawn(scan_loop(state.clone(), stop.clone()));
        if let Some(acl) = acl {
            // Detached: it ends with the shutdown signal.
            drop(runtime::spawn(acl.run_reload(stop.clone())));
        }
        log::info!("name server serving on {}", server.local_addr());
        let (s, node) = (state.clone(), server.local_addr().to_string());
        let metrics = tern_shell::metrics::serve(
            &state.config.metrics,
            Arc::new(move || metrics::render(&s, &counted, &node)),
            http_tls,
        )
        .await;
        Ok(Self {
            server,
            stop,
            scanner,
            state,
            metrics,
            #[cfg(feature = "controller")]
            controller,
        })
    }

    /// Where the metrics endpoint listens, when it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.local_addr())
    }

    /// The bound address (the real port when `listenPort` was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The embedded controller's peer port, when it runs one.
    pub fn controller_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "controller")]
        return self.controller.as_ref().map(|c| c.local_addr());
        #[cfg(not(feature = "controller"))]
        None
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &NamesrvConfig {
        &self.state.config
    }

    /// Stops expiring, stops accepting, lets in-flight requests finish and closes every
    /// connection. KV changes are already on disk (each is persisted before it is acked).
    pub async fn shutdown(self) {
        if let Some(m) = self.metrics {
            m.shutdown().await;
        }
        self.stop.trigger();
        self.scanner.await;
        self.server.shutdown().await;
        #[cfg(feature = "controller")]
        if let Some(c) = self.controller {
            c.shutdown().await;
        }
        log::info!("name server stopped");
    }
}

/// Every `scanNotActiveBrokerInterval`, drops brokers silent past their expiry.
async fn scan_loop(state: Arc<State>, stop: Shutdown) {
    let every = Duration::from_millis(state.config.scan_not_active_broker_interval_millis);
    loop {
        if stop.sleep(every).await {
            return;
        }
        let removed = state.routes_mut().expire(Instant::now());
        if removed > 0 {
            log::info!("expired {removed} silent brokers");
        }
    }
}
