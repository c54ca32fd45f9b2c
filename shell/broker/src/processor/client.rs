//! Client management: heartbeats, unregistration, group membership, queue locks.

use std::sync::Arc;

use tern_shell::body::{
    CheckClientRequestBody, Connection as ConnInfo, ConsumerConnection,
    GetConsumerListByGroupResponseBody, HeartbeatData, LockBatchRequestBody, LockBatchResponseBody,
};
use tern_shell::code::RequestCode;
use tern_shell::headers::{ConsumerGroupRequestHeader, UnregisterClientRequestHeader};
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, ResponseCode, runtime};

use crate::BrokerCtx;

/// Tells every member of `group` to rebalance now: oneway, as RocketMQ does, and without
/// waiting. Each member's write runs in a task of its own, so a member that stopped
/// reading delays nobody (its write ends with the connection's write timeout); at most
/// [`MAX_NOTIFY_IN_FLIGHT`](crate::clients::MAX_NOTIFY_IN_FLIGHT) are written at once
/// and beyond that a notification is dropped.
pub fn notify_ids_changed(ctx: &BrokerCtx, group: &str) {
    if ctx
        .groups
        .get(group)
        .is_some_and(|g| !g.notify_consumer_ids_changed_enable)
    {
        return;
    }
    let header = ConsumerGroupRequestHeader {
        consumer_group: group.to_owned(),
    };
    for (client_id, conn) in ctx.clients.consumer_connections(group) {
        let Some(slot) = ctx.clients.notify_slot() else {
            log::warn!(
                "too many notifications in flight; {client_id} of group {group} is not told of its change"
            );
            continue;
        };
        let cmd = RemotingCommand::request(RequestCode::NotifyConsumerIdsChanged, &header).oneway();
        let group = group.to_owned();
        runtime::spawn(async move {
            if let Err(e) = conn.oneway(cmd).await {
                log::debug!("notifying {client_id} of group {group} changes: {e}");
            }
            drop(slot);
        });
    }
}

/// HEART_BEAT: registers producer and consumer groups of the client on this connection.
pub async fn heartbeat(
    ctx: &Arc<BrokerCtx>,
    conn: &ConnectionCtx,
    req: &RemotingCommand,
) -> Answer {
    let hb: HeartbeatData = match tern_shell::body::from_json(&req.body) {
        Ok(hb) => hb,
        Err(e) => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("bad heartbeat body: {e}"),
            ));
        }
    };
    for c in &hb.consumer_data_set {
        let group = match ctx.groups.try_get_or_create(&c.group_name) {
            Ok(g) => g,
            Err(why) => {
                return Err(Refusal::new(why.response_code(), why.remark(&c.group_name)));
            }
        };
        if c.message_model == tern_shell::body::MessageModel::Clustering {
            let retry = format!("%RETRY%{}", c.group_name);
            if ctx.topics.get(&retry).is_none() {
                ctx.topics.ensure(&retry, group.retry_queue_nums.max(1), 6);
                ctx.request_registration();
            }
        }
    }
    let (changed, new_conn) = ctx.clients.heartbeat(conn, req.language, req.version, &hb);
    ctx.filters
        .note_heartbeat(ctx.config.enable_property_filter, &hb);
    if new_conn {
        let (ctx2, conn2) = (ctx.clone(), conn.clone());
        runtime::spawn(async move {
            conn2.closed().await;
            for g in ctx2.clients.connection_closed(conn2.id()) {
                log::info!(
                    "consumer of group {g} at {} disconnected",
                    conn2.peer_addr()
                );
                notify_ids_changed(&ctx2, &g);
            }
        });
    }
    for g in changed {
        log::info!("consumer {} joined group {g}", hb.client_id);
        notify_ids_changed(ctx, &g);
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// CHECK_CLIENT_CONFIG: a consumer asks at start whether its (SQL92) subscription will be
/// served, so a bad expression fails its start rather than every pull.
pub fn check_client_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let body: CheckClientRequestBody = if req.body.is_empty() {
        CheckClientRequestBody::default()
    } else {
        match tern_shell::body::from_json(&req.body) {
            Ok(b) => b,
            Err(e) => {
                return Err(Refusal::new(
                    ResponseCode::SystemError,
                    format!("bad check-client body: {e}"),
                ));
            }
        }
    };
    let refusal = body
        .subscription_data
        .as_ref()
        .and_then(|sub| crate::filter::check_subscription(ctx.config.enable_property_filter, sub));
    match refusal {
        None => Ok(RemotingCommand::response_to(req, ResponseCode::Success)),
        Some(r) => {
            log::warn!(
                "client {} of group {} asked about a subscription refused here: {}",
                body.client_id,
                body.group,
                r.remark()
            );
            Err(r)
        }
    }
}

/// UNREGISTER_CLIENT.
pub async fn unregister(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h: UnregisterClientRequestHeader = req.decode_header()?;
    for g in ctx.clients.unregister(
        conn.id(),
        h.producer_group.as_deref(),
        h.consumer_group.as_deref(),
    ) {
        notify_ids_changed(ctx, &g);
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_CONSUMER_LIST_BY_GROUP.
pub fn consumer_list(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ConsumerGroupRequestHeader = req.decode_header()?;
    match ctx.clients.consumer_group(&h.consumer_group) {
        Some(g) if !g.members.is_empty() => {
            let body = GetConsumerListByGroupResponseBody {
                consumer_id_list: g.client_ids(),
            };
            Ok(RemotingCommand::response_to(req, ResponseCode::Success)
                .with_body(tern_shell::body::to_json(&body)))
        }
        _ => Err(Refusal::new(
            ResponseCode::SystemError,
            format!("no consumer for this group, {}", h.consumer_group),
        )),
    }
}

/// GET_CONSUMER_CONNECTION_LIST.
pub fn consumer_connections(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: ConsumerGroupRequestHeader = req.decode_header()?;
    let Some(g) = ctx.clients.consumer_group(&h.consumer_group) else {
        return Err(Refusal::new(
            ResponseCode::ConsumerNotOnline,
            format!("the consumer group[{}] not online", h.consumer_group),
        ));
    };
    let body = ConsumerConnection {
        connection_set: g
            .members
            .values()
            .map(|m| ConnInfo {
                client_id: m.client_id.clone(),
                client_addr: m.conn.peer_addr().to_string(),
                language: m.language,
                version: m.version,
            })
            .collect(),
        subscription_table: g.subscriptions.clone(),
        consume_type: g.consume_type.clone(),
        message_model: g.message_model.clone(),
        consume_from_where: g.consume_from_where.clone(),
    };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&body)))
}

/// LOCK_BATCH_MQ: orderly consumers lock the queues they own. Cheap by design: the C++
/// client retries a refused lock in a tight loop.
pub fn lock_batch(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let body: LockBatchRequestBody = match tern_shell::body::from_json(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("bad lock body: {e}"),
            ));
        }
    };
    let ok = ctx
        .clients
        .lock_queues(&body.consumer_group, &body.client_id, &body.mq_set);
    let resp = LockBatchResponseBody { lock_ok_mq_set: ok };
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&resp)))
}

/// UNLOCK_BATCH_MQ.
pub fn unlock_batch(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let body: LockBatchRequestBody = match tern_shell::body::from_json(&req.body) {
        Ok(b) => b,
        Err(e) => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("bad unlock body: {e}"),
            ));
        }
    };
    ctx.clients
        .unlock_queues(&body.consumer_group, &body.client_id, &body.mq_set);
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}
