//! ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue
//! (RocketMQ's `ReceiveMessageActivity`, `AckMessageActivity`,
//! `ChangeInvisibleDurationActivity`, `ForwardMessageToDLQActivity`), over POP.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tern_client::consumer::pop::{PopSpec, pop};
use tern_shell::headers::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
    ConsumerSendMsgBackRequestHeader,
};
use tern_shell::pop::ExtraInfo;
use tern_shell::runtime::now_ms;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::Request;

use super::{Inner, call, validate_topic};
use crate::convert::{duration_ms, incoming, timestamp};
use crate::handle::ReceiptHandle;
use crate::meta::CallCtx;
use crate::pb::*;
use crate::session::Session;
use crate::status::{from_client_error, from_remoting, ok, overall, status};

/// A server stream's frames.
pub type Frames<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

/// Most messages one receive asks for (`MAX_MSG_NUMS_FOR_POP_REQUEST`).
const MAX_BATCH: i32 = 32;
/// `ConsumeInitMode.MAX`: a new group starts at the end of the queue (the broker reads
/// a young queue from its start).
const INIT_MODE_MAX: i32 = 1;
/// Kept free of a receive's deadline for the answer to travel back.
const DEADLINE_SLACK: Duration = Duration::from_millis(300);

fn frame(
    content: receive_message_response::Content,
) -> Result<ReceiveMessageResponse, tonic::Status> {
    Ok(ReceiveMessageResponse {
        content: Some(content),
    })
}

/// ReceiveMessage: the frames are a status, each message, then the delivery time.
pub(super) fn receive_message(
    inner: Arc<Inner>,
    request: Request<ReceiveMessageRequest>,
) -> Frames<ReceiveMessageResponse> {
    let (tx, rx) = mpsc::channel(MAX_BATCH as usize + 2);
    tokio::spawn(async move {
        use receive_message_response::Content;
        let opened = inner.open(&request);
        let messages = match opened {
            Err(s) => Err(s),
            Ok((ctx, session)) => receive(&inner, &ctx, &session, request.into_inner()).await,
        };
        let first = match &messages {
            Ok(m) if m.is_empty() => status(Code::MessageNotFound, "no new message"),
            Ok(_) => ok(),
            Err(s) => s.clone(),
        };
        if tx.send(frame(Content::Status(first))).await.is_err() {
            return;
        }
        for m in messages.unwrap_or_default() {
            // A client gone mid-answer: the rest come back after their invisible time.
            if tx.send(frame(Content::Message(m))).await.is_err() {
                return;
            }
        }
        let _ = tx
            .send(frame(Content::DeliveryTimestamp(timestamp(now_ms()))))
            .await;
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

impl Inner {
    /// The long poll a receive may hold: the asked time (else the longest) within the
    /// configured bounds and the call's deadline; ILLEGAL_POLLING_TIME when the deadline
    /// leaves less than the shortest.
    fn polling_time(
        &self,
        asked: Option<Duration>,
        deadline: Option<Duration>,
    ) -> Result<Duration, Status> {
        let s = &self.settings;
        let mut poll = asked
            .unwrap_or(s.max_long_polling)
            .clamp(s.min_long_polling, s.max_long_polling);
        if let Some(d) = deadline {
            let room = d.saturating_sub(DEADLINE_SLACK);
            if poll > room {
                if room < s.min_long_polling {
                    return Err(status(
                        Code::IllegalPollingTime,
                        format!(
                            "the deadline leaves {} ms, under the polling minimum",
                            room.as_millis()
                        ),
                    ));
                }
                poll = room;
            }
        }
        Ok(poll)
    }
}

async fn receive(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Arc<Session>,
    req: ReceiveMessageRequest,
) -> Result<Vec<Message>, Status> {
    let mq = req.message_queue.clone().unwrap_or_default();
    let topic = validate_topic(mq.topic.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &topic)?;
    let settings = match session.settings() {
        Some(s) => s,
        // A client this endpoint does not know yet: the broker restarted, and the
        // client resends its settings only every 5 minutes. Its receive names what they
        // would: the group and the topic with its filter (RocketMQ's proxy answers
        // UNRECOGNIZED_CLIENT_TYPE until then).
        None => {
            inner
                .adopt_settings(ctx, session, settings_of_receive(&req, &group, &topic))
                .await?
        }
    };
    let poll = inner.polling_time(
        req.long_polling_timeout
            .as_ref()
            .map(|d| Duration::from_millis(duration_ms(d) as u64)),
        ctx.deadline,
    )?;
    let s = &inner.settings;
    let invisible = match (&req.invisible_duration, req.auto_renew) {
        (Some(d), _) => {
            let d = Duration::from_millis(duration_ms(d) as u64);
            if d < s.min_invisible || d > s.max_invisible {
                return Err(status(
                    Code::IllegalInvisibleTime,
                    format!(
                        "invisible duration {} ms is outside [{}, {}] ms",
                        d.as_millis(),
                        s.min_invisible.as_millis(),
                        s.max_invisible.as_millis()
                    ),
                ));
            }
            d
        }
        // Auto-renewing clients (push consumers) get the default; Tern does not renew
        // (docs/grpc.md).
        (None, _) => s.default_invisible,
    };
    let selector = crate::session::selector(req.filter_expression.as_ref())?;
    let fifo = match &settings.pub_sub {
        Some(settings::PubSub::Subscription(sub)) => sub.fifo.unwrap_or(false),
        _ => false,
    };
    let max_attempts = settings
        .backoff_policy
        .as_ref()
        .map_or(17, |b| b.max_attempts.max(1));
    let broker = inner.broker_of(&mq)?;
    let addr = inner.broker_addr(session, &topic, &broker).await?;
    let spec = PopSpec {
        group: &group,
        topic: &topic,
        broker: &broker,
        // Every queue of the broker, as the proxy's read selector names it: the client's
        // queue only picks the broker (a simple consumer cycles through the route's
        // queues; a FIFO POP keeps each queue's order itself).
        queue_id: -1,
        max: req.batch_size.clamp(1, MAX_BATCH) as u32,
        invisible,
        poll,
        exp_type: selector.expression_type().name(),
        exp: selector.expression(),
        init_mode: INIT_MODE_MAX,
        order: fifo,
        attempt_id: req.attempt_id.as_deref(),
    };
    let popped = pop(&session.instance, &addr, &spec)
        .await
        .map_err(|e| from_client_error(&e))?;
    let mut out = Vec::with_capacity(popped.len());
    for r in popped {
        let handle = ReceiptHandle {
            extra: ExtraInfo::parse(&r.receipt_handle)
                .map_err(|e| status(Code::InternalServerError, e))?,
            commit_log_offset: Some(r.message.commit_log_offset),
        };
        // Past its attempts: to the group's DLQ, as the proxy does for push consumers.
        if r.message.reconsume_times >= max_attempts {
            let m = &r.message;
            let id = m
                .properties
                .get(tern_shell::message::property::UNIQ_KEY)
                .cloned()
                .unwrap_or_else(|| m.offset_msg_id.clone());
            match to_dlq(inner, session, &group, &topic, &handle, &id).await {
                Ok(()) => log::info!(
                    "message {id} of {topic} reached {max_attempts} attempts in group {group}: sent to its DLQ"
                ),
                Err(e) => log::warn!(
                    "message {id} of {topic} could not be sent to the DLQ of {group}: {}",
                    e.message
                ),
            }
            continue;
        }
        out.push(incoming(&r.message, &topic, Some(handle.encode())));
    }
    Ok(out)
}

/// The settings a consumer's receive implies: a push consumer (it auto-renews) or a
/// simple one, of `group`, subscribed to `topic` with the receive's filter.
fn settings_of_receive(req: &ReceiveMessageRequest, group: &str, topic: &str) -> Settings {
    let resource = |n: &str| Resource {
        resource_namespace: String::new(),
        name: n.to_owned(),
    };
    let client_type = if req.auto_renew {
        ClientType::PushConsumer
    } else {
        ClientType::SimpleConsumer
    };
    Settings {
        client_type: Some(client_type as i32),
        pub_sub: Some(settings::PubSub::Subscription(Subscription {
            group: Some(resource(group)),
            subscriptions: vec![SubscriptionEntry {
                topic: Some(resource(topic)),
                expression: req.filter_expression.clone(),
            }],
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Parses a receipt handle; INVALID_RECEIPT_HANDLE when it is malformed or expired.
fn parse_handle(s: &str) -> Result<ReceiptHandle, Status> {
    let h = ReceiptHandle::parse(s).map_err(|e| status(Code::InvalidReceiptHandle, e))?;
    if h.expired(now_ms()) {
        return Err(status(
            Code::InvalidReceiptHandle,
            "receipt handle is expired",
        ));
    }
    Ok(h)
}

/// ACK_MESSAGE for one handle.
async fn ack_one(
    inner: &Inner,
    session: &Session,
    group: &str,
    topic: &str,
    handle: &ReceiptHandle,
) -> Result<(), Status> {
    let header = AckMessageRequestHeader {
        consumer_group: group.to_owned(),
        topic: handle.extra.real_topic(topic, group),
        queue_id: handle.extra.queue_id,
        extra_info: handle.encode(),
        offset: handle.offset(),
    };
    let addr = inner
        .broker_addr(session, topic, &handle.extra.broker_name)
        .await?;
    let cmd = RemotingCommand::request(RequestCode::AckMessage, &header);
    let resp = call(session, &addr, cmd).await?;
    match resp.response_code() {
        ResponseCode::Success => Ok(()),
        code => Err(status(
            from_remoting(code),
            format!("ack failed: {}", resp.remark.unwrap_or_default()),
        )),
    }
}

/// CONSUMER_SEND_MSG_BACK straight to the group's DLQ, then the ack.
async fn to_dlq(
    inner: &Inner,
    session: &Session,
    group: &str,
    topic: &str,
    handle: &ReceiptHandle,
    message_id: &str,
) -> Result<(), Status> {
    let Some(offset) = handle.commit_log_offset else {
        return Err(status(
            Code::InvalidReceiptHandle,
            "commit log offset is empty",
        ));
    };
    let header = ConsumerSendMsgBackRequestHeader {
        offset,
        group: group.to_owned(),
        delay_level: -1,
        origin_msg_id: Some(message_id.to_owned()),
        origin_topic: Some(handle.extra.real_topic(topic, group)),
        unit_mode: None,
        max_reconsume_times: None,
    };
    let addr = inner
        .broker_addr(session, topic, &handle.extra.broker_name)
        .await?;
    let cmd = RemotingCommand::request(RequestCode::ConsumerSendMsgBack, &header);
    let resp = call(session, &addr, cmd).await?;
    if resp.response_code() != ResponseCode::Success {
        return Err(status(
            from_remoting(resp.response_code()),
            resp.remark.unwrap_or_default(),
        ));
    }
    ack_one(inner, session, group, topic, handle).await
}

pub(super) async fn ack_message(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: AckMessageRequest,
) -> Result<AckMessageResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &topic)?;
    if req.entries.is_empty() {
        return Err(status(Code::BadRequest, "no entry to ack"));
    }
    let mut entries = Vec::with_capacity(req.entries.len());
    for e in req.entries.iter().take(1024) {
        let result = match parse_handle(&e.receipt_handle) {
            Ok(h) => ack_one(inner, session, &group, &topic, &h)
                .await
                .map(|()| ok()),
            Err(s) => Err(s),
        };
        entries.push(AckMessageResultEntry {
            message_id: e.message_id.clone(),
            receipt_handle: e.receipt_handle.clone(),
            status: Some(result.unwrap_or_else(|s| s)),
        });
    }
    Ok(AckMessageResponse {
        status: Some(overall(entries.iter().filter_map(|e| e.status.as_ref()))),
        entries,
    })
}

pub(super) async fn change_invisible_duration(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: ChangeInvisibleDurationRequest,
) -> Result<ChangeInvisibleDurationResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &topic)?;
    let invisible = req.invisible_duration.as_ref().map_or(0, duration_ms);
    let max = inner.settings.max_invisible.as_millis() as i64;
    if invisible > max {
        return Err(status(
            Code::IllegalInvisibleTime,
            format!("invisible duration {invisible} ms is over {max} ms"),
        ));
    }
    let handle = parse_handle(&req.receipt_handle)?;
    let header = ChangeInvisibleTimeRequestHeader {
        consumer_group: group.clone(),
        topic: handle.extra.real_topic(&topic, &group),
        queue_id: handle.extra.queue_id,
        extra_info: handle.encode(),
        offset: handle.offset(),
        invisible_time: invisible,
    };
    let addr = inner
        .broker_addr(session, &topic, &handle.extra.broker_name)
        .await?;
    let cmd = RemotingCommand::request(RequestCode::ChangeMessageInvisibletime, &header);
    let resp = call(session, &addr, cmd).await?;
    if resp.response_code() != ResponseCode::Success {
        return Err(status(
            from_remoting(resp.response_code()),
            format!(
                "changeInvisibleDuration failed: {}",
                resp.remark.unwrap_or_default()
            ),
        ));
    }
    let h: ChangeInvisibleTimeResponseHeader = resp
        .decode_header()
        .map_err(|e| status(Code::InternalServerError, e.to_string()))?;
    // The broker wrote a one-message checkpoint at the message's offset.
    let offset = handle.offset();
    let renewed = ReceiptHandle {
        extra: ExtraInfo {
            ck_queue_offset: offset,
            pop_time: h.pop_time,
            invisible_time: h.invisible_time,
            revive_qid: h.revive_qid,
            offset: Some(offset),
            ..handle.extra
        },
        commit_log_offset: handle.commit_log_offset,
    };
    Ok(ChangeInvisibleDurationResponse {
        status: Some(ok()),
        receipt_handle: renewed.encode(),
    })
}

pub(super) async fn forward_to_dlq(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: ForwardMessageToDeadLetterQueueRequest,
) -> Result<ForwardMessageToDeadLetterQueueResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &topic)?;
    let handle = parse_handle(&req.receipt_handle)?;
    to_dlq(inner, session, &group, &topic, &handle, &req.message_id).await?;
    Ok(ForwardMessageToDeadLetterQueueResponse { status: Some(ok()) })
}
