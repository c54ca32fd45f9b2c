//! Requests brokers send to clients on the client's own connections (Java's
//! `ClientRemotingProcessor`): NOTIFY_CONSUMER_IDS_CHANGED makes the group's push consumer
//! rebalance now, GET_CONSUMER_RUNNING_INFO gets a minimal report,
//! RESET_CONSUMER_CLIENT_OFFSET moves a push consumer to the offsets an admin reset,
//! GET_CONSUMER_STATUS_FROM_CLIENT answers its offsets, CONSUME_MESSAGE_DIRECTLY runs its
//! listener on one message, CHECK_TRANSACTION_STATE goes to
//! the transaction producer of the half message's group; everything else is answered
//! REQUEST_CODE_NOT_SUPPORTED.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tern_shell::body::{
    ConsumeMessageDirectlyResult, GetConsumerStatusBody, MessageQueue, QueueKeyMap, ResetOffsetBody,
};
use tern_shell::connection::not_supported;
use tern_shell::headers::{
    CheckTransactionStateRequestHeader, ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader, ResetOffsetRequestHeader,
};
use tern_shell::message::{MessageExt, decode_pulled, property};
use tern_shell::{ConnectionCtx, Processor, RemotingCommand, RequestCode, ResponseCode};

/// What a consumer registered on a client instance answers to brokers.
pub trait ConsumerHook: Send + Sync + std::fmt::Debug {
    /// The group's membership changed: rebalance as soon as possible (never blocks).
    fn rebalance_now(&self);
    /// The body of GET_CONSUMER_RUNNING_INFO (Java's `ConsumerRunningInfo` JSON).
    fn running_info(&self) -> Vec<u8>;
    /// RESET_CONSUMER_CLIENT_OFFSET: an admin moved the group's offsets of `topic`;
    /// consume the queues this member owns from `offsets` (never blocks: the work runs
    /// on its own). False when this kind of consumer cannot.
    fn reset_offset(&self, _topic: &str, _offsets: BTreeMap<MessageQueue, i64>) -> bool {
        false
    }
    /// GET_CONSUMER_STATUS_FROM_CLIENT: this member's offsets of the queues of `topic`
    /// it owns (Java's `cloneOffsetTable`).
    fn offsets_of(&self, _topic: &str) -> BTreeMap<MessageQueue, i64> {
        BTreeMap::new()
    }
    /// CONSUME_MESSAGE_DIRECTLY: runs the listener on `msg` now, blocking (called on a
    /// blocking thread); `None` when this kind of consumer has no listener.
    fn consume_directly(
        &self,
        _msg: MessageExt,
        _broker_name: &str,
    ) -> Option<ConsumeMessageDirectlyResult> {
        None
    }
}

/// Consumers by group, shared between the instance and its connections' processor.
pub type Hooks = Arc<Mutex<HashMap<String, Arc<dyn ConsumerHook>>>>;

/// What a transaction producer registered on a client instance does with check-backs.
pub trait TransactionCheckHook: Send + Sync + std::fmt::Debug {
    /// The broker on `conn` asks about the half message `msg`: answer later with
    /// END_TRANSACTION (fromTransactionCheck=true), on that connection. Must not block:
    /// it runs on the connection's task.
    fn check(
        &self,
        conn: ConnectionCtx,
        header: CheckTransactionStateRequestHeader,
        msg: MessageExt,
    );
}

/// Transaction producers by group.
pub type CheckHooks = Arc<Mutex<HashMap<String, Arc<dyn TransactionCheckHook>>>>;

/// The processor of a client instance's connections.
#[derive(Debug, Clone, Default)]
pub struct ClientProcessor {
    hooks: Hooks,
    checkers: CheckHooks,
}

impl ClientProcessor {
    /// A processor dispatching to consumer `hooks` and transaction `checkers`.
    pub fn new(hooks: Hooks, checkers: CheckHooks) -> Self {
        Self { hooks, checkers }
    }

    /// CHECK_TRANSACTION_STATE (oneway: nothing is answered, problems are logged).
    fn check_transaction(&self, conn: &ConnectionCtx, req: &RemotingCommand) {
        let peer = conn.peer_addr();
        let header = match req.decode_header::<CheckTransactionStateRequestHeader>() {
            Ok(h) => h,
            Err(e) => {
                log::warn!("bad CHECK_TRANSACTION_STATE header from {peer}: {e}");
                return;
            }
        };
        let msg = match decode_pulled(&req.body, false) {
            Ok(mut msgs) if msgs.len() == 1 => msgs.remove(0),
            Ok(msgs) => {
                log::warn!(
                    "CHECK_TRANSACTION_STATE from {peer} carries {} messages, not one",
                    msgs.len()
                );
                return;
            }
            Err(e) => {
                log::warn!("CHECK_TRANSACTION_STATE from {peer}: bad message body: {e}");
                return;
            }
        };
        let Some(group) = msg.properties.get(property::PGROUP).cloned() else {
            log::warn!("CHECK_TRANSACTION_STATE from {peer}: the message has no PGROUP");
            return;
        };
        let checker = self
            .checkers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&group)
            .cloned();
        match checker {
            Some(c) => c.check(conn.clone(), header, msg),
            None => log::debug!("check-back for group {group}, which has no producer here"),
        }
    }

    /// RESET_CONSUMER_CLIENT_OFFSET (oneway from the broker: problems are logged).
    fn reset_offset(&self, conn: &ConnectionCtx, req: &RemotingCommand) {
        let peer = conn.peer_addr();
        let h = match req.decode_header::<ResetOffsetRequestHeader>() {
            Ok(h) => h,
            Err(e) => {
                log::warn!("bad RESET_CONSUMER_CLIENT_OFFSET header from {peer}: {e}");
                return;
            }
        };
        let body: ResetOffsetBody = match tern_shell::body::from_json(&req.body) {
            Ok(b) => b,
            Err(e) => {
                log::warn!("bad RESET_CONSUMER_CLIENT_OFFSET body from {peer}: {e}");
                return;
            }
        };
        match self.hook(&h.group) {
            Some(hook) => {
                log::info!(
                    "broker {peer} resets {} of {} to {} offsets",
                    h.topic,
                    h.group,
                    body.offset_table.0.len()
                );
                if !hook.reset_offset(&h.topic, body.offset_table.0) {
                    log::warn!("group {} cannot reset its offsets here", h.group);
                }
            }
            None => log::debug!(
                "offset reset for group {}, which has no consumer here",
                h.group
            ),
        }
    }

    /// GET_CONSUMER_STATUS_FROM_CLIENT.
    fn consumer_status(&self, req: &RemotingCommand) -> RemotingCommand {
        let h = match req.decode_header::<GetConsumerStatusRequestHeader>() {
            Ok(h) => h,
            Err(e) => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SystemError,
                    format!("bad header: {e}"),
                );
            }
        };
        let body = GetConsumerStatusBody {
            message_queue_table: QueueKeyMap(
                self.hook(&h.group)
                    .map(|hook| hook.offsets_of(&h.topic))
                    .unwrap_or_default(),
            ),
            ..GetConsumerStatusBody::default()
        };
        RemotingCommand::response_to(req, ResponseCode::Success)
            .with_body(tern_shell::body::to_json(&body))
    }

    /// CONSUME_MESSAGE_DIRECTLY: the listener's verdict on the message in the body.
    async fn consume_directly(&self, req: &RemotingCommand) -> RemotingCommand {
        let h = match req.decode_header::<ConsumeMessageDirectlyResultRequestHeader>() {
            Ok(h) => h,
            Err(e) => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SystemError,
                    format!("bad header: {e}"),
                );
            }
        };
        let msg = match decode_pulled(&req.body, true) {
            Ok(mut msgs) if msgs.len() == 1 => msgs.remove(0),
            Ok(msgs) => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SystemError,
                    format!("the body holds {} messages, not one", msgs.len()),
                );
            }
            Err(e) => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SystemError,
                    format!("bad message body: {e}"),
                );
            }
        };
        let not_here = || {
            RemotingCommand::error_response(
                req,
                ResponseCode::SystemError,
                format!(
                    "The Consumer Group <{}> not exist in this consumer",
                    h.consumer_group
                ),
            )
        };
        let Some(hook) = self.hook(&h.consumer_group) else {
            return not_here();
        };
        let broker = h.broker_name.clone().unwrap_or_default();
        // The listener is the application's blocking code: not on this connection's task.
        let verdict =
            tern_shell::runtime::spawn_blocking(move || hook.consume_directly(msg, &broker)).await;
        match verdict {
            Some(r) => RemotingCommand::response_to(req, ResponseCode::Success)
                .with_body(tern_shell::body::to_json(&r)),
            None => not_here(),
        }
    }

    fn hook(&self, group: &str) -> Option<Arc<dyn ConsumerHook>> {
        self.hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .cloned()
    }
}

impl Processor for ClientProcessor {
    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        match req.request_code_enum() {
            RequestCode::NotifyConsumerIdsChanged => {
                match req.decode_header::<ConsumerGroupRequestHeader>() {
                    Ok(h) => match self.hook(&h.consumer_group) {
                        Some(hook) => {
                            log::info!(
                                "broker {} says group {} changed: rebalancing",
                                conn.peer_addr(),
                                h.consumer_group
                            );
                            hook.rebalance_now();
                        }
                        None => log::debug!("notify for unknown group {}", h.consumer_group),
                    },
                    Err(e) => log::debug!("bad NOTIFY_CONSUMER_IDS_CHANGED header: {e}"),
                }
                // Oneway from brokers; an answer to a oneway request is dropped anyway.
                Some(RemotingCommand::response_to(&req, ResponseCode::Success))
            }
            RequestCode::GetConsumerRunningInfo => {
                let h = match req.decode_header::<GetConsumerRunningInfoRequestHeader>() {
                    Ok(h) => h,
                    Err(e) => {
                        return Some(RemotingCommand::error_response(
                            &req,
                            ResponseCode::SystemError,
                            format!("bad header: {e}"),
                        ));
                    }
                };
                Some(match self.hook(&h.consumer_group) {
                    Some(hook) => RemotingCommand::response_to(&req, ResponseCode::Success)
                        .with_body(hook.running_info()),
                    None => RemotingCommand::error_response(
                        &req,
                        ResponseCode::SystemError,
                        format!(
                            "The Consumer Group <{}> not exist in this consumer",
                            h.consumer_group
                        ),
                    ),
                })
            }
            RequestCode::CheckTransactionState => {
                self.check_transaction(conn, &req);
                None
            }
            RequestCode::ResetConsumerClientOffset => {
                self.reset_offset(conn, &req);
                None
            }
            RequestCode::GetConsumerStatusFromClient => Some(self.consumer_status(&req)),
            RequestCode::ConsumeMessageDirectly => Some(self.consume_directly(&req).await),
            _ => Some(not_supported(&req)),
        }
    }
}
