//! The POP requests both POP consumers send (the simple consumer and the push consumer in
//! POP mode), as the Java remoting client builds them: POP_MESSAGE
//! (`PopMessageRequestHeader`, receipt handles built from the answer as
//! `MQClientAPIImpl.processPopResponse` builds them), ACK_MESSAGE
//! (`AckMessageRequestHeader`) and CHANGE_MESSAGE_INVISIBLETIME
//! (`ChangeInvisibleTimeRequestHeader`).

use std::time::Duration;

use tern_shell::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader, PopMessageResponseHeader,
};
use tern_shell::message::{MessageExt, decode_pulled_each};
use tern_shell::pop::{ExtraInfo, parse_msg_offset_info, parse_start_offset_info, retry_flag};
use tern_shell::runtime::now_ms;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, ok};

/// Slack added to a POP's RPC timeout beyond its poll time (Java: 10 s).
const POP_RPC_SLACK: Duration = Duration::from_secs(10);

/// A popped message and what acking it needs.
#[derive(Debug, Clone)]
pub struct ReceivedMessage {
    /// The message; its `topic` is the subscribed topic, even when it came from the
    /// group's retry topic (as the Java client shows it).
    pub message: MessageExt,
    /// Why its body could not be read (LZ4/ZSTD/zlib that does not decode): `message`
    /// then holds the body as stored. It must still be acked.
    pub decode_error: Option<String>,
    /// The receipt handle (`POP_CK`).
    pub receipt_handle: String,
    /// The topic it was read from (the retry topic for a redelivery).
    pub real_topic: String,
    /// The broker it was popped from.
    pub broker_addr: String,
}

impl ReceivedMessage {
    /// When the broker popped it, ms since the epoch, and for how long it is hidden.
    pub(crate) fn pop_window(&self) -> Option<(i64, i64)> {
        let e = ExtraInfo::parse(&self.receipt_handle).ok()?;
        Some((e.pop_time, e.invisible_time))
    }
}

/// One POP_MESSAGE.
#[derive(Debug, Clone)]
pub struct PopSpec<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    /// The broker's name (it is part of every receipt handle).
    pub broker: &'a str,
    /// A queue, or -1 for every queue of the broker.
    pub queue_id: i32,
    pub max: u32,
    pub invisible: Duration,
    /// Longest hold of the long poll.
    pub poll: Duration,
    /// `TAG` or `SQL92`.
    pub exp_type: &'a str,
    pub exp: &'a str,
    /// Where a group with no offset starts (`ConsumeInitMode`: 0 = MIN, 1 = MAX).
    pub init_mode: i32,
    /// An orderly POP: a queue's next messages wait until these are acked.
    pub order: bool,
    /// Names a retried orderly POP, so the broker answers it with the same messages.
    pub attempt_id: Option<&'a str>,
}

/// Pops from the broker at `addr`. Empty when nothing came within the poll time.
pub async fn pop(
    client: &ClientInstance,
    addr: &str,
    spec: &PopSpec<'_>,
) -> Result<Vec<ReceivedMessage>> {
    let header = PopMessageRequestHeader {
        consumer_group: spec.group.to_owned(),
        topic: spec.topic.to_owned(),
        queue_id: spec.queue_id,
        max_msg_nums: spec.max as i32,
        invisible_time: spec.invisible.as_millis() as i64,
        poll_time: spec.poll.as_millis() as i64,
        born_time: Some(now_ms()),
        init_mode: spec.init_mode,
        exp_type: Some(spec.exp_type.to_owned()),
        exp: Some(spec.exp.to_owned()),
        order: Some(spec.order),
        attempt_id: spec.attempt_id.map(str::to_owned),
    };
    let cmd = RemotingCommand::request(RequestCode::PopMessage, &header);
    let resp = client.invoke(addr, cmd, spec.poll + POP_RPC_SLACK).await?;
    match resp.response_code() {
        ResponseCode::Success => decode(&resp, spec.topic, spec.broker, addr),
        ResponseCode::PollingTimeout | ResponseCode::PollingFull | ResponseCode::PullNotFound => {
            Ok(Vec::new())
        }
        _ => Err(ClientError::from_response(&resp)),
    }
}

/// ACK_MESSAGE: `m` is not delivered to `group` again.
pub(crate) async fn ack(client: &ClientInstance, group: &str, m: &ReceivedMessage) -> Result<()> {
    let header = AckMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: m.real_topic.clone(),
        queue_id: m.message.queue_id,
        extra_info: m.receipt_handle.clone(),
        offset: m.message.queue_offset,
    };
    let cmd = RemotingCommand::request(RequestCode::AckMessage, &header);
    client.invoke_ok(&m.broker_addr, cmd).await.map(drop)
}

/// CHANGE_MESSAGE_INVISIBLETIME: `m` is hidden for `invisible` from now instead; returns
/// it with its new receipt handle (the old one no longer acks it).
pub(crate) async fn change_invisible(
    client: &ClientInstance,
    group: &str,
    m: &ReceivedMessage,
    invisible: Duration,
) -> Result<ReceivedMessage> {
    let header = ChangeInvisibleTimeRequestHeader {
        consumer_group: group.to_owned(),
        topic: m.real_topic.clone(),
        queue_id: m.message.queue_id,
        extra_info: m.receipt_handle.clone(),
        offset: m.message.queue_offset,
        invisible_time: invisible.as_millis() as i64,
    };
    let cmd = RemotingCommand::request(RequestCode::ChangeMessageInvisibletime, &header);
    let resp = ok(client
        .invoke(&m.broker_addr, cmd, client.config().rpc_timeout)
        .await?)?;
    let h: ChangeInvisibleTimeResponseHeader = resp
        .decode_header()
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    let old = ExtraInfo::parse(&m.receipt_handle).map_err(ClientError::Protocol)?;
    // The client builds the new handle itself, with the message's offset as the
    // checkpoint's (the broker wrote a one-message checkpoint there).
    let handle = ExtraInfo {
        ck_queue_offset: m.message.queue_offset,
        pop_time: h.pop_time,
        invisible_time: h.invisible_time,
        revive_qid: h.revive_qid,
        offset: Some(m.message.queue_offset),
        ..old
    };
    let mut out = m.clone();
    out.receipt_handle = handle.build();
    out.message.properties.insert(
        tern_shell::pop::POP_CK.to_owned(),
        out.receipt_handle.clone(),
    );
    Ok(out)
}

/// The messages of a POP answer with their receipt handles.
fn decode(
    resp: &RemotingCommand,
    topic: &str,
    broker: &str,
    addr: &str,
) -> Result<Vec<ReceivedMessage>> {
    let h: PopMessageResponseHeader = resp
        .decode_header()
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    let starts = parse_start_offset_info(h.start_offset_info.as_deref().unwrap_or_default())
        .map_err(ClientError::Protocol)?;
    let offsets = parse_msg_offset_info(h.msg_offset_info.as_deref().unwrap_or_default())
        .map_err(ClientError::Protocol)?;
    let records =
        decode_pulled_each(&resp.body, true).map_err(|e| ClientError::Protocol(e.to_string()))?;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let (mut message, decode_error) = match r {
            Ok(m) => (m, None),
            Err(u) => (u.message, Some(u.error.to_string())),
        };
        let flag = retry_flag(&message.topic);
        let key = (flag, message.queue_id);
        let (Some(start), Some(list)) = (starts.get(&key), offsets.get(&key)) else {
            return Err(ClientError::Protocol(format!(
                "message of {}/{} not named in the answer's offset info",
                message.topic, message.queue_id
            )));
        };
        if !list.contains(&message.queue_offset) {
            return Err(ClientError::Protocol(format!(
                "offset {} of {}/{} not in msgOffsetInfo",
                message.queue_offset, message.topic, message.queue_id
            )));
        }
        let handle = ExtraInfo {
            ck_queue_offset: *start,
            pop_time: h.pop_time,
            invisible_time: h.invisible_time,
            revive_qid: h.revive_qid,
            retry: flag,
            broker_name: broker.to_owned(),
            queue_id: message.queue_id,
            offset: Some(message.queue_offset),
        }
        .build();
        let real_topic = std::mem::replace(&mut message.topic, topic.to_owned());
        message
            .properties
            .insert(tern_shell::pop::POP_CK.to_owned(), handle.clone());
        message
            .properties
            .entry(tern_shell::pop::FIRST_POP_TIME.to_owned())
            .or_insert_with(|| h.pop_time.to_string());
        out.push(ReceivedMessage {
            message,
            decode_error,
            receipt_handle: handle,
            real_topic,
            broker_addr: addr.to_owned(),
        });
    }
    Ok(out)
}
