//! Building and checking messages before they leave the client.

pub use tern_shell::body::MessageQueue;
pub use tern_shell::message::{Message, MessageExt, property};

use crate::error::{ClientError, Result};

/// Java's `MessageConst` keys a producer sets, beyond [`property`]'s.
pub mod keys {
    /// Set by a pull consumer from the pull response: the queue's min offset then.
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    /// Set by a pull consumer from the pull response: the queue's max offset then.
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
}

/// Longest topic name (`TopicValidator`).
pub const MAX_TOPIC_LEN: usize = 127;
/// Longest properties string (a Java short).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Setters for the properties producers use, in Java's names.
pub trait MessageBuilder: Sized {
    /// Sets TAGS (one tag; consumers filter on it).
    fn with_tags(self, tags: &str) -> Self;
    /// Sets KEYS (space-joined; each key is indexed for queryMsgByKey).
    fn with_keys<I, S>(self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;
    /// Sets DELAY (level 1..=18 of `1s 5s 10s 30s 1m ... 2h`).
    fn with_delay_level(self, level: i32) -> Self;
    /// Delivers the message `seconds` after the broker stores it (RocketMQ 5's
    /// `setDelayTimeSec`: `TIMER_DELAY_SEC`). A delay level set too wins.
    fn with_delay_sec(self, seconds: i64) -> Self;
    /// Delivers the message `ms` after the broker stores it (`setDelayTimeMs`:
    /// `TIMER_DELAY_MS`).
    fn with_delay_ms(self, ms: i64) -> Self;
    /// Delivers the message at `epoch_ms` (`setDeliverTimeMs`: `TIMER_DELIVER_MS`).
    fn with_deliver_time_ms(self, epoch_ms: i64) -> Self;
    /// Sets the user flag.
    fn with_flag(self, flag: i32) -> Self;
}

impl MessageBuilder for Message {
    fn with_tags(self, tags: &str) -> Self {
        self.with_property(property::TAGS, tags)
    }

    fn with_keys<I, S>(self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let joined: Vec<String> = keys
            .into_iter()
            .map(|k| k.as_ref().trim().to_owned())
            .filter(|k| !k.is_empty())
            .collect();
        self.with_property(property::KEYS, joined.join(" "))
    }

    fn with_delay_level(self, level: i32) -> Self {
        self.with_property(property::DELAY, level.to_string())
    }

    fn with_delay_sec(self, seconds: i64) -> Self {
        self.with_property(property::TIMER_DELAY_SEC, seconds.to_string())
    }

    fn with_delay_ms(self, ms: i64) -> Self {
        self.with_property(property::TIMER_DELAY_MS, ms.to_string())
    }

    fn with_deliver_time_ms(self, epoch_ms: i64) -> Self {
        self.with_property(property::TIMER_DELIVER_MS, epoch_ms.to_string())
    }

    fn with_flag(mut self, flag: i32) -> Self {
        self.flag = flag;
        self
    }
}

/// Checks a topic name like Java's `Validators.checkTopic`.
pub fn check_topic(topic: &str) -> Result<()> {
    if topic.is_empty() {
        return Err(ClientError::InvalidMessage("the topic is empty".into()));
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(ClientError::InvalidMessage(format!(
            "the topic is longer than {MAX_TOPIC_LEN} characters"
        )));
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return Err(ClientError::InvalidMessage(format!(
            "the topic {topic:?} contains characters other than letters, digits, %|_-"
        )));
    }
    Ok(())
}

/// Checks a message like Java's `Validators.checkMessage`: topic, non-empty body, size.
pub fn check_message(msg: &Message, max_bytes: usize) -> Result<()> {
    check_topic(&msg.topic)?;
    if msg.body.is_empty() {
        return Err(ClientError::InvalidMessage(
            "the message body is empty".into(),
        ));
    }
    if msg.body.len() > max_bytes {
        return Err(ClientError::MessageTooLarge {
            size: msg.body.len(),
            max: max_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_sets_java_property_names() {
        let m = Message::new("T", "b")
            .with_tags("TagA")
            .with_keys(["k1", " ", "k2"])
            .with_delay_level(3)
            .with_flag(7);
        assert_eq!(m.properties["TAGS"], "TagA");
        assert_eq!(m.properties["KEYS"], "k1 k2");
        assert_eq!(m.properties["DELAY"], "3");
        assert_eq!(m.flag, 7);
    }

    #[test]
    fn bad_messages_are_refused_with_a_reason() {
        assert!(check_message(&Message::new("T", ""), 10).is_err());
        assert!(check_message(&Message::new("a b", "x"), 10).is_err());
        assert_eq!(
            check_message(&Message::new("T", vec![0u8; 11]), 10),
            Err(ClientError::MessageTooLarge { size: 11, max: 10 })
        );
        assert!(check_message(&Message::new("%RETRY%g", "x"), 10).is_ok());
    }
}
