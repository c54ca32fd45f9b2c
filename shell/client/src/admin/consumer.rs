//! Admin operations on a consumer group through its brokers and clients: the request
//! mode (pull or POP), offset reset by time, the clients' offsets and running info, and
//! consuming one message directly.

use std::collections::BTreeMap;

use tern_shell::body::{
    ConsumeMessageDirectlyResult, GetConsumerStatusBody, MessageQueue, ResetOffsetBody,
    SetMessageRequestModeRequestBody, to_json,
};
use tern_shell::headers::{
    ConsumeMessageDirectlyResultRequestHeader, GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusRequestHeader, ResetOffsetRequestHeader,
};
use tern_shell::{RemotingCommand, RequestCode};

use super::{Admin, Target, decode};
use crate::error::{ClientError, Result};

/// How long a broker may take to reach a group's client for the admin (RocketMQ's
/// broker waits 10 s for the client; mqadmin itself gives up after 5 s).
const VIA_CLIENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(12);

/// How a group consumes a topic when the broker divides its queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestMode {
    /// Pulled from offsets the group commits.
    Pull,
    /// POPed: the broker hands out messages and keeps the group's progress.
    Pop,
}

impl RequestMode {
    /// Java's `MessageRequestMode` name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pull => "PULL",
            Self::Pop => "POP",
        }
    }

    /// Parses `PULL` or `POP` (any case).
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "PULL" => Ok(Self::Pull),
            "POP" => Ok(Self::Pop),
            _ => Err(ClientError::InvalidMessage(format!(
                "consume mode must be PULL or POP, not {s:?}"
            ))),
        }
    }
}

impl Admin {
    /// SET_MESSAGE_REQUEST_MODE on each broker of `target`: consumers of `group` that let
    /// the broker divide queues (`client_rebalance = false`) pull or POP `topic`.
    /// `pop_share_queue_num` ≤ 0 lets every POP member read every queue. Returns the
    /// brokers done.
    pub async fn set_message_request_mode(
        &self,
        target: &Target,
        topic: &str,
        group: &str,
        mode: RequestMode,
        pop_share_queue_num: i32,
    ) -> Result<Vec<String>> {
        let body = SetMessageRequestModeRequestBody {
            topic: topic.to_owned(),
            consumer_group: group.to_owned(),
            mode: mode.name().to_owned(),
            pop_share_queue_num,
        };
        let addrs = self.target_addrs(target).await?;
        self.invoke_all(addrs, || {
            RemotingCommand::request_code(RequestCode::SetMessageRequestMode)
                .with_body(to_json(&body))
        })
        .await
    }

    /// INVOKE_BROKER_TO_RESET_OFFSET on every broker of `topic`'s route: `group`'s
    /// offsets move to the first message stored at or after `timestamp_ms` (−1: the end
    /// of each queue); without `force` only backwards. A running group moves through its
    /// clients, a stopped one in the broker. Returns the new offset of every queue.
    pub async fn reset_offset_by_time(
        &self,
        topic: &str,
        group: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<BTreeMap<MessageQueue, i64>> {
        let header = ResetOffsetRequestHeader {
            topic: topic.to_owned(),
            group: group.to_owned(),
            timestamp: timestamp_ms,
            is_force: force,
            queue_id: None,
            offset: None,
        };
        let masters = self.route_masters(topic).await?;
        let bodies: Vec<ResetOffsetBody> = self
            .ask_each(masters, RequestCode::InvokeBrokerToResetOffset, &header)
            .await?;
        Ok(bodies.into_iter().flat_map(|b| b.offset_table.0).collect())
    }

    /// INVOKE_BROKER_TO_GET_CONSUMER_STATUS at the first broker of `topic`'s route (as
    /// Java asks): each online client's offsets of `topic`, by client id (`client_id`:
    /// that one only). Clients that cannot answer (RocketMQ's C++ client) are left out.
    pub async fn consumer_status(
        &self,
        topic: &str,
        group: &str,
        client_id: Option<&str>,
    ) -> Result<BTreeMap<String, BTreeMap<MessageQueue, i64>>> {
        let route = self.topic_route(topic).await?;
        let addr = route
            .broker_datas
            .iter()
            .find_map(|b| b.master_addr())
            .ok_or_else(|| ClientError::NotFound(format!("no master serves {topic}")))?;
        let header = GetConsumerStatusRequestHeader {
            topic: topic.to_owned(),
            group: group.to_owned(),
            client_addr: client_id.map(str::to_owned),
        };
        let cmd = RemotingCommand::request(RequestCode::InvokeBrokerToGetConsumerStatus, &header);
        let resp = crate::instance::ok(self.client.invoke(addr, cmd, VIA_CLIENT_TIMEOUT).await?)?;
        let body: GetConsumerStatusBody = decode(&resp.body)?;
        Ok(body
            .consumer_table
            .into_iter()
            .map(|(c, t)| (c, t.0))
            .collect())
    }

    /// A broker where `group` has `client_id` connected (each master is asked who is
    /// in the group, as GET_CONSUMER_CONNECTION_LIST answers).
    async fn broker_of_client(&self, group: &str, client_id: &str) -> Result<String> {
        for (_, addr) in self.all_masters().await? {
            let h = tern_shell::headers::ConsumerGroupRequestHeader {
                consumer_group: group.to_owned(),
            };
            let cmd = RemotingCommand::request(RequestCode::GetConsumerConnectionList, &h);
            let Ok(resp) = self.client.invoke_ok(&addr, cmd).await else {
                continue;
            };
            let conns: tern_shell::body::ConsumerConnection = decode(&resp.body)?;
            if conns
                .connection_set
                .iter()
                .any(|c| c.client_id == client_id)
            {
                return Ok(addr);
            }
        }
        Err(ClientError::NotFound(format!(
            "client {client_id} of group {group} is not connected to any broker"
        )))
    }

    /// GET_CONSUMER_RUNNING_INFO of one client, through a broker it is connected to:
    /// Java's `ConsumerRunningInfo` JSON as the client wrote it.
    pub async fn consumer_running_info(
        &self,
        group: &str,
        client_id: &str,
        jstack: bool,
    ) -> Result<serde_json::Value> {
        let addr = self.broker_of_client(group, client_id).await?;
        let h = GetConsumerRunningInfoRequestHeader {
            consumer_group: group.to_owned(),
            client_id: client_id.to_owned(),
            jstack_enable: Some(jstack),
        };
        let cmd = RemotingCommand::request(RequestCode::GetConsumerRunningInfo, &h);
        let resp = crate::instance::ok(self.client.invoke(&addr, cmd, VIA_CLIENT_TIMEOUT).await?)?;
        decode(&resp.body)
    }

    /// CONSUME_MESSAGE_DIRECTLY: client `client_id` of `group` runs its listener on the
    /// message with offset msgId `offset_msg_id` now (through the broker that stores it).
    pub async fn consume_message_directly(
        &self,
        group: &str,
        client_id: &str,
        offset_msg_id: &str,
        topic: Option<&str>,
    ) -> Result<ConsumeMessageDirectlyResult> {
        let id = tern_shell::message::decode_offset_msg_id(offset_msg_id.trim()).map_err(|e| {
            ClientError::InvalidMessage(format!("{offset_msg_id} is not an offset msgId: {e}"))
        })?;
        let h = ConsumeMessageDirectlyResultRequestHeader {
            consumer_group: group.to_owned(),
            client_id: Some(client_id.to_owned()),
            msg_id: Some(offset_msg_id.trim().to_owned()),
            broker_name: None,
            topic: topic.map(str::to_owned),
        };
        let cmd = RemotingCommand::request(RequestCode::ConsumeMessageDirectly, &h);
        let addr = id.store_host.to_string();
        let resp = crate::instance::ok(self.client.invoke(&addr, cmd, VIA_CLIENT_TIMEOUT).await?)?;
        decode(&resp.body)
    }
}
