//! Consumers.
//!
//! * [`pull`]: the pull consumer (lite-pull style): the caller assigns queues, pulls from
//!   offsets it chooses and commits offsets itself.
//! * [`push`]: the push consumer: rebalance (every 20 s and on
//!   NOTIFY_CONSUMER_IDS_CHANGED), per-queue long-polling pull loops, process queues,
//!   concurrent and orderly listeners, retry through CONSUMER_SEND_MSG_BACK and the
//!   `%RETRY%group` subscription, clustering and broadcasting.
//! * [`lite`]: the lite pull consumer (Java's `DefaultLitePullConsumer`): subscribe (with
//!   the push consumer's rebalance) or assign queues, background pulls into a bounded
//!   buffer, `poll`, seek, pause/resume, auto-commit.
//! * [`selector`]: [`MessageSelector`], a tag or SQL92 subscription (Java's
//!   `MessageSelector`).
//! * [`simple`]: [`SimpleConsumer`], RocketMQ 5's receive / ack / change-invisible-duration
//!   consumer over the broker's POP.
//! * [`pop`]: the POP requests both POP consumers send.
//! * [`allocate`]: queue allocation strategies, identical to Java's.
//! * [`offset_store`]: remote offsets (clustering) and local offset files (broadcasting).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tern_shell::body::SubscriptionData;
use tern_shell::sync::MutexExt;

pub use tern_shell::allocate;
mod hook;
pub mod lite;
pub mod offset_store;
pub mod pop;
pub mod pull;
mod pull_loop;
pub mod push;
pub mod selector;
pub mod simple;

pub use allocate::AllocateStrategy;
pub use lite::{LitePullConsumer, LitePullConsumerConfig};
pub use pop::ReceivedMessage;
pub use pull::{PullConsumer, PullResult, PullStatus};
pub use push::{
    ConcurrentListener, ConsumeContext, ConsumeFromWhere, ConsumeStatus, MessageModel,
    OrderlyListener, OrderlyStatus, PushConsumer, PushConsumerConfig,
};
pub use selector::{ExpressionType, MessageSelector};
pub use simple::SimpleConsumer;

/// The readable queues of `topic` in its route (every queue id below a readable broker's
/// `readQueueNums`), unsorted: the pull consumer's and the rebalance's queues.
pub(crate) fn readable_queues(
    topic: &str,
    route: &tern_shell::body::TopicRouteData,
) -> Vec<tern_shell::body::MessageQueue> {
    let readable = route
        .queue_datas
        .iter()
        .filter(|q| q.perm & crate::instance::PERM_READ != 0);
    readable
        .flat_map(|q| {
            (0..q.read_queue_nums.max(0)).map(|queue_id| tern_shell::body::MessageQueue {
                topic: topic.to_owned(),
                broker_name: q.broker_name.clone(),
                queue_id,
            })
        })
        .collect()
}

/// Claims a consumer's start once a broker has accepted each of `subs`: false when the
/// consumer was started already, before the checks or by a call racing them. The checks
/// come before the claim so that a start refused for an SQL92 subscription (the broker's
/// code and remark) leaves the consumer unstarted, to be corrected and started again.
pub(crate) async fn claim_start(
    client: &crate::instance::ClientInstance,
    group: &str,
    subs: &Mutex<BTreeMap<String, SubscriptionData>>,
    started: &AtomicBool,
) -> crate::error::Result<bool> {
    if started.load(Ordering::Acquire) {
        return Ok(false);
    }
    // Copied out: the lock is not held across the round trips.
    let subs: Vec<_> = subs.guard().values().cloned().collect();
    for sub in &subs {
        selector::check_in_broker(client, group, sub).await?;
    }
    Ok(!started.swap(true, Ordering::AcqRel))
}

/// A consumer's start once its hook is registered: the routes of `topics` (one not
/// there yet is logged: its rebalance waits for it), the instance's tasks, and a first
/// heartbeat to every broker (a failed one logged: the next comes with the interval).
pub(crate) async fn join_brokers(
    client: &crate::instance::ClientInstance,
    group: &str,
    topics: impl IntoIterator<Item = String>,
) {
    for t in topics {
        if let Err(e) = client.fetch_route(&t).await {
            log::info!("route of {t} not available yet: {e}");
        }
    }
    client.start();
    for e in client.send_heartbeat_to_all_brokers().await {
        log::warn!("first heartbeat of {group}: {e}");
    }
}

/// Pause before a rebalance that could not finish (no route yet, lock refused...).
const RETRY_INCOMPLETE: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits for a consumer's next rebalance: `interval` after one that finished,
/// [`RETRY_INCOMPLETE`] after one that did not, sooner on `kick` (taken before the
/// rebalance, so a kick during it counts); true when `shutdown` came first.
pub(crate) async fn await_next_rebalance(
    complete: bool,
    interval: std::time::Duration,
    kick: &tern_shell::runtime::Shutdown,
    shutdown: &tern_shell::runtime::Shutdown,
) -> bool {
    use tern_shell::runtime;
    let wait = if complete { interval } else { RETRY_INCOMPLETE };
    shutdown
        .until(runtime::race(runtime::sleep(wait), kick.wait()))
        .await
}

/// Refuses a consumer group name Java would refuse (empty, over 120 characters).
pub(crate) fn check_group(group: &str) -> crate::error::Result<()> {
    if group.is_empty() || group.len() > 120 {
        return Err(crate::error::ClientError::InvalidMessage(
            "the consumer group must have 1 to 120 characters".into(),
        ));
    }
    Ok(())
}

/// A stored message of topic `T`, queue 0, at `queue_offset`, for the consumers' tests.
#[cfg(test)]
pub(crate) fn stored_message(queue_offset: i64, body: Vec<u8>) -> tern_shell::message::MessageExt {
    let host = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    tern_shell::message::MessageExt {
        topic: "T".into(),
        queue_id: 0,
        flag: 0,
        queue_offset,
        commit_log_offset: 0,
        sys_flag: 0,
        born_timestamp: 0,
        born_host: host,
        store_timestamp: 0,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: 0,
        store_size: 0,
        body,
        properties: Default::default(),
        offset_msg_id: String::new(),
    }
}
