//! Maintenance admin codes: copying a group's offsets, and removing consume queues no
//! longer needed (a deleted topic's, or ones whose every record is gone from the log).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use tern_shell::headers::CloneGroupOffsetRequestHeader;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::store::QueueFacts;

/// CLONE_GROUP_OFFSET: gives `destGroup` the offsets `srcGroup` has, in one topic or in
/// every topic it has offsets in. Unless the source is `offline`, a topic its online
/// members no longer subscribe to is left out.
pub fn clone_group_offset(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let h: CloneGroupOffsetRequestHeader = req.decode_header()?;
    let src = ctx.offsets.topics_of_group(&h.src_group);
    let topic = h.topic.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let online = ctx.clients.consumer_group(&h.src_group);
    let mut copied = BTreeMap::new();
    for (t, offsets) in src {
        if topic.is_some_and(|only| only != t) {
            continue;
        }
        if ctx.topics.get(&t).is_none() {
            log::warn!("[cloneGroupOffset], topic config not exist, {t}");
            continue;
        }
        if h.offline != Some(true)
            && online
                .as_ref()
                .is_some_and(|g| !g.subscriptions.is_empty() && !g.subscriptions.contains_key(&t))
        {
            log::warn!(
                "cloneGroupOffset: topic {t} is not in the subscription of group {}",
                h.src_group
            );
            continue;
        }
        copied.insert(format!("{t}@{}", h.dest_group), offsets);
    }
    log::info!(
        "offsets of {} copied to {} for {} topic(s)",
        h.src_group,
        h.dest_group,
        copied.len()
    );
    ctx.offsets.put_all(copied);
    ctx.offsets.persist();
    Ok(RemotingCommand::response_to(req, ResponseCode::Success))
}

/// Runs a queue removal on the blocking pool and answers as RocketMQ does.
async fn remove(
    ctx: &std::sync::Arc<BrokerCtx>,
    req: &RemotingCommand,
    what: &'static str,
    pick: impl Fn(&str, QueueFacts) -> bool + Send + 'static,
) -> Answer {
    let c = ctx.clone();
    let result =
        tern_shell::runtime::spawn_blocking(move || c.store.remove_queues(&|t, _, f| pick(t, f)))
            .await;
    match result {
        Ok(removed) => {
            for (t, q) in &removed {
                log::info!("{what}: consume queue {t}/{q} removed");
            }
            Ok(RemotingCommand::response_to(req, ResponseCode::Success))
        }
        Err(e) => Err(Refusal::new(ResponseCode::SystemError, e.to_string())),
    }
}

/// CLEAN_EXPIRED_CONSUMEQUEUE: removes the queues (of non-system topics) whose newest
/// record is below the commit log's first offset: every entry points at nothing.
pub async fn clean_expired_consume_queue(
    ctx: &std::sync::Arc<BrokerCtx>,
    req: &RemotingCommand,
) -> Answer {
    // The picker runs under the store's lock: it reads only what it was given.
    let system = ctx.topics.system_names();
    remove(ctx, req, "cleanExpiredConsumeQueue", move |topic, f| {
        // A queue with no entry yet was just made (RocketMQ skips it the same way).
        f.last_record_end > 0 && f.last_record_end <= f.log_min && !is_system(&system, topic)
    })
    .await
}

/// CLEAN_UNUSED_TOPIC: removes the queues of topics that are no longer in the topic
/// table (system topics stay), so a topic made again starts empty.
pub async fn clean_unused_topic(ctx: &std::sync::Arc<BrokerCtx>, req: &RemotingCommand) -> Answer {
    let live: HashSet<String> = ctx.topics.names().into_iter().collect();
    let system = ctx.topics.system_names();
    remove(ctx, req, "cleanUnusedTopic", move |topic, _| {
        !live.contains(topic) && !is_system(&system, topic)
    })
    .await
}

/// `TopicValidator.isSystemTopic` over a snapshot of the broker's system topics.
fn is_system(system: &BTreeSet<String>, topic: &str) -> bool {
    system.contains(topic) || topic.starts_with(crate::topics::SYSTEM_TOPIC_PREFIX)
}
