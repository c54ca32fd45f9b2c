//! The client instance (Java's `MQClientInstance`): one per config, shared by the
//! producers, consumers and admin built on it. It owns the connections, talks to the name
//! servers with fail-over, caches topic routes and broker addresses, and keeps every broker
//! in its routes informed through heartbeats until it shuts down.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use tern_shell::body::{
    ConsumerData, HeartbeatData, MessageQueue, ProducerData, TopicRouteData, from_json,
};
use tern_shell::headers::{GetRouteInfoRequestHeader, UnregisterClientRequestHeader};
use tern_shell::message::UniqIdGenerator;
use tern_shell::runtime::{self, Shutdown};
use tern_shell::{ConnectionConfig, ConnectionPool, RemotingCommand, RequestCode, ResponseCode};

use crate::config::ClientConfig;
use crate::error::{ClientError, Result, tidy_reason};
use crate::processor::{
    CheckHooks, ClientProcessor, ConsumerHook, Hooks, Replies, ReplySlot, TransactionCheckHook,
};

/// A request's wait for its reply; dropping it forgets the request, so a late reply is
/// dropped.
#[derive(Debug)]
pub(crate) struct ReplyWait {
    replies: Replies,
    id: String,
    slot: Arc<ReplySlot>,
}

impl ReplyWait {
    /// Resolves with the reply.
    pub(crate) async fn reply(&self) -> crate::message::MessageExt {
        self.slot.wait().await
    }
}

impl Drop for ReplyWait {
    fn drop(&mut self) {
        self.replies.guard().remove(&self.id);
    }
}

/// Perm bit: consumers may read.
pub const PERM_READ: i32 = 4;
/// Perm bit: producers may write.
pub const PERM_WRITE: i32 = 2;

/// A shared client instance; cloning shares it.
#[derive(Debug, Clone)]
pub struct ClientInstance {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ClientConfig,
    client_id: String,
    client_ip: IpAddr,
    /// Connections; requests from brokers on them go to the registered consumers' hooks.
    pool: ConnectionPool<ClientProcessor>,
    /// Push consumers by group, for broker→client requests.
    hooks: Hooks,
    /// Transaction producers by group, for check-backs.
    checkers: CheckHooks,
    /// Requests waiting for their reply.
    replies: Replies,
    /// Index of the name server that answered last; tried first next time.
    ns_index: AtomicUsize,
    /// Shared, so a sender can tell "the same route as last time" by pointer.
    routes: Mutex<HashMap<String, Arc<TopicRouteData>>>,
    /// brokerName → (brokerId → address), from every route seen.
    brokers: Mutex<HashMap<String, BTreeMap<i64, String>>>,
    /// group → queue → the replica the broker last suggested pulling it from (Java's
    /// `PullAPIWrapper.pullFromWhichNodeTable`; the master when absent). Nested so a
    /// pull looks up and clears without building a key.
    pull_from: Mutex<HashMap<String, HashMap<MessageQueue, i64>>>,
    /// topic → when a failed request last made its route be fetched again.
    failure_refresh: Mutex<HashMap<String, Instant>>,
    producers: Mutex<BTreeSet<String>>,
    consumers: Mutex<BTreeMap<String, ConsumerData>>,
    uniq: UniqIdGenerator,
    started: AtomicBool,
    shutdown: Shutdown,
}

/// Least time between two route refreshes of a topic caused by failed requests.
const FAILURE_REFRESH_GAP: Duration = Duration::from_millis(100);

static INSTANCE_COUNTER: AtomicUsize = AtomicUsize::new(0);

impl ClientInstance {
    /// A new instance; fails only when the name server list is empty.
    pub fn new(config: ClientConfig) -> Result<Self> {
        if config.namesrv_addrs.is_empty() {
            return Err(ClientError::InvalidMessage(
                "no name server address configured".into(),
            ));
        }
        let client_ip = config
            .client_ip
            .unwrap_or_else(|| local_ip_towards(&config.namesrv_addrs[0]));
        let n = INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed);
        let instance = config
            .instance_name
            .clone()
            .unwrap_or_else(|| format!("{}#{n}", std::process::id()));
        let client_id = format!("{client_ip}@{instance}");
        let hooks = Hooks::default();
        let checkers = CheckHooks::default();
        let replies = Replies::default();
        let pool = ConnectionPool::with_processor(
            ConnectionConfig {
                tls: config.tls.clone(),
                ..ConnectionConfig::default()
            },
            config.connect_timeout,
            Arc::new(ClientProcessor::new(
                hooks.clone(),
                checkers.clone(),
                replies.clone(),
            )),
        );
        let hash = client_id
            .bytes()
            .fold(0i32, |h, b| h.wrapping_mul(31).wrapping_add(i32::from(b)));
        Ok(Self {
            inner: Arc::new(Inner {
                uniq: UniqIdGenerator::new(client_ip, hash),
                config,
                client_id,
                client_ip,
                pool,
                hooks,
                checkers,
                replies,
                ns_index: AtomicUsize::new(0),
                routes: Mutex::new(HashMap::new()),
                brokers: Mutex::new(HashMap::new()),
                pull_from: Mutex::new(HashMap::new()),
                failure_refresh: Mutex::new(HashMap::new()),
                producers: Mutex::new(BTreeSet::new()),
                consumers: Mutex::new(BTreeMap::new()),
                started: AtomicBool::new(false),
                shutdown: Shutdown::new(),
            }),
        })
    }

    /// `clientIP@instanceName`, how brokers know this client.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The local address in the client id.
    pub fn client_ip(&self) -> IpAddr {
        self.inner.client_ip
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// A new UNIQ_KEY (§5.2).
    pub fn next_uniq_id(&self) -> String {
        self.inner.uniq.next_id()
    }

    /// Starts the background task (route refresh and heartbeats every 30 s). Idempotent.
    pub fn start(&self) {
        if self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        runtime::spawn(async move { me.background().await });
    }

    async fn background(self) {
        let cfg = &self.inner.config;
        let tick = cfg
            .heartbeat_interval
            .min(cfg.poll_name_server_interval)
            .max(Duration::from_millis(100));
        let (mut since_hb, mut since_poll) = (Duration::ZERO, Duration::ZERO);
        loop {
            if self.inner.shutdown.sleep(tick).await {
                return;
            }
            since_hb += tick;
            since_poll += tick;
            if since_poll >= cfg.poll_name_server_interval {
                since_poll = Duration::ZERO;
                self.refresh_all_routes().await;
            }
            if since_hb >= cfg.heartbeat_interval {
                since_hb = Duration::ZERO;
                self.send_heartbeat_to_all_brokers().await;
            }
        }
    }

    /// True once [`ClientInstance::shutdown`] ran.
    pub fn is_shut_down(&self) -> bool {
        self.inner.shutdown.is_triggered()
    }

    /// Sends `cmd` to a name server, starting with the one that answered last and moving
    /// to the next on a connect or transport failure. A reply with an error code is a
    /// reply: it is returned, not retried elsewhere.
    pub async fn invoke_namesrv(&self, cmd: RemotingCommand) -> Result<RemotingCommand> {
        if self.is_shut_down() {
            return Err(ClientError::Shutdown);
        }
        let cmd = self.signed(cmd);
        let addrs = &self.inner.config.namesrv_addrs;
        let timeout = self.inner.config.rpc_timeout;
        let start = self.inner.ns_index.load(Ordering::Relaxed);
        let mut reasons = Vec::new();
        for i in 0..addrs.len() {
            let idx = (start + i) % addrs.len();
            let addr = &addrs[idx];
            match self.inner.pool.invoke(addr, cmd.clone(), timeout).await {
                Ok(resp) => {
                    self.inner.ns_index.store(idx, Ordering::Relaxed);
                    return Ok(resp);
                }
                Err(e) => {
                    let reason = match e {
                        tern_shell::RemotingError::Connect { reason, .. } => {
                            tidy_reason(addr, &reason)
                        }
                        tern_shell::RemotingError::Timeout => {
                            format!("no answer within {} ms", timeout.as_millis())
                        }
                        other => other.to_string(),
                    };
                    log::warn!("name server {addr} failed: {reason}");
                    self.inner.pool.close(addr).await;
                    reasons.push(format!("{addr}: {reason}"));
                }
            }
        }
        Err(ClientError::NameServerUnreachable { reasons })
    }

    /// Sends `cmd` to `addr` and waits up to `timeout` for the answer.
    pub async fn invoke(
        &self,
        addr: &str,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        self.invoke_mut(addr, &mut cmd, timeout).await
    }

    /// [`Self::invoke`] with the command left to the caller (signed, its opaque set), who
    /// can send it again: signing again replaces the signature.
    pub async fn invoke_mut(
        &self,
        addr: &str,
        cmd: &mut RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        if self.is_shut_down() {
            return Err(ClientError::Shutdown);
        }
        self.sign(cmd);
        self.inner
            .pool
            .invoke_mut(addr, cmd, timeout)
            .await
            .map_err(|e| ClientError::remoting(addr, e, timeout.as_millis() as u64))
    }

    /// `cmd` signed with the configured ACL account, if any.
    fn signed(&self, mut cmd: RemotingCommand) -> RemotingCommand {
        self.sign(&mut cmd);
        cmd
    }

    /// Signs `cmd` with the configured ACL account, if any.
    fn sign(&self, cmd: &mut RemotingCommand) {
        if let Some(c) = &self.inner.config.credentials {
            c.sign(cmd);
        }
    }

    /// Sends `cmd` to `addr` with the default RPC timeout and fails on a non-zero code.
    pub async fn invoke_ok(&self, addr: &str, cmd: RemotingCommand) -> Result<RemotingCommand> {
        let resp = self
            .invoke(addr, cmd, self.inner.config.rpc_timeout)
            .await?;
        ok(resp)
    }

    /// Sends `cmd` to `addr` oneway.
    pub async fn invoke_oneway(&self, addr: &str, cmd: RemotingCommand) -> Result<()> {
        if self.is_shut_down() {
            return Err(ClientError::Shutdown);
        }
        let ms = self.inner.config.rpc_timeout.as_millis() as u64;
        self.inner
            .pool
            .invoke_oneway(addr, self.signed(cmd))
            .await
            .map_err(|e| ClientError::remoting(addr, e, ms))
    }

    /// Asks the name servers for `topic`'s route and caches it (and its brokers).
    pub async fn fetch_route(&self, topic: &str) -> Result<TopicRouteData> {
        let header = GetRouteInfoRequestHeader {
            topic: topic.to_owned(),
            accept_standard_json_only: None,
        };
        let resp = self
            .invoke_namesrv(RemotingCommand::request(
                RequestCode::GetRouteinfoByTopic,
                &header,
            ))
            .await?;
        if resp.response_code() == ResponseCode::TopicNotExist {
            self.inner.routes.guard().remove(topic);
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            });
        }
        let resp = ok(resp)?;
        let route: TopicRouteData =
            from_json(&resp.body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if route.queue_datas.is_empty() || route.broker_datas.is_empty() {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            });
        }
        self.remember_brokers(&route);
        self.inner
            .routes
            .guard()
            .insert(topic.to_owned(), Arc::new(route.clone()));
        Ok(route)
    }

    /// The cached route of `topic`, fetched on first use.
    pub async fn topic_route(&self, topic: &str) -> Result<TopicRouteData> {
        if let Some(r) = self.cached_route(topic) {
            return Ok(TopicRouteData::clone(&r));
        }
        self.fetch_route(topic).await
    }

    /// The cached route of `topic`, if any, without copying it: a producer asks on every
    /// send whether the route changed, which a pointer comparison answers.
    pub fn cached_route(&self, topic: &str) -> Option<Arc<TopicRouteData>> {
        self.inner.routes.guard().get(topic).cloned()
    }

    /// Records broker addresses from a route (routes from the admin's cluster info too).
    pub fn remember_brokers(&self, route: &TopicRouteData) {
        let mut b = self.inner.brokers.guard();
        for bd in &route.broker_datas {
            b.insert(bd.broker_name.clone(), bd.broker_addrs.0.clone());
        }
    }

    /// The master address (id 0) of `broker_name`, from the routes seen so far.
    pub fn master_addr(&self, broker_name: &str) -> Option<String> {
        self.inner
            .brokers
            .guard()
            .get(broker_name)
            .and_then(|m| m.get(&0).cloned())
    }

    /// The master address, or any replica's when the master is gone (reads only).
    pub fn any_addr(&self, broker_name: &str) -> Option<String> {
        self.subscribe_addr(broker_name, 0).map(|(addr, _)| addr)
    }

    /// RocketMQ's `findBrokerAddressInSubscribe(name, id, onlyThisBroker = false)`:
    /// replica `id`'s address, else for a slave id the next one's, else the master's or
    /// any replica's; with whether the address is a slave's.
    pub fn subscribe_addr(&self, broker_name: &str, id: i64) -> Option<(String, bool)> {
        let brokers = self.inner.brokers.guard();
        let replicas = brokers.get(broker_name)?;
        let found = replicas
            .get_key_value(&id)
            .or_else(|| {
                (id != 0)
                    .then(|| replicas.get_key_value(&(id + 1)))
                    .flatten()
            })
            .or_else(|| replicas.get_key_value(&0))
            .or_else(|| replicas.iter().next());
        found.map(|(id, addr)| (addr.clone(), *id != 0))
    }

    /// The replica `group` pulls `queue` from: the broker's last suggestion, else the
    /// master (Java's `recalculatePullFromWhichNode`).
    pub fn pull_from(&self, group: &str, queue: &MessageQueue) -> i64 {
        self.inner
            .pull_from
            .guard()
            .get(group)
            .and_then(|queues| queues.get(queue))
            .copied()
            .unwrap_or(0)
    }

    /// Records a pull answer's `suggestWhichBrokerId` (Java's `updatePullFromWhichNode`).
    pub fn suggest_pull_from(&self, group: &str, queue: &MessageQueue, id: i64) {
        let mut table = self.inner.pull_from.guard();
        if id == 0 {
            if let Some(queues) = table.get_mut(group) {
                queues.remove(queue);
            }
        } else {
            let queues = match table.get_mut(group) {
                Some(q) => q,
                None => table.entry(group.to_owned()).or_default(),
            };
            queues.insert(queue.clone(), id);
        }
    }

    /// Re-fetches `topic`'s route after a request to one of its brokers failed, at most
    /// once per [`FAILURE_REFRESH_GAP`]: a master that died is gone from the route (and in
    /// controller mode its successor is in it) long before the periodic refresh.
    pub async fn refresh_route_after_failure(&self, topic: &str) {
        {
            let mut last = self.inner.failure_refresh.guard();
            let now = Instant::now();
            if last
                .get(topic)
                .is_some_and(|t| now.duration_since(*t) < FAILURE_REFRESH_GAP)
            {
                return;
            }
            last.insert(topic.to_owned(), now);
        }
        if let Err(e) = self.fetch_route(topic).await {
            log::debug!("route refresh of {topic} after a failure failed: {e}");
        }
    }

    /// Re-fetches every cached route; failures keep the old route.
    pub async fn refresh_all_routes(&self) {
        let topics: Vec<String> = self.inner.routes.guard().keys().cloned().collect();
        for t in topics {
            if let Err(e) = self.fetch_route(&t).await {
                log::debug!("route refresh of {t} failed: {e}");
            }
        }
    }

    /// Announces a producer group in heartbeats.
    pub fn register_producer(&self, group: &str) {
        self.inner.producers.guard().insert(group.to_owned());
    }

    /// Announces a consumer group (with its subscriptions) in heartbeats.
    pub fn register_consumer(&self, data: ConsumerData) {
        self.inner
            .consumers
            .guard()
            .insert(data.group_name.clone(), data);
    }

    /// Routes NOTIFY_CONSUMER_IDS_CHANGED and GET_CONSUMER_RUNNING_INFO for `group` to
    /// `hook`.
    pub fn register_hook(&self, group: &str, hook: Arc<dyn ConsumerHook>) {
        self.inner.hooks.guard().insert(group.to_owned(), hook);
    }

    /// A slot for the reply to the request with `correlation_id`, forgotten when the
    /// guard drops.
    pub(crate) fn expect_reply(&self, correlation_id: &str) -> ReplyWait {
        let slot = Arc::new(ReplySlot::default());
        self.inner
            .replies
            .guard()
            .insert(correlation_id.to_owned(), slot.clone());
        ReplyWait {
            replies: self.inner.replies.clone(),
            id: correlation_id.to_owned(),
            slot,
        }
    }

    /// Routes CHECK_TRANSACTION_STATE for half messages of producer `group` to `hook`.
    pub fn register_transaction_checker(&self, group: &str, hook: Arc<dyn TransactionCheckHook>) {
        self.inner.checkers.guard().insert(group.to_owned(), hook);
    }

    /// Stops routing check-backs of `group` here.
    pub fn unregister_transaction_checker(&self, group: &str) {
        self.inner.checkers.guard().remove(group);
    }

    /// Asks one broker serving `topic` for the client ids of `group`
    /// (GET_CONSUMER_LIST_BY_GROUP), sorted as Java sorts them.
    pub async fn consumer_ids(&self, topic: &str, group: &str) -> Result<Vec<String>> {
        let route = self.topic_route(topic).await?;
        let addr = route
            .broker_datas
            .iter()
            .find_map(|b| {
                let m = &b.broker_addrs.0;
                m.get(&0).or_else(|| m.values().next()).cloned()
            })
            .ok_or_else(|| ClientError::NoRoute {
                topic: topic.to_owned(),
            })?;
        let h = tern_shell::headers::ConsumerGroupRequestHeader {
            consumer_group: group.to_owned(),
        };
        let cmd = RemotingCommand::request(RequestCode::GetConsumerListByGroup, &h);
        let resp = self.invoke_ok(&addr, cmd).await?;
        let body: tern_shell::body::GetConsumerListByGroupResponseBody =
            from_json(&resp.body).map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut ids = body.consumer_id_list;
        crate::consumer::allocate::sort_client_ids(&mut ids);
        Ok(ids)
    }

    /// The heartbeat body as of now.
    pub fn heartbeat_data(&self) -> HeartbeatData {
        HeartbeatData {
            client_id: self.inner.client_id.clone(),
            producer_data_set: self
                .inner
                .producers
                .guard()
                .iter()
                .map(|g| ProducerData {
                    group_name: g.clone(),
                })
                .collect(),
            consumer_data_set: self.inner.consumers.guard().values().cloned().collect(),
            ..HeartbeatData::default()
        }
    }

    /// Sends a heartbeat to every broker in the routes: masters only when this client
    /// has no consumers (as Java does), every replica otherwise. Returns the failures.
    pub async fn send_heartbeat_to_all_brokers(&self) -> Vec<ClientError> {
        let data = self.heartbeat_data();
        if data.producer_data_set.is_empty() && data.consumer_data_set.is_empty() {
            return Vec::new();
        }
        let body = tern_shell::body::to_json(&data);
        let only_masters = data.consumer_data_set.is_empty();
        let addrs: BTreeSet<String> = self
            .inner
            .brokers
            .guard()
            .values()
            .flat_map(|m| {
                m.iter()
                    .filter(|(id, _)| !only_masters || **id == 0)
                    .map(|(_, a)| a.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut errors = Vec::new();
        for addr in addrs {
            let cmd = RemotingCommand::request_code(RequestCode::HeartBeat).with_body(body.clone());
            if let Err(e) = self.invoke_ok(&addr, cmd).await {
                log::warn!("heartbeat to {addr} failed: {e}");
                errors.push(e);
            }
        }
        errors
    }

    /// Unregisters every group from every known broker, stops the background task and
    /// closes the connections. Further calls fail with [`ClientError::Shutdown`].
    pub async fn shutdown(&self) {
        if self.is_shut_down() {
            return;
        }
        let producers: Vec<String> = self.inner.producers.guard().iter().cloned().collect();
        let consumers: Vec<String> = self.inner.consumers.guard().keys().cloned().collect();
        let addrs: BTreeSet<String> = self
            .inner
            .brokers
            .guard()
            .values()
            .flat_map(|m| m.values().cloned().collect::<Vec<_>>())
            .collect();
        let groups = producers
            .into_iter()
            .map(|g| (Some(g), None))
            .chain(consumers.into_iter().map(|g| (None, Some(g))));
        for (producer_group, consumer_group) in groups {
            let h = UnregisterClientRequestHeader {
                client_id: self.inner.client_id.clone(),
                producer_group,
                consumer_group,
            };
            for addr in &addrs {
                let cmd = RemotingCommand::request(RequestCode::UnregisterClient, &h);
                if let Err(e) = self.invoke_ok(addr, cmd).await {
                    log::debug!("unregister at {addr} failed: {e}");
                }
            }
        }
        self.inner.shutdown.trigger();
        self.inner.pool.close_all().await;
    }
}

/// Passes a success response through; turns any other code into an error.
pub fn ok(resp: RemotingCommand) -> Result<RemotingCommand> {
    if resp.response_code() == ResponseCode::Success {
        Ok(resp)
    } else {
        Err(ClientError::from_response(&resp))
    }
}

/// The local address the OS would use to reach `addr` (a UDP "connect" sends nothing).
fn local_ip_towards(addr: &str) -> IpAddr {
    let fallback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Some(target) = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .or_else(|| addr.parse::<SocketAddr>().ok())
    else {
        return fallback;
    };
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    UdpSocket::bind(bind)
        .and_then(|s| {
            s.connect(target)?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(fallback)
}
