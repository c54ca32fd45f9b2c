//! Requests brokers send to clients on the client's own connections (Java's
//! `ClientRemotingProcessor`): NOTIFY_CONSUMER_IDS_CHANGED makes the group's push consumer
//! rebalance now, GET_CONSUMER_RUNNING_INFO gets a minimal report,
//! RESET_CONSUMER_CLIENT_OFFSET moves a push consumer to the offsets an admin reset,
//! GET_CONSUMER_STATUS_FROM_CLIENT answers its offsets, CONSUME_MESSAGE_DIRECTLY runs its
//! listener on one message, PUSH_REPLY_MESSAGE_TO_CLIENT brings the reply to a request,
//! CHECK_TRANSACTION_STATE goes to
//! the transaction producer of the half message's group; everything else is answered
//! REQUEST_CODE_NOT_SUPPORTED.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;

use tern_shell::body::{
    ConsumeMessageDirectlyResult, GetConsumerStatusBody, MessageQueue, QueueKeyMap, ResetOffsetBody,
};
use tern_shell::connection::not_supported;
use tern_shell::headers::ReplyMessageRequestHeader;
use tern_shell::headers::{
    CheckTransactionStateRequestHeader, ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader, ResetOffsetRequestHeader,
};
use tern_shell::message::{
    Compression, MAX_INFLATED_BYTES, MessageExt, decode_pulled, property, string_to_properties,
};
use tern_shell::{ConnectionCtx, Processor, RemotingCommand, RequestCode, ResponseCode};

/// The request's header, or the SYSTEM_ERROR answer naming what is wrong with it.
fn header<H: tern_shell::FromExtFields>(req: &RemotingCommand) -> Result<H, RemotingCommand> {
    req.decode_header().map_err(|e| {
        RemotingCommand::error_response(req, ResponseCode::SystemError, format!("bad header: {e}"))
    })
}

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

/// Requests waiting for their reply, by CORRELATION_ID (Java's
/// `RequestFutureHolder`); the processor fills a slot when PUSH_REPLY_MESSAGE_TO_CLIENT
/// brings its reply.
pub type Replies = Arc<Mutex<HashMap<String, Arc<ReplySlot>>>>;

/// Where one request's reply lands.
#[derive(Debug, Default)]
pub struct ReplySlot {
    reply: Mutex<Option<MessageExt>>,
    arrived: tern_shell::runtime::Shutdown,
}

impl ReplySlot {
    fn fill(&self, m: MessageExt) {
        *self.reply.guard() = Some(m);
        self.arrived.trigger();
    }

    /// Waits for the reply.
    pub async fn wait(&self) -> MessageExt {
        loop {
            self.arrived.wait().await;
            if let Some(m) = self.reply.guard().take() {
                return m;
            }
        }
    }
}

/// The correlation id that pairs a request with its reply.
pub const CORRELATION_ID: &str = "CORRELATION_ID";

/// The processor of a client instance's connections.
#[derive(Debug, Clone, Default)]
pub struct ClientProcessor {
    hooks: Hooks,
    checkers: CheckHooks,
    replies: Replies,
}

impl ClientProcessor {
    /// A processor dispatching to consumer `hooks`, transaction `checkers` and waiting
    /// `replies`.
    pub fn new(hooks: Hooks, checkers: CheckHooks, replies: Replies) -> Self {
        Self {
            hooks,
            checkers,
            replies,
        }
    }

    /// PUSH_REPLY_MESSAGE_TO_CLIENT (Java's `receiveReplyMessage`): the reply to one of
    /// this client's requests. A reply nobody waits for any more (timed out) is dropped.
    fn receive_reply(&self, conn: &ConnectionCtx, req: &RemotingCommand) -> RemotingCommand {
        let h: ReplyMessageRequestHeader = match header(req) {
            Ok(h) => h,
            Err(answer) => return answer,
        };
        let body = match Compression::of_sys_flag(h.sys_flag) {
            Ok(None) => req.body.clone(),
            Ok(Some(c)) => match c.decompress(&req.body, MAX_INFLATED_BYTES) {
                Ok(b) => b,
                Err(e) => {
                    return RemotingCommand::error_response(
                        req,
                        ResponseCode::SystemError,
                        format!("process reply message fail: body does not decompress: {e}"),
                    );
                }
            },
            Err(bits) => {
                return RemotingCommand::error_response(
                    req,
                    ResponseCode::SystemError,
                    format!("process reply message fail: unknown compression {bits:#x}"),
                );
            }
        };
        let properties =
            string_to_properties(h.properties.as_deref().unwrap_or_default().as_bytes());
        let host = |s: &str| {
            s.trim_start_matches('/')
                .parse()
                .unwrap_or_else(|_| conn.peer_addr())
        };
        let msg = MessageExt {
            topic: h.topic,
            queue_id: h.queue_id,
            flag: h.flag,
            sys_flag: h.sys_flag,
            born_timestamp: h.born_timestamp,
            born_host: host(&h.born_host),
            store_timestamp: h.store_timestamp,
            store_host: host(&h.store_host),
            reconsume_times: h.reconsume_times.unwrap_or(0),
            body,
            properties,
            // Pushed, not stored: no place in a log or queue.
            queue_offset: 0,
            commit_log_offset: 0,
            prepared_transaction_offset: 0,
            body_crc: 0,
            store_size: 0,
            offset_msg_id: String::new(),
        };
        let Some(id) = msg.properties.get(CORRELATION_ID).cloned() else {
            return RemotingCommand::error_response(
                req,
                ResponseCode::SystemError,
                "process reply message fail: no CORRELATION_ID",
            );
        };
        let slot = self.replies.guard().get(&id).cloned();
        match slot {
            Some(s) => s.fill(msg),
            None => log::warn!(
                "reply {id} from {} came after its request timed out",
                conn.peer_addr()
            ),
        }
        RemotingCommand::response_to(req, ResponseCode::Success)
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
        let checker = self.checkers.guard().get(&group).cloned();
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
        let h: GetConsumerStatusRequestHeader = match header(req) {
            Ok(h) => h,
            Err(answer) => return answer,
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
        let h: ConsumeMessageDirectlyResultRequestHeader = match header(req) {
            Ok(h) => h,
            Err(answer) => return answer,
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
        self.hooks.guard().get(group).cloned()
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
                let h: GetConsumerRunningInfoRequestHeader = match header(&req) {
                    Ok(h) => h,
                    Err(answer) => return Some(answer),
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
            RequestCode::PushReplyMessageToClient => Some(self.receive_reply(conn, &req)),
            _ => Some(not_supported(&req)),
        }
    }
}
