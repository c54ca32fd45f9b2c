//! The consumer as its client instance's connections see it, one way for the push and the
//! lite pull consumer: a [`Hook`] holding the consumer weakly (a dropped consumer answers
//! nothing) and the running-info JSON both report (Java's `ConsumerRunningInfo`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use tern_shell::body::{ConsumeMessageDirectlyResult, MessageQueue, QueueKeyMap, SubscriptionData};
use tern_shell::message::MessageExt;

use crate::instance::ClientInstance;
use crate::processor::ConsumerHook;

/// A consumer registered on its client instance: it answers while the consumer lives, as
/// the consumer's own [`ConsumerHook`] (implemented on `Arc<Inner>`, so a reset can start
/// work that holds the consumer); after that, nothing (ConsumerHook's defaults' answers).
#[derive(Debug)]
pub(crate) struct Hook<T>(pub(crate) Weak<T>);

impl<T> ConsumerHook for Hook<T>
where
    T: Send + Sync + std::fmt::Debug,
    Arc<T>: ConsumerHook,
{
    fn rebalance_now(&self) {
        if let Some(i) = self.0.upgrade() {
            i.rebalance_now();
        }
    }

    fn running_info(&self) -> Vec<u8> {
        self.0
            .upgrade()
            .map(|i| i.running_info())
            .unwrap_or_default()
    }

    fn reset_offset(&self, topic: &str, offsets: BTreeMap<MessageQueue, i64>) -> bool {
        self.0
            .upgrade()
            .is_some_and(|i| i.reset_offset(topic, offsets))
    }

    fn offsets_of(&self, topic: &str) -> BTreeMap<MessageQueue, i64> {
        self.0
            .upgrade()
            .map(|i| i.offsets_of(topic))
            .unwrap_or_default()
    }

    fn consume_directly(
        &self,
        msg: MessageExt,
        broker_name: &str,
    ) -> Option<ConsumeMessageDirectlyResult> {
        self.0.upgrade()?.consume_directly(msg, broker_name)
    }
}

/// Java's `ConsumerRunningInfo`: the properties every consumer reports, its
/// subscriptions, and its queues as it sees them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunningInfo<'a> {
    pub properties: BTreeMap<&'a str, String>,
    pub subscription_set: Vec<SubscriptionData>,
    pub mq_table: QueueKeyMap<serde_json::Value>,
    /// The POPed queues (the push consumer's only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mq_pop_table: Option<QueueKeyMap<serde_json::Value>>,
    pub status_table: BTreeMap<String, serde_json::Value>,
}

impl<'a> RunningInfo<'a> {
    /// The properties every consumer reports (`consume_type` CONSUME_ACTIVELY or
    /// CONSUME_PASSIVELY, `message_model` CLUSTERING or BROADCASTING), no queue yet.
    pub fn new(
        consume_type: &str,
        message_model: &str,
        start_ms: i64,
        client: &ClientInstance,
        subscription_set: Vec<SubscriptionData>,
    ) -> Self {
        let properties = BTreeMap::from([
            ("PROP_CONSUME_TYPE", consume_type.to_owned()),
            ("PROP_CONSUMER_START_TIMESTAMP", start_ms.to_string()),
            (
                "PROP_NAMESERVER_ADDR",
                client.config().namesrv_addrs.join(";"),
            ),
            ("PROP_CLIENT_VERSION", "V4_9_4".to_owned()),
            ("messageModel", message_model.to_owned()),
        ]);
        Self {
            properties,
            subscription_set,
            mq_table: QueueKeyMap(BTreeMap::new()),
            mq_pop_table: None,
            status_table: BTreeMap::new(),
        }
    }

    /// The JSON body of GET_CONSUMER_RUNNING_INFO.
    pub fn to_json(&self) -> Vec<u8> {
        tern_shell::body::to_json(self)
    }
}
