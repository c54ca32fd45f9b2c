//! Tern's edge gateway: on an ARM device, RocketMQ producers send to a local broker
//! (Tern's, on the same engine, with small files and SYNC_FLUSH) found through a local
//! name server; a forwarder sends everything on to the central cluster in order, at
//! least once, keeping each message's id. The uplink may come and go and the device may
//! lose power: an acknowledged message is on the local disk and is forwarded when the
//! cluster can be reached.
//!
//! [`Gateway::start`] runs the three parts; [`Gateway::shutdown`] stops the forwarder
//! (saving its progress), then the broker (clean close), then the name server.

use std::net::SocketAddr;

use tern_broker::Broker;
use tern_namesrv::{NameServer, NamesrvConfig};
use tern_shell::runtime::{self, JoinHandle, Shutdown};

pub mod cli;
pub mod config;
pub mod forward;

pub use config::EdgeConfig;
pub use forward::{Forwarder, Stats};

/// A running gateway.
#[derive(Debug)]
pub struct Gateway {
    namesrv: NameServer,
    broker: Broker,
    forwarding: JoinHandle<Stats>,
    stop_forwarding: Shutdown,
}

impl Gateway {
    /// Starts the local name server on `namesrv_listen`, the broker registered with it,
    /// and the forwarder.
    pub async fn start(mut cfg: EdgeConfig, namesrv_listen: SocketAddr) -> Result<Gateway, String> {
        let ns_cfg = NamesrvConfig {
            bind_address: namesrv_listen.ip().to_string(),
            listen_port: namesrv_listen.port(),
            kv_config_path: cfg.broker.store_root.join("namesrv-kv.json"),
            ..NamesrvConfig::default()
        };
        let namesrv = NameServer::start(ns_cfg)
            .await
            .map_err(|e| format!("starting the local name server: {e}"))?;
        cfg.broker.namesrv_addrs = vec![namesrv.local_addr().to_string()];
        // `tls.enable` and `tls.client.*` are the uplink's (the forwarder's): the local
        // broker registers in plaintext with its in-process name server.
        let mut local = cfg.broker.clone();
        local.tls.client = tern_shell::tls::ClientTlsSettings::default();
        let broker = match Broker::start(local).await {
            Ok(b) => b,
            Err(e) => {
                namesrv.shutdown().await;
                return Err(e.to_string());
            }
        };
        let dead = forward::dead_letter::DeadLetters::new(&cfg.broker.store_root);
        let forwarder = match Forwarder::new(broker.ctx().clone(), cfg) {
            Ok(f) => f,
            Err(e) => {
                let _ = broker.shutdown().await;
                namesrv.shutdown().await;
                return Err(e);
            }
        };
        // The forwarder's state joins the local broker's runtime info, so `tern-admin
        // brokerStatus` on the gateway shows it.
        let report = forwarder.report();
        broker.ctx().extra_stats().register(move |out| {
            report
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entries(dead.count(), out);
        });
        let stop_forwarding = Shutdown::new();
        let forwarding = runtime::spawn(forwarder.run(stop_forwarding.clone()));
        Ok(Gateway {
            namesrv,
            broker,
            forwarding,
            stop_forwarding,
        })
    }

    /// The local name server producers use.
    pub fn namesrv_addr(&self) -> SocketAddr {
        self.namesrv.local_addr()
    }

    /// The local broker's advertised address.
    pub fn broker_addr(&self) -> SocketAddr {
        self.broker.ctx().store_host()
    }

    /// The metrics endpoint's address, with `metricsExporterType=PROM` (the forwarder's
    /// figures are there as `tern_edge_*` gauges).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.broker.metrics_addr()
    }

    /// Stops forwarding (progress saved), then the broker and the name server.
    pub async fn shutdown(self) -> Result<Stats, String> {
        self.stop_forwarding.trigger();
        let stats = self.forwarding.await;
        let closed = self.broker.shutdown().await;
        self.namesrv.shutdown().await;
        closed.map(|()| stats).map_err(|e| e.to_string())
    }
}
