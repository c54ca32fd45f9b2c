//! The transaction producer (Java's `TransactionMQProducer`): a message is sent as a half
//! message that consumers cannot see, a local transaction runs, and its outcome commits
//! or rolls back the message (END_TRANSACTION, oneway, to the broker that stored it).
//!
//! When the outcome never arrives (Unknown, a crash, a lost packet), the broker asks the
//! producer group later (CHECK_TRANSACTION_STATE); any live producer of the group answers
//! from [`TransactionListener::check_local`]. Check-backs run one at a time on the
//! producer's own thread (Java's single check thread), so a listener may block; at most
//! [`MAX_PENDING_CHECKS`] wait, further ones are dropped and the broker asks again.
//!
//! A listener that returns an error or panics counts as Unknown, as Java counts an
//! exception; the error text goes to the broker in the request's remark.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;

use tern_shell::headers::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, transaction_state,
};
use tern_shell::message::{Message, MessageExt, decode_offset_msg_id, property};
use tern_shell::{Connection, RemotingCommand, RequestCode};

use super::{Producer, SendResult, SendStatus};
use crate::config::{ClientConfig, ProducerConfig};
use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::processor::TransactionCheckHook;

/// Check-backs waiting for the check thread; more are dropped (Java's queue holds 2000).
pub const MAX_PENDING_CHECKS: usize = 2000;
/// The group Java reserves for its own default producer; transactions need a real one.
const DEFAULT_PRODUCER_GROUP: &str = "DEFAULT_PRODUCER";

/// The outcome of a local transaction (Java's `LocalTransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LocalTransactionState {
    /// Deliver the message.
    Commit,
    /// Drop the message.
    Rollback,
    /// Not decided yet: the broker will ask again later.
    Unknown,
}

impl LocalTransactionState {
    /// Java's enum name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Commit => "COMMIT_MESSAGE",
            Self::Rollback => "ROLLBACK_MESSAGE",
            Self::Unknown => "UNKNOW",
        }
    }

    /// The `commitOrRollback` value of END_TRANSACTION.
    fn wire(self) -> i32 {
        match self {
            Self::Commit => transaction_state::COMMIT,
            Self::Rollback => transaction_state::ROLLBACK,
            Self::Unknown => transaction_state::UNKNOWN,
        }
    }
}

/// Why a listener could not decide; reported to the broker and treated as Unknown.
pub type ListenerError = Box<dyn std::error::Error + Send + Sync>;
/// What a listener returns.
pub type ListenerResult = std::result::Result<LocalTransactionState, ListenerError>;

/// The application's side of a transaction (Java's `TransactionListener`).
pub trait TransactionListener: Send + Sync + 'static {
    /// What [`TransactionProducer::send_in_transaction`] passes through to
    /// [`TransactionListener::execute_local`] (Java's `Object arg`).
    type Arg: ?Sized + Sync;

    /// Runs the local transaction once the half message is stored. `msg` carries its
    /// UNIQ_KEY (the transaction id) and `__transactionId__`. Runs on the task that
    /// called `send_in_transaction`.
    fn execute_local(&self, msg: &Message, arg: &Self::Arg) -> ListenerResult;

    /// Says how the transaction of `msg` ended, when the broker asks (the first answer
    /// was Unknown or never arrived). Runs on the producer's check thread.
    fn check_local(&self, msg: &MessageExt) -> ListenerResult;
}

/// What [`TransactionProducer::send_in_transaction`] returns (Java's
/// `TransactionSendResult`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransactionSendResult {
    /// How the half message was stored: its UNIQ_KEY, offset msgId, queue, and the
    /// transaction id from the broker.
    pub send: SendResult,
    /// What the local transaction decided (Rollback when the half message was stored but
    /// not flushed or replicated in time, as Java does).
    pub local_state: LocalTransactionState,
}

/// A producer of transactional messages; cloning shares it.
pub struct TransactionProducer<L: TransactionListener> {
    producer: Producer,
    checker: Arc<Checker<L>>,
    /// The template topic whose route names every broker (heartbeats at start).
    create_topic_key: String,
}

impl<L: TransactionListener> Clone for TransactionProducer<L> {
    fn clone(&self) -> Self {
        Self {
            producer: self.producer.clone(),
            checker: self.checker.clone(),
            create_topic_key: self.create_topic_key.clone(),
        }
    }
}

impl<L: TransactionListener> fmt::Debug for TransactionProducer<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransactionProducer")
            .field("group", &self.checker.group)
            .field("producer", &self.producer)
            .finish()
    }
}

impl<L: TransactionListener> TransactionProducer<L> {
    /// A transaction producer with its own client instance. The group must be set: the
    /// broker asks the group about unresolved transactions.
    pub fn new(config: ProducerConfig, client: ClientConfig, listener: L) -> Result<Self> {
        Self::with_instance(config, ClientInstance::new(client)?, listener)
    }

    /// A transaction producer on a shared client instance.
    pub fn with_instance(
        config: ProducerConfig,
        client: ClientInstance,
        listener: L,
    ) -> Result<Self> {
        let group = config.group.trim().to_owned();
        if group.is_empty() || group == DEFAULT_PRODUCER_GROUP {
            return Err(ClientError::InvalidMessage(format!(
                "a transaction producer needs its own producer group (not empty, not {DEFAULT_PRODUCER_GROUP}): the broker asks the group about unresolved transactions"
            )));
        }
        let checker = Arc::new(Checker {
            listener: Arc::new(listener),
            client: client.clone(),
            group,
            jobs: Mutex::new(None),
        });
        Ok(Self {
            create_topic_key: config.create_topic_key.clone(),
            producer: Producer::with_instance(config, client),
            checker,
        })
    }

    /// The plain producer underneath (for non-transactional sends in the same group).
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// The client instance.
    pub fn client(&self) -> &ClientInstance {
        self.producer.client()
    }

    /// The listener.
    pub fn listener(&self) -> &L {
        &self.checker.listener
    }

    /// Starts the check thread, takes check-backs for the group, starts the producer, and
    /// announces the group to every broker at once (check-backs go to producers a broker
    /// has heard from; Java's producer heartbeats to the brokers of TBW102's route at
    /// start, so one that never sent can still answer for a group member that died).
    pub async fn start(&self) -> Result<()> {
        {
            let mut jobs = self.checker.jobs.guard();
            if jobs.is_none() {
                let (tx, rx) = sync_channel::<Job>(MAX_PENDING_CHECKS);
                std::thread::Builder::new()
                    .name(format!("tx-check-{}", self.checker.group))
                    .spawn(move || {
                        // Ends when the producer shuts down and drops the sender.
                        for job in rx {
                            job();
                        }
                    })
                    .map_err(|e| {
                        ClientError::InvalidMessage(format!("cannot start the check thread: {e}"))
                    })?;
                *jobs = Some(tx);
            }
        }
        self.client()
            .register_transaction_checker(&self.checker.group, self.checker.clone());
        self.producer.start();
        let client = self.client();
        if let Err(e) = client.topic_route(&self.create_topic_key).await {
            log::debug!("route of {}: {e}", self.create_topic_key);
        }
        client.send_heartbeat_to_all_brokers().await;
        Ok(())
    }

    /// Stops taking check-backs, unregisters from every broker and closes the client
    /// instance. Check-backs already queued still run; their answers may not get out.
    pub async fn shutdown(&self) {
        self.client()
            .unregister_transaction_checker(&self.checker.group);
        self.checker.jobs.guard().take();
        self.producer.shutdown().await;
    }

    /// Sends `msg` as a half message, runs [`TransactionListener::execute_local`] with
    /// `arg`, and ends the transaction with its outcome (oneway; if that is lost the
    /// broker asks the group later). Fails if the half message could not be stored, or if
    /// `msg` has a delay level (a transactional message cannot be delayed).
    pub async fn send_in_transaction(
        &self,
        mut msg: Message,
        arg: &L::Arg,
    ) -> Result<TransactionSendResult> {
        if msg
            .properties
            .get(property::DELAY)
            .is_some_and(|d| d.trim().parse::<i64>() != Ok(0))
        {
            return Err(ClientError::InvalidMessage(
                "a transactional message cannot have a delay level".into(),
            ));
        }
        let group = &self.checker.group;
        msg.properties
            .insert(property::TRAN_MSG.to_owned(), "true".to_owned());
        msg.properties
            .insert(property::PGROUP.to_owned(), group.clone());
        // Set here, not by the send, so the listener sees the id the broker keeps.
        let client = self.client().clone();
        msg.properties
            .entry(property::UNIQ_KEY.to_owned())
            .or_insert_with(|| client.next_uniq_id());
        let sent = self.producer.send(msg.clone()).await?;
        let (state, remark) = match sent.status {
            SendStatus::SendOk => {
                if let Some(id) = &sent.transaction_id {
                    msg.properties
                        .insert(property::TRANSACTION_ID.to_owned(), id.clone());
                }
                let listener = &self.checker.listener;
                run_listener("executeLocalTransaction", || {
                    listener.execute_local(&msg, arg)
                })
            }
            // Stored, but not as durably as asked: Java rolls back rather than risk it.
            _ => (LocalTransactionState::Rollback, None),
        };
        if let Err(e) = self.end_transaction(&msg.topic, &sent, state, remark).await {
            log::warn!(
                "transaction {} ended {} locally, but telling the broker failed (it will ask later): {e}",
                sent.msg_id,
                state.name()
            );
        }
        Ok(TransactionSendResult {
            send: sent,
            local_state: state,
        })
    }

    async fn end_transaction(
        &self,
        topic: &str,
        sent: &SendResult,
        state: LocalTransactionState,
        remark: Option<String>,
    ) -> Result<()> {
        let id = decode_offset_msg_id(&sent.offset_msg_id).map_err(|e| {
            ClientError::Protocol(format!("offset msgId {}: {e}", sent.offset_msg_id))
        })?;
        let client = self.client();
        // The master of the queue's broker, as Java; the id's store host if unknown.
        let addr = client
            .master_addr(&sent.queue.broker_name)
            .unwrap_or_else(|| id.store_host.to_string());
        let header = EndTransactionRequestHeader {
            producer_group: self.checker.group.clone(),
            tran_state_table_offset: sent.queue_offset,
            commit_log_offset: id.commit_log_offset,
            commit_or_rollback: state.wire(),
            from_transaction_check: Some(false),
            msg_id: sent.msg_id.clone(),
            transaction_id: sent.transaction_id.clone(),
            topic: Some(topic.to_owned()),
        };
        client
            .invoke_oneway(&addr, end_command(&header, remark))
            .await
    }
}

/// A job for the check thread.
type Job = Box<dyn FnOnce() + Send>;

/// Answers check-backs for one group.
struct Checker<L> {
    listener: Arc<L>,
    client: ClientInstance,
    group: String,
    /// The check thread's queue; `None` before start and after shutdown.
    jobs: Mutex<Option<SyncSender<Job>>>,
}

impl<L> fmt::Debug for Checker<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checker")
            .field("group", &self.group)
            .finish()
    }
}

impl<L: TransactionListener> TransactionCheckHook for Checker<L> {
    fn check(&self, conn: Connection, header: CheckTransactionStateRequestHeader, msg: MessageExt) {
        let (listener, client, group) = (
            self.listener.clone(),
            self.client.clone(),
            self.group.clone(),
        );
        let job: Job = Box::new(move || {
            let (state, remark) =
                run_listener("checkLocalTransaction", || listener.check_local(&msg));
            // Java answers with the UNIQ_KEY, or the offset msgId without one.
            let msg_id = msg
                .properties
                .get(property::UNIQ_KEY)
                .cloned()
                .unwrap_or_else(|| msg.offset_msg_id.clone());
            let end = EndTransactionRequestHeader {
                producer_group: group,
                tran_state_table_offset: header.tran_state_table_offset,
                commit_log_offset: header.commit_log_offset,
                commit_or_rollback: state.wire(),
                from_transaction_check: Some(true),
                msg_id,
                transaction_id: header.transaction_id,
                topic: header.topic,
            };
            let cmd = end_command(&end, remark);
            // Answered on the connection the question came on; through the pool to the
            // same address if that one closed meanwhile (Java answers by address).
            let result = crate::block_on(async {
                match conn.oneway(cmd.clone()).await {
                    Ok(()) => Ok(()),
                    Err(_) => {
                        let addr = conn.peer_addr().to_string();
                        client.invoke_oneway(&addr, cmd).await
                    }
                }
            });
            if let Err(e) = result {
                log::warn!(
                    "answering the check-back of {} to {} failed: {e}",
                    end.msg_id,
                    conn.peer_addr()
                );
            }
        });
        let sent = self.jobs.guard().as_ref().map(|tx| tx.try_send(job));
        match sent {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_))) => log::warn!(
                "{MAX_PENDING_CHECKS} check-backs already waiting for group {}: dropped one (the broker asks again)",
                self.group
            ),
            Some(Err(TrySendError::Disconnected(_))) | None => {
                log::debug!(
                    "check-back for group {} after shutdown: dropped",
                    self.group
                );
            }
        }
    }
}

fn end_command(header: &EndTransactionRequestHeader, remark: Option<String>) -> RemotingCommand {
    let cmd = RemotingCommand::request(RequestCode::EndTransaction, header);
    match remark {
        Some(r) => cmd.with_remark(r),
        None => cmd,
    }
}

/// Runs a listener method; an error or a panic is Unknown, with the reason as remark.
fn run_listener(
    what: &str,
    f: impl FnOnce() -> ListenerResult,
) -> (LocalTransactionState, Option<String>) {
    let reason = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(state)) => return (state, None),
        Ok(Err(e)) => format!("{what} failed: {e}"),
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_owned());
            format!("{what} panicked: {text}")
        }
    };
    log::warn!("{reason}: the transaction stays unknown");
    (LocalTransactionState::Unknown, Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_errors_and_panics_are_unknown_with_a_reason() {
        assert_eq!(
            run_listener("x", || Ok(LocalTransactionState::Commit)),
            (LocalTransactionState::Commit, None)
        );
        let (s, r) = run_listener("x", || Err("db down".into()));
        assert_eq!(s, LocalTransactionState::Unknown);
        assert_eq!(r.as_deref(), Some("x failed: db down"));
        let (s, r) = run_listener("x", || panic!("boom"));
        assert_eq!(s, LocalTransactionState::Unknown);
        assert_eq!(r.as_deref(), Some("x panicked: boom"));
    }

    struct Never;
    impl TransactionListener for Never {
        type Arg = ();
        fn execute_local(&self, _: &Message, _: &()) -> ListenerResult {
            Ok(LocalTransactionState::Unknown)
        }
        fn check_local(&self, _: &MessageExt) -> ListenerResult {
            Ok(LocalTransactionState::Unknown)
        }
    }

    #[test]
    fn a_group_is_required_and_delays_are_refused() {
        let client = ClientConfig::new("127.0.0.1:1");
        for g in ["", "DEFAULT_PRODUCER"] {
            assert!(
                TransactionProducer::new(ProducerConfig::new(g), client.clone(), Never).is_err()
            );
        }
        let p = TransactionProducer::new(ProducerConfig::new("g"), client, Never).unwrap();
        let m = Message::new("T", "b").with_property("DELAY", "3");
        let e = crate::block_on(p.send_in_transaction(m, &())).unwrap_err();
        assert!(e.to_string().contains("delay"), "{e}");
    }
}
