//! PullMessage, UpdateOffset, GetOffset and QueryOffset: the 5.x pull consumer's RPCs,
//! which RocketMQ's proxy leaves unimplemented. Tern answers them with the remoting
//! requests a 4.x pull consumer sends (PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET,
//! GET_MIN/MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP).

use std::sync::Arc;

use tern_client::MessageQueue as RemotingQueue;
use tern_client::consumer::{PullConsumer, PullStatus};
use tern_shell::acl::rules::perm;
use tokio::sync::mpsc;
use tonic::Request;

use super::consumer::Frames;
use super::{Inner, topic_need, validate_topic};
use crate::convert::{incoming, timestamp_ms};
use crate::meta::CallCtx;
use crate::pb::*;
use crate::session::Session;
use crate::status::{from_client_error, ok, status};

/// Most messages one pull returns.
const MAX_PULL: i32 = 32;

/// The remoting queue a request names; the broker defaults to this one.
fn remoting_queue(inner: &Inner, mq: Option<&MessageQueue>) -> Result<RemotingQueue, Status> {
    let mq = mq.ok_or_else(|| status(Code::BadRequest, "no message queue given"))?;
    let topic = validate_topic(mq.topic.as_ref())?;
    if mq.id < 0 {
        return Err(status(
            Code::BadRequest,
            format!("queue id {} is not a queue", mq.id),
        ));
    }
    let broker_name = inner.broker_of(mq)?;
    Ok(RemotingQueue {
        topic,
        broker_name,
        queue_id: mq.id,
    })
}

fn pull_frame(c: pull_message_response::Content) -> Result<PullMessageResponse, tonic::Status> {
    Ok(PullMessageResponse { content: Some(c) })
}

/// PullMessage: a status, the messages, then the next offset.
pub(super) fn pull_message(
    inner: Arc<Inner>,
    request: Request<PullMessageRequest>,
) -> Frames<PullMessageResponse> {
    let (tx, rx) = mpsc::channel(MAX_PULL as usize + 2);
    tokio::spawn(async move {
        use pull_message_response::Content;
        let result = match inner.open(&request) {
            Err(s) => Err(s),
            Ok((ctx, session)) => pull(&inner, &ctx, &session, request.into_inner()).await,
        };
        match result {
            Err(s) => {
                let _ = tx.send(pull_frame(Content::Status(s))).await;
            }
            Ok((first, messages, next)) => {
                if tx.send(pull_frame(Content::Status(first))).await.is_err() {
                    return;
                }
                for m in messages {
                    if tx.send(pull_frame(Content::Message(m))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send(pull_frame(Content::NextOffset(next))).await;
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

async fn pull(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: PullMessageRequest,
) -> Result<(Status, Vec<Message>, i64), Status> {
    let queue = remoting_queue(inner, req.message_queue.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &queue.topic)?;
    if req.offset < 0 {
        return Err(status(Code::IllegalOffset, "offset cannot be negative"));
    }
    let selector = crate::session::selector(req.filter_expression.as_ref())?;
    let consumer = PullConsumer::with_instance(group, session.instance.clone());
    let r = consumer
        .pull_with_selector(
            &queue,
            &selector,
            req.offset,
            req.batch_size.clamp(1, MAX_PULL),
        )
        .await
        .map_err(|e| from_client_error(&e))?;
    let first = match r.status {
        PullStatus::Found => ok(),
        PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {
            status(Code::MessageNotFound, "no new message")
        }
        PullStatus::OffsetIllegal => status(
            Code::IllegalOffset,
            format!(
                "offset {} is outside [{}, {}]",
                req.offset, r.min_offset, r.max_offset
            ),
        ),
    };
    let messages = r
        .messages
        .iter()
        .map(|m| incoming(m, &queue.topic, None))
        .collect();
    Ok((first, messages, r.next_begin_offset))
}

pub(super) async fn update_offset(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: UpdateOffsetRequest,
) -> Result<UpdateOffsetResponse, Status> {
    let queue = remoting_queue(inner, req.message_queue.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &queue.topic)?;
    if req.offset < 0 {
        return Err(status(Code::IllegalOffset, "offset cannot be negative"));
    }
    PullConsumer::with_instance(group, session.instance.clone())
        .commit_offset(&queue, req.offset)
        .await
        .map_err(|e| from_client_error(&e))?;
    Ok(UpdateOffsetResponse { status: Some(ok()) })
}

pub(super) async fn get_offset(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: GetOffsetRequest,
) -> Result<GetOffsetResponse, Status> {
    let queue = remoting_queue(inner, req.message_queue.as_ref())?;
    let group = inner.consumer(ctx, req.group.as_ref(), &queue.topic)?;
    match PullConsumer::with_instance(group, session.instance.clone())
        .query_offset(&queue)
        .await
        .map_err(|e| from_client_error(&e))?
    {
        Some(offset) => Ok(GetOffsetResponse {
            status: Some(ok()),
            offset,
        }),
        None => Err(status(
            Code::OffsetNotFound,
            "the group has no offset for this queue",
        )),
    }
}

pub(super) async fn query_offset(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: QueryOffsetRequest,
) -> Result<QueryOffsetResponse, Status> {
    let queue = remoting_queue(inner, req.message_queue.as_ref())?;
    inner.authorize(ctx, &[topic_need(&queue.topic, perm::SUB)])?;
    // No group is named: the offsets are the queue's, asked as a pull consumer asks.
    let c = PullConsumer::with_instance("TOOLS_CONSUMER", session.instance.clone());
    let offset = match QueryOffsetPolicy::try_from(req.query_offset_policy) {
        Ok(QueryOffsetPolicy::Beginning) => c.min_offset(&queue).await,
        Ok(QueryOffsetPolicy::End) => c.max_offset(&queue).await,
        Ok(QueryOffsetPolicy::Timestamp) => {
            let Some(t) = &req.timestamp else {
                return Err(status(
                    Code::BadRequest,
                    "TIMESTAMP policy needs a timestamp",
                ));
            };
            c.search_offset(&queue, timestamp_ms(t)).await
        }
        Err(_) => return Err(status(Code::BadRequest, "unknown query offset policy")),
    }
    .map_err(|e| from_client_error(&e))?;
    Ok(QueryOffsetResponse {
        status: Some(ok()),
        offset,
    })
}
