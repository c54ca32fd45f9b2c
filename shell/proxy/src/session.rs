//! The 5.x clients the endpoint knows, by client id.
//!
//! Each client gets a remoting client instance of its own ([`ClientInstance`], named after
//! the client id), which is how the brokers know it: its heartbeats carry the client's
//! producer groups (one per topic, as RocketMQ's proxy names them) and its consumer group,
//! so consumer listings, check-backs and expiry work as for a 4.x client. A broker's
//! check-back arrives on that instance's connection and is passed to the client over its
//! Telemetry stream. A client silent for `grpcClientIdleTimeMills` is forgotten, and its
//! instance unregisters from the brokers, as a 4.x client's shutdown does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use tern_client::consumer::MessageSelector;
use tern_client::processor::{ConsumerHook, TransactionCheckHook};
use tern_client::{ClientConfig, ClientInstance, Producer, ProducerConfig, SessionCredentials};
use tern_shell::ConnectionCtx;
use tern_shell::body::{
    ConsumeFromWhere, ConsumeMessageDirectlyResult, ConsumeType, ConsumerData, MessageModel,
    SubscriptionData,
};
use tern_shell::headers::CheckTransactionStateRequestHeader;
use tern_shell::message::MessageExt;
use tokio::sync::mpsc;

use crate::handle::TransactionId;
use crate::pb::{self, ClientType, Code, FilterType, Status, TelemetryCommand};
use crate::status::status;

/// Most clients known at once; past it a new client is answered TOO_MANY_REQUESTS.
pub const MAX_CLIENTS: usize = 10_000;

/// Commands waiting to be written to one client's Telemetry stream; past it a
/// check-back is dropped (the broker asks again), as RocketMQ drops a oneway.
pub const TELEMETRY_QUEUE: usize = 256;

/// How long a broker's CONSUME_MESSAGE_DIRECTLY waits for the client's verdict (the
/// broker gives the whole call 10 s).
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(8);

/// Most verify-message commands waiting for the client at once.
const MAX_PENDING_VERIFIES: usize = 64;

/// What the endpoint's sessions talk to.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The name servers.
    pub namesrv_addrs: Vec<String>,
    /// How the endpoint signs its requests to the brokers (`innerClientAuthenticationCredentials`).
    pub credentials: Option<SessionCredentials>,
    /// TLS to the name servers and brokers (`tls.enable`, `tls.client.*`).
    pub tls: Option<tern_shell::tls::ClientTls>,
}

impl Upstream {
    /// A remoting client's configuration: these name servers and credentials, named
    /// `instance_name` (a 5.x client's id, so the brokers list it as that client).
    pub fn client_config(&self, instance_name: &str) -> ClientConfig {
        let mut cfg = ClientConfig::new(&self.namesrv_addrs.join(";"));
        cfg.instance_name = Some(instance_name.to_owned());
        cfg.credentials = self.credentials.clone();
        cfg.tls = self.tls.clone();
        cfg
    }
}

/// A sender of Telemetry commands to one client.
pub type TelemetrySender = mpsc::Sender<Result<TelemetryCommand, tonic::Status>>;

/// One client.
#[derive(Debug)]
pub struct Session {
    /// Its client id.
    pub client_id: String,
    /// Its remoting instance.
    pub instance: ClientInstance,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The settings as answered (merged), once Telemetry brought them.
    settings: Option<pb::Settings>,
    telemetry: Option<TelemetrySender>,
    last_seen: Instant,
    /// Producers by topic (the topic is the producer group).
    producers: HashMap<String, Producer>,
    /// Verify-message commands sent, by nonce, waiting for the client's result code.
    verifies: HashMap<String, std::sync::mpsc::SyncSender<i32>>,
    /// Counts nonces.
    nonces: u64,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update is a single assignment or insert: the state stays valid.
        self.state.guard()
    }

    /// Marks the client alive.
    pub fn touch(&self) {
        self.lock().last_seen = Instant::now();
    }

    /// The merged settings, once the client sent its own.
    pub fn settings(&self) -> Option<pb::Settings> {
        self.lock().settings.clone()
    }

    /// Whether its settings are known (from Telemetry, or adopted from a call).
    pub fn is_known(&self) -> bool {
        self.lock().settings.is_some()
    }

    /// The client type its settings name.
    pub fn client_type(&self) -> Option<ClientType> {
        let s = self.lock();
        let t = s.settings.as_ref()?.client_type?;
        ClientType::try_from(t).ok()
    }

    /// Keeps the settings answered to the client.
    pub fn set_settings(&self, settings: pb::Settings) {
        self.lock().settings = Some(settings);
    }

    /// The stream check-backs go to.
    pub fn set_telemetry(&self, tx: Option<TelemetrySender>) {
        self.lock().telemetry = tx;
    }

    /// Forgets `tx` when it is still the stream check-backs go to: a client that
    /// reconnected has opened a new one, which stays.
    pub fn end_telemetry(&self, tx: &TelemetrySender) {
        let mut s = self.lock();
        if s.telemetry.as_ref().is_some_and(|t| t.same_channel(tx)) {
            s.telemetry = None;
        }
    }

    fn telemetry(&self) -> Option<TelemetrySender> {
        self.lock().telemetry.clone()
    }

    /// The client's answer to the verify-message command `nonce` arrived.
    pub fn verified(&self, nonce: &str, code: i32) {
        if let Some(tx) = self.lock().verifies.remove(nonce) {
            let _ = tx.try_send(code);
        }
    }

    /// Asks the client over Telemetry to consume `msg` now (CONSUME_MESSAGE_DIRECTLY,
    /// `tern-admin consumeMessage -d`) and waits for its verdict: blocking, on a
    /// blocking thread.
    fn verify(&self, msg: &MessageExt) -> ConsumeMessageDirectlyResult {
        let started = Instant::now();
        let verdict = |result: &str, remark: Option<String>| ConsumeMessageDirectlyResult {
            order: false,
            auto_commit: true,
            consume_result: result.to_owned(),
            remark,
            spent_time_mills: started.elapsed().as_millis() as i64,
        };
        let Some(tx) = self.telemetry() else {
            return verdict(
                "CR_THROW_EXCEPTION",
                Some("the client has no telemetry stream".into()),
            );
        };
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        let nonce = {
            let mut s = self.lock();
            if s.verifies.len() >= MAX_PENDING_VERIFIES {
                return verdict(
                    "CR_THROW_EXCEPTION",
                    Some("too many verifications waiting".into()),
                );
            }
            s.nonces += 1;
            let nonce = format!("{}-{}", s.nonces, tern_shell::runtime::now_ms());
            s.verifies.insert(nonce.clone(), done);
            nonce
        };
        let cmd = TelemetryCommand {
            status: Some(crate::status::ok()),
            command: Some(pb::telemetry_command::Command::VerifyMessageCommand(
                pb::VerifyMessageCommand {
                    nonce: nonce.clone(),
                    message: Some(crate::convert::incoming(msg, &msg.topic, None)),
                },
            )),
        };
        let answer = match tx.try_send(Ok(cmd)) {
            Ok(()) => wait.recv_timeout(VERIFY_TIMEOUT).ok(),
            Err(_) => None,
        };
        self.lock().verifies.remove(&nonce);
        match answer.map(Code::try_from) {
            Some(Ok(Code::Ok)) => verdict("CR_SUCCESS", None),
            Some(Ok(Code::FailedToConsumeMessage)) => verdict("CR_LATER", None),
            Some(Ok(Code::MessageCorrupted)) => verdict("CR_RETURN_NULL", None),
            Some(other) => verdict(
                "CR_THROW_EXCEPTION",
                Some(format!("the client answered {other:?}")),
            ),
            None => verdict(
                "CR_THROW_EXCEPTION",
                Some(format!(
                    "the client did not answer within {} s",
                    VERIFY_TIMEOUT.as_secs()
                )),
            ),
        }
    }

    /// The producer for `topic` (RocketMQ's proxy: the topic is the producer group).
    /// `max_body` is the largest body it sends.
    pub fn producer(&self, topic: &str, max_body: usize) -> Producer {
        let mut s = self.lock();
        if let Some(p) = s.producers.get(topic) {
            return p.clone();
        }
        let mut cfg = ProducerConfig::new(topic);
        // The client retries itself with its backoff policy; one attempt per call here.
        cfg.retry_times_when_send_failed = 0;
        cfg.max_message_bytes = max_body;
        let p = Producer::with_instance(cfg, self.instance.clone());
        p.start();
        s.producers.insert(topic.to_owned(), p.clone());
        p
    }

    /// Registers what `settings` say the client is, so the next heartbeat tells the
    /// brokers: a producer per publishing topic (with check-backs routed to this
    /// session), or the consumer group and its subscriptions.
    pub fn register(self: &Arc<Self>, settings: &pb::Settings) -> Result<(), Status> {
        match &settings.pub_sub {
            Some(pb::settings::PubSub::Publishing(p)) => {
                for t in &p.topics {
                    self.instance.register_producer(&t.name);
                    self.instance.register_transaction_checker(
                        &t.name,
                        Arc::new(CheckForward {
                            session: Arc::downgrade(self),
                        }),
                    );
                }
                Ok(())
            }
            Some(pb::settings::PubSub::Subscription(s)) => {
                let group = s.group.as_ref().map(|g| g.name.clone()).unwrap_or_default();
                if group.is_empty() {
                    return Err(status(
                        Code::IllegalConsumerGroup,
                        "subscription names no group",
                    ));
                }
                let mut subscriptions = Vec::new();
                for e in &s.subscriptions {
                    let topic = e.topic.as_ref().map(|t| t.name.clone()).unwrap_or_default();
                    let selector = selector(e.expression.as_ref())?;
                    subscriptions
                        .push(selector.subscription(&topic, tern_shell::runtime::now_ms()));
                }
                let push = settings.client_type == Some(ClientType::PushConsumer as i32);
                self.instance.register_hook(
                    &group,
                    Arc::new(ConsumerForward {
                        session: Arc::downgrade(self),
                        subscriptions: subscriptions.clone(),
                        push,
                        version: settings
                            .user_agent
                            .as_ref()
                            .map(|u| u.version.clone())
                            .unwrap_or_default(),
                    }),
                );
                self.instance.register_consumer(ConsumerData {
                    group_name: group,
                    consume_type: if push {
                        ConsumeType::ConsumePassively
                    } else {
                        ConsumeType::ConsumeActively
                    },
                    message_model: MessageModel::Clustering,
                    consume_from_where: ConsumeFromWhere::ConsumeFromLastOffset,
                    subscription_data_set: subscriptions,
                    unit_mode: false,
                });
                Ok(())
            }
            None => Err(status(
                Code::BadRequest,
                "there is no publishing or subscription data in settings",
            )),
        }
    }
}

/// A filter expression as a remoting selector; `Err` is ILLEGAL_FILTER_EXPRESSION.
pub fn selector(e: Option<&pb::FilterExpression>) -> Result<MessageSelector, Status> {
    let Some(e) = e else {
        return Ok(MessageSelector::all());
    };
    let s = match FilterType::try_from(e.r#type).unwrap_or(FilterType::Tag) {
        FilterType::Sql => MessageSelector::sql(e.expression.clone()),
        _ if e.expression.trim().is_empty() => MessageSelector::all(),
        _ => MessageSelector::tag(e.expression.clone()),
    };
    s.check()
        .map_err(|err| status(Code::IllegalFilterExpression, err.to_string()))?;
    Ok(s)
}

/// Passes a broker's check-back to the client over Telemetry.
#[derive(Debug)]
struct CheckForward {
    session: Weak<Session>,
}

impl TransactionCheckHook for CheckForward {
    fn check(&self, _conn: ConnectionCtx, h: CheckTransactionStateRequestHeader, msg: MessageExt) {
        let Some(session) = self.session.upgrade() else {
            return;
        };
        let Some(tx) = session.telemetry() else {
            log::debug!(
                "check-back for {}: client {} has no telemetry stream",
                msg.topic,
                session.client_id
            );
            return;
        };
        let offset_msg_id = h
            .offset_msg_id
            .clone()
            .unwrap_or_else(|| msg.offset_msg_id.clone());
        let transaction_id = TransactionId {
            offset_msg_id,
            tran_state_table_offset: h.tran_state_table_offset,
        }
        .encode();
        let topic = h.topic.clone().unwrap_or_else(|| msg.topic.clone());
        let cmd = TelemetryCommand {
            status: Some(crate::status::ok()),
            command: Some(
                pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    pb::RecoverOrphanedTransactionCommand {
                        message: Some(crate::convert::incoming(&msg, &topic, None)),
                        transaction_id,
                    },
                ),
            ),
        };
        if tx.try_send(Ok(cmd)).is_err() {
            log::warn!(
                "check-back for client {} dropped: its telemetry stream is full or closed",
                session.client_id
            );
        }
    }
}

/// Answers the broker's questions about a 5.x consumer: its running info (from its
/// settings), and CONSUME_MESSAGE_DIRECTLY passed to it as a VerifyMessageCommand. It
/// needs no rebalance: 5.x clients poll QueryAssignment.
#[derive(Debug)]
struct ConsumerForward {
    session: Weak<Session>,
    subscriptions: Vec<SubscriptionData>,
    push: bool,
    version: String,
}

impl ConsumerHook for ConsumerForward {
    fn rebalance_now(&self) {}

    fn running_info(&self) -> Vec<u8> {
        let consume_type = if self.push {
            "CONSUME_PASSIVELY"
        } else {
            "CONSUME_ACTIVELY"
        };
        let info = serde_json::json!({
            "properties": {
                "PROP_CONSUME_TYPE": consume_type,
                "PROP_CLIENT_VERSION": self.version,
                "PROP_CLIENT_PROTOCOL": "gRPC v2",
            },
            "subscriptionSet": self.subscriptions,
            "mqTable": {},
            "statusTable": {},
        });
        serde_json::to_vec(&info).unwrap_or_default()
    }

    fn consume_directly(
        &self,
        msg: MessageExt,
        _broker: &str,
    ) -> Option<ConsumeMessageDirectlyResult> {
        Some(self.session.upgrade()?.verify(&msg))
    }
}

/// The sessions.
#[derive(Debug)]
pub struct Sessions {
    upstream: Upstream,
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// Round-robin position of sends without a message group.
    turn: AtomicUsize,
}

impl Sessions {
    /// No sessions yet.
    pub fn new(upstream: Upstream) -> Self {
        Self {
            upstream,
            map: Mutex::new(HashMap::new()),
            turn: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.map.guard()
    }

    /// The next round-robin position.
    pub fn next_turn(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    /// The session of `client_id`, made on its first call.
    pub fn get(&self, client_id: &str) -> Result<Arc<Session>, Status> {
        let mut map = self.lock();
        if let Some(s) = map.get(client_id) {
            s.touch();
            return Ok(s.clone());
        }
        if map.len() >= MAX_CLIENTS {
            return Err(status(
                Code::TooManyRequests,
                format!("more than {MAX_CLIENTS} clients are connected"),
            ));
        }
        let instance = ClientInstance::new(self.upstream.client_config(client_id))
            .map_err(|e| status(Code::InternalServerError, e.to_string()))?;
        instance.start();
        let s = Arc::new(Session {
            client_id: client_id.to_owned(),
            instance,
            state: Mutex::new(State {
                settings: None,
                telemetry: None,
                last_seen: Instant::now(),
                producers: HashMap::new(),
                verifies: HashMap::new(),
                nonces: 0,
            }),
        });
        map.insert(client_id.to_owned(), s.clone());
        Ok(s)
    }

    /// Forgets `client_id`; the caller shuts its instance down.
    pub fn remove(&self, client_id: &str) -> Option<Arc<Session>> {
        self.lock().remove(client_id)
    }

    /// Forgets the clients silent for `idle`, and returns them (to be shut down).
    pub fn expire(&self, idle: Duration) -> Vec<Arc<Session>> {
        let now = Instant::now();
        let mut map = self.lock();
        let gone: Vec<String> = map
            .iter()
            .filter(|(_, s)| now.duration_since(s.lock().last_seen) > idle)
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|k| map.remove(k)).collect()
    }

    /// Every session (for shutdown).
    pub fn drain(&self) -> Vec<Arc<Session>> {
        self.lock().drain().map(|(_, s)| s).collect()
    }
}
