//! Administration: topics and subscription groups.

use tern_shell::body::{SubscriptionGroupConfig, TopicConfig};
use tern_shell::headers::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader,
    GetSubscriptionGroupConfigRequestHeader, TopicRequestHeader,
};
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::topics::validate_topic;

/// Most queues a topic may have.
const MAX_QUEUES: i32 = 1024;

/// UPDATE_AND_CREATE_TOPIC: creates or updates a topic, then registers at once so routes
/// show it.
pub async fn create_topic(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: CreateTopicRequestHeader = req.decode_header()?;
    validate_topic(&h.topic)?;
    if h.topic == h.default_topic
        && h.topic != crate::topics::AUTO_CREATE_TOPIC
        && h.topic == ctx.config.cluster_name
    {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "the topic[{}] is conflict with system reserved words",
                h.topic
            ),
        ));
    }
    for (what, n) in [
        ("readQueueNums", h.read_queue_nums),
        ("writeQueueNums", h.write_queue_nums),
    ] {
        if !(1..=MAX_QUEUES).contains(&n) {
            return Err(Refusal::new(
                ResponseCode::InvalidParameter,
                format!("{what} {n} is outside 1..{MAX_QUEUES}"),
            ));
        }
    }
    // RocketMQ 5's attributes: applied to the topic's current ones (kept when the
    // request names none), refused as RocketMQ refuses them.
    let current = ctx.topics.get(&h.topic);
    let attributes = match tern_shell::attributes::alter(
        current.is_none(),
        &current.map(|t| t.attributes).unwrap_or_default(),
        h.attributes.as_deref().unwrap_or(""),
    ) {
        Ok(a) => a,
        Err(e) => {
            log::warn!(
                "topic {}: attributes {:?} refused: {e}",
                h.topic,
                h.attributes
            );
            return Err(Refusal::new(ResponseCode::SystemError, e));
        }
    };
    let t = TopicConfig {
        topic_name: h.topic.clone(),
        read_queue_nums: h.read_queue_nums,
        write_queue_nums: h.write_queue_nums,
        perm: h.perm,
        topic_filter_type: h.topic_filter_type.clone(),
        topic_sys_flag: h.topic_sys_flag.unwrap_or(0),
        order: h.order,
        attributes,
    };
    if ctx.topics.upsert(t) {
        log::info!(
            "topic {} created or updated: {} read / {} write queues, perm {}",
            h.topic,
            h.read_queue_nums,
            h.write_queue_nums,
            h.perm
        );
        // Answered once on disk, as RocketMQ persists the table before it answers: a
        // topic acknowledged and then lost to a crash would take its route with it.
        ctx.topics.persisted().await;
        crate::register::register_all_now(ctx).await;
    }
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// DELETE_TOPIC_IN_BROKER: forgets the topic, its offsets and its consume queues, so a
/// topic made again under the name starts empty (RocketMQ's `deleteTopics`). The
/// records stay in the commit log and age out with their segments; queries by key see
/// only records their topic's queues still hold.
pub async fn delete_topic(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: TopicRequestHeader = req.decode_header()?;
    validate_topic(&h.topic)?;
    ctx.topics.delete(&h.topic);
    ctx.offsets.delete_topic(&h.topic);
    ctx.topics.persisted().await;
    ctx.request_registration();
    match ctx.store.delete_topic_queues(&h.topic).await {
        Ok(n) => {
            log::info!("topic {} deleted with its {n} consume queue(s)", h.topic);
            Ok(RemotingCommand::response_to(req, ResponseCode::Success))
        }
        Err(e) => {
            log::error!("deleting the consume queues of {}: {e}", h.topic);
            Err(Refusal::new(
                ResponseCode::SystemError,
                format!("topic {} deleted, its consume queues not: {e}", h.topic),
            ))
        }
    }
}

/// GET_ALL_TOPIC_CONFIG.
pub fn all_topics(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&ctx.topics.wrapper())))
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP.
pub async fn create_group(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let g: SubscriptionGroupConfig = match tern_shell::body::from_json(&req.body) {
        Ok(g) => g,
        Err(e) => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("bad subscription group body: {e}"),
            ));
        }
    };
    if g.group_name.is_empty() || g.group_name.len() > 120 {
        return Err(Refusal::new(
            ResponseCode::InvalidParameter,
            "group name must be 1..120 characters",
        ));
    }
    ctx.groups.upsert(g);
    // Answered once on disk (RocketMQ persists the table before it answers).
    ctx.groups.persisted().await;
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG.
pub fn all_groups(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(tern_shell::body::to_json(&ctx.groups.wrapper())))
}

/// GET_SUBSCRIPTIONGROUP_CONFIG: one group's configuration (a proxy in CLUSTER mode reads
/// a group's retry policy and order with it). An unknown group is SYSTEM_ERROR, as
/// RocketMQ answers it.
pub fn group_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: GetSubscriptionGroupConfigRequestHeader = req.decode_header()?;
    match ctx.groups.get(&h.group) {
        Some(g) => Ok(RemotingCommand::response_to(req, ResponseCode::Success)
            .with_body(tern_shell::body::to_json(&g))),
        None => Err(Refusal::new(
            ResponseCode::SystemError,
            format!("No group in this broker: {}", h.group),
        )),
    }
}

/// DELETE_SUBSCRIPTIONGROUP: forgets the group, and its offsets with `cleanOffset`.
pub async fn delete_group(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: DeleteSubscriptionGroupRequestHeader = req.decode_header()?;
    ctx.groups.delete(&h.group_name);
    if h.clean_offset == Some(true) {
        ctx.offsets.delete_group(&h.group_name);
        ctx.offsets.persist();
        ctx.offsets.persisted().await;
    }
    ctx.groups.persisted().await;
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// GET_BROKER_CONFIG: every key the broker reads, with its effective value (the live
/// keys as they are now), as `key=value` lines.
pub fn broker_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(ctx.live.render().into_bytes()))
}

/// UPDATE_BROKER_CONFIG: the body is Java properties text. Only the keys that take
/// effect at once are accepted ([`crate::config::live::LIVE_KEYS`]); one other key
/// refuses the whole update, naming it. Accepted changes are written to the `-c` file
/// first, so a restart keeps them; a new `brokerPermission` is registered at once.
pub async fn update_broker_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    use crate::config::live::UpdateError;
    let body = String::from_utf8_lossy(&req.body);
    match ctx.live.update(&body) {
        Ok((updated, keys)) => {
            log::info!(
                "broker config updated: {}{}",
                keys.join(", "),
                if ctx.live.persisted() {
                    ""
                } else {
                    " (started without a config file: kept until restart)"
                }
            );
            ctx.groups
                .set_auto_create(updated.auto_create_subscription_group);
            if keys.iter().any(|k| k == "brokerPermission") {
                ctx.topics.bump_version();
                crate::register::register_all_now(ctx).await;
            }
            Ok(RemotingCommand::response_to(req, ResponseCode::Success))
        }
        Err(e) => {
            log::warn!("broker config update refused: {e}");
            let code = match e {
                UpdateError::BlackListed(_) | UpdateError::NotLive(_) => ResponseCode::NoPermission,
                UpdateError::Unknown(_) | UpdateError::Invalid(_) => ResponseCode::InvalidParameter,
                UpdateError::Persist(_) => ResponseCode::SystemError,
            };
            Err(Refusal::new(code, e.to_string()))
        }
    }
}
