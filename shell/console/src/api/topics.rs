//! The Topics page's routes: list, create or update, detail, delete.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_client::{Admin, Target};
use tern_shell::body::TopicConfig;

use super::{Answer, ApiError, field, number};

/// A topic's kind, as the dashboard's filter buttons name them.
fn kind(topic: &str) -> &'static str {
    if topic.starts_with("%RETRY%") {
        "RETRY"
    } else if topic.starts_with("%DLQ%") {
        "DLQ"
    } else if tern_shell::topic::is_system_topic(topic) {
        "SYSTEM"
    } else {
        "NORMAL"
    }
}

pub(super) async fn topics(a: &Admin) -> Answer {
    let list = a.topic_list().await?;
    Ok(json!(
        list.iter()
            .map(|t| json!({"topic": t, "kind": kind(t)}))
            .collect::<Vec<_>>()
    ))
}

pub(super) async fn create_topic(a: &Admin, body: &Value) -> Answer {
    let topic = field(body, "topic")?;
    tern_client::message::check_topic(topic)?;
    let read = number(body, "readQueueNums", 8)?;
    let write = number(body, "writeQueueNums", 8)?;
    let perm = number(body, "perm", 6)?;
    if !(1..=1024).contains(&read) || !(1..=1024).contains(&write) {
        return Err(ApiError::bad("queue counts must be 1..1024"));
    }
    if ![2, 4, 6].contains(&perm) {
        return Err(ApiError::bad(
            "perm must be 2 (write), 4 (read) or 6 (read and write)",
        ));
    }
    let cluster = match body.get("cluster").and_then(Value::as_str) {
        Some(c) if !c.is_empty() => c.to_owned(),
        _ => a
            .cluster_info()
            .await?
            .cluster_addr_table
            .into_keys()
            .next()
            .ok_or_else(|| ApiError::bad("the name server knows no cluster"))?,
    };
    let cfg = TopicConfig {
        topic_name: topic.to_owned(),
        read_queue_nums: read as i32,
        write_queue_nums: write as i32,
        perm: perm as i32,
        ..TopicConfig::default()
    };
    let brokers = a
        .create_topic(&Target::Cluster(cluster.clone()), &cfg)
        .await?;
    Ok(json!({"topic": topic, "cluster": cluster, "brokers": brokers}))
}

pub(super) async fn topic_detail(a: &Admin, topic: &str) -> Answer {
    let route = a.topic_route(topic).await?;
    let stats = a.topic_stats(topic).await?;
    let queues: Vec<Value> = stats
        .iter()
        .map(|(q, o)| {
            json!({
                "brokerName": q.broker_name,
                "queueId": q.queue_id,
                "minOffset": o.min_offset,
                "maxOffset": o.max_offset,
                "lastUpdateTimestamp": o.last_update_timestamp,
            })
        })
        .collect();
    let consumers = a.topic_consumers(topic).await.unwrap_or_default();
    // Written out: the route's broker addresses are keyed by number, which RocketMQ's
    // JSON leaves unquoted and plain JSON cannot.
    let brokers: Vec<Value> = route
        .broker_datas
        .iter()
        .map(|b| {
            let addrs: BTreeMap<String, &String> = b
                .broker_addrs
                .0
                .iter()
                .map(|(id, a)| (id.to_string(), a))
                .collect();
            json!({"brokerName": b.broker_name, "cluster": b.cluster, "brokerAddrs": addrs})
        })
        .collect();
    Ok(json!({
        "topic": topic,
        "route": {"brokerDatas": brokers, "queueDatas": route.queue_datas},
        "queues": queues,
        "consumerGroups": consumers,
    }))
}

pub(super) async fn delete_topic(a: &Admin, topic: &str) -> Answer {
    let clusters = a.topic_clusters(topic).await?;
    for c in &clusters {
        a.delete_topic(c, topic).await?;
    }
    Ok(json!({"topic": topic, "clusters": clusters}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_rocketmq_names() {
        assert_eq!(kind("%RETRY%g"), "RETRY");
        assert_eq!(kind("%DLQ%g"), "DLQ");
        assert_eq!(kind("TBW102"), "SYSTEM");
        assert_eq!(kind("Orders"), "NORMAL");
    }
}
