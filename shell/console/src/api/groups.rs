//! The Consumers page's routes: the group list, a group's progress and clients, reset to
//! a time, delete.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use tern_client::{Admin, ClientError, Target};

use super::{Answer, ApiError, field, number};

/// Every subscription group of every master, with the brokers that hold it.
pub(super) async fn groups(a: &Admin) -> Answer {
    let mut by_group: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, addr) in a.all_masters().await? {
        match a.subscription_groups(&addr).await {
            Ok(groups) => {
                for g in groups.into_keys() {
                    by_group.entry(g).or_default().insert(name.clone());
                }
            }
            Err(e) => errors.push(format!("{name} ({addr}): {e}")),
        }
    }
    let list: Vec<Value> = by_group
        .into_iter()
        .map(|(g, brokers)| json!({"group": g, "brokers": brokers}))
        .collect();
    Ok(json!({"groups": list, "errors": errors}))
}

pub(super) async fn group_detail(a: &Admin, group: &str) -> Answer {
    let progress = a.consume_progress(group, None).await?;
    let (connection, offline) = match a.consumer_connection(group).await {
        Ok(c) => (json!(c), None),
        Err(e) => (Value::Null, Some(e.to_string())),
    };
    Ok(json!({
        "group": group,
        "progress": progress,
        "connection": connection,
        "offline": offline,
    }))
}

/// Resets the group's offsets of `topic`, or of every topic it consumes but its retry
/// topic, to `timestamp` (mqadmin's `resetOffsetByTime -f true`).
pub(super) async fn reset_group(a: &Admin, body: &Value) -> Answer {
    let group = field(body, "group")?;
    let ts = number(body, "timestamp", -1)?;
    if ts < 0 {
        return Err(ApiError::bad(
            "missing field timestamp (ms since the epoch)",
        ));
    }
    let progress = a.consume_progress(group, None).await?;
    let chosen = body
        .get("topic")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let topics: BTreeSet<&str> = progress
        .queues
        .iter()
        .map(|q| q.queue.topic.as_str())
        .filter(|t| chosen.map_or(!t.starts_with("%RETRY%"), |c| c == *t))
        .collect();
    if topics.is_empty() {
        return Err(ApiError {
            status: 404,
            message: format!("the group {group} has no offsets to reset"),
        });
    }
    let mut out = BTreeMap::new();
    for t in topics {
        let queues = a.reset_offset_by_time(t, group, ts, true).await?;
        out.insert(t.to_owned(), queues.len());
    }
    Ok(json!({"group": group, "timestamp": ts, "queuesByTopic": out}))
}

/// Deletes the group and its offsets on every master, then its retry and dead-letter
/// topics where they exist (as rocketmq-dashboard's delete does).
pub(super) async fn delete_group(a: &Admin, group: &str) -> Answer {
    let info = a.cluster_info().await?;
    let mut done = Vec::new();
    for cluster in info.cluster_addr_table.keys() {
        done.extend(
            a.delete_subscription_group(&Target::Cluster(cluster.clone()), group, true)
                .await?,
        );
    }
    let mut topics = Vec::new();
    for topic in [format!("%RETRY%{group}"), format!("%DLQ%{group}")] {
        let clusters = match a.topic_clusters(&topic).await {
            Ok(c) => c,
            Err(ClientError::NoRoute { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        for c in &clusters {
            a.delete_topic(c, &topic).await?;
        }
        topics.push(topic);
    }
    Ok(json!({"group": group, "brokers": done, "topicsDeleted": topics}))
}
