//! The RocketMQ 5.x gRPC endpoint inside the broker (RocketMQ's proxy in LOCAL mode,
//! `mqbroker --enable-proxy`): what the endpoint needs of this broker beyond remoting.
//! The endpoint itself is `tern-proxy`; it reaches the processors through the broker's
//! own remoting port, so every check and metric of a remoting request applies.

use std::sync::{Arc, Weak};

use tern_proxy::{
    Backend, Endpoint, GroupPolicy, Lookup, ProxySettings, Upstream, message_type_of,
};
use tern_shell::acl::guard::Acl;

use crate::{BrokerCtx, StartError};

/// This broker, as the endpoint sees it.
#[derive(Debug)]
struct Local {
    /// Weak: the context outlives the endpoint only while the broker runs.
    ctx: Weak<BrokerCtx>,
    broker_name: String,
}

impl Backend for Local {
    fn local_broker(&self) -> Option<String> {
        Some(self.broker_name.clone())
    }

    fn topic_message_type<'a>(&'a self, topic: &'a str) -> Lookup<'a, Option<String>> {
        let t = self.ctx.upgrade().and_then(|ctx| ctx.topics.get(topic));
        Box::pin(std::future::ready(t.as_ref().map(message_type_of)))
    }

    fn group_policy<'a>(&'a self, group: &'a str) -> Lookup<'a, Option<GroupPolicy>> {
        let g = self.ctx.upgrade().and_then(|ctx| ctx.groups.get(group));
        Box::pin(std::future::ready(g.as_ref().map(GroupPolicy::from)))
    }

    fn acl(&self) -> Option<Arc<Acl>> {
        self.ctx.upgrade()?.acl.clone()
    }
}

/// Starts the endpoint on `listenAddr:grpcServerPort` (the remoting port's address),
/// with the remoting port's TLS, talking to the name servers this broker registers with.
pub fn start(ctx: &Arc<BrokerCtx>, settings: ProxySettings) -> Result<Endpoint, StartError> {
    let host = ctx.config.listen_ip;
    let upstream = Upstream {
        namesrv_addrs: ctx.config.namesrv_addrs.clone(),
        credentials: ctx.config.inner_credentials.clone(),
        // A broker's own connections' TLS: the loopback to an enforcing port needs it.
        tls: tern_shell::tls::ClientTls::new(&ctx.config.tls.client)
            .map_err(StartError::GrpcTls)?,
    };
    let backend = Arc::new(Local {
        ctx: Arc::downgrade(ctx),
        broker_name: ctx.config.broker_name.clone(),
    });
    let port = settings.port;
    // The remoting port's TLS (tls.server.*), offering h2 as gRPC clients require.
    let tls = tern_shell::tls::ServerTls::with_alpn(&ctx.config.tls.server, &[b"h2"])
        .map_err(StartError::GrpcTls)?;
    Endpoint::start(host, settings, upstream, backend, tls).map_err(|error| StartError::Grpc {
        host,
        port,
        error,
    })
}
