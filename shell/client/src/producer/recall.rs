//! Recalling a timer message (RocketMQ 5.3.2's `DefaultMQProducer.recallMessage`): the
//! send of a message with a due time is answered with a recall handle; handing it back
//! before the message is due cancels it.

use tern_shell::RemotingCommand;
use tern_shell::RequestCode;
use tern_shell::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tern_shell::recall::Fields;

use super::Producer;
use crate::error::{ClientError, Result};

impl Producer {
    /// Recalls the timer message of `topic` whose send answered `handle`; returns its
    /// msg id. As RocketMQ's client: retry and dead-letter topics are refused, and the
    /// request goes to the master of the broker named in the handle.
    pub async fn recall(&self, topic: &str, handle: &str) -> Result<String> {
        if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") {
            return Err(ClientError::InvalidMessage(format!(
                "recall is not supported for the retry or dead-letter topic {topic}"
            )));
        }
        let broker = handle_broker(handle)?;
        let client = &self.inner.client;
        if client.master_addr(&broker).is_none() {
            client.fetch_route(topic).await?;
        }
        let addr = client
            .master_addr(&broker)
            .ok_or_else(|| ClientError::NoRoute {
                topic: format!("{topic} (broker {broker} of the recall handle)"),
            })?;
        let cmd = RemotingCommand::request(
            RequestCode::RecallMessage,
            &RecallMessageRequestHeader {
                producer_group: Some(self.inner.config.group.clone()),
                topic: topic.to_owned(),
                recall_handle: handle.to_owned(),
            },
        );
        let resp = client.invoke_ok(&addr, cmd).await?;
        let h: RecallMessageResponseHeader = resp
            .decode_header()
            .map_err(|e| ClientError::Protocol(format!("recall response: {e}")))?;
        Ok(h.msg_id)
    }
}

/// The broker name a recall handle names (read as RocketMQ's client does: the broker
/// checks the rest).
fn handle_broker(handle: &str) -> Result<String> {
    Fields::read(handle)
        .map(|f| f.broker_name)
        .ok_or_else(|| ClientError::InvalidMessage("recall handle is invalid".into()))
}
