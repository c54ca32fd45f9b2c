//! Operations behind the broker's read-only and maintenance admin codes and the name
//! server's configuration: producer connections, consume queues, stats windows, offset
//! cloning, queue clean-ups, KV config, write permissions, name server settings.

use std::collections::{BTreeMap, BTreeSet};

use tern_shell::body::{
    BrokerStatsData, ConsumeStatsList, GroupList, ProducerConnection,
    QueryConsumeQueueResponseBody, SubscriptionGroupConfig, SubscriptionGroupWrapper,
};
use tern_shell::headers::{
    AddWritePermOfBrokerResponseHeader, BrokerNameRequestHeader, CloneGroupOffsetRequestHeader,
    DeleteSubscriptionGroupRequestHeader, GetConsumeStatsInBrokerHeader,
    GetProducerConnectionListRequestHeader, KvConfigKeyRequestHeader, PutKvConfigRequestHeader,
    QueryConsumeQueueRequestHeader, TopicRequestHeader, ViewBrokerStatsDataRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
};
use tern_shell::{RemotingCommand, RequestCode};

use super::{Admin, Target, decode};
use crate::error::{ClientError, Result};

impl Admin {
    /// Master addresses of the brokers serving `topic`, sorted.
    pub async fn topic_masters(&self, topic: &str) -> Result<Vec<String>> {
        let mut out = self.route_masters(topic).await?;
        out.sort();
        Ok(out)
    }

    /// Master addresses of the brokers serving `topic`, in its route's order (the name
    /// server's, by broker name): the order requests that change state go in.
    pub(crate) async fn route_masters(&self, topic: &str) -> Result<Vec<String>> {
        let route = self.topic_route(topic).await?;
        Ok(route
            .broker_datas
            .iter()
            .filter_map(|b| b.master_addr().map(str::to_owned))
            .collect())
    }

    /// Clusters of the brokers serving `topic` (mqadmin's `getTopicClusterList`).
    pub async fn topic_clusters(&self, topic: &str) -> Result<BTreeSet<String>> {
        let route = self.topic_route(topic).await?;
        Ok(route.broker_datas.into_iter().map(|b| b.cluster).collect())
    }

    /// The connected producers of `group`, from every broker of `topic`'s route
    /// (GET_PRODUCER_CONNECTION_LIST); a broker that does not know the group adds none.
    pub async fn producer_connection(
        &self,
        group: &str,
        topic: &str,
    ) -> Result<ProducerConnection> {
        let h = GetProducerConnectionListRequestHeader {
            producer_group: group.to_owned(),
        };
        let mut all = ProducerConnection::default();
        for addr in self.topic_masters(topic).await? {
            let cmd = RemotingCommand::request(RequestCode::GetProducerConnectionList, &h);
            match self.client.invoke_ok(&addr, cmd).await {
                Ok(resp) => {
                    let pc: ProducerConnection = decode(&resp.body)?;
                    all.connection_set.extend(pc.connection_set);
                }
                Err(ClientError::Broker { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if all.connection_set.is_empty() {
            return Err(ClientError::NotFound(format!(
                "the producer group {group} is not online"
            )));
        }
        Ok(all)
    }

    /// Gives `dest` the offsets `src` has (CLONE_GROUP_OFFSET on every broker of
    /// `topic`); returns the brokers done.
    pub async fn clone_group_offset(
        &self,
        src: &str,
        dest: &str,
        topic: &str,
        offline: bool,
    ) -> Result<Vec<String>> {
        let h = CloneGroupOffsetRequestHeader {
            src_group: src.to_owned(),
            dest_group: dest.to_owned(),
            topic: Some(topic.to_owned()),
            offline: Some(offline),
        };
        let addrs = self.topic_masters(topic).await?;
        self.request_each(addrs, RequestCode::CloneGroupOffset, &h)
            .await
    }

    /// Every subscription group's consume stats on one broker (GET_BROKER_CONSUME_STATS).
    pub async fn broker_consume_stats(
        &self,
        addr: &str,
        is_order: bool,
        timeout: std::time::Duration,
    ) -> Result<ConsumeStatsList> {
        let cmd = RemotingCommand::request(
            RequestCode::GetBrokerConsumeStats,
            &GetConsumeStatsInBrokerHeader { is_order },
        );
        let resp = crate::instance::ok(self.client.invoke(addr, cmd, timeout).await?)?;
        decode(&resp.body)
    }

    /// `count` entries of a consume queue from `index` (QUERY_CONSUME_QUEUE). An index
    /// outside the queue answers no entries (the broker's remark says so).
    pub async fn query_consume_queue(
        &self,
        addr: &str,
        topic: &str,
        queue_id: i32,
        index: i64,
        count: i32,
        group: Option<&str>,
    ) -> Result<(QueryConsumeQueueResponseBody, Option<String>)> {
        let h = QueryConsumeQueueRequestHeader {
            topic: topic.to_owned(),
            queue_id,
            index,
            count,
            consumer_group: group.map(str::to_owned),
        };
        let cmd = RemotingCommand::request(RequestCode::QueryConsumeQueue, &h);
        let resp = self.client.invoke_ok(addr, cmd).await?;
        let body = if resp.body.is_empty() {
            QueryConsumeQueueResponseBody::default()
        } else {
            decode(&resp.body)?
        };
        Ok((body, resp.remark))
    }

    /// The last minute, hour and day of a broker's stats item (VIEW_BROKER_STATS_DATA).
    pub async fn view_broker_stats(
        &self,
        addr: &str,
        name: &str,
        key: &str,
    ) -> Result<BrokerStatsData> {
        let h = ViewBrokerStatsDataRequestHeader {
            stats_name: name.to_owned(),
            stats_key: key.to_owned(),
        };
        let cmd = RemotingCommand::request(RequestCode::ViewBrokerStatsData, &h);
        self.ask(addr, cmd).await
    }

    /// Groups consuming `topic` on any of its brokers (QUERY_TOPIC_CONSUME_BY_WHO), sorted.
    pub async fn topic_consumers(&self, topic: &str) -> Result<Vec<String>> {
        let h = TopicRequestHeader {
            topic: topic.to_owned(),
        };
        let masters = self.topic_masters(topic).await?;
        let lists: Vec<GroupList> = self
            .ask_each(masters, RequestCode::QueryTopicConsumeByWho, &h)
            .await?;
        let groups: BTreeSet<String> = lists.into_iter().flat_map(|l| l.group_list).collect();
        Ok(groups.into_iter().collect())
    }

    /// Brokers a maintenance code goes to: one broker, one cluster's masters, or every
    /// master the name servers know.
    pub async fn masters_of(&self, target: Option<&Target>) -> Result<Vec<String>> {
        match target {
            Some(t) => self.target_addrs(t).await,
            None => {
                let mut all: Vec<String> = self
                    .all_masters()
                    .await?
                    .into_iter()
                    .map(|(_, a)| a)
                    .collect();
                all.sort();
                Ok(all)
            }
        }
    }

    /// Runs a code without header or body on each broker; `(address, answer)` each, an
    /// error answer kept as the error.
    pub async fn on_each_broker(
        &self,
        addrs: &[String],
        code: RequestCode,
    ) -> Vec<(String, Result<()>)> {
        let mut out = Vec::new();
        for addr in addrs {
            let cmd = RemotingCommand::request_code(code);
            let r = self.client.invoke_ok(addr, cmd).await.map(|_| ());
            out.push((addr.clone(), r));
        }
        out
    }

    /// Every subscription group a broker holds (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), by name.
    pub async fn subscription_groups(
        &self,
        addr: &str,
    ) -> Result<BTreeMap<String, SubscriptionGroupConfig>> {
        let cmd = RemotingCommand::request_code(RequestCode::GetAllSubscriptionGroupConfig);
        let w: SubscriptionGroupWrapper = self.ask(addr, cmd).await?;
        Ok(w.subscription_group_table)
    }

    /// Deletes a subscription group (DELETE_SUBSCRIPTIONGROUP); returns the brokers done.
    pub async fn delete_subscription_group(
        &self,
        target: &Target,
        group: &str,
        clean_offset: bool,
    ) -> Result<Vec<String>> {
        let h = DeleteSubscriptionGroupRequestHeader {
            group_name: group.to_owned(),
            clean_offset: Some(clean_offset),
        };
        let addrs = self.target_addrs(target).await?;
        self.request_each(addrs, RequestCode::DeleteSubscriptionGroup, &h)
            .await
    }

    /// Name server addresses, as configured.
    pub fn namesrv_addrs(&self) -> Vec<String> {
        self.client.config().namesrv_addrs.clone()
    }

    /// Sends `cmd` to every name server, failing on the first that refuses.
    async fn on_each_namesrv(
        &self,
        cmd: &RemotingCommand,
    ) -> Result<Vec<(String, RemotingCommand)>> {
        self.invoke_each(self.namesrv_addrs(), || cmd.clone()).await
    }

    /// Puts a KV config entry on every name server (PUT_KV_CONFIG).
    pub async fn put_kv_config(&self, namespace: &str, key: &str, value: &str) -> Result<()> {
        let h = PutKvConfigRequestHeader {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            value: value.to_owned(),
        };
        self.on_each_namesrv(&RemotingCommand::request(RequestCode::PutKvConfig, &h))
            .await
            .map(|_| ())
    }

    /// Deletes a KV config entry on every name server (DELETE_KV_CONFIG).
    pub async fn delete_kv_config(&self, namespace: &str, key: &str) -> Result<()> {
        let h = KvConfigKeyRequestHeader {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
        };
        self.on_each_namesrv(&RemotingCommand::request(RequestCode::DeleteKvConfig, &h))
            .await
            .map(|_| ())
    }

    /// A KV config entry (GET_KV_CONFIG); `None` when no name server has it.
    pub async fn get_kv_config(&self, namespace: &str, key: &str) -> Result<Option<String>> {
        let h = KvConfigKeyRequestHeader {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
        };
        let cmd = RemotingCommand::request(RequestCode::GetKvConfig, &h);
        let resp = self.client.invoke_namesrv(cmd).await?;
        if resp.response_code() != tern_shell::ResponseCode::Success {
            return Ok(None);
        }
        Ok(resp.ext_fields.get("value").map(str::to_owned))
    }

    /// Takes away (`writable` false) or gives back the write permission of a broker's
    /// topics on every name server; `(name server, topics changed)` each.
    pub async fn set_write_perm(
        &self,
        broker_name: &str,
        writable: bool,
    ) -> Result<Vec<(String, i32)>> {
        let h = BrokerNameRequestHeader {
            broker_name: broker_name.to_owned(),
        };
        let code = if writable {
            RequestCode::AddWritePermOfBroker
        } else {
            RequestCode::WipeWritePermOfBroker
        };
        let mut out = Vec::new();
        for (ns, resp) in self
            .on_each_namesrv(&RemotingCommand::request(code, &h))
            .await?
        {
            let n = if writable {
                resp.decode_header::<AddWritePermOfBrokerResponseHeader>()
                    .map(|h| h.add_topic_count)
            } else {
                resp.decode_header::<WipeWritePermOfBrokerResponseHeader>()
                    .map(|h| h.wipe_topic_count)
            };
            out.push((ns, n.map_err(|e| ClientError::Protocol(e.to_string()))?));
        }
        Ok(out)
    }

    /// Each name server's settings (GET_NAMESRV_CONFIG), parsed from `key=value` lines.
    pub async fn namesrv_config(&self) -> Result<Vec<(String, BTreeMap<String, String>)>> {
        let cmd = RemotingCommand::request_code(RequestCode::GetNamesrvConfig);
        let mut out = Vec::new();
        for (ns, resp) in self.on_each_namesrv(&cmd).await? {
            let text = String::from_utf8_lossy(&resp.body);
            let table = text
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .collect();
            out.push((ns, table));
        }
        Ok(out)
    }

    /// Changes one setting on every name server (UPDATE_NAMESRV_CONFIG).
    pub async fn update_namesrv_config(&self, key: &str, value: &str) -> Result<Vec<String>> {
        let cmd = RemotingCommand::request_code(RequestCode::UpdateNamesrvConfig)
            .with_body(format!("{key}={value}\n").into_bytes());
        Ok(self
            .on_each_namesrv(&cmd)
            .await?
            .into_iter()
            .map(|(ns, _)| ns)
            .collect())
    }
}
