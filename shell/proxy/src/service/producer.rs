//! SendMessage, EndTransaction and RecallMessage (RocketMQ's `SendMessageActivity`,
//! `EndTransactionActivity`, `RecallMessageActivity`).

use tern_client::{MessageQueue, SendResult, SendStatus};
use tern_shell::acl::rules::perm;
use tern_shell::headers::EndTransactionRequestHeader;
use tern_shell::message::{
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK, decode_offset_msg_id,
};
use tern_shell::runtime::now_ms;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use super::{Inner, topic_need, validate_topic};
use crate::convert::{Outgoing, is_transfer, outgoing, type_accepted};
use crate::handle::TransactionId;
use crate::meta::CallCtx;
use crate::pb::*;
use crate::session::Session;
use crate::status::{from_client_error, from_remoting, ok, overall, status};

const PERM_WRITE: i32 = 2;

impl Inner {
    /// The queue a message goes to, by its message group's hash (FIFO) or in turn: among
    /// this broker's writable queues of the topic in LOCAL mode, every broker's in CLUSTER
    /// mode. The client's queue is not used, as in the proxy; the hash differs from the
    /// proxy's (Guava's consistent hash), which no client can see.
    async fn choose_queue(&self, session: &Session, o: &Outgoing) -> Result<MessageQueue, Status> {
        let topic = &o.message.topic;
        let route = self.route(session, topic).await?;
        let here = self.backend.local_broker();
        let mut writable: Vec<(&str, i32)> = route
            .queue_datas
            .iter()
            .filter(|q| here.as_ref().is_none_or(|h| *h == q.broker_name))
            .filter(|q| q.perm & PERM_WRITE != 0)
            .flat_map(|q| {
                (0..q.write_queue_nums.clamp(0, 1024)).map(|id| (q.broker_name.as_str(), id))
            })
            .collect();
        // One order for every endpoint: a message group hashes to the same queue.
        writable.sort_unstable();
        if writable.is_empty() {
            let on = here.map_or_else(String::new, |h| format!(" on broker {h}"));
            return Err(status(
                Code::Forbidden,
                format!("topic {topic} has no writable queue{on}"),
            ));
        }
        let i = match &o.group {
            Some(g) => tern_client::producer::hash_index(g, writable.len()),
            None => self.sessions.next_turn() % writable.len(),
        };
        let (broker, queue_id) = writable[i];
        Ok(MessageQueue {
            topic: topic.clone(),
            broker_name: broker.to_owned(),
            queue_id,
        })
    }
}

fn entry(r: &SendResult, kind: MessageType) -> SendResultEntry {
    let code = match r.status {
        SendStatus::SendOk => Code::Ok,
        SendStatus::FlushDiskTimeout => Code::MasterPersistenceTimeout,
        SendStatus::FlushSlaveTimeout => Code::SlavePersistenceTimeout,
        SendStatus::SlaveNotAvailable => Code::HaNotAvailable,
    };
    let transaction_id = if kind == MessageType::Transaction {
        TransactionId {
            offset_msg_id: r.offset_msg_id.clone(),
            tran_state_table_offset: r.queue_offset,
        }
        .encode()
    } else {
        String::new()
    };
    SendResultEntry {
        status: Some(status(code, r.status.name())),
        message_id: r.msg_id.clone(),
        transaction_id,
        offset: r.queue_offset,
        recall_handle: r.recall_handle.clone().unwrap_or_default(),
    }
}

pub(super) async fn send_message(
    inner: &Inner,
    ctx: &CallCtx,
    session: &std::sync::Arc<Session>,
    req: SendMessageRequest,
) -> Result<SendMessageResponse, Status> {
    let Some(first) = req.messages.first() else {
        return Err(status(Code::MessageCorrupted, "no message to send"));
    };
    let topic = validate_topic(first.topic.as_ref())?;
    if req
        .messages
        .iter()
        .any(|m| m.topic.as_ref().map(|t| t.name.as_str()) != Some(topic.as_str()))
    {
        return Err(status(
            Code::MessageCorrupted,
            "messages of one request must share a topic",
        ));
    }
    inner.authorize(ctx, &[topic_need(&topic, perm::PUB)])?;
    let topic_type = inner.backend.topic_message_type(&topic).await;
    let now = now_ms();
    let mut prepared = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        let o = outgoing(m, &inner.settings, ctx.peer, now)?;
        if inner.settings.topic_message_type_check
            && !is_transfer(&o.message)
            && !type_accepted(o.kind, topic_type.as_deref())
        {
            return Err(status(
                Code::MessagePropertyConflictWithType,
                format!(
                    "topic {topic} takes {} messages, not {}",
                    topic_type.as_deref().unwrap_or("NORMAL"),
                    o.kind.as_str_name()
                ),
            ));
        }
        prepared.push(o);
    }
    if !session.is_known() {
        // Not known yet (the broker restarted; the client resends its settings only every
        // 5 minutes): its check-backs need it registered as the topic's producer.
        inner
            .adopt_settings(ctx, session, settings_of_send(&topic))
            .await?;
    }
    let producer = session.producer(&topic, inner.settings.max_message_size);
    let mut entries = Vec::with_capacity(prepared.len());
    // One send per message, in order: a FIFO group's messages keep their order.
    for o in prepared {
        let queue = inner.choose_queue(session, &o).await?;
        let kind = o.kind;
        let e = match producer.send_to_queue(o.message, &queue).await {
            Ok(r) => entry(&r, kind),
            Err(e) => SendResultEntry {
                status: Some(from_client_error(&e)),
                ..Default::default()
            },
        };
        entries.push(e);
    }
    Ok(SendMessageResponse {
        status: Some(overall(entries.iter().filter_map(|e| e.status.as_ref()))),
        entries,
    })
}

/// The settings a send implies: a producer of `topic`.
fn settings_of_send(topic: &str) -> Settings {
    Settings {
        client_type: Some(ClientType::Producer as i32),
        pub_sub: Some(settings::PubSub::Publishing(Publishing {
            topics: vec![Resource {
                resource_namespace: String::new(),
                name: topic.to_owned(),
            }],
            ..Default::default()
        })),
        ..Default::default()
    }
}

pub(super) async fn end_transaction(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: EndTransactionRequest,
) -> Result<EndTransactionResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    inner.authorize(ctx, &[topic_need(&topic, perm::PUB)])?;
    if req.transaction_id.trim().is_empty() {
        return Err(status(
            Code::InvalidTransactionId,
            "transaction id cannot be empty",
        ));
    }
    let id = TransactionId::parse(&req.transaction_id)
        .map_err(|e| status(Code::InvalidTransactionId, e))?;
    let at = decode_offset_msg_id(&id.offset_msg_id)
        .map_err(|e| status(Code::InvalidTransactionId, e.to_string()))?;
    let commit_or_rollback = match TransactionResolution::try_from(req.resolution) {
        Ok(TransactionResolution::Commit) => SYSFLAG_TRANSACTION_COMMIT,
        Ok(TransactionResolution::Rollback) => SYSFLAG_TRANSACTION_ROLLBACK,
        _ => 0,
    };
    let header = EndTransactionRequestHeader {
        producer_group: topic.clone(),
        tran_state_table_offset: id.tran_state_table_offset,
        commit_log_offset: at.commit_log_offset,
        commit_or_rollback,
        from_transaction_check: Some(req.source == TransactionSource::SourceServerCheck as i32),
        msg_id: req.message_id.clone(),
        transaction_id: Some(req.message_id.clone()),
        topic: Some(topic),
    };
    // Sent as a request, not oneway as the proxy sends it: the broker's answer (a
    // refusal too) reaches the client, after the decision is stored.
    let cmd = RemotingCommand::request(RequestCode::EndTransaction, &header);
    let addr = at.store_host.to_string();
    let resp = super::call(session, &addr, cmd).await?;
    let code = match resp.response_code() {
        ResponseCode::Success => return Ok(EndTransactionResponse { status: Some(ok()) }),
        ResponseCode::SystemError | ResponseCode::MessageIllegal => Code::BadRequest,
        other => from_remoting(other),
    };
    Err(status(code, resp.remark.unwrap_or_default()))
}

pub(super) async fn recall_message(
    inner: &Inner,
    ctx: &CallCtx,
    session: &Session,
    req: RecallMessageRequest,
) -> Result<RecallMessageResponse, Status> {
    let topic = validate_topic(req.topic.as_ref())?;
    inner.authorize(ctx, &[topic_need(&topic, perm::PUB)])?;
    if req.recall_handle.trim().is_empty() {
        return Err(status(Code::BadRequest, "recall handle cannot be empty"));
    }
    let producer = session.producer(&topic, inner.settings.max_message_size);
    match producer.recall(&topic, &req.recall_handle).await {
        Ok(message_id) => Ok(RecallMessageResponse {
            status: Some(ok()),
            message_id,
        }),
        Err(tern_client::ClientError::Broker { code, remark })
            if ResponseCode::from_raw(code) == ResponseCode::SystemError =>
        {
            Err(status(Code::BadRequest, remark))
        }
        Err(tern_client::ClientError::InvalidMessage(m)) => Err(status(Code::BadRequest, m)),
        Err(e) => Err(from_client_error(&e)),
    }
}
