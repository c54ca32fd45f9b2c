//! Request-reply (RocketMQ 4.6's `DefaultMQProducer.request` and `MessageUtil`): a
//! request is a message carrying `CORRELATION_ID`, `REPLY_TO_CLIENT` (this client's id)
//! and `TTL`; whoever consumes it answers with [`create_reply`], sent by any producer to
//! the cluster's `<cluster>_REPLY_TOPIC` (SEND_REPLY_MESSAGE); the broker pushes the reply
//! to this client (PUSH_REPLY_MESSAGE_TO_CLIENT), which hands it to the waiting request.

use std::time::{Duration, Instant};

use tern_shell::runtime;

use super::Producer;
use crate::error::{ClientError, Result};
use crate::message::{Message, MessageExt};
use crate::processor::CORRELATION_ID;

/// The requester's client id.
pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
/// How long the requester waits, ms.
pub const TTL: &str = "TTL";
/// `reply` on a reply message: the producer sends it with SEND_REPLY_MESSAGE.
pub const MSG_TYPE: &str = "MSG_TYPE";
/// The value of [`MSG_TYPE`] on a reply.
pub const REPLY_MESSAGE_FLAG: &str = "reply";
/// The cluster the request was stored in (set by the broker).
const CLUSTER: &str = "CLUSTER";

/// Java's `MessageUtil.createReplyMessage`: the reply to `request` with `body`, to be
/// sent with [`Producer::send`]. Fails for a message that is not a request or was not
/// stored by a broker that names its cluster.
pub fn create_reply(request: &MessageExt, body: impl Into<Vec<u8>>) -> Result<Message> {
    let get = |k: &str| request.properties.get(k).cloned();
    let Some(cluster) = get(CLUSTER) else {
        return Err(ClientError::InvalidMessage(format!(
            "create reply message fail, requestMessage error, property[{CLUSTER}] is null."
        )));
    };
    let (Some(correlation), Some(reply_to)) = (get(CORRELATION_ID), get(REPLY_TO_CLIENT)) else {
        return Err(ClientError::InvalidMessage(format!(
            "{} is not a request: it has no {CORRELATION_ID} or {REPLY_TO_CLIENT}",
            request.msg_id()
        )));
    };
    let mut reply = Message::new(format!("{cluster}_REPLY_TOPIC"), body);
    reply
        .properties
        .insert(MSG_TYPE.into(), REPLY_MESSAGE_FLAG.into());
    reply.properties.insert(CORRELATION_ID.into(), correlation);
    reply.properties.insert(REPLY_TO_CLIENT.into(), reply_to);
    if let Some(ttl) = get(TTL) {
        reply.properties.insert(TTL.into(), ttl);
    }
    Ok(reply)
}

impl Producer {
    /// Sends `msg` as a request and waits up to `timeout` (send included) for its reply.
    pub async fn request(&self, mut msg: Message, timeout: Duration) -> Result<MessageExt> {
        let started = Instant::now();
        let client = &self.inner.client;
        let correlation = client.next_uniq_id();
        msg.properties
            .insert(CORRELATION_ID.into(), correlation.clone());
        msg.properties
            .insert(REPLY_TO_CLIENT.into(), client.client_id().to_owned());
        msg.properties
            .insert(TTL.into(), timeout.as_millis().to_string());
        // The broker pushes the reply on this client's producer connection: it must have
        // heard this producer's heartbeat first (Java's `prepareSendRequest`).
        if client.topic_route(&msg.topic).await.is_err() {
            client.fetch_route(&msg.topic).await?;
        }
        for e in client.send_heartbeat_to_all_brokers().await {
            log::debug!("heartbeat before a request: {e}");
        }
        let wait = client.expect_reply(&correlation);
        let topic = msg.topic.clone();
        self.send(msg).await?;
        let left = timeout.saturating_sub(started.elapsed());
        runtime::timeout(left, wait.reply())
            .await
            .map_err(|_| ClientError::Timeout {
                what: format!("send request message to <{topic}> OK, but wait reply message"),
                timeout_ms: timeout.as_millis() as u64,
            })
    }
}
