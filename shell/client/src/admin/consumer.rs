//! Admin operations on how a consumer group consumes: the request mode (pull or POP).

use tern_shell::body::{SetMessageRequestModeRequestBody, to_json};
use tern_shell::{RemotingCommand, RequestCode};

use super::{Admin, Target};
use crate::error::{ClientError, Result};

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
        let mut done = Vec::new();
        for addr in self.target_addrs(target).await? {
            let cmd = RemotingCommand::request_code(RequestCode::SetMessageRequestMode)
                .with_body(to_json(&body));
            self.client.invoke_ok(&addr, cmd).await?;
            done.push(addr);
        }
        Ok(done)
    }
}
