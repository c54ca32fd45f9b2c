//! The requests a broker in controller mode serves: the controller's push that the role
//! changed (NOTIFY_BROKER_ROLE_CHANGED, 1008) and its epoch file (GET_BROKER_EPOCH_CACHE,
//! 1007, mqadmin getBrokerEpoch).

use tern_shell::body::to_json;
use tern_shell::body::{EpochEntryBody, EpochEntryCache};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;

fn not_controller_mode() -> Refusal {
    Refusal::new(
        ResponseCode::SystemError,
        "this broker is not in controller mode (enableControllerMode=false)",
    )
}

/// NOTIFY_BROKER_ROLE_CHANGED: the manager asks the leader at once (one round trip more
/// than taking the push's word, and the answer is the committed state, never a stale
/// push overtaking a newer one).
pub fn role_changed(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let Some(cm) = &ctx.controller else {
        return Err(not_controller_mode());
    };
    cm.replica.notified.notify(1);
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_BROKER_EPOCH_CACHE: the epoch file, each term with its end.
pub fn epoch_cache(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let Some(cm) = &ctx.controller else {
        return Err(not_controller_mode());
    };
    let entries = cm.replica.epochs();
    let max = ctx.store.log_end() as i64;
    let epoch_list = entries
        .iter()
        .enumerate()
        .map(|(i, e)| EpochEntryBody {
            epoch: e.epoch,
            start_offset: e.start_offset,
            end_offset: entries.get(i + 1).map_or(max, |n| n.start_offset),
        })
        .collect();
    let body = EpochEntryCache {
        cluster_name: ctx.config.cluster_name.clone(),
        broker_name: ctx.config.broker_name.clone(),
        broker_id: ctx.broker_id(),
        epoch_list,
        max_offset: max,
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success).with_body(to_json(&body)))
}
