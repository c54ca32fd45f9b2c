//! Request-reply (RocketMQ's `ReplyMessageProcessor`): a replier sends the reply to a
//! request message with SEND_REPLY_MESSAGE (324) or _V2 (325), to the cluster's
//! `<cluster>_REPLY_TOPIC`; the broker pushes it to the requester named by its
//! `REPLY_TO_CLIENT` property (PUSH_REPLY_MESSAGE_TO_CLIENT, 326, on the requester's
//! producer connection) and also stores it in the reply topic, as RocketMQ does by
//! default (`storeReplyMessageEnable`). The replier is answered SUCCESS once the
//! requester took it; a requester not connected here, or one that did not take it, is
//! SYSTEM_ERROR with RocketMQ's remark, whatever the store did.

use std::fmt;
use std::time::Duration;

use tern_engine::properties::{self, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR};
use tern_shell::answer::respond;
use tern_shell::code::RequestCode;
use tern_shell::headers::{
    ReplyMessageRequestHeader, SendMessageRequestHeader, SendMessageResponseHeader,
};
use tern_shell::runtime::now_ms;
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, RemotingError, ResponseCode};

use super::send;
use crate::BrokerCtx;

/// The requester's client id on a request and its reply.
pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// When the broker pushed the reply, ms (added to the pushed copy).
const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
/// How long the requester may take to take a reply (RocketMQ's `callClient`: 10 s).
const PUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// SEND_REPLY_MESSAGE / SEND_REPLY_MESSAGE_V2.
pub async fn send_reply(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h = SendMessageRequestHeader::from_command(req)?;
    let pushed = push_reply(ctx, conn, &h, &req.body).await;
    // Stored through the send path (checks, CLUSTER, the reply topic's queues) as a plain
    // send of the same header.
    let mut as_send = req.clone();
    as_send.code = match req.request_code_enum() {
        RequestCode::SendReplyMessageV2 => RequestCode::SendMessageV2.raw(),
        _ => RequestCode::SendMessage.raw(),
    };
    let stored = respond(&as_send, send::send(ctx, conn, &as_send).await);
    match pushed {
        Err(e) => Err(Refusal::new(ResponseCode::SystemError, e.to_string())),
        Ok(()) if stored.response_code() == ResponseCode::Success => Ok(stored),
        Ok(()) => {
            log::warn!(
                "reply to {} pushed but not stored: code {} {}",
                h.topic,
                stored.code,
                stored.remark.as_deref().unwrap_or_default()
            );
            // RocketMQ's zeros, so the replier's client decodes the answer.
            Ok(
                RemotingCommand::response_to(req, ResponseCode::Success).with_header(
                    &SendMessageResponseHeader::new("0".into(), h.queue_id.max(0), 0),
                ),
            )
        }
    }
}

/// Why a reply was not pushed to its requester; said with RocketMQ's remarks.
#[derive(Debug)]
enum PushReplyError {
    /// The reply names no requester (no REPLY_TO_CLIENT property).
    NoRequester,
    /// The requester has no producer connection to this broker.
    NotConnected(String),
    /// The requester answered the push with a failure.
    Refused(String),
    /// The push did not reach the requester, or no answer came.
    Failed(String, RemotingError),
}

impl fmt::Display for PushReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRequester => write!(f, "reply message properties[{REPLY_TO_CLIENT}] is null"),
            Self::NotConnected(requester) => write!(
                f,
                "push reply message fail, channel of <{requester}> not found."
            ),
            // RocketMQ's remark, its missing space included.
            Self::Refused(requester) | Self::Failed(requester, _) => {
                write!(f, "push reply message to {requester}fail.")
            }
        }
    }
}

impl std::error::Error for PushReplyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Failed(_, e) => Some(e),
            _ => None,
        }
    }
}

/// PUSH_REPLY_MESSAGE_TO_CLIENT to the requester.
async fn push_reply(
    ctx: &BrokerCtx,
    conn: &ConnectionCtx,
    h: &SendMessageRequestHeader,
    body: &[u8],
) -> Result<(), PushReplyError> {
    let props = h.properties.clone().unwrap_or_default();
    let Some(requester) = properties::get(props.as_bytes(), REPLY_TO_CLIENT) else {
        return Err(PushReplyError::NoRequester);
    };
    let requester = requester.to_owned();
    let Some(to) = ctx.clients.producer_connection(&requester) else {
        return Err(PushReplyError::NotConnected(requester));
    };
    let mut with_time = props;
    if !with_time.is_empty() && !with_time.ends_with(PROPERTY_SEPARATOR as char) {
        with_time.push(PROPERTY_SEPARATOR as char);
    }
    with_time.push_str(PUSH_REPLY_TIME);
    with_time.push(NAME_VALUE_SEPARATOR as char);
    with_time.push_str(&now_ms().to_string());
    with_time.push(PROPERTY_SEPARATOR as char);
    let header = ReplyMessageRequestHeader {
        producer_group: h.producer_group.clone(),
        topic: h.topic.clone(),
        default_topic: h.default_topic.clone(),
        default_topic_queue_nums: h.default_topic_queue_nums,
        queue_id: h.queue_id,
        sys_flag: h.sys_flag,
        born_timestamp: h.born_timestamp,
        flag: h.flag,
        properties: Some(with_time),
        reconsume_times: h.reconsume_times,
        unit_mode: h.unit_mode,
        born_host: conn.peer_addr().to_string(),
        store_host: ctx.store_host.to_string(),
        store_timestamp: now_ms(),
    };
    let cmd = RemotingCommand::request(RequestCode::PushReplyMessageToClient, &header)
        .with_body(body.to_vec());
    match to.request(cmd, PUSH_TIMEOUT).await {
        Ok(resp) if resp.response_code() == ResponseCode::Success => Ok(()),
        Ok(resp) => {
            log::warn!(
                "push reply message to <{requester}> return fail, response remark: {}",
                resp.remark.unwrap_or_default()
            );
            Err(PushReplyError::Refused(requester))
        }
        Err(e) => {
            log::warn!("push reply message to <{requester}> fail: {e}");
            Err(PushReplyError::Failed(requester, e))
        }
    }
}
