//! The route table: which brokers are alive, which clusters they form, and which queues
//! each topic has on which broker. Modelled on Java's `RouteInfoManager` so clients and
//! admin tools see the same answers; everything lives in memory and is rebuilt from broker
//! registrations after a restart (a name server keeps no route state on disk).
//!
//! Callers hold the table behind one `RwLock` and never across an `.await`: every
//! operation here is a short, synchronous map update.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tern_shell::body::{
    BrokerData, ClusterInfo, DataVersion, NumKeyMap, QueueData, TopicConfig, TopicList,
    TopicRouteData,
};

/// Broker id of a master.
pub const MASTER_ID: i64 = 0;
/// Perm bit that lets producers write (`PermName.PERM_WRITE`).
pub const PERM_WRITE: i32 = 2;
/// TopicSysFlag bit of unit topics.
const FLAG_UNIT: i32 = 0x1;
/// TopicSysFlag bit of topics with unit subscriptions.
const FLAG_UNIT_SUB: i32 = 0x2;

/// A broker process is identified by its cluster and address (two clusters may reuse an
/// address in tests; Java keys its live table the same way).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerAddrInfo {
    /// Cluster name.
    pub cluster: String,
    /// `ip:port` clients dial.
    pub addr: String,
}

/// Liveness and version of one broker process.
#[derive(Debug, Clone)]
struct BrokerLiveInfo {
    /// Last register, heartbeat or unchanged data-version query.
    last_update: Instant,
    /// Silence after which the broker is dropped.
    timeout: Duration,
    /// Topic-config version of its last registration: unchanged ⇒ queues not re-applied.
    data_version: DataVersion,
    /// What slaves of this broker dial for HA.
    ha_server_addr: String,
    /// The connection it registered on: when that closes, the broker is gone.
    conn_id: Option<u64>,
}

/// One REGISTER_BROKER, decoded.
#[derive(Debug, Clone)]
pub struct Registration {
    /// Cluster name.
    pub cluster: String,
    /// `ip:port`.
    pub addr: String,
    /// Broker (group) name.
    pub broker_name: String,
    /// 0 master, > 0 slave.
    pub broker_id: i64,
    /// HA address.
    pub ha_server_addr: String,
    /// Topics and their version.
    pub topics: BTreeMap<String, TopicConfig>,
    /// Version of `topics`.
    pub data_version: DataVersion,
    /// Filter servers (kept for the route's `filterServerTable`).
    pub filter_servers: Vec<String>,
    /// Expiry for this broker.
    pub timeout: Duration,
    /// Connection the request came on.
    pub conn_id: Option<u64>,
}

/// What a registering broker is told.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterResult {
    /// The live master's address, for slaves.
    pub master_addr: Option<String>,
    /// The live master's HA address, for slaves.
    pub ha_server_addr: Option<String>,
    /// The registration was ignored because another live address holds its broker id
    /// with a higher `stateVersion` (a deposed master). Java still answers SUCCESS, with
    /// neither address; this is for logs and tests.
    pub refused: bool,
}

/// The name server's tables.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// topic → brokerName → queues.
    topic_queues: BTreeMap<String, BTreeMap<String, QueueData>>,
    /// brokerName → addresses.
    brokers: BTreeMap<String, BrokerData>,
    /// cluster → broker names.
    clusters: BTreeMap<String, BTreeSet<String>>,
    /// Live broker processes.
    live: BTreeMap<BrokerAddrInfo, BrokerLiveInfo>,
    /// Broker address → filter servers.
    filter_servers: BTreeMap<String, Vec<String>>,
}

impl RouteTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or refreshes) a broker, applying its topics when it is a master whose
    /// topic config changed or which is new.
    ///
    /// A registration for an id that another live address of the broker-set holds with a
    /// higher `stateVersion` is ignored, as RocketMQ 5's `RouteInfoManager.registerBroker`
    /// does: in controller mode the state version is the master epoch, so a deposed master
    /// (frozen, then woken still believing it is master) cannot take id 0 back. Equal
    /// versions are accepted; a registration without one counts as 0, as in Java.
    pub fn register(&mut self, r: Registration, now: Instant) -> RegisterResult {
        self.clusters
            .entry(r.cluster.clone())
            .or_default()
            .insert(r.broker_name.clone());
        let mut first = !self.brokers.contains_key(&r.broker_name);
        let bd = self
            .brokers
            .entry(r.broker_name.clone())
            .or_insert_with(|| BrokerData {
                cluster: r.cluster.clone(),
                broker_name: r.broker_name.clone(),
                broker_addrs: NumKeyMap::default(),
                ..Default::default()
            });
        // One address has one role: a slave promoted to master (or the reverse) must not
        // stay listed under its old id. As in Java this comes before the state-version
        // check, so a refused address is left under no id of this broker-set.
        bd.broker_addrs
            .0
            .retain(|id, addr| *addr != r.addr || *id == r.broker_id);
        let holder = bd
            .broker_addrs
            .0
            .get(&r.broker_id)
            .filter(|held| **held != r.addr)
            .cloned();
        if let Some(held) = holder {
            let held_key = BrokerAddrInfo {
                cluster: r.cluster.clone(),
                addr: held,
            };
            let held_version = self
                .live
                .get(&held_key)
                .map(|info| info.data_version.state_version);
            let new_version = r.data_version.state_version;
            if let Some(held_version) = held_version.filter(|v| *v > new_version) {
                log::warn!(
                    "registration of {} id {} in {}/{} ignored: {} holds that id with state \
                     version {held_version} > {new_version}",
                    r.addr,
                    r.broker_id,
                    r.cluster,
                    r.broker_name,
                    held_key.addr
                );
                // As Java: the refused address is no longer a live broker.
                self.live.remove(&BrokerAddrInfo {
                    cluster: r.cluster,
                    addr: r.addr,
                });
                return RegisterResult {
                    refused: true,
                    ..RegisterResult::default()
                };
            }
        }
        let old = bd.broker_addrs.0.insert(r.broker_id, r.addr.clone());
        first |= old.is_none();

        let key = BrokerAddrInfo {
            cluster: r.cluster.clone(),
            addr: r.addr.clone(),
        };
        if r.broker_id == MASTER_ID && (first || self.topic_config_changed(&key, &r.data_version)) {
            for tc in r.topics.values() {
                self.apply_topic(&r.broker_name, tc);
            }
        }
        let prev = self.live.insert(
            key,
            BrokerLiveInfo {
                last_update: now,
                timeout: r.timeout,
                data_version: r.data_version,
                ha_server_addr: r.ha_server_addr,
                conn_id: r.conn_id,
            },
        );
        if prev.is_none() {
            log::info!(
                "new broker registered: {} {} id {} in cluster {}",
                r.broker_name,
                r.addr,
                r.broker_id,
                r.cluster
            );
        }
        if r.filter_servers.is_empty() {
            self.filter_servers.remove(&r.addr);
        } else {
            self.filter_servers.insert(r.addr.clone(), r.filter_servers);
        }

        let mut result = RegisterResult::default();
        if r.broker_id != MASTER_ID {
            let master = self
                .brokers
                .get(&r.broker_name)
                .and_then(|bd| bd.master_addr())
                .map(str::to_owned);
            if let Some(master) = master {
                let master_key = BrokerAddrInfo {
                    cluster: r.cluster,
                    addr: master.clone(),
                };
                if let Some(info) = self.live.get(&master_key) {
                    result.ha_server_addr = Some(info.ha_server_addr.clone());
                    result.master_addr = Some(master);
                }
            }
        }
        result
    }

    fn apply_topic(&mut self, broker_name: &str, tc: &TopicConfig) {
        let qd = QueueData {
            broker_name: broker_name.to_owned(),
            read_queue_nums: tc.read_queue_nums,
            write_queue_nums: tc.write_queue_nums,
            perm: tc.perm,
            topic_sys_flag: tc.topic_sys_flag,
        };
        let per_broker = self.topic_queues.entry(tc.topic_name.clone()).or_default();
        if per_broker.get(broker_name) != Some(&qd) {
            log::info!("topic {} on {broker_name}: {qd:?}", tc.topic_name);
            per_broker.insert(broker_name.to_owned(), qd);
        }
    }

    /// True if the broker is unknown or its last registered data version differs.
    pub fn topic_config_changed(&self, key: &BrokerAddrInfo, version: &DataVersion) -> bool {
        self.live
            .get(key)
            .is_none_or(|info| info.data_version != *version)
    }

    /// The data version the broker last registered with.
    pub fn data_version(&self, key: &BrokerAddrInfo) -> Option<DataVersion> {
        self.live.get(key).map(|i| i.data_version.clone())
    }

    /// Marks a broker alive now (heartbeat); false if it is not registered.
    pub fn touch(&mut self, key: &BrokerAddrInfo, now: Instant) -> bool {
        match self.live.get_mut(key) {
            Some(info) => {
                info.last_update = now;
                true
            }
            None => false,
        }
    }

    /// Removes a broker process (UNREGISTER_BROKER, expiry, closed connection). When its
    /// broker name has no address left, the name leaves its cluster and every topic.
    pub fn unregister(&mut self, cluster: &str, addr: &str, broker_name: &str, broker_id: i64) {
        let key = BrokerAddrInfo {
            cluster: cluster.to_owned(),
            addr: addr.to_owned(),
        };
        if self.live.remove(&key).is_some() {
            log::info!("broker {broker_name} {addr} id {broker_id} removed");
        }
        self.filter_servers.remove(addr);
        let mut name_gone = false;
        if let Some(bd) = self.brokers.get_mut(broker_name) {
            // Remove by id when it still maps to this address; otherwise by address.
            if bd.broker_addrs.0.get(&broker_id).map(String::as_str) == Some(addr) {
                bd.broker_addrs.0.remove(&broker_id);
            } else {
                bd.broker_addrs.0.retain(|_, a| a != addr);
            }
            if bd.broker_addrs.0.is_empty() {
                self.brokers.remove(broker_name);
                name_gone = true;
            }
        }
        if name_gone {
            if let Some(names) = self.clusters.get_mut(cluster) {
                names.remove(broker_name);
                if names.is_empty() {
                    self.clusters.remove(cluster);
                }
            }
            self.remove_broker_name_from_topics(broker_name);
        }
    }

    /// Removes whatever was registered at `key`, finding its name and id from the tables.
    fn remove_process(&mut self, key: &BrokerAddrInfo) {
        let found = self.brokers.iter().find_map(|(name, bd)| {
            (bd.cluster == key.cluster)
                .then(|| {
                    bd.broker_addrs
                        .0
                        .iter()
                        .find(|(_, a)| **a == key.addr)
                        .map(|(id, _)| (name.clone(), *id))
                })
                .flatten()
        });
        match found {
            Some((name, id)) => self.unregister(&key.cluster, &key.addr, &name, id),
            None => {
                self.live.remove(key);
                self.filter_servers.remove(&key.addr);
            }
        }
    }

    fn remove_broker_name_from_topics(&mut self, broker_name: &str) {
        self.topic_queues.retain(|topic, per_broker| {
            if per_broker.remove(broker_name).is_some() && per_broker.is_empty() {
                log::info!("topic {topic} removed: its last broker {broker_name} is gone");
                return false;
            }
            true
        });
    }

    /// Removes brokers silent for longer than their timeout; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let dead: Vec<BrokerAddrInfo> = self
            .live
            .iter()
            .filter(|(_, i)| now.saturating_duration_since(i.last_update) > i.timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &dead {
            log::warn!(
                "broker {} in cluster {} expired: no heartbeat",
                key.addr,
                key.cluster
            );
            self.remove_process(key);
        }
        dead.len()
    }

    /// Removes brokers that registered on connection `conn_id`, which has closed.
    pub fn connection_closed(&mut self, conn_id: u64) -> usize {
        let gone: Vec<BrokerAddrInfo> = self
            .live
            .iter()
            .filter(|(_, i)| i.conn_id == Some(conn_id))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &gone {
            log::info!("broker {} connection closed", key.addr);
            self.remove_process(key);
        }
        gone.len()
    }

    /// The route of `topic`, or `None` if it has no queue or no broker data (code 17).
    pub fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let per_broker = self.topic_queues.get(topic)?;
        let mut route = TopicRouteData {
            queue_datas: per_broker.values().cloned().collect(),
            ..Default::default()
        };
        for name in per_broker.keys() {
            if let Some(bd) = self.brokers.get(name) {
                for addr in bd.broker_addrs.0.values() {
                    if let Some(fs) = self.filter_servers.get(addr) {
                        route.filter_server_table.insert(addr.clone(), fs.clone());
                    }
                }
                route.broker_datas.push(bd.clone());
            }
        }
        if route.queue_datas.is_empty() || route.broker_datas.is_empty() {
            return None;
        }
        Some(route)
    }

    /// Every broker and cluster (GET_BROKER_CLUSTER_INFO).
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.brokers.clone(),
            cluster_addr_table: self
                .clusters
                .iter()
                .map(|(c, names)| (c.clone(), names.iter().cloned().collect()))
                .collect(),
        }
    }

    /// Every topic with a route.
    pub fn all_topics(&self) -> TopicList {
        list(self.topic_queues.keys().cloned())
    }

    /// Topics with queues on a broker of `cluster` (GET_TOPICS_BY_CLUSTER).
    pub fn topics_of_cluster(&self, cluster: &str) -> TopicList {
        let Some(names) = self.clusters.get(cluster) else {
            return TopicList::default();
        };
        list(
            self.topic_queues
                .iter()
                .filter(|(_, per)| per.keys().any(|b| names.contains(b)))
                .map(|(t, _)| t.clone()),
        )
    }

    /// Cluster and broker names, which brokers serve as system topics; `brokerAddr` is a
    /// master's address the admin tool can ask (GET_SYSTEM_TOPIC_LIST_FROM_NS).
    pub fn system_topics(&self) -> TopicList {
        let mut topics = BTreeSet::new();
        let mut broker_addr = None;
        for (cluster, names) in &self.clusters {
            topics.insert(cluster.clone());
            for name in names {
                topics.insert(name.clone());
                if broker_addr.is_none() {
                    broker_addr = self
                        .brokers
                        .get(name)
                        .and_then(|bd| bd.broker_addrs.0.values().next().cloned());
                }
            }
        }
        TopicList {
            topic_list: topics.into_iter().collect(),
            broker_addr,
        }
    }

    /// Topics whose (first) queue data's sysFlag passes `pred` (unit-topic queries).
    pub fn topics_by_sys_flag(&self, pred: impl Fn(i32) -> bool) -> TopicList {
        list(
            self.topic_queues
                .iter()
                .filter(|(_, per)| per.values().next().is_some_and(|q| pred(q.topic_sys_flag)))
                .map(|(t, _)| t.clone()),
        )
    }

    /// Unit topics (GET_UNIT_TOPIC_LIST).
    pub fn unit_topics(&self) -> TopicList {
        self.topics_by_sys_flag(|f| f & FLAG_UNIT != 0)
    }

    /// Topics with unit subscriptions (GET_HAS_UNIT_SUB_TOPIC_LIST).
    pub fn unit_sub_topics(&self) -> TopicList {
        self.topics_by_sys_flag(|f| f & FLAG_UNIT_SUB != 0)
    }

    /// Non-unit topics with unit subscriptions (GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST).
    pub fn unit_sub_non_unit_topics(&self) -> TopicList {
        self.topics_by_sys_flag(|f| f & FLAG_UNIT == 0 && f & FLAG_UNIT_SUB != 0)
    }

    /// Deletes a topic everywhere, or only from the brokers of `cluster`.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        match cluster.filter(|c| !c.is_empty()) {
            None => {
                self.topic_queues.remove(topic);
            }
            Some(cluster) => {
                let names = self.clusters.get(cluster).cloned().unwrap_or_default();
                if let Some(per) = self.topic_queues.get_mut(topic) {
                    per.retain(|b, _| !names.contains(b));
                    if per.is_empty() {
                        self.topic_queues.remove(topic);
                    }
                }
            }
        }
    }

    /// Adds queue data for a topic from an admin tool, for brokers we know
    /// (REGISTER_TOPIC_IN_NAMESRV).
    pub fn register_topic(&mut self, topic: &str, queues: Vec<QueueData>) {
        for qd in queues {
            if self.brokers.contains_key(&qd.broker_name) {
                self.topic_queues
                    .entry(topic.to_owned())
                    .or_default()
                    .insert(qd.broker_name.clone(), qd);
            }
        }
    }

    /// Clears (`add == false`) or sets the write perm of every queue on `broker_name`;
    /// returns how many topics changed (WIPE/ADD_WRITE_PERM_OF_BROKER).
    pub fn set_write_perm(&mut self, broker_name: &str, add: bool) -> i32 {
        let mut n = 0;
        for per in self.topic_queues.values_mut() {
            if let Some(qd) = per.get_mut(broker_name) {
                qd.perm = if add {
                    qd.perm | PERM_WRITE
                } else {
                    qd.perm & !PERM_WRITE
                };
                n += 1;
            }
        }
        n
    }
}

fn list(topics: impl Iterator<Item = String>) -> TopicList {
    TopicList {
        topic_list: topics.collect(),
        broker_addr: None,
    }
}

#[cfg(test)]
#[path = "routes_tests.rs"]
mod tests;
