//! Message request modes (`MessageRequestModeManager`): whether a group consumes a topic
//! by PULL or POP, set by SET_MESSAGE_REQUEST_MODE (401) and listed by
//! GET_ALL_MESSAGE_REQUEST_MODE (402). Saved to `config/messageRequestMode.tern` (the
//! JSON RocketMQ keeps in `messageRequestMode.json`) on each change.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;
use tern_shell::{Answer, Refusal};

use tern_shell::body::{
    MessageRequestModeSerializeWrapper, SetMessageRequestModeRequestBody, from_json, to_json,
};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::persist::{Saver, load_json};

/// Most (topic, group) modes kept.
const MAX_MODES: usize = 10_000;

type Table = BTreeMap<String, BTreeMap<String, SetMessageRequestModeRequestBody>>;

/// The modes table.
#[derive(Debug)]
pub struct RequestModes {
    table: Arc<Mutex<Table>>,
    saver: Saver<Vec<u8>>,
}

impl RequestModes {
    /// Loads `config/messageRequestMode.tern` under `store_root`.
    pub fn load(store_root: &Path) -> Self {
        let path = store_root.join("config").join("messageRequestMode.tern");
        let table = match load_json::<MessageRequestModeSerializeWrapper>(&path) {
            Ok(Some(w)) => w.message_request_mode_map,
            Ok(None) => Table::new(),
            Err(e) => {
                log::error!("message request modes unreadable, starting empty: {e}");
                Table::new()
            }
        };
        let table = Arc::new(Mutex::new(table));
        let copy = table.clone();
        Self {
            saver: Saver::new("message request modes", path, move || {
                to_json(&MessageRequestModeSerializeWrapper {
                    message_request_mode_map: copy.guard().clone(),
                })
            }),
            table,
        }
    }

    /// The mode set for `group` on `topic`, if any.
    pub fn get(&self, topic: &str, group: &str) -> Option<SetMessageRequestModeRequestBody> {
        self.table.guard().get(topic)?.get(group).cloned()
    }

    /// Resolves once every change is written (shutdown).
    pub async fn persisted(&self) {
        self.saver.saved().await;
    }
}

/// SET_MESSAGE_REQUEST_MODE (401).
pub fn set_mode(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let body: SetMessageRequestModeRequestBody = match from_json(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return Err(Refusal::new(ResponseCode::SystemError, e.to_string()));
        }
    };
    if tern_shell::pop::is_retry_topic(&body.topic) {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("retry topic {} not allowed to set mode", body.topic),
        ));
    }
    if body.mode != "PULL" && body.mode != "POP" {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            format!("mode {:?} is neither PULL nor POP", body.mode),
        ));
    }
    if ctx.topics.get(&body.topic).is_none() {
        return Err(Refusal::new(
            ResponseCode::TopicNotExist,
            format!("topic {} not exist", body.topic),
        ));
    }
    if ctx.groups.get_or_create(&body.consumer_group).is_none() {
        return Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("consumer group {} not exist", body.consumer_group),
        ));
    }
    let modes = &ctx.pop.modes;
    {
        let mut t = modes.table.guard();
        let known = t
            .get(&body.topic)
            .is_some_and(|g| g.contains_key(&body.consumer_group));
        let size: usize = t.values().map(BTreeMap::len).sum();
        if !known && size >= MAX_MODES {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("the broker keeps at most {MAX_MODES} message request modes"),
            ));
        }
        t.entry(body.topic.clone())
            .or_default()
            .insert(body.consumer_group.clone(), body);
    }
    modes.saver.save();
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_ALL_MESSAGE_REQUEST_MODE (402): the whole table, RocketMQ's wrapper JSON.
pub fn all_modes(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let map = ctx.pop.modes.table.guard().clone();
    if map.is_empty() {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            "No message request mode in this broker",
        ));
    }
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_body(to_json(
            &MessageRequestModeSerializeWrapper {
                message_request_mode_map: map,
            },
        )),
    )
}
