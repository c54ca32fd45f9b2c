//! Message queries: by offset msgId (VIEW_MESSAGE_BY_ID at the storing broker), by key or
//! UNIQ_KEY (QUERY_MESSAGE at every broker of the topic), by queue offset (a one-message
//! pull).

use tern_shell::body::MessageQueue;
use tern_shell::headers::{QueryMessageRequestHeader, ViewMessageRequestHeader};
use tern_shell::message::{MessageExt, decode_offset_msg_id, decode_pulled, property};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use super::Admin;
use crate::consumer::{PullConsumer, PullStatus};
use crate::error::{ClientError, Result};

/// Java's `MixAll.TOOLS_CONSUMER_GROUP`, the group admin pulls use.
pub const TOOLS_CONSUMER_GROUP: &str = "TOOLS_CONSUMER";
/// Most messages one key query returns per broker (the broker caps at 64).
pub const MAX_QUERY_NUM: i32 = 64;

impl Admin {
    /// The message stored under an offset msgId (the `msgId` of a send response, Java's
    /// `offsetMsgId`): decoded to `ip:port` + commit-log offset, asked of that broker.
    pub async fn view_message(&self, offset_msg_id: &str) -> Result<MessageExt> {
        let id = decode_offset_msg_id(offset_msg_id.trim()).map_err(|e| {
            ClientError::InvalidMessage(format!("{offset_msg_id} is not an offset msgId: {e}"))
        })?;
        let addr = id.store_host.to_string();
        let h = ViewMessageRequestHeader {
            offset: id.commit_log_offset,
            topic: None,
        };
        let cmd = RemotingCommand::request(RequestCode::ViewMessageById, &h);
        let resp = self
            .client()
            .invoke(&addr, cmd, self.client().config().rpc_timeout)
            .await?;
        if resp.response_code() != ResponseCode::Success {
            return Err(ClientError::NotFound(format!(
                "message {offset_msg_id} not found at {addr}: {}",
                resp.remark.unwrap_or_default()
            )));
        }
        decode_pulled(&resp.body, false)
            .map_err(|e| ClientError::Protocol(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::NotFound(format!("message {offset_msg_id} not found")))
    }

    /// Messages of `topic` whose KEYS contain `key`, stored in `[begin_ms, end_ms]`.
    pub async fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max: i32,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<MessageExt>> {
        let mut msgs = self.query(topic, key, max, begin_ms, end_ms, false).await?;
        msgs.retain(|m| {
            m.properties
                .get(property::KEYS)
                .is_some_and(|ks| tern_shell::message::has_key(ks, key))
        });
        Ok(msgs)
    }

    /// Messages of `topic` with this UNIQ_KEY (the `msgId` Java clients show).
    pub async fn query_by_unique_key(
        &self,
        topic: &str,
        uniq_key: &str,
    ) -> Result<Vec<MessageExt>> {
        let mut msgs = self.query(topic, uniq_key, 32, 0, i64::MAX, true).await?;
        msgs.retain(|m| m.properties.get(property::UNIQ_KEY).map(String::as_str) == Some(uniq_key));
        Ok(msgs)
    }

    /// Looks a message id up either way: an offset msgId first, then a UNIQ_KEY in
    /// `topic` (what Java's queryMsgById does for 5.x ids).
    pub async fn find_message(&self, id: &str, topic: Option<&str>) -> Result<Vec<MessageExt>> {
        if decode_offset_msg_id(id).is_ok() {
            match self.view_message(id).await {
                Ok(m) => return Ok(vec![m]),
                Err(e) if topic.is_none() => return Err(e),
                Err(_) => {}
            }
        }
        match topic {
            Some(t) => self.query_by_unique_key(t, id).await,
            None => Err(ClientError::InvalidMessage(format!(
                "{id} is not an offset msgId; give the topic (-t) to look it up as a unique key"
            ))),
        }
    }

    async fn query(
        &self,
        topic: &str,
        key: &str,
        max: i32,
        begin_ms: i64,
        end_ms: i64,
        unique: bool,
    ) -> Result<Vec<MessageExt>> {
        let route = self.topic_route(topic).await?;
        let h = QueryMessageRequestHeader {
            topic: topic.to_owned(),
            key: key.to_owned(),
            max_num: max.clamp(1, MAX_QUERY_NUM),
            begin_timestamp: begin_ms,
            end_timestamp: end_ms,
            unique_key_query: unique.then_some(true),
        };
        let mut out = Vec::new();
        for b in &route.broker_datas {
            let Some(addr) = b
                .master_addr()
                .or_else(|| b.broker_addrs.0.values().next().map(String::as_str))
            else {
                continue;
            };
            let cmd = RemotingCommand::request(RequestCode::QueryMessage, &h);
            let resp = self
                .client()
                .invoke(addr, cmd, self.client().config().rpc_timeout)
                .await?;
            match resp.response_code() {
                ResponseCode::Success => out.extend(
                    decode_pulled(&resp.body, false)
                        .map_err(|e| ClientError::Protocol(e.to_string()))?,
                ),
                ResponseCode::QueryNotFound => {}
                _ => return Err(ClientError::from_response(&resp)),
            }
        }
        out.sort_by_key(|m| (m.store_timestamp, m.commit_log_offset));
        Ok(out)
    }

    /// The message at `offset` of a queue (a one-message pull as `TOOLS_CONSUMER`).
    pub async fn query_by_offset(&self, queue: &MessageQueue, offset: i64) -> Result<MessageExt> {
        let c = PullConsumer::with_instance(TOOLS_CONSUMER_GROUP, self.client().clone());
        let r = c.pull(queue, offset, 1).await?;
        match (r.status, r.messages.into_iter().next()) {
            (PullStatus::Found, Some(m)) if m.queue_offset == offset => Ok(m),
            _ => Err(ClientError::NotFound(format!(
                "no message at offset {offset} of {}:{}:{} (queue holds {}..{})",
                queue.topic, queue.broker_name, queue.queue_id, r.min_offset, r.max_offset
            ))),
        }
    }
}
