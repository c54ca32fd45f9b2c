//! POLLING_INFO (200055, RocketMQ 5's `PollingInfoProcessor`): how many POP requests are
//! held now on one `topic@group@queueId` key (an all-queue POP is held under queue -1;
//! NOTIFICATIONs are not counted); and POP_ROLLBACK (200056, RocketMQ 5.3.2's
//! `exportPopRecord`).

use tern_shell::headers::{PollingInfoRequestHeader, PollingInfoResponseHeader};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use super::receive::readable_topic;
use crate::BrokerCtx;

/// POLLING_INFO, with RocketMQ's checks in its order.
pub fn polling_info(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: PollingInfoRequestHeader = req.decode_header()?;
    readable_topic(ctx, &h.topic, h.queue_id.max(-1))?;
    let Some(group) = ctx.groups.get_or_create(&h.consumer_group) else {
        return Err(Refusal::new(
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{}] does not exist", h.consumer_group),
        ));
    };
    if !group.consume_enable {
        return Err(Refusal::new(
            ResponseCode::NoPermission,
            format!("subscription group no permission, {}", h.consumer_group),
        ));
    }
    let key = super::poll_key(&h.topic, &h.consumer_group, h.queue_id.max(-1));
    let n = ctx.pop.polling_num(&key);
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &PollingInfoResponseHeader {
                polling_num: i32::try_from(n).unwrap_or(i32::MAX),
            },
        ),
    )
}

/// POP_ROLLBACK: RocketMQ 5.3.2 moves POP state kept in its RocksDB store
/// (`popConsumerKVServiceInit`, RIP-73) back into the revive topic. Tern keeps POP state
/// only in the revive topic already (RocketMQ's file store), so there is nothing to
/// move: SUCCESS, as a RocketMQ broker without the RocksDB store answers.
pub fn pop_rollback(req: &RemotingCommand) -> Answer {
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}
