//! POLLING_INFO (200055, RocketMQ 5's `PollingInfoProcessor`): how many POP requests are
//! held now on one `topic@group@queueId` key (an all-queue POP is held under queue -1;
//! NOTIFICATIONs are not counted); and POP_ROLLBACK (200056, RocketMQ 5.3.2's
//! `exportPopRecord`).

use tern_shell::headers::{PollingInfoRequestHeader, PollingInfoResponseHeader};
use tern_shell::{RemotingCommand, ResponseCode};

use super::receive::{readable_topic, refuse};
use crate::BrokerCtx;
use crate::processor::bad_header;

/// POLLING_INFO, with RocketMQ's checks in its order.
pub fn polling_info(ctx: &BrokerCtx, req: &RemotingCommand) -> RemotingCommand {
    let h: PollingInfoRequestHeader = match req.decode_header() {
        Ok(h) => h,
        Err(e) => return bad_header(req, e),
    };
    if let Err(r) = readable_topic(ctx, req, &h.topic, h.queue_id.max(-1)) {
        return r;
    }
    let Some(group) = ctx.groups.get_or_create(&h.consumer_group) else {
        return refuse(
            req,
            ResponseCode::SubscriptionGroupNotExist,
            format!("subscription group [{}] does not exist", h.consumer_group),
        );
    };
    if !group.consume_enable {
        return refuse(
            req,
            ResponseCode::NoPermission,
            format!("subscription group no permission, {}", h.consumer_group),
        );
    }
    let key = super::poll_key(&h.topic, &h.consumer_group, h.queue_id.max(-1));
    let n = ctx.pop.polling_num(&key);
    RemotingCommand::response_to(req, ResponseCode::Success).with_header(
        &PollingInfoResponseHeader {
            polling_num: i32::try_from(n).unwrap_or(i32::MAX),
        },
    )
}

/// POP_ROLLBACK: RocketMQ 5.3.2 moves POP state kept in its RocksDB store
/// (`popConsumerKVServiceInit`, RIP-73) back into the revive topic. Tern keeps POP state
/// only in the revive topic already (RocketMQ's file store), so there is nothing to
/// move: SUCCESS, as a RocketMQ broker without the RocksDB store answers.
pub fn pop_rollback(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, ResponseCode::Success)
}
