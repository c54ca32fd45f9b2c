//! Request handling: one function per request code, mirroring Java's
//! `DefaultRequestProcessor` and `ClientRequestProcessor` so admin tools and clients get
//! the answers (codes, remarks, bodies) they expect. Codes we do not serve get 3.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tern_shell::sync::{MutexExt, RwLockExt};

use tern_shell::body::{
    DataVersion, RegisterBrokerBody, TopicConfigSerializeWrapper, TopicList, TopicRouteData,
    from_json, to_json,
};
use tern_shell::code::version;
use tern_shell::connection::not_supported;
use tern_shell::headers::{
    AddWritePermOfBrokerResponseHeader, BrokerHeartbeatRequestHeader, BrokerIdentityRequestHeader,
    BrokerNameRequestHeader, DeleteTopicFromNamesrvRequestHeader, FromExtFields,
    GetKvConfigResponseHeader, GetKvListByNamespaceRequestHeader, GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader, HeaderError, KvConfigKeyRequestHeader,
    PutKvConfigRequestHeader, QueryDataVersionResponseHeader, RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader, WipeWritePermOfBrokerResponseHeader,
};
use tern_shell::{
    ConnectionCtx, ExtFields, Processor, Refusal, RemotingCommand, RequestCode, ResponseCode,
    runtime,
};

use tern_shell::acl::guard::Acl;

use crate::config::NamesrvConfig;
use crate::kv::KvStore;
use crate::routes::{BrokerAddrInfo, Registration, RouteTable};

/// KV namespace holding `topic → "brokerName:queueNum;..."` for ordered topics.
pub const NAMESPACE_ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// Request codes `RequestCode` has no name for but admin tools send to name servers.
pub(crate) mod extra_code {
    /// GET_SYSTEM_TOPIC_LIST_FROM_NS.
    pub const GET_SYSTEM_TOPIC_LIST_FROM_NS: i32 = 304;
    /// GET_UNIT_TOPIC_LIST.
    pub const GET_UNIT_TOPIC_LIST: i32 = 311;
    /// GET_HAS_UNIT_SUB_TOPIC_LIST.
    pub const GET_HAS_UNIT_SUB_TOPIC_LIST: i32 = 312;
    /// GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST.
    pub const GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: i32 = 313;
}

/// State shared by the processor and the expiry task.
#[derive(Debug)]
pub(crate) struct State {
    /// Routes; a std lock, never held across `.await`.
    pub routes: RwLock<RouteTable>,
    /// KV config.
    pub kv: KvStore,
    /// Settings as started.
    pub config: NamesrvConfig,
    /// Settings now: the start's, with what UPDATE_NAMESRV_CONFIG changed since (only
    /// [`RUNTIME_KEYS`](crate::config::RUNTIME_KEYS)). Request handlers read this one.
    live: RwLock<NamesrvConfig>,
    /// Connections a broker registered on that already have a close watcher.
    watched: Mutex<HashSet<u64>>,
    /// Access control, with `aclEnable`.
    acl: Option<Arc<Acl>>,
}

impl State {
    /// Fresh tables over a loaded KV store.
    pub fn new(config: NamesrvConfig, kv: KvStore, acl: Option<Arc<Acl>>) -> Self {
        Self {
            acl,
            routes: RwLock::new(RouteTable::new()),
            kv,
            live: RwLock::new(config.clone()),
            config,
            watched: Mutex::new(HashSet::new()),
        }
    }

    /// The route table for writing.
    pub fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, RouteTable> {
        // The table stays consistent per operation; a panicked writer left a valid table.
        self.routes.write_guard()
    }

    /// The settings now (see `live`).
    fn live(&self) -> std::sync::RwLockReadGuard<'_, NamesrvConfig> {
        self.live.read_guard()
    }

    /// The route table for reading.
    fn routes(&self) -> std::sync::RwLockReadGuard<'_, RouteTable> {
        self.routes.read_guard()
    }
}

/// The name server's request processor.
#[derive(Debug, Clone)]
pub struct NamesrvProcessor {
    state: Arc<State>,
}

/// A handler's answer: `Err` is an error response already built.
type Reply = Result<RemotingCommand, RemotingCommand>;

fn header<H: FromExtFields>(req: &RemotingCommand) -> Result<H, RemotingCommand> {
    req.decode_header()
        .map_err(|e: HeaderError| fail(req, ResponseCode::SystemError, e.to_string()))
}

fn fail(req: &RemotingCommand, code: ResponseCode, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::error_response(req, code, remark)
}

fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, ResponseCode::Success)
}

/// REGISTER_TOPIC_IN_NAMESRV request: just the topic (the queues are in the body).
struct RegisterTopicRequestHeader {
    topic: String,
}

impl FromExtFields for RegisterTopicRequestHeader {
    fn from_ext_fields(ext: &ExtFields) -> Result<Self, HeaderError> {
        let topic = ext.get("topic").ok_or(HeaderError::Missing("topic"))?;
        Ok(Self {
            topic: topic.to_owned(),
        })
    }
}

impl Processor for NamesrvProcessor {
    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        if let Some(acl) = &self.state.acl {
            if let Err(why) = crate::acl::check(acl, &req, conn.peer_addr().ip()) {
                log::warn!(
                    "request {} from {} refused: {why}",
                    req.code,
                    conn.peer_addr()
                );
                return Some(Refusal::from(why).into_response(&req));
            }
        }
        Some(self.handle(conn, &req).unwrap_or_else(|e| e))
    }
}

impl NamesrvProcessor {
    /// A processor over shared state (the expiry task holds the same state).
    pub(crate) fn new(state: Arc<State>) -> Self {
        Self { state }
    }

    fn handle(&self, conn: &ConnectionCtx, req: &RemotingCommand) -> Reply {
        use RequestCode as C;
        match req.request_code_enum() {
            C::PutKvConfig => self.put_kv(req),
            C::GetKvConfig => self.get_kv(req),
            C::DeleteKvConfig => self.delete_kv(req),
            C::GetKvlistByNamespace => self.kv_list(req),
            C::RegisterBroker => self.register_broker(conn, req),
            C::UnregisterBroker => self.unregister_broker(req),
            C::QueryDataVersion => self.query_data_version(req),
            C::BrokerHeartbeat => self.broker_heartbeat(req),
            C::GetRouteinfoByTopic => self.route(req),
            C::GetBrokerClusterInfo => {
                Ok(ok(req).with_body(to_json(&self.state.routes().cluster_info())))
            }
            C::UpdateNamesrvConfig => self.update_config(conn, req),
            C::GetNamesrvConfig => {
                let text: String = self
                    .state
                    .live()
                    .properties()
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}\n"))
                    .collect();
                Ok(ok(req).with_body(text.into_bytes()))
            }
            C::GetAllTopicListFromNameserver => {
                if !self.state.live().enable_all_topic_list {
                    return Err(fail(req, ResponseCode::SystemError, "disable"));
                }
                Ok(ok(req).with_body(to_json(&self.state.routes().all_topics())))
            }
            C::DeleteTopicInNamesrv => {
                let h: DeleteTopicFromNamesrvRequestHeader = header(req)?;
                self.state
                    .routes_mut()
                    .delete_topic(&h.topic, h.cluster_name.as_deref());
                Ok(ok(req))
            }
            C::RegisterTopicInNamesrv => {
                let h: RegisterTopicRequestHeader = header(req)?;
                let route: TopicRouteData = from_json(&req.body)
                    .map_err(|e| fail(req, ResponseCode::SystemError, e.to_string()))?;
                self.state
                    .routes_mut()
                    .register_topic(&h.topic, route.queue_datas);
                Ok(ok(req))
            }
            C::GetTopicsByCluster => {
                let h: GetTopicsByClusterRequestHeader = header(req)?;
                self.topic_list(req, |t| t.topics_of_cluster(&h.cluster))
            }
            C::WipeWritePermOfBroker => {
                let h: BrokerNameRequestHeader = header(req)?;
                let n = self
                    .state
                    .routes_mut()
                    .set_write_perm(&h.broker_name, false);
                log::info!("write perm of {} wiped on {n} topics", h.broker_name);
                Ok(ok(req).with_header(&WipeWritePermOfBrokerResponseHeader {
                    wipe_topic_count: n,
                }))
            }
            C::AddWritePermOfBroker => {
                let h: BrokerNameRequestHeader = header(req)?;
                let n = self.state.routes_mut().set_write_perm(&h.broker_name, true);
                log::info!("write perm of {} added on {n} topics", h.broker_name);
                Ok(ok(req).with_header(&AddWritePermOfBrokerResponseHeader { add_topic_count: n }))
            }
            C::Other(extra_code::GET_SYSTEM_TOPIC_LIST_FROM_NS) => {
                self.topic_list(req, RouteTable::system_topics)
            }
            C::Other(extra_code::GET_UNIT_TOPIC_LIST) => {
                self.topic_list(req, RouteTable::unit_topics)
            }
            C::Other(extra_code::GET_HAS_UNIT_SUB_TOPIC_LIST) => {
                self.topic_list(req, RouteTable::unit_sub_topics)
            }
            C::Other(extra_code::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) => {
                self.topic_list(req, RouteTable::unit_sub_non_unit_topics)
            }
            _ => Ok(not_supported(req)),
        }
    }

    /// Topic lists other than "all" are switched off together by `enableTopicList`.
    fn topic_list(&self, req: &RemotingCommand, f: impl FnOnce(&RouteTable) -> TopicList) -> Reply {
        if !self.state.live().enable_topic_list {
            return Err(fail(req, ResponseCode::SystemError, "disable"));
        }
        Ok(ok(req).with_body(to_json(&f(&self.state.routes()))))
    }

    /// UPDATE_NAMESRV_CONFIG: `key=value` lines in the body. All or nothing: a refused
    /// key leaves every setting as it was.
    fn update_config(&self, conn: &ConnectionCtx, req: &RemotingCommand) -> Reply {
        log::info!("updateConfig called by {}", conn.peer_addr());
        if req.body.is_empty() {
            return Ok(ok(req));
        }
        let text = std::str::from_utf8(&req.body).map_err(|e| {
            fail(
                req,
                ResponseCode::SystemError,
                format!("string2Properties error: {e}"),
            )
        })?;
        let mut live = self.state.live.write_guard();
        match live.updated(text) {
            Ok(next) => {
                log::info!(
                    "name server settings updated: {}",
                    text.trim().replace('\n', ", ")
                );
                *live = next;
                Ok(ok(req))
            }
            Err(why) => {
                let code = match why {
                    crate::config::UpdateRefused::BlackListed => ResponseCode::NoPermission,
                    _ => ResponseCode::InvalidParameter,
                };
                Err(fail(req, code, why.to_string()))
            }
        }
    }

    fn put_kv(&self, req: &RemotingCommand) -> Reply {
        let h: PutKvConfigRequestHeader = header(req)?;
        self.state
            .kv
            .put(&h.namespace, &h.key, &h.value)
            .map_err(|e| fail(req, ResponseCode::SystemError, e.to_string()))?;
        Ok(ok(req))
    }

    fn get_kv(&self, req: &RemotingCommand) -> Reply {
        let h: KvConfigKeyRequestHeader = header(req)?;
        match self.state.kv.get(&h.namespace, &h.key) {
            Some(value) => {
                Ok(ok(req).with_header(&GetKvConfigResponseHeader { value: Some(value) }))
            }
            None => Err(fail(
                req,
                ResponseCode::QueryNotFound,
                format!("No config item, Namespace: {} Key: {}", h.namespace, h.key),
            )),
        }
    }

    fn delete_kv(&self, req: &RemotingCommand) -> Reply {
        let h: KvConfigKeyRequestHeader = header(req)?;
        self.state
            .kv
            .delete(&h.namespace, &h.key)
            .map_err(|e| fail(req, ResponseCode::SystemError, e.to_string()))?;
        Ok(ok(req))
    }

    fn kv_list(&self, req: &RemotingCommand) -> Reply {
        let h: GetKvListByNamespaceRequestHeader = header(req)?;
        match self.state.kv.list(&h.namespace) {
            Some(t) => Ok(ok(req).with_body(to_json(&t))),
            None => Err(fail(
                req,
                ResponseCode::QueryNotFound,
                format!("No config item, Namespace: {}", h.namespace),
            )),
        }
    }

    fn register_broker(&self, conn: &ConnectionCtx, req: &RemotingCommand) -> Reply {
        let h: RegisterBrokerRequestHeader = header(req)?;
        if let Some(expected) = h.body_crc32.filter(|c| *c != 0) {
            // UtilAll.crc32: IEEE CRC-32 masked to 31 bits.
            let actual = (crc32fast::hash(&req.body) & 0x7FFF_FFFF) as i32;
            if actual != expected {
                log::warn!(
                    "register from {} ({}): body crc32 {actual} != header {expected}",
                    h.broker_addr,
                    conn.peer_addr()
                );
                return Err(fail(req, ResponseCode::SystemError, "crc32 not match"));
            }
        }
        let bad_body = |e: tern_shell::body::BodyError| {
            fail(
                req,
                ResponseCode::SystemError,
                format!("bad register body: {e}"),
            )
        };
        let body = if req.body.is_empty() {
            RegisterBrokerBody::default()
        } else if req.version >= version::V3_0_11 {
            RegisterBrokerBody::decode(&req.body, h.compressed.unwrap_or(false), req.version)
                .map_err(bad_body)?
        } else {
            // Before 3.0.11 the body was the topic wrapper alone.
            let w: TopicConfigSerializeWrapper = from_json(&req.body).map_err(bad_body)?;
            RegisterBrokerBody {
                topic_config_serialize_wrapper: w,
                filter_server_list: Vec::new(),
            }
        };
        let timeout_ms = h
            .heartbeat_timeout_millis
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|ms| *ms > 0)
            .unwrap_or(self.state.live().broker_expired_millis);
        let wrapper = body.topic_config_serialize_wrapper;
        let registration = Registration {
            cluster: h.cluster_name,
            addr: h.broker_addr,
            broker_name: h.broker_name,
            broker_id: h.broker_id,
            ha_server_addr: h.ha_server_addr,
            topics: wrapper.topic_config_table,
            data_version: wrapper.data_version,
            filter_servers: body.filter_server_list,
            timeout: Duration::from_millis(timeout_ms),
            conn_id: Some(conn.id()),
        };
        let result = self
            .state
            .routes_mut()
            .register(registration, Instant::now());
        self.watch(conn);
        let mut resp = ok(req).with_header(&RegisterBrokerResponseHeader {
            ha_server_addr: result.ha_server_addr,
            master_addr: result.master_addr,
        });
        if self.state.live().return_order_topic_config_to_broker {
            if let Some(t) = self.state.kv.list(NAMESPACE_ORDER_TOPIC_CONFIG) {
                resp = resp.with_body(to_json(&t));
            }
        }
        Ok(resp)
    }

    /// Drops the brokers registered on `conn` once it closes (Java's `onChannelDestroy`).
    fn watch(&self, conn: &ConnectionCtx) {
        let id = conn.id();
        let first = self.state.watched.guard().insert(id);
        if !first {
            return;
        }
        let state = self.state.clone();
        let conn = conn.clone();
        runtime::spawn(async move {
            conn.closed().await;
            state.watched.guard().remove(&id);
            state.routes_mut().connection_closed(id);
        });
    }

    fn unregister_broker(&self, req: &RemotingCommand) -> Reply {
        let h: BrokerIdentityRequestHeader = header(req)?;
        self.state.routes_mut().unregister(
            &h.cluster_name,
            &h.broker_addr,
            &h.broker_name,
            h.broker_id,
        );
        Ok(ok(req))
    }

    fn query_data_version(&self, req: &RemotingCommand) -> Reply {
        let h: BrokerIdentityRequestHeader = header(req)?;
        let theirs: DataVersion = from_json(&req.body)
            .map_err(|e| fail(req, ResponseCode::SystemError, e.to_string()))?;
        let key = BrokerAddrInfo {
            cluster: h.cluster_name,
            addr: h.broker_addr,
        };
        let mut routes = self.state.routes_mut();
        let changed = routes.topic_config_changed(&key, &theirs);
        if !changed {
            routes.touch(&key, Instant::now());
        }
        let ours = routes.data_version(&key);
        drop(routes);
        let mut resp = ok(req).with_header(&QueryDataVersionResponseHeader { changed });
        if let Some(v) = ours {
            resp = resp.with_body(to_json(&v));
        }
        Ok(resp)
    }

    fn broker_heartbeat(&self, req: &RemotingCommand) -> Reply {
        let h: BrokerHeartbeatRequestHeader = header(req)?;
        let key = BrokerAddrInfo {
            cluster: h.cluster_name,
            addr: h.broker_addr,
        };
        if !self.state.routes_mut().touch(&key, Instant::now()) {
            log::debug!("heartbeat from unregistered broker {}", key.addr);
        }
        Ok(ok(req))
    }

    fn route(&self, req: &RemotingCommand) -> Reply {
        let h: GetRouteInfoRequestHeader = header(req)?;
        let Some(mut route) = self.state.routes().route(&h.topic) else {
            return Err(fail(
                req,
                ResponseCode::TopicNotExist,
                format!(
                    "No topic route info in name server for the topic: {}",
                    h.topic
                ),
            ));
        };
        if self.state.live().order_message_enable {
            route.order_topic_conf = self.state.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, &h.topic);
        }
        let standard = h.accept_standard_json_only.unwrap_or(false);
        Ok(ok(req).with_body(route.encode_for(req.version, standard)))
    }
}
