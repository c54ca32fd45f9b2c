//! The admin API (Java's `DefaultMQAdminExt`), what `tern-admin` is built on: topics,
//! clusters, brokers, subscription groups, consumer progress and message queries.
//!
//! Cluster-wide operations go to every master of the cluster as listed by
//! GET_BROKER_CLUSTER_INFO; topic operations go to the brokers of the topic's route.

mod acl;
mod broker_config;
mod consumer;
mod controller;
mod ops;
mod query;

pub use acl::AccessConfig;
pub use broker_config::BrokerAddr;
pub use consumer::RequestMode;
pub use controller::{BrokerEpochs, BrokerSets, ControllerMetadata, Elected, ReplicaAddr};
pub use query::{MAX_QUERY_NUM, TOOLS_CONSUMER_GROUP};

use std::collections::BTreeMap;

use serde::Serialize;
use tern_shell::body::{
    ClusterInfo, ConsumeStats, ConsumerConnection, KvTable, MessageQueue, SubscriptionGroupConfig,
    TopicConfig, TopicList, TopicOffset, TopicRouteData, TopicStatsTable, from_json, to_json,
};
use tern_shell::headers::{
    ConsumerGroupRequestHeader, CreateTopicRequestHeader, DeleteTopicFromNamesrvRequestHeader,
    GetConsumeStatsRequestHeader, TopicRequestHeader,
};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode, ToExtFields};

use crate::config::{AUTO_CREATE_TOPIC_KEY, ClientConfig};
use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, ok};

/// Decodes a JSON answer body; one that does not parse is a protocol error.
fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    from_json(body).map_err(|e| ClientError::Protocol(e.to_string()))
}

/// Where a create/update goes: one broker, or every master of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One broker by address (`-b`).
    Broker(String),
    /// Every master of a cluster (`-c`).
    Cluster(String),
}

/// Progress of a consumer group on one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueProgress {
    /// The queue.
    pub queue: MessageQueue,
    /// The queue's max offset.
    pub broker_offset: i64,
    /// The group's committed offset.
    pub consumer_offset: i64,
    /// `broker_offset - consumer_offset` (never negative).
    pub diff: i64,
    /// Store time of the last consumed message (0 if unknown).
    pub last_timestamp: i64,
}

/// Progress of a consumer group (GET_CONSUME_STATS merged over the brokers).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsumeProgress {
    /// The group.
    pub group: String,
    /// Per queue, sorted.
    pub queues: Vec<QueueProgress>,
    /// Sum of `diff`.
    pub diff_total: i64,
    /// Messages per second as the brokers report it.
    pub consume_tps: f64,
}

/// Admin operations; cloning shares the client instance.
#[derive(Debug, Clone)]
pub struct Admin {
    client: ClientInstance,
}

impl Admin {
    /// An admin with its own client instance.
    pub fn new(config: ClientConfig) -> Result<Self> {
        Ok(Self::with_instance(ClientInstance::new(config)?))
    }

    /// An admin on a shared client instance.
    pub fn with_instance(client: ClientInstance) -> Self {
        Self { client }
    }

    /// The client instance.
    pub fn client(&self) -> &ClientInstance {
        &self.client
    }

    /// Closes the connections.
    pub async fn shutdown(&self) {
        self.client.shutdown().await;
    }

    /// Clusters and their brokers (GET_BROKER_CLUSTER_INFO).
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let cmd = RemotingCommand::request_code(RequestCode::GetBrokerClusterInfo);
        let resp = ok(self.client.invoke_namesrv(cmd).await?)?;
        decode(&resp.body)
    }

    /// `(brokerName, master address)` of every master in `cluster`, sorted by name.
    pub async fn cluster_masters(&self, cluster: &str) -> Result<Vec<(String, String)>> {
        let info = self.cluster_info().await?;
        let names = info
            .cluster_addr_table
            .get(cluster)
            .ok_or_else(|| ClientError::NotFound(format!("cluster {cluster} not found")))?;
        let mut out: Vec<(String, String)> = names
            .iter()
            .filter_map(|n| {
                let addr = info.broker_addr_table.get(n)?.master_addr()?;
                Some((n.clone(), addr.to_owned()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// `(brokerName, master address)` of every master the name server knows.
    pub async fn all_masters(&self) -> Result<Vec<(String, String)>> {
        let info = self.cluster_info().await?;
        Ok(info
            .broker_addr_table
            .iter()
            .filter_map(|(n, b)| Some((n.clone(), b.master_addr()?.to_owned())))
            .collect())
    }

    /// Sends `cmd()` to each of `addrs` in turn, failing on the first that refuses; each
    /// answer with its address.
    pub(crate) async fn invoke_each(
        &self,
        addrs: Vec<String>,
        cmd: impl Fn() -> RemotingCommand,
    ) -> Result<Vec<(String, RemotingCommand)>> {
        let mut out = Vec::new();
        for addr in addrs {
            let resp = self.client.invoke_ok(&addr, cmd()).await?;
            out.push((addr, resp));
        }
        Ok(out)
    }

    /// Request `code` with header `h` to each of `addrs`, failing on the first that
    /// refuses; the addresses done.
    pub(crate) async fn request_each(
        &self,
        addrs: Vec<String>,
        code: RequestCode,
        h: &impl ToExtFields,
    ) -> Result<Vec<String>> {
        self.invoke_all(addrs, || RemotingCommand::request(code, h))
            .await
    }

    /// Sends `cmd` to `addr`; its JSON answer.
    pub(crate) async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        addr: &str,
        cmd: RemotingCommand,
    ) -> Result<T> {
        decode(&self.client.invoke_ok(addr, cmd).await?.body)
    }

    /// Request `code` with header `h` to each of `addrs` in turn; their JSON answers. The
    /// first refusal or undecodable answer stops it: the brokers after it are not asked.
    pub(crate) async fn ask_each<T: serde::de::DeserializeOwned>(
        &self,
        addrs: Vec<String>,
        code: RequestCode,
        h: &impl ToExtFields,
    ) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(addrs.len());
        for addr in addrs {
            out.push(self.ask(&addr, RemotingCommand::request(code, h)).await?);
        }
        Ok(out)
    }

    /// [`Admin::invoke_each`] for a request whose answer says nothing more: the
    /// addresses done.
    pub(crate) async fn invoke_all(
        &self,
        addrs: Vec<String>,
        cmd: impl Fn() -> RemotingCommand,
    ) -> Result<Vec<String>> {
        let done = self.invoke_each(addrs, cmd).await?;
        Ok(done.into_iter().map(|(addr, _)| addr).collect())
    }

    pub(crate) async fn target_addrs(&self, target: &Target) -> Result<Vec<String>> {
        match target {
            Target::Broker(addr) => Ok(vec![addr.clone()]),
            Target::Cluster(c) => {
                let masters = self.cluster_masters(c).await?;
                if masters.is_empty() {
                    return Err(ClientError::NotFound(format!("cluster {c} has no master")));
                }
                Ok(masters.into_iter().map(|(_, a)| a).collect())
            }
        }
    }

    /// Creates or updates a topic (UPDATE_AND_CREATE_TOPIC); returns the brokers done.
    pub async fn create_topic(&self, target: &Target, cfg: &TopicConfig) -> Result<Vec<String>> {
        let addrs = self.target_addrs(target).await?;
        let h = CreateTopicRequestHeader {
            topic: cfg.topic_name.clone(),
            default_topic: AUTO_CREATE_TOPIC_KEY.into(),
            read_queue_nums: cfg.read_queue_nums,
            write_queue_nums: cfg.write_queue_nums,
            perm: cfg.perm,
            topic_filter_type: cfg.topic_filter_type.clone(),
            topic_sys_flag: Some(cfg.topic_sys_flag),
            order: cfg.order,
            // Keys carry their sign (`+message.type` → `FIFO`, `-key`), as mqadmin's `-a`.
            attributes: (!cfg.attributes.is_empty())
                .then(|| tern_shell::attributes::modification_text(&cfg.attributes)),
            force: None,
        };
        self.request_each(addrs, RequestCode::UpdateAndCreateTopic, &h)
            .await
    }

    /// Deletes a topic from every master of `cluster`, then from every name server.
    pub async fn delete_topic(&self, cluster: &str, topic: &str) -> Result<()> {
        let h = TopicRequestHeader {
            topic: topic.to_owned(),
        };
        let masters = self.cluster_masters(cluster).await?;
        let addrs = masters.into_iter().map(|(_, addr)| addr).collect();
        self.request_each(addrs, RequestCode::DeleteTopicInBroker, &h)
            .await?;
        let h = DeleteTopicFromNamesrvRequestHeader {
            topic: topic.to_owned(),
            cluster_name: Some(cluster.to_owned()),
        };
        let mut reached = false;
        let mut reasons = Vec::new();
        for ns in &self.client.config().namesrv_addrs {
            let cmd = RemotingCommand::request(RequestCode::DeleteTopicInNamesrv, &h);
            match self.client.invoke_ok(ns, cmd).await {
                Ok(_) => reached = true,
                Err(e) => reasons.push(format!("{ns}: {e}")),
            }
        }
        if !reached {
            return Err(ClientError::NameServerUnreachable { reasons });
        }
        Ok(())
    }

    /// Every topic the name servers know (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), sorted.
    pub async fn topic_list(&self) -> Result<Vec<String>> {
        let cmd = RemotingCommand::request_code(RequestCode::GetAllTopicListFromNameserver);
        let resp = ok(self.client.invoke_namesrv(cmd).await?)?;
        let list: TopicList = decode(&resp.body)?;
        let mut topics = list.topic_list;
        topics.sort();
        Ok(topics)
    }

    /// The route of a topic, fresh from the name server.
    pub async fn topic_route(&self, topic: &str) -> Result<TopicRouteData> {
        self.client.fetch_route(topic).await
    }

    /// Min/max offsets per queue of a topic (GET_TOPIC_STATS_INFO on every broker).
    pub async fn topic_stats(&self, topic: &str) -> Result<BTreeMap<MessageQueue, TopicOffset>> {
        let h = TopicRequestHeader {
            topic: topic.to_owned(),
        };
        let tables: Vec<TopicStatsTable> = self
            .ask_each(
                self.route_masters(topic).await?,
                RequestCode::GetTopicStatsInfo,
                &h,
            )
            .await?;
        Ok(tables.into_iter().flat_map(|t| t.offset_table.0).collect())
    }

    /// A broker's runtime statistics (GET_BROKER_RUNTIME_INFO).
    pub async fn broker_runtime_info(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let cmd = RemotingCommand::request_code(RequestCode::GetBrokerRuntimeInfo);
        let t: KvTable = self.ask(addr, cmd).await?;
        Ok(t.table)
    }

    /// Creates or updates a subscription group; returns the brokers done.
    pub async fn create_subscription_group(
        &self,
        target: &Target,
        cfg: &SubscriptionGroupConfig,
    ) -> Result<Vec<String>> {
        let addrs = self.target_addrs(target).await?;
        self.invoke_all(addrs, || {
            RemotingCommand::request_code(RequestCode::UpdateAndCreateSubscriptionGroup)
                .with_body(to_json(cfg))
        })
        .await
    }

    /// A group's committed offsets and lag per queue, from every master (GET_CONSUME_STATS).
    pub async fn consume_progress(
        &self,
        group: &str,
        topic: Option<&str>,
    ) -> Result<ConsumeProgress> {
        let h = GetConsumeStatsRequestHeader {
            consumer_group: group.to_owned(),
            topic: topic.map(str::to_owned),
            topic_list: None,
        };
        let mut queues = Vec::new();
        let mut tps = 0.0;
        for (_, addr) in self.all_masters().await? {
            let cmd = RemotingCommand::request(RequestCode::GetConsumeStats, &h);
            let resp = self
                .client
                .invoke(&addr, cmd, self.client.config().rpc_timeout)
                .await?;
            if resp.response_code() != ResponseCode::Success {
                // This broker does not serve the group (Java skips such brokers too).
                log::debug!("consume stats of {group} at {addr}: {}", resp.code);
                continue;
            }
            let s: ConsumeStats = decode(&resp.body)?;
            tps += s.consume_tps;
            for (q, w) in s.offset_table.0 {
                queues.push(QueueProgress {
                    queue: q,
                    broker_offset: w.broker_offset,
                    consumer_offset: w.consumer_offset,
                    diff: (w.broker_offset - w.consumer_offset).max(0),
                    last_timestamp: w.last_timestamp,
                });
            }
        }
        queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(ConsumeProgress {
            group: group.to_owned(),
            diff_total: queues.iter().map(|q| q.diff).sum(),
            queues,
            consume_tps: tps,
        })
    }

    /// The online consumers of a group (GET_CONSUMER_CONNECTION_LIST, first master that
    /// knows the group).
    pub async fn consumer_connection(&self, group: &str) -> Result<ConsumerConnection> {
        let h = ConsumerGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let mut last = None;
        for (_, addr) in self.all_masters().await? {
            let cmd = RemotingCommand::request(RequestCode::GetConsumerConnectionList, &h);
            match self.client.invoke_ok(&addr, cmd).await {
                Ok(resp) => {
                    return decode(&resp.body);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(ClientError::Broker { code: 206, .. }) | None => {
                ClientError::NotFound(format!("the consumer group {group} is not online"))
            }
            Some(e) => e,
        })
    }
}
