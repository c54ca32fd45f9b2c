//! CLUSTER mode (the `tern-proxy` binary, RocketMQ's `mqproxy -pm cluster`): the endpoint
//! in front of every broker the name servers know, none of them its host. What a call
//! needs beyond remoting is asked of the brokers and cached, as RocketMQ's
//! `ClusterMetadataService` does: a topic's configuration from a broker of its route
//! (GET_TOPIC_CONFIG), a group's from a broker of the cluster (GET_SUBSCRIPTIONGROUP_CONFIG;
//! every broker of a cluster holds the groups `updateSubGroup -c` made). The ACL rules are
//! the proxy's own `plainAclFile`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use tern_client::{ClientError, ClientInstance};
use tern_shell::acl::guard::Acl;
use tern_shell::body::{SubscriptionGroupConfig, TopicConfig, from_json};
use tern_shell::config::{ConfigError, ConfigReader, in_range};
use tern_shell::headers::{GetSubscriptionGroupConfigRequestHeader, GetTopicConfigRequestHeader};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use crate::session::Upstream;
use crate::{Backend, GroupPolicy, Lookup, message_type_of};

/// How long a lookup waits for a broker (RocketMQ's `DEFAULT_TIMEOUT`).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// The metadata cache's keys (RocketMQ's proxy names and defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// A topic's configuration is asked again once this old
    /// (`topicConfigCacheRefreshSeconds`, 20 s).
    pub topic_refresh: Duration,
    /// Most topics remembered (`topicConfigCacheMaxNum`, 20,000).
    pub topic_max: usize,
    /// A group's configuration is asked again once this old
    /// (`subscriptionGroupConfigCacheRefreshSeconds`, 20 s).
    pub group_refresh: Duration,
    /// Most groups remembered (`subscriptionGroupConfigCacheMaxNum`, 20,000).
    pub group_max: usize,
}

impl CacheSettings {
    /// Reads the keys.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let secs = |r: &mut ConfigReader<'_>, key: &str| {
            r.get_checked(key, 20u64, in_range(1, 86_400))
                .map(Duration::from_secs)
        };
        let max = |r: &mut ConfigReader<'_>, key: &str| {
            r.get_checked(key, 20_000usize, in_range(1, 1_000_000))
        };
        Ok(Self {
            topic_refresh: secs(r, "topicConfigCacheRefreshSeconds")?,
            topic_max: max(r, "topicConfigCacheMaxNum")?,
            group_refresh: secs(r, "subscriptionGroupConfigCacheRefreshSeconds")?,
            group_max: max(r, "subscriptionGroupConfigCacheMaxNum")?,
        })
    }
}

/// Answers remembered for a while; an answer that could not be had is not remembered.
#[derive(Debug)]
struct Cache<T> {
    refresh: Duration,
    max: usize,
    map: Mutex<HashMap<String, (Instant, T)>>,
}

impl<T: Clone> Cache<T> {
    fn new(refresh: Duration, max: usize) -> Self {
        Self {
            refresh,
            max,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, T)>> {
        self.map.guard()
    }

    fn fresh(&self, key: &str) -> Option<T> {
        let map = self.lock();
        let (at, v) = map.get(key)?;
        (at.elapsed() < self.refresh).then(|| v.clone())
    }

    /// Remembers `v`; when full, the stale answers go first, then all of them (a cache
    /// that big is being walked by names no one will ask for again).
    fn put(&self, key: &str, v: T) {
        let mut map = self.lock();
        if map.len() >= self.max && !map.contains_key(key) {
            map.retain(|_, (at, _)| at.elapsed() < self.refresh);
            if map.len() >= self.max {
                map.clear();
            }
        }
        map.insert(key.to_owned(), (Instant::now(), v));
    }
}

/// The brokers of a cluster, as the endpoint sees them.
#[derive(Debug)]
pub struct Cluster {
    /// The proxy's own client for its lookups (signed as the upstream credentials say).
    instance: ClientInstance,
    /// Whose brokers hold the groups (`rocketMQClusterName`).
    cluster_name: String,
    acl: Option<Arc<Acl>>,
    topics: Cache<Option<String>>,
    groups: Cache<Option<GroupPolicy>>,
}

/// What a broker said to a lookup: a body, "no such thing", or no answer.
enum Answer {
    Body(Vec<u8>),
    Absent,
    Failed(String),
}

impl Cluster {
    /// A cluster reached through `upstream`'s name servers.
    pub fn new(
        upstream: &Upstream,
        cluster_name: &str,
        acl: Option<Arc<Acl>>,
        cache: &CacheSettings,
    ) -> Result<Self, ClientError> {
        let instance = ClientInstance::new(upstream.client_config("tern-proxy-metadata"))?;
        Ok(Self {
            instance,
            cluster_name: cluster_name.to_owned(),
            acl,
            topics: Cache::new(cache.topic_refresh, cache.topic_max),
            groups: Cache::new(cache.group_refresh, cache.group_max),
        })
    }

    /// Asks one master of `route_topic`'s route; `absent` is the code meaning "none".
    async fn ask(&self, route_topic: &str, cmd: RemotingCommand, absent: ResponseCode) -> Answer {
        let route = match self.instance.fetch_route(route_topic).await {
            Ok(r) => r,
            Err(ClientError::NoRoute { .. } | ClientError::TopicNotExist { .. }) => {
                return Answer::Absent;
            }
            Err(e) => return Answer::Failed(e.to_string()),
        };
        let Some(addr) = route
            .broker_datas
            .iter()
            .find_map(|b| b.broker_addrs.0.get(&0))
        else {
            return Answer::Failed(format!("route of {route_topic} names no master"));
        };
        match self.instance.invoke(addr, cmd, LOOKUP_TIMEOUT).await {
            Ok(resp) if resp.response_code() == ResponseCode::Success => Answer::Body(resp.body),
            Ok(resp) if resp.response_code() == absent => Answer::Absent,
            Ok(resp) => Answer::Failed(format!(
                "{addr} answered {}: {}",
                resp.code,
                resp.remark.unwrap_or_default()
            )),
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    /// `key`'s answer from `cache`, or asked of a master of `route_topic`'s route with
    /// `cmd` and remembered; `absent` is the broker's code for "none". `what` names the
    /// thing in logs.
    #[allow(clippy::too_many_arguments)]
    async fn lookup<B: serde::de::DeserializeOwned, T: Clone>(
        &self,
        cache: &Cache<Option<T>>,
        key: &str,
        route_topic: &str,
        cmd: RemotingCommand,
        absent: ResponseCode,
        what: &str,
        answer_of: impl FnOnce(&B) -> T,
    ) -> Option<T> {
        if let Some(v) = cache.fresh(key) {
            return v;
        }
        let v = match self.ask(route_topic, cmd, absent).await {
            Answer::Body(b) => match from_json::<B>(&b) {
                Ok(body) => Some(answer_of(&body)),
                Err(e) => {
                    log::warn!("{what} {key}'s configuration does not parse: {e}");
                    return None;
                }
            },
            Answer::Absent => None,
            Answer::Failed(why) => {
                log::warn!("{what} {key}'s configuration: {why}");
                return None;
            }
        };
        cache.put(key, v.clone());
        v
    }

    async fn lookup_topic(&self, topic: &str) -> Option<String> {
        let cmd = RemotingCommand::request(
            RequestCode::GetTopicConfig,
            &GetTopicConfigRequestHeader {
                topic: topic.to_owned(),
                lo: None,
            },
        );
        let absent = ResponseCode::TopicNotExist;
        self.lookup(
            &self.topics,
            topic,
            topic,
            cmd,
            absent,
            "topic",
            |t: &TopicConfig| message_type_of(t),
        )
        .await
    }

    async fn lookup_group(&self, group: &str) -> Option<GroupPolicy> {
        let cmd = RemotingCommand::request(
            RequestCode::GetSubscriptionGroupConfig,
            &GetSubscriptionGroupConfigRequestHeader {
                group: group.to_owned(),
            },
        );
        // RocketMQ's broker answers an unknown group with SYSTEM_ERROR.
        let absent = ResponseCode::SystemError;
        let cluster = &self.cluster_name;
        self.lookup(
            &self.groups,
            group,
            cluster,
            cmd,
            absent,
            "group",
            |g: &SubscriptionGroupConfig| GroupPolicy::from(g),
        )
        .await
    }

    /// Stops the lookup client.
    pub async fn shutdown(&self) {
        self.instance.shutdown().await;
    }
}

impl Backend for Cluster {
    fn local_broker(&self) -> Option<String> {
        None
    }

    fn topic_message_type<'a>(&'a self, topic: &'a str) -> Lookup<'a, Option<String>> {
        Box::pin(self.lookup_topic(topic))
    }

    fn group_policy<'a>(&'a self, group: &'a str) -> Lookup<'a, Option<GroupPolicy>> {
        Box::pin(self.lookup_group(group))
    }

    fn acl(&self) -> Option<Arc<Acl>> {
        self.acl.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_drops_stale_answers_first_then_all() {
        let c: Cache<u32> = Cache::new(Duration::from_secs(60), 2);
        c.put("a", 1);
        c.put("b", 2);
        assert_eq!((c.fresh("a"), c.fresh("b")), (Some(1), Some(2)));
        // Full and nothing stale: all go, the new one stays.
        c.put("c", 3);
        assert_eq!((c.fresh("a"), c.fresh("c")), (None, Some(3)));
        // Replacing a key never evicts.
        c.put("d", 4);
        c.put("d", 5);
        assert_eq!((c.fresh("c"), c.fresh("d")), (Some(3), Some(5)));

        let stale: Cache<u32> = Cache::new(Duration::ZERO, 8);
        stale.put("a", 1);
        assert_eq!(stale.fresh("a"), None, "a zero refresh asks every time");
    }
}
