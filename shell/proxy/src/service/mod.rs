//! `MessagingService`: each RPC opens its call (metadata, session, ACL), then runs in the
//! module of its family. Errors are answered in-band (`status` in the response), as
//! RocketMQ's proxy answers them; only Telemetry fails the stream itself.

use std::sync::Arc;
use std::time::Duration;

use tern_shell::acl::rules::perm;
use tern_shell::body::TopicRouteData;
use tokio::sync::{oneshot, watch};
use tonic::{Request, Response, Streaming};

use crate::config::ProxySettings;
use crate::meta::CallCtx;
use crate::pb::messaging_service_server::{MessagingService, MessagingServiceServer};
use crate::pb::*;
use crate::session::{Session, Sessions, Upstream};
use crate::status::{from_client_error, status};
use crate::{Backend, SHUTDOWN_GRACE};

mod client;
mod consumer;
mod offset;
mod producer;
mod route;

/// How often silent clients are looked for.
const REAP_EVERY: Duration = Duration::from_secs(10);
/// Most concurrent streams on one HTTP/2 connection.
const MAX_STREAMS_PER_CONNECTION: u32 = 256;

/// The service; cloning shares it.
#[derive(Debug, Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    settings: ProxySettings,
    sessions: Sessions,
    backend: Arc<dyn Backend>,
    /// The endpoint's bound port: every broker's endpoint in a route (LOCAL mode: each
    /// broker runs one on the same port, as RocketMQ's brokers with `--enable-proxy` do).
    grpc_port: u16,
    /// Set at shutdown: Telemetry streams end.
    shutdown: watch::Sender<bool>,
}

impl Service {
    pub fn new(
        settings: ProxySettings,
        upstream: Upstream,
        backend: Arc<dyn Backend>,
        grpc_port: u16,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                sessions: Sessions::new(upstream),
                backend,
                grpc_port,
                shutdown: watch::channel(false).0,
            }),
        }
    }

    /// Serves `listener` until `stopped`, then drains for up to [`SHUTDOWN_GRACE`] and
    /// forgets every client.
    pub async fn serve(
        self,
        listener: std::net::TcpListener,
        tls: Option<tern_shell::tls::ServerTls>,
        stopped: oneshot::Receiver<()>,
    ) {
        let inner = self.inner.clone();
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                log::error!("gRPC endpoint: cannot serve its listener: {e}");
                return;
            }
        };
        let reaper = tokio::spawn(reap(inner.clone()));
        let limit = inner.settings.max_inbound_bytes;
        let svc = MessagingServiceServer::new(self)
            .max_decoding_message_size(limit)
            .max_encoding_message_size(limit);
        let (begun, grace) = oneshot::channel::<()>();
        let signal = {
            let inner = inner.clone();
            async move {
                let _ = stopped.await;
                let _ = inner.shutdown.send(true);
                let _ = begun.send(());
            }
        };
        let router = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
            .add_service(svc);
        let server = async move {
            match tls {
                Some(tls) => {
                    router
                        .serve_with_incoming_shutdown(crate::tls::incoming(listener, tls), signal)
                        .await
                }
                None => {
                    router
                        .serve_with_incoming_shutdown(
                            // No Nagle: a streamed answer's frames go out as written, not
                            // 40 ms later behind the client's delayed ACK.
                            tonic::transport::server::TcpIncoming::from(listener)
                                .with_nodelay(Some(true))
                                .with_keepalive(Some(Duration::from_secs(60))),
                            signal,
                        )
                        .await
                }
            }
        };
        let bounded = async {
            let _ = grace.await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            r = server => if let Err(e) = r {
                log::error!("gRPC endpoint stopped: {e}");
            },
            () = bounded => log::info!("gRPC endpoint: calls still running after {SHUTDOWN_GRACE:?} are cut"),
        }
        reaper.abort();
        for s in inner.sessions.drain() {
            s.set_telemetry(None);
            let _ = tokio::time::timeout(Duration::from_secs(2), s.instance.shutdown()).await;
        }
    }
}

/// Forgets clients silent for `grpcClientIdleTimeMills`.
async fn reap(inner: Arc<Inner>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        for s in inner.sessions.expire(inner.settings.client_idle) {
            log::info!("gRPC client {} silent: forgotten", s.client_id);
            s.set_telemetry(None);
            s.instance.shutdown().await;
        }
    }
}

/// What a call needs of the ACL: a resource (a topic, or a group as `%RETRY%group`) and
/// a permission bit.
type Need = (String, u8);

pub(crate) fn topic_need(topic: &str, p: u8) -> Need {
    (topic.to_owned(), p)
}

pub(crate) fn group_need(group: &str) -> Need {
    (tern_shell::acl::guard::group(group), perm::SUB)
}

impl Inner {
    /// The broker `mq` names; the broker this proxy runs beside when it names none.
    fn broker_of(&self, mq: &MessageQueue) -> Result<String, Status> {
        mq.broker
            .as_ref()
            .map(|b| b.name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| self.backend.local_broker())
            .ok_or_else(|| status(Code::BadRequest, "the message queue names no broker"))
    }

    /// Reads the call's metadata and finds (or makes) its client's session.
    fn open<T>(&self, req: &Request<T>) -> Result<(CallCtx, Arc<Session>), Status> {
        let ctx = CallCtx::read(req.metadata(), req.remote_addr())?;
        let session = self.sessions.get(&ctx.client_id)?;
        Ok((ctx, session))
    }

    /// Checks the call's signature and that its account holds every need (when
    /// `aclEnable`); UNAUTHORIZED with RocketMQ's remark otherwise.
    fn authorize(&self, ctx: &CallCtx, needs: &[Need]) -> Result<(), Status> {
        let Some(acl) = self.backend.acl() else {
            return Ok(());
        };
        let refuse = |why: String| {
            log::warn!(
                "gRPC call from {} ({}) refused: {why}",
                ctx.peer,
                ctx.client_id
            );
            status(Code::Unauthorized, why)
        };
        let content = ctx.date_time.as_deref().unwrap_or_default();
        let (ak, sig) = match &ctx.authorization {
            Some(a) => (Some(a.access_key.as_str()), a.signature.as_slice()),
            None => (None, &[][..]),
        };
        if ctx.date_time.is_none() && ak.is_some() {
            return Err(refuse("datetime is null".into()));
        }
        let access = acl
            .authenticate_tag(ak, content.as_bytes(), sig, ctx.peer.ip())
            .map_err(|why| refuse(why.to_string()))?;
        for (resource, p) in needs {
            access
                .require(resource, *p)
                .map_err(|why| refuse(why.to_string()))?;
        }
        Ok(())
    }

    /// The group a consumer's call names, checked, once its account may read it and
    /// `topic` (SUB on both).
    fn consumer(
        &self,
        ctx: &CallCtx,
        group: Option<&Resource>,
        topic: &str,
    ) -> Result<String, Status> {
        let group = validate_group(group)?;
        self.authorize(ctx, &[topic_need(topic, perm::SUB), group_need(&group)])?;
        Ok(group)
    }

    /// The topic's route from the name servers (cached by the session's instance).
    async fn route(&self, session: &Session, topic: &str) -> Result<TopicRouteData, Status> {
        session
            .instance
            .topic_route(topic)
            .await
            .map_err(|e| from_client_error(&e))
    }

    /// The remoting address of `broker`'s master, learning routes for `topic` if needed.
    async fn broker_addr(
        &self,
        session: &Session,
        topic: &str,
        broker: &str,
    ) -> Result<String, Status> {
        if let Some(a) = session.instance.master_addr(broker) {
            return Ok(a);
        }
        session
            .instance
            .fetch_route(topic)
            .await
            .map_err(|e| from_client_error(&e))?;
        session.instance.master_addr(broker).ok_or_else(|| {
            status(
                Code::NotFound,
                format!("broker {broker} of topic {topic} has no master"),
            )
        })
    }
}

/// Sends `cmd` to the broker at `addr` within the session's RPC timeout; a transport
/// failure is answered as a status.
pub(crate) async fn call(
    session: &Session,
    addr: &str,
    cmd: tern_shell::RemotingCommand,
) -> Result<tern_shell::RemotingCommand, Status> {
    session
        .instance
        .invoke(addr, cmd, session.instance.config().rpc_timeout)
        .await
        .map_err(|e| from_client_error(&e))
}

/// A topic a client may name: RocketMQ's `Validators.checkTopic`, and no system topic.
pub(crate) fn validate_topic(r: Option<&Resource>) -> Result<String, Status> {
    let name = r.map(|r| r.name.clone()).unwrap_or_default();
    tern_client::message::check_topic(&name)
        .map_err(|e| status(Code::IllegalTopic, e.to_string()))?;
    let system = name
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("rmq_sys_"))
        || matches!(
            name.as_str(),
            "TBW102" | "SCHEDULE_TOPIC_XXXX" | "OFFSET_MOVED_EVENT"
        )
        || name.starts_with("%RETRY%")
        || name.starts_with("%DLQ%");
    if system {
        return Err(status(
            Code::IllegalTopic,
            format!("topic {name} is a system topic"),
        ));
    }
    Ok(name)
}

/// A group a client may name: RocketMQ's `Validators.checkGroup`, and no system group.
pub(crate) fn validate_group(r: Option<&Resource>) -> Result<String, Status> {
    let name = r.map(|r| r.name.clone()).unwrap_or_default();
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'));
    if !ok {
        return Err(status(
            Code::IllegalConsumerGroup,
            format!(
                "consumer group {name:?} is empty, too long or has characters other than letters, digits, %|_-"
            ),
        ));
    }
    if name.starts_with("CID_RMQ_SYS_") || name == "TOOLS_CONSUMER" {
        return Err(status(
            Code::IllegalConsumerGroup,
            format!("group {name} is a system group"),
        ));
    }
    Ok(name)
}

/// Opens the call, runs `$handler`, and answers any failure in-band in `$resp`'s status.
macro_rules! unary {
    ($self:ident, $req:ident, $resp:ident, $handler:path) => {{
        let inner = &$self.inner;
        let answer = match inner.open(&$req) {
            Err(s) => Err(s),
            Ok((ctx, session)) => $handler(inner, &ctx, &session, $req.into_inner()).await,
        };
        Ok(Response::new(answer.unwrap_or_else(|s| {
            let mut refused = $resp::default();
            refused.status = Some(s);
            refused
        })))
    }};
}

type Answer<T> = Result<Response<T>, tonic::Status>;

#[tonic::async_trait]
impl MessagingService for Service {
    async fn query_route(&self, request: Request<QueryRouteRequest>) -> Answer<QueryRouteResponse> {
        unary!(self, request, QueryRouteResponse, route::query_route)
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Answer<HeartbeatResponse> {
        unary!(self, request, HeartbeatResponse, client::heartbeat)
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Answer<SendMessageResponse> {
        unary!(self, request, SendMessageResponse, producer::send_message)
    }

    async fn query_assignment(
        &self,
        request: Request<QueryAssignmentRequest>,
    ) -> Answer<QueryAssignmentResponse> {
        unary!(
            self,
            request,
            QueryAssignmentResponse,
            route::query_assignment
        )
    }

    type ReceiveMessageStream = consumer::Frames<ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<ReceiveMessageRequest>,
    ) -> Answer<Self::ReceiveMessageStream> {
        Ok(Response::new(consumer::receive_message(
            self.inner.clone(),
            request,
        )))
    }

    async fn ack_message(&self, request: Request<AckMessageRequest>) -> Answer<AckMessageResponse> {
        unary!(self, request, AckMessageResponse, consumer::ack_message)
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<ForwardMessageToDeadLetterQueueRequest>,
    ) -> Answer<ForwardMessageToDeadLetterQueueResponse> {
        unary!(
            self,
            request,
            ForwardMessageToDeadLetterQueueResponse,
            consumer::forward_to_dlq
        )
    }

    type PullMessageStream = consumer::Frames<PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<PullMessageRequest>,
    ) -> Answer<Self::PullMessageStream> {
        Ok(Response::new(offset::pull_message(
            self.inner.clone(),
            request,
        )))
    }

    async fn update_offset(
        &self,
        request: Request<UpdateOffsetRequest>,
    ) -> Answer<UpdateOffsetResponse> {
        unary!(self, request, UpdateOffsetResponse, offset::update_offset)
    }

    async fn get_offset(&self, request: Request<GetOffsetRequest>) -> Answer<GetOffsetResponse> {
        unary!(self, request, GetOffsetResponse, offset::get_offset)
    }

    async fn query_offset(
        &self,
        request: Request<QueryOffsetRequest>,
    ) -> Answer<QueryOffsetResponse> {
        unary!(self, request, QueryOffsetResponse, offset::query_offset)
    }

    async fn end_transaction(
        &self,
        request: Request<EndTransactionRequest>,
    ) -> Answer<EndTransactionResponse> {
        unary!(
            self,
            request,
            EndTransactionResponse,
            producer::end_transaction
        )
    }

    type TelemetryStream = client::Commands;

    async fn telemetry(
        &self,
        request: Request<Streaming<TelemetryCommand>>,
    ) -> Answer<Self::TelemetryStream> {
        client::telemetry(self.inner.clone(), request).map(Response::new)
    }

    async fn notify_client_termination(
        &self,
        request: Request<NotifyClientTerminationRequest>,
    ) -> Answer<NotifyClientTerminationResponse> {
        unary!(
            self,
            request,
            NotifyClientTerminationResponse,
            client::notify_client_termination
        )
    }

    async fn change_invisible_duration(
        &self,
        request: Request<ChangeInvisibleDurationRequest>,
    ) -> Answer<ChangeInvisibleDurationResponse> {
        unary!(
            self,
            request,
            ChangeInvisibleDurationResponse,
            consumer::change_invisible_duration
        )
    }

    async fn recall_message(
        &self,
        request: Request<RecallMessageRequest>,
    ) -> Answer<RecallMessageResponse> {
        unary!(
            self,
            request,
            RecallMessageResponse,
            producer::recall_message
        )
    }

    async fn sync_lite_subscription(
        &self,
        _request: Request<SyncLiteSubscriptionRequest>,
    ) -> Answer<SyncLiteSubscriptionResponse> {
        // Lite topics (RIP-74, 5.4) have no store side in Tern: said plainly, as the
        // proxy says it for features it lacks.
        Ok(Response::new(SyncLiteSubscriptionResponse {
            status: Some(status(
                Code::Unsupported,
                "lite topics are not supported by Tern",
            )),
        }))
    }
}
