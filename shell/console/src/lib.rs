//! Tern's web console: what rocketmq-dashboard shows and does, served by the process
//! itself. It talks to the cluster only through the admin API ([`tern_client::Admin`]),
//! so it works against any RocketMQ 4.x/5.x cluster, and serves one page (HTML, script
//! and style compiled into the binary) with a JSON API under `/api/`.
//!
//! - [`config`]: the keys (`consoleListen`, `namesrvAddr`, `consoleUser`, ...).
//! - [`auth`]: the console's own login (a session cookie), and the CSRF rule.
//! - [`history`]: produce and consume TPS of the last 30 minutes, sampled by the console.
//! - [`api`]: the routes; each turns one page action into admin calls.
//! - [`assets`]: the page.

pub mod api;
pub mod assets;
pub mod auth;
pub mod config;
pub mod history;
mod messages;

use std::net::SocketAddr;
use std::sync::Arc;

use tern_client::{Admin, ClientConfig, SessionCredentials};
use tern_shell::http::{Handler, HttpServer};
use tern_shell::runtime::{self, JoinHandle, Shutdown};

pub use config::ConsoleConfig;

/// A running console.
#[derive(Debug)]
pub struct Console {
    server: HttpServer,
    shutdown: Shutdown,
    sampler: JoinHandle<()>,
    admin: Admin,
}

impl Console {
    /// Binds `config.listen` and starts the TPS sampler. Refuses a non-loopback address
    /// without a login: the console can delete topics and groups.
    pub async fn start(config: ConsoleConfig) -> Result<Console, String> {
        config.check()?;
        let mut client = ClientConfig::new(&config.namesrv_addrs);
        client.instance_name = Some("tern-console".into());
        if let Some((ak, sk)) = &config.admin_credentials {
            client.credentials = Some(SessionCredentials {
                access_key: ak.clone(),
                secret_key: sk.clone(),
                security_token: None,
            });
        }
        let admin = Admin::new(client).map_err(|e| format!("console: {e}"))?;
        let app = Arc::new(api::App::new(admin.clone(), &config));
        let shutdown = Shutdown::new();
        let sampler = runtime::spawn(history::run(
            admin.clone(),
            app.history.clone(),
            config.sample_every,
            shutdown.clone(),
        ));
        let handler: Handler = {
            let app = app.clone();
            Arc::new(move |req| Some(app.handle(req)))
        };
        let server = match HttpServer::bind_app(&config.listen, handler).await {
            Ok(s) => s,
            Err(e) => {
                shutdown.trigger();
                sampler.await;
                return Err(format!("console: cannot listen on {}: {e}", config.listen));
            }
        };
        log::info!("console on http://{}", server.local_addr());
        Ok(Console {
            server,
            shutdown,
            sampler,
            admin,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// Stops serving and sampling, and closes the admin connections.
    pub async fn shutdown(self) {
        self.shutdown.trigger();
        self.server.shutdown().await;
        self.sampler.await;
        self.admin.shutdown().await;
    }
}
