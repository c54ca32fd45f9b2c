//! Heartbeat, Telemetry and NotifyClientTermination (RocketMQ's `ClientActivity`): who the
//! client is, the settings the server answers, and the stream check-backs travel on.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tern_shell::acl::rules::perm;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Streaming};

use super::{Inner, Need, group_need, topic_need, validate_group, validate_topic};
use crate::convert::duration;
use crate::meta::CallCtx;
use crate::pb::settings::PubSub;
use crate::pb::*;
use crate::session::{Session, TELEMETRY_QUEUE};
use crate::status::{ok, status};

/// The retry delays of RocketMQ's default `CustomizedRetryPolicy`.
const CUSTOMIZED_BACKOFF_SECS: [u64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// The server-to-client half of a Telemetry stream.
pub type Commands = Pin<Box<dyn Stream<Item = Result<TelemetryCommand, tonic::Status>> + Send>>;

pub(super) async fn heartbeat(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: HeartbeatRequest,
) -> Result<HeartbeatResponse, Status> {
    let Some(kind) = session.client_type() else {
        return Err(status(
            Code::UnrecognizedClientType,
            "cannot find client settings for this client",
        ));
    };
    match kind {
        ClientType::Producer => inner.authorize(ctx, &[])?,
        ClientType::PushConsumer | ClientType::SimpleConsumer => {
            let group = validate_group(req.group.as_ref())?;
            inner.authorize(ctx, &[group_need(&group)])?;
        }
        other => {
            return Err(status(
                Code::UnrecognizedClientType,
                format!("client type {} is not supported", other.as_str_name()),
            ));
        }
    }
    session.touch();
    Ok(HeartbeatResponse { status: Some(ok()) })
}

pub(super) async fn notify_client_termination(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: NotifyClientTerminationRequest,
) -> Result<NotifyClientTerminationResponse, Status> {
    let needs: Vec<Need> = match &req.group {
        Some(g) => vec![group_need(&validate_group(Some(g))?)],
        None => Vec::new(),
    };
    inner.authorize(ctx, &needs)?;
    if let Some(s) = inner.sessions.remove(&session.client_id) {
        s.set_telemetry(None);
        // Unregisters its groups from every broker, as a 4.x client's shutdown does.
        s.instance.shutdown().await;
    }
    Ok(NotifyClientTerminationResponse { status: Some(ok()) })
}

/// What settings need of the ACL: PUB on each published topic; SUB on the group and on
/// each subscribed topic.
fn settings_needs(settings: &Settings) -> Result<Vec<Need>, Status> {
    match &settings.pub_sub {
        Some(PubSub::Publishing(p)) => p
            .topics
            .iter()
            .map(|t| validate_topic(Some(t)).map(|t| topic_need(&t, perm::PUB)))
            .collect(),
        Some(PubSub::Subscription(s)) => {
            let mut needs = vec![group_need(&validate_group(s.group.as_ref())?)];
            for e in &s.subscriptions {
                needs.push(topic_need(&validate_topic(e.topic.as_ref())?, perm::SUB));
            }
            Ok(needs)
        }
        None => Err(status(
            Code::BadRequest,
            "there is no publishing or subscription data in settings",
        )),
    }
}

impl Inner {
    /// The client's settings with the server's overlay (`GrpcClientSettingsManager`).
    async fn merge_settings(&self, mut s: Settings) -> Settings {
        let cfg = &self.settings;
        match &mut s.pub_sub {
            Some(PubSub::Publishing(p)) => {
                p.validate_message_type = cfg.topic_message_type_check;
                p.max_body_size = i32::try_from(cfg.max_message_size).unwrap_or(i32::MAX);
                s.backoff_policy = Some(RetryPolicy {
                    max_attempts: cfg.producer_max_attempts,
                    strategy: Some(retry_policy::Strategy::ExponentialBackoff(
                        ExponentialBackoff {
                            initial: Some(duration(cfg.producer_backoff_initial)),
                            max: Some(duration(cfg.producer_backoff_max)),
                            multiplier: cfg.producer_backoff_multiplier,
                        },
                    )),
                });
            }
            Some(PubSub::Subscription(sub)) => {
                let group = sub
                    .group
                    .as_ref()
                    .map(|g| g.name.clone())
                    .unwrap_or_default();
                let policy = self.backend.group_policy(&group).await.unwrap_or_default();
                sub.receive_batch_size = Some(cfg.receive_batch_size);
                sub.long_polling_timeout = Some(duration(cfg.max_long_polling));
                sub.fifo = Some(policy.orderly);
                s.backoff_policy = Some(RetryPolicy {
                    max_attempts: policy.retry_max_times.saturating_add(1).max(1),
                    strategy: Some(retry_policy::Strategy::CustomizedBackoff(
                        CustomizedBackoff {
                            next: CUSTOMIZED_BACKOFF_SECS
                                .iter()
                                .map(|s| duration(Duration::from_secs(*s)))
                                .collect(),
                        },
                    )),
                });
            }
            None => {}
        }
        s.metric = Some(Metric {
            on: false,
            endpoints: None,
        });
        s
    }

    /// A client's settings arrived: check them, register the client, answer the merged
    /// settings, and tell the brokers at once (a check-back needs the producer known).
    async fn settings_arrived(
        &self,
        ctx: &CallCtx,
        session: &Arc<Session>,
        settings: Settings,
    ) -> Result<TelemetryCommand, Status> {
        let merged = self.adopt_settings(ctx, session, settings).await?;
        Ok(TelemetryCommand {
            status: Some(ok()),
            command: Some(telemetry_command::Command::Settings(merged)),
        })
    }

    /// Checks `settings`, registers the client as they say, keeps them merged with the
    /// server's overlay (returned), and heartbeats the brokers in the background.
    pub(super) async fn adopt_settings(
        &self,
        ctx: &CallCtx,
        session: &Arc<Session>,
        settings: Settings,
    ) -> Result<Settings, Status> {
        let needs = settings_needs(&settings)?;
        self.authorize(ctx, &needs)?;
        session.register(&settings)?;
        let merged = self.merge_settings(settings).await;
        session.set_settings(merged.clone());
        let topics: Vec<String> = match &merged.pub_sub {
            Some(PubSub::Publishing(p)) => p.topics.iter().map(|t| t.name.clone()).collect(),
            Some(PubSub::Subscription(s)) => s
                .subscriptions
                .iter()
                .filter_map(|e| e.topic.as_ref().map(|t| t.name.clone()))
                .collect(),
            None => Vec::new(),
        };
        let instance = session.instance.clone();
        // The brokers learn the client after the answer: a push consumer waits for it.
        tokio::spawn(async move {
            for t in &topics {
                if let Err(e) = instance.fetch_route(t).await {
                    log::debug!("route of {t} for gRPC client {}: {e}", instance.client_id());
                }
            }
            instance.send_heartbeat_to_all_brokers().await;
        });
        Ok(merged)
    }
}

/// Opens a Telemetry stream: the client's commands are read on a task of their own, and
/// what the server sends (the settings answer, check-backs) goes out on the returned stream.
pub(super) fn telemetry(
    inner: Arc<Inner>,
    request: Request<Streaming<TelemetryCommand>>,
) -> Result<Commands, tonic::Status> {
    let (ctx, session) = inner
        .open(&request)
        .map_err(|s| tonic::Status::invalid_argument(s.message))?;
    let mut incoming = request.into_inner();
    let (tx, rx) = mpsc::channel(TELEMETRY_QUEUE);
    session.set_telemetry(Some(tx.clone()));
    let mut shutdown = inner.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                n = incoming.message() => n,
                _ = shutdown.changed() => break,
            };
            let cmd = match next {
                Ok(Some(cmd)) => cmd,
                Ok(None) => break,
                Err(e) => {
                    log::debug!("telemetry of gRPC client {} ended: {e}", session.client_id);
                    break;
                }
            };
            session.touch();
            match cmd.command {
                Some(telemetry_command::Command::Settings(s)) => {
                    let answer = match inner.settings_arrived(&ctx, &session, s).await {
                        Ok(a) => Ok(a),
                        Err(st) if (40000..50000).contains(&st.code) => {
                            Err(tonic::Status::invalid_argument(st.message))
                        }
                        Err(st) => Err(tonic::Status::internal(st.message)),
                    };
                    let failed = answer.is_err();
                    if tx.send(answer).await.is_err() || failed {
                        break;
                    }
                }
                Some(telemetry_command::Command::VerifyMessageResult(r)) => {
                    let code = cmd.status.map_or(Code::Ok as i32, |s| s.code);
                    session.verified(&r.nonce, code);
                }
                // Thread stacks are never asked for (running info is answered from the
                // settings): nothing waits for one.
                Some(other) => log::debug!(
                    "gRPC client {} sent an unsolicited telemetry command: {other:?}",
                    session.client_id
                ),
                None => {}
            }
        }
        session.end_telemetry(&tx);
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok(Box::pin(stream))
}
