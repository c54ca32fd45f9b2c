//! Tern's RocketMQ 5.x gRPC endpoint: the `apache.rocketmq.v2.MessagingService` the 5.x
//! clients (apache/rocketmq-clients) speak, as RocketMQ's proxy serves it in LOCAL mode
//! (inside the broker). docs/grpc.md says what each RPC does and what differs from the
//! Java proxy.
//!
//! The endpoint is a translator: each RPC becomes the remoting requests a 4.x client would
//! send (SEND_MESSAGE, POP_MESSAGE, ACK_MESSAGE, END_TRANSACTION...), sent through a
//! [`tern_client::ClientInstance`] per 5.x client, so the brokers' processors, checks and
//! store are the ones every other client goes through, and a message sent over gRPC is an
//! ordinary record to 4.x consumers. What the remoting protocol cannot tell (a topic's
//! `message.type`, a group's retry policy, the ACL rules) comes from the [`Backend`].
//!
//! tonic needs tokio: the endpoint runs on a small runtime of its own (`grpcWorkerThreads`
//! threads named `tern-grpc`), and the remoting side stays on Tern's runtime. Futures of
//! the two meet only where a tonic handler awaits a tern-client call, which is
//! executor-independent (async-io timers and sockets).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tern_shell::acl::guard::Acl;

pub mod cluster;
pub mod config;
pub mod convert;
pub mod handle;
pub mod meta;
mod service;
pub mod session;
pub mod status;
mod tls;

pub use config::ProxySettings;
pub use session::Upstream;

/// The generated protocol (apache/rocketmq-apis, `third_party/rocketmq-apis/`).
#[allow(
    missing_docs,
    missing_debug_implementations,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    tonic::include_proto!("apache.rocketmq.v2");
}

/// What a group's configuration says to 5.x consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPolicy {
    /// `consumeMessageOrderly`: FIFO delivery.
    pub orderly: bool,
    /// `retryMaxTimes`: deliveries after the first before the DLQ.
    pub retry_max_times: i32,
}

impl From<&tern_shell::body::SubscriptionGroupConfig> for GroupPolicy {
    fn from(g: &tern_shell::body::SubscriptionGroupConfig) -> Self {
        Self {
            orderly: g.consume_message_orderly,
            retry_max_times: g.retry_max_times,
        }
    }
}

/// A topic's `message.type` attribute, `NORMAL` when it has none.
pub fn message_type_of(t: &tern_shell::body::TopicConfig) -> String {
    t.attributes
        .get(tern_shell::attributes::MESSAGE_TYPE)
        .cloned()
        .unwrap_or_else(|| "NORMAL".into())
}

impl Default for GroupPolicy {
    /// A new `SubscriptionGroupConfig`'s.
    fn default() -> Self {
        Self {
            orderly: false,
            retry_max_times: 16,
        }
    }
}

/// A lookup the endpoint awaits: in LOCAL mode answered at once from the broker's tables,
/// in CLUSTER mode by asking a broker (and cached).
pub type Lookup<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What the endpoint asks of the brokers it fronts, beyond remoting: the broker it runs in
/// (LOCAL mode, `tern-broker --enable-proxy`) or a cluster found through the name servers
/// (CLUSTER mode, the `tern-proxy` binary; [`cluster::Cluster`]).
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// LOCAL mode: the name of the broker the endpoint runs in. Sends go to its queues,
    /// and a route names each broker's own endpoint (its host, this port). `None` in
    /// CLUSTER mode: sends go to every broker's queues, and a route names the endpoint the
    /// client dialled, as RocketMQ's `ClusterTopicRouteService` answers.
    fn local_broker(&self) -> Option<String>;
    /// `topic`'s `message.type` attribute: `Some("NORMAL")` for a topic without one,
    /// `None` when no broker has such a topic.
    fn topic_message_type<'a>(&'a self, topic: &'a str) -> Lookup<'a, Option<String>>;
    /// `group`'s configuration, when the brokers have one.
    fn group_policy<'a>(&'a self, group: &'a str) -> Lookup<'a, Option<GroupPolicy>>;
    /// The ACL rules in force (`aclEnable`), checked against each call's signature.
    fn acl(&self) -> Option<Arc<Acl>>;
}

/// A running endpoint.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How long shutdown waits for calls in flight (a long poll is cut short).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

impl Endpoint {
    /// Binds `host:settings.port` and serves on a runtime of its own. The port is bound
    /// before this returns, so a port in use fails the caller's start.
    /// With `tls` the port serves TLS as its mode says (ALPN `h2` must be offered:
    /// [`tern_shell::tls::ServerTls::with_alpn`]).
    pub fn start(
        host: IpAddr,
        settings: ProxySettings,
        upstream: Upstream,
        backend: Arc<dyn Backend>,
        tls: Option<tern_shell::tls::ServerTls>,
    ) -> std::io::Result<Endpoint> {
        let listener = std::net::TcpListener::bind((host, settings.port))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(settings.worker_threads)
            .thread_name("tern-grpc")
            .enable_all()
            .build()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let service = service::Service::new(settings, upstream, backend, addr.port());
        let thread = std::thread::Builder::new()
            .name("tern-grpc-main".into())
            .spawn(move || {
                runtime.block_on(service.serve(listener, tls, stopped));
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(Endpoint {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, ends the calls in flight (within a few seconds), and forgets every
    /// client (each unregisters from the brokers).
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
