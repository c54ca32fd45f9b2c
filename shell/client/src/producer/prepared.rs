//! A message made ready for the wire once: checked, its UNIQ_KEY given, compressed,
//! and built into the request every attempt sends.

use tern_shell::ext_fields::ToCompactString;
use tern_shell::headers::SendMessageRequestHeaderV2;
use tern_shell::message::{Message, SYSFLAG_TRANSACTION_PREPARED, encode_batch, property};
use tern_shell::{RemotingCommand, RequestCode};

use super::{Producer, request};
use crate::error::{ClientError, Result};
use crate::message::{MAX_PROPERTIES_LEN, check_message, check_topic};

/// A message made ready for the wire once: the request is built with its body and every
/// header field but the two an attempt sets ([`Prepared::aim`]), and sent again as it is
/// by a retry, nothing copied.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) topic: String,
    pub(super) uniq_id: String,
    pub(super) request: RemotingCommand,
}

/// SEND_MESSAGE_V2's header fields that each attempt sets: the queue and the send time.
const QUEUE_ID: &str = "e";
const BORN_TIMESTAMP: &str = "g";

impl Prepared {
    /// The request of `header` with `body`; `header`'s queue and born time are set by
    /// [`Self::aim`].
    fn new(
        code: RequestCode,
        header: SendMessageRequestHeaderV2,
        body: Vec<u8>,
        uniq_id: String,
    ) -> Self {
        let request = RemotingCommand::request(code, &header).with_body(body);
        Self {
            topic: header.b,
            uniq_id,
            request,
        }
    }

    /// Addresses the request to queue `queue_id`, sent at `born_ms`.
    pub(super) fn aim(&mut self, queue_id: i32, born_ms: i64) {
        let fields = &mut self.request.ext_fields;
        fields.insert(QUEUE_ID, queue_id.to_compact_string());
        fields.insert(BORN_TIMESTAMP, born_ms.to_compact_string());
    }
}

impl Producer {
    pub(super) fn prepare(&self, msg: Message) -> Result<Prepared> {
        self.prepare_with(msg, None)
    }

    /// `compressed`: the body is already compressed with these sysFlag bits.
    pub(super) fn prepare_with(
        &self,
        mut msg: Message,
        compressed: Option<i32>,
    ) -> Result<Prepared> {
        let cfg = &self.inner.config;
        check_message(&msg, cfg.max_message_bytes)?;
        let uniq_id = msg
            .properties
            .entry(property::UNIQ_KEY.to_owned())
            .or_insert_with(|| self.inner.client.next_uniq_id())
            .clone();
        // Java's producer moves these two properties of a retry message into the header.
        let (mut reconsume_times, mut max_reconsume_times) = (None, None);
        if msg.topic.starts_with("%RETRY%") {
            reconsume_times = msg
                .properties
                .remove("RECONSUME_TIME")
                .and_then(|v| v.parse().ok());
            max_reconsume_times = msg
                .properties
                .remove("MAX_RECONSUME_TIMES")
                .and_then(|v| v.parse().ok());
        }
        let properties = msg.properties_string();
        let (body, mut sys_flag) = match compressed {
            Some(bits) => (msg.body, bits),
            None => match (msg.body.len() >= cfg.compress_over_bytes)
                .then(|| cfg.compress_type.compress(&msg.body, cfg.compress_level))
                .flatten()
            {
                Some(c) => (c, cfg.compress_type.sys_flag()),
                None => (msg.body, 0),
            },
        };
        // Java flags a half message by its TRAN_MSG property (see `transaction`).
        if msg.properties.get(property::TRAN_MSG).map(String::as_str) == Some("true") {
            sys_flag |= SYSFLAG_TRANSACTION_PREPARED;
        }
        check_properties(&properties)?;
        let reply = msg.properties.get(request::MSG_TYPE).map(String::as_str)
            == Some(request::REPLY_MESSAGE_FLAG);
        let code = if reply {
            RequestCode::SendReplyMessageV2
        } else {
            RequestCode::SendMessageV2
        };
        let header = SendMessageRequestHeaderV2 {
            f: sys_flag,
            h: msg.flag,
            i: (!properties.is_empty()).then_some(properties),
            j: Some(reconsume_times.unwrap_or(0)),
            l: max_reconsume_times,
            m: Some(false),
            ..self.send_header(msg.topic)
        };
        Ok(Prepared::new(code, header, body, uniq_id))
    }

    pub(super) fn prepare_batch(&self, mut msgs: Vec<Message>) -> Result<Prepared> {
        let Some(topic) = msgs.first().map(|m| m.topic.clone()) else {
            return Err(ClientError::InvalidMessage("the batch is empty".into()));
        };
        check_topic(&topic)?;
        if topic.starts_with("%RETRY%") {
            return Err(ClientError::InvalidMessage(
                "batches cannot go to a %RETRY% topic".into(),
            ));
        }
        let mut ids = Vec::with_capacity(msgs.len());
        for m in &mut msgs {
            if m.topic != topic {
                return Err(ClientError::InvalidMessage(
                    "every message of a batch must have the same topic".into(),
                ));
            }
            if m.properties.contains_key(property::DELAY) {
                return Err(ClientError::InvalidMessage(
                    "batched messages cannot have a delay level".into(),
                ));
            }
            check_message(m, self.inner.config.max_message_bytes)?;
            let id = m
                .properties
                .entry(property::UNIQ_KEY.to_owned())
                .or_insert_with(|| self.inner.client.next_uniq_id())
                .clone();
            check_properties_len(tern_shell::message::properties_len(&m.properties))?;
            ids.push(id);
        }
        let body = encode_batch(&msgs).map_err(|e| ClientError::InvalidMessage(e.to_string()))?;
        let max = self.inner.config.max_message_bytes;
        if body.len() > max {
            return Err(ClientError::MessageTooLarge {
                size: body.len(),
                max,
            });
        }
        let header = SendMessageRequestHeaderV2 {
            j: Some(0),
            m: Some(true),
            ..self.send_header(topic)
        };
        Ok(Prepared::new(
            RequestCode::SendBatchMessage,
            header,
            body,
            ids.join(","),
        ))
    }

    /// The send header's fields every send of this producer has, for `topic`: the rest
    /// are the message's, and the queue and born time the attempt's ([`Prepared::aim`]).
    fn send_header(&self, topic: String) -> SendMessageRequestHeaderV2 {
        let cfg = &self.inner.config;
        SendMessageRequestHeaderV2 {
            a: cfg.group.clone(),
            b: topic,
            c: cfg.create_topic_key.clone(),
            d: cfg.default_topic_queue_nums,
            k: Some(false),
            ..Default::default()
        }
    }
}

fn check_properties(props: &str) -> Result<()> {
    check_properties_len(props.len())
}

fn check_properties_len(len: usize) -> Result<()> {
    if len > MAX_PROPERTIES_LEN {
        return Err(ClientError::InvalidMessage(format!(
            "properties are {len} bytes, the maximum is {MAX_PROPERTIES_LEN}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tern_shell::headers::FromExtFields;

    use super::*;

    #[test]
    fn an_attempt_sets_the_queue_and_born_time_and_keeps_the_rest() {
        let header = SendMessageRequestHeaderV2 {
            a: "G".into(),
            b: "T".into(),
            c: "TBW102".into(),
            d: 4,
            f: 1,
            h: 7,
            i: Some("UNIQ_KEY\u{1}X\u{2}".into()),
            j: Some(0),
            k: Some(false),
            m: Some(false),
            ..Default::default()
        };
        let mut p = Prepared::new(
            RequestCode::SendMessageV2,
            header.clone(),
            b"body".to_vec(),
            "X".into(),
        );
        assert_eq!(p.topic, "T");
        for (queue, born) in [(3, 1_700_000_000_123), (5, 1_700_000_000_456)] {
            p.aim(queue, born);
            let sent = SendMessageRequestHeaderV2::from_ext_fields(&p.request.ext_fields).unwrap();
            let expected = SendMessageRequestHeaderV2 {
                e: queue,
                g: born,
                ..header.clone()
            };
            assert_eq!(sent, expected);
            assert_eq!(p.request.body, b"body");
        }
    }
}
