//! The listener: accepts connections, bounds how many are open, closes idle ones, and
//! drains on shutdown (stop accepting, let in-flight requests finish, close).
//!
//! With TLS ([`ServerConfig::tls`]) each accepted socket goes through the mode in a task
//! of its own, holding its connection slot, so a slow handshake delays no one else.

use crate::sync::MutexExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_lock::{Semaphore, SemaphoreGuardArc};
use async_std::io::WriteExt;
use async_std::net::{TcpListener, TcpStream};

use crate::code::ResponseCode;
use crate::connection::{Connection, ConnectionConfig, Processor, read_frame};
use crate::frame::{FrameLimits, RemotingCommand};
use crate::runtime::{self, JoinHandle, Shutdown};
use crate::tls::{self, Refused, ServerTls};

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Most connections open at once; further clients wait in the accept backlog.
    pub max_connections: usize,
    /// Per-connection settings; `idle_timeout` defaults to Java's 120 s here.
    pub connection: ConnectionConfig,
    /// How long shutdown waits for connections to drain.
    pub drain_timeout: Duration,
    /// TLS (`tls.server.mode` permissive or enforcing); none serves plaintext only.
    pub tls: Option<ServerTls>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            connection: ConnectionConfig {
                idle_timeout: Some(Duration::from_secs(120)),
                ..ConnectionConfig::default()
            },
            drain_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// A running server. Dropping it does not stop it; call [`Server::shutdown`].
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    shutdown: Shutdown,
    connections: Arc<Mutex<HashMap<u64, Connection>>>,
    accept_task: JoinHandle<()>,
    drain_timeout: Duration,
}

/// A bound listening socket that accepts nothing yet: the owner learns the port (a
/// broker advertises it) and builds what its processor needs before it serves.
/// Connections that arrive meanwhile wait in the kernel's backlog.
#[derive(Debug)]
pub struct Bound {
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl Bound {
    /// Binds `addr` (e.g. `"127.0.0.1:0"` in tests).
    pub async fn bind(addr: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&runtime::resolve(addr).await?[..]).await?;
        let local_addr = listener.local_addr()?;
        Ok(Self {
            listener,
            local_addr,
        })
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts accepting, each connection served by `processor`.
    pub fn serve<P: Processor>(self, config: ServerConfig, processor: Arc<P>) -> Server {
        let shutdown = Shutdown::new();
        let connections: Arc<Mutex<HashMap<u64, Connection>>> = Arc::default();
        let accept_task = runtime::spawn(accept_loop(
            self.listener,
            config.clone(),
            processor,
            shutdown.clone(),
            connections.clone(),
        ));
        Server {
            local_addr: self.local_addr,
            shutdown,
            connections,
            accept_task,
            drain_timeout: config.drain_timeout,
        }
    }
}

impl Server {
    /// Binds `addr` and starts accepting ([`Bound::bind`], then [`Bound::serve`]).
    pub async fn bind<P: Processor>(
        addr: &str,
        config: ServerConfig,
        processor: Arc<P>,
    ) -> std::io::Result<Self> {
        Ok(Bound::bind(addr).await?.serve(config, processor))
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Open connections right now (the broker uses them to reach clients).
    pub fn connections(&self) -> Vec<Connection> {
        self.connections.guard().values().cloned().collect()
    }

    /// Stops accepting, asks every connection to finish its in-flight requests and close,
    /// and waits (bounded by the drain timeout) until they have.
    pub async fn shutdown(self) {
        self.shutdown.trigger();
        let conns_table = self.connections.clone();
        self.accept_task.await;
        let conns: Vec<Connection> = conns_table.guard().values().cloned().collect();
        for c in &conns {
            c.close();
        }
        let all_closed = async {
            for c in &conns {
                c.closed().await;
            }
        };
        if runtime::timeout(self.drain_timeout, all_closed)
            .await
            .is_err()
        {
            log::warn!("shutdown: some connections did not drain in time");
        }
    }
}

async fn accept_loop<P: Processor>(
    listener: TcpListener,
    config: ServerConfig,
    processor: Arc<P>,
    shutdown: Shutdown,
    connections: Arc<Mutex<HashMap<u64, Connection>>>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut backoff = Duration::from_millis(5);
    loop {
        let permit = match runtime::race(async { Some(slots.acquire_arc().await) }, async {
            shutdown.wait().await;
            None
        })
        .await
        {
            Some(p) => p,
            None => return,
        };
        let accepted = runtime::race(async { Some(listener.accept().await) }, async {
            shutdown.wait().await;
            None
        })
        .await;
        let (stream, peer) = match accepted {
            None => return,
            Some(Ok(accepted)) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Some(Err(e)) => {
                // Out of file descriptors and the like: back off instead of spinning.
                log::warn!("accept failed: {e}; retrying in {backoff:?}");
                runtime::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let Some(tls) = config.tls.clone() else {
            serve(stream, peer, &config, &processor, &connections, permit);
            continue;
        };
        let (config, processor) = (config.clone(), processor.clone());
        let (connections, shutdown) = (connections.clone(), shutdown.clone());
        runtime::spawn(async move {
            match tls.accept(stream).await {
                // A connection that finished its handshake after shutdown began would
                // not be drained: close it instead.
                Ok(_) if shutdown.is_triggered() => {}
                Ok(stream) => serve(stream, peer, &config, &processor, &connections, permit),
                Err(Refused::Plaintext(tcp)) => {
                    refuse_plaintext(tcp, &config.connection.limits).await
                }
                Err(Refused::Failed) => {}
            }
        });
    }
}

/// Starts a connection over `stream` and keeps it in the table until it closes; the
/// connection slot is given back then.
fn serve<P: Processor>(
    stream: impl Into<tls::Stream>,
    peer: SocketAddr,
    config: &ServerConfig,
    processor: &Arc<P>,
    connections: &Arc<Mutex<HashMap<u64, Connection>>>,
    permit: SemaphoreGuardArc,
) {
    let conn = match Connection::start(stream, peer, config.connection.clone(), processor.clone()) {
        Ok(conn) => conn,
        Err(e) => {
            log::warn!("connection from {peer} not started: {e}");
            return;
        }
    };
    connections.guard().insert(conn.id(), conn.clone());
    let registry = connections.clone();
    runtime::spawn(async move {
        conn.closed().await;
        registry.guard().remove(&conn.id());
        drop(permit);
    });
}

/// Longest a refused plaintext client is given to send its first request.
const REFUSAL_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// Under `enforcing`, a plaintext client's first request is answered with the reason
/// (so Tern's and Java's clients show it rather than a bare "connection closed"); then
/// the connection closes. Nothing of the request is processed.
async fn refuse_plaintext(mut tcp: TcpStream, limits: &FrameLimits) {
    let read = runtime::timeout(REFUSAL_READ_TIMEOUT, read_frame(&mut tcp, limits)).await;
    if let Ok(Ok((req, _))) = read {
        if !req.is_oneway() && !req.is_response() {
            let resp = RemotingCommand::error_response(
                &req,
                ResponseCode::SystemError,
                "this server requires TLS (tls.server.mode=enforcing): connect with TLS \
                 (tls.enable=true)",
            );
            if let Ok(bytes) = resp.encode() {
                let _ = runtime::timeout(REFUSAL_READ_TIMEOUT, tcp.write_all(&bytes)).await;
            }
        }
    }
    let _ = tcp.shutdown(std::net::Shutdown::Both);
}
