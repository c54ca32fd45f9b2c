//! The JSON API under `/api/`: one route per page action, each a few admin calls. Errors
//! come back as `{"error": "..."}` with a status a page can act on: 400 for bad input,
//! 401 without a session, 404 for what does not exist, 502 when the cluster refused or
//! could not be reached (the text says which name server or broker, and why).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tern_client::admin::AccessConfig;
use tern_client::{Admin, ClientError, Target};
use tern_shell::body::TopicConfig;
use tern_shell::http::{Request, Response};
use tern_shell::runtime::{self, now_ms};
use tern_shell::sync::MutexExt;

use crate::auth::{self, Auth, Refusal};
use crate::config::ConsoleConfig;
use crate::history::History;
use crate::{assets, messages};

/// An answer the API refuses with.
#[derive(Debug)]
pub struct ApiError {
    status: u16,
    message: String,
}

impl ApiError {
    fn bad(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
        }
    }
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> Self {
        let status = match &e {
            ClientError::NotFound(_) | ClientError::NoRoute { .. } => 404,
            ClientError::TopicNotExist { .. } => 404,
            ClientError::InvalidMessage(_) => 400,
            _ => 502,
        };
        Self {
            status,
            message: e.to_string(),
        }
    }
}

type Answer = Result<Value, ApiError>;

/// What the routes share.
#[derive(Debug)]
pub struct App {
    admin: Admin,
    auth: Auth,
    /// The console signs with admin credentials: ACL accounts may be edited.
    acl_editable: bool,
    /// The TPS samples ([`crate::history::run`] fills them).
    pub history: Arc<Mutex<History>>,
}

impl App {
    /// The routes over `admin`, with `config`'s login.
    pub fn new(admin: Admin, config: &ConsoleConfig) -> Self {
        Self {
            admin,
            auth: Auth::new(config.login.clone()),
            acl_editable: config.admin_credentials.is_some(),
            history: Arc::default(),
        }
    }

    /// Answers one request (on a blocking thread: the admin calls are waited for here).
    pub fn handle(&self, req: &Request) -> Response {
        if let Err(why) = self.check_origin(req) {
            return json_response(403, &json!({ "error": why }));
        }
        let Some(route) = req.path.strip_prefix("/api/") else {
            return assets::serve(&req.path);
        };
        match (req.method.as_str(), route) {
            ("GET", "session") => {
                let logged_in = self.auth.check(req).is_ok();
                return json_response(
                    200,
                    &json!({"loginRequired": self.auth.required(), "loggedIn": logged_in}),
                );
            }
            ("POST", "login") => return self.login(req),
            ("POST", "logout") => {
                self.auth.logout(req);
                return json_response(200, &json!({}));
            }
            _ => {}
        }
        if let Err(r) = self.auth.check(req) {
            let (status, text) = match r {
                Refusal::LoginRequired => (401, "log in first"),
                Refusal::MissingCsrfHeader => (403, "changing requests need X-Tern-Console: 1"),
            };
            return json_response(status, &json!({ "error": text }));
        }
        let body = if req.body.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice::<Value>(&req.body)
                .map_err(|e| ApiError::bad(format!("the request body is not JSON: {e}")))
        };
        let answer = body
            .and_then(|body| runtime::block_on(self.route(req.method.as_str(), route, req, &body)));
        match answer {
            Ok(v) => json_response(200, &v),
            Err(e) => json_response(e.status, &json!({ "error": e.message })),
        }
    }

    /// DNS rebinding and cross-site requests. Without a login the console trusts its
    /// loopback address, so a request must name a loopback host: a page of another site
    /// that rebinds its own name to 127.0.0.1 sends that name as `Host` and is refused.
    /// A changing request from a browser must come from the console's own origin.
    fn check_origin(&self, req: &Request) -> Result<(), &'static str> {
        let host = req.header("host").unwrap_or("");
        if !self.auth.required() && !is_loopback_host(host) {
            return Err(
                "this console has no login and answers only to a loopback address \
                        (localhost, 127.0.0.1, [::1])",
            );
        }
        if !matches!(req.method.as_str(), "GET" | "HEAD")
            && let Some(origin) = req.header("origin")
        {
            let from = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            if from != host {
                return Err("a changing request must come from the console's own page");
            }
        }
        Ok(())
    }

    fn login(&self, req: &Request) -> Response {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let field = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
        if req.header(auth::CSRF_HEADER) != Some("1") {
            return json_response(
                403,
                &json!({"error": "changing requests need X-Tern-Console: 1"}),
            );
        }
        match self.auth.login(field("user"), field("password")) {
            Some(token) => json_response(200, &json!({})).header(
                "Set-Cookie",
                format!(
                    "{}={token}; HttpOnly; SameSite=Strict; Path=/",
                    auth::COOKIE
                ),
            ),
            None => json_response(401, &json!({"error": "wrong user or password"})),
        }
    }

    async fn route(&self, method: &str, route: &str, req: &Request, body: &Value) -> Answer {
        let a = &self.admin;
        match (method, route) {
            ("GET", "cluster") => self.cluster().await,
            ("GET", "tps") => Ok(json!(self.history.guard().samples())),
            ("GET", "topics") => topics(a).await,
            ("POST", "topics") => create_topic(a, body).await,
            ("GET", "topic") => topic_detail(a, param(req, "topic")?).await,
            ("POST", "topic/delete") => delete_topic(a, field(body, "topic")?).await,
            ("GET", "groups") => groups(a).await,
            ("GET", "group") => group_detail(a, param(req, "group")?).await,
            ("POST", "group/reset") => reset_group(a, body).await,
            ("POST", "group/delete") => delete_group(a, field(body, "group")?).await,
            ("GET", "producers") => {
                let c = a
                    .producer_connection(param(req, "group")?, param(req, "topic")?)
                    .await?;
                Ok(json!(c.connection_set))
            }
            ("GET", "messages") => find_messages(a, req).await,
            ("GET", "message") => {
                let id = param(req, "id")?;
                let found =
                    messages::by_id(a, id, req.param("topic").filter(|t| !t.is_empty())).await?;
                let m = &found[0];
                let mut v = messages::detail(m);
                v["track"] = json!(messages::track(a, m).await?);
                Ok(v)
            }
            ("POST", "message/resend") => {
                let r = a
                    .consume_message_directly(
                        field(body, "group")?,
                        field(body, "clientId")?,
                        field(body, "offsetMsgId")?,
                        body.get("topic").and_then(Value::as_str),
                    )
                    .await?;
                Ok(json!(r))
            }
            ("GET", "acl") => acl(a, self.acl_editable).await,
            ("POST", "acl/account" | "acl/delete") if !self.acl_editable => Err(ApiError {
                status: 403,
                message: "the console has no admin credentials (consoleAccessKey and \
                          consoleSecretKey): ACL accounts are read-only here"
                    .into(),
            }),
            ("POST", "acl/account") => update_account(a, body).await,
            ("POST", "acl/delete") => {
                let key = field(body, "accessKey")?;
                let mut done = Vec::new();
                for cluster in a.cluster_info().await?.cluster_addr_table.keys() {
                    done.extend(
                        a.delete_acl_account(&Target::Cluster(cluster.clone()), key)
                            .await?,
                    );
                }
                Ok(json!({"accessKey": key, "brokers": done}))
            }
            _ => Err(ApiError {
                status: 404,
                message: format!("no API {method} /api/{route}"),
            }),
        }
    }

    /// Clusters and brokers: role, version, disk use, from each broker's runtime info.
    async fn cluster(&self) -> Answer {
        let a = &self.admin;
        let info = a.cluster_info().await?;
        let mut clusters = Vec::new();
        for (cluster, names) in &info.cluster_addr_table {
            let mut brokers = Vec::new();
            for name in names {
                let Some(b) = info.broker_addr_table.get(name) else {
                    continue;
                };
                for (id, addr) in &b.broker_addrs.0 {
                    let (stats, error) = match a.broker_runtime_info(addr).await {
                        Ok(t) => (t, None),
                        Err(e) => (BTreeMap::new(), Some(e.to_string())),
                    };
                    let get = |k: &str| stats.get(k).cloned();
                    brokers.push(json!({
                        "name": name,
                        "id": id,
                        "role": get("brokerRole").unwrap_or_else(|| if *id == 0 { "MASTER".into() } else { "SLAVE".into() }),
                        "addr": addr,
                        "version": get("brokerVersionDesc"),
                        "diskRatio": get("commitLogDiskRatio"),
                        "putToday": get("msgPutTotalTodayNow"),
                        "getToday": get("msgGetTotalTodayNow"),
                        "error": error,
                    }));
                }
            }
            clusters.push(json!({"name": cluster, "brokers": brokers}));
        }
        Ok(json!({"namesrv": a.namesrv_addrs(), "clusters": clusters}))
    }
}

/// `Host` names the loopback interface: `localhost`, `127.x.y.z` or `[::1]`, any port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn json_response(status: u16, v: &Value) -> Response {
    Response::with_status(status, "application/json", v.to_string())
        .header("Cache-Control", "no-store")
}

fn param<'r>(req: &'r Request, name: &str) -> Result<&'r str, ApiError> {
    req.param(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad(format!("missing parameter {name}")))
}

fn field<'b>(body: &'b Value, name: &str) -> Result<&'b str, ApiError> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad(format!("missing field {name}")))
}

fn number(body: &Value, name: &str, default: i64) -> Result<i64, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .ok_or_else(|| ApiError::bad(format!("{name} must be a number"))),
    }
}

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

async fn topics(a: &Admin) -> Answer {
    let list = a.topic_list().await?;
    Ok(json!(
        list.iter()
            .map(|t| json!({"topic": t, "kind": kind(t)}))
            .collect::<Vec<_>>()
    ))
}

async fn create_topic(a: &Admin, body: &Value) -> Answer {
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

async fn topic_detail(a: &Admin, topic: &str) -> Answer {
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

async fn delete_topic(a: &Admin, topic: &str) -> Answer {
    let clusters = a.topic_clusters(topic).await?;
    for c in &clusters {
        a.delete_topic(c, topic).await?;
    }
    Ok(json!({"topic": topic, "clusters": clusters}))
}

/// Every subscription group of every master, with the brokers that hold it.
async fn groups(a: &Admin) -> Answer {
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

async fn group_detail(a: &Admin, group: &str) -> Answer {
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

/// Resets every topic the group consumes (its retry topic included) to `timestamp`.
async fn reset_group(a: &Admin, body: &Value) -> Answer {
    let group = field(body, "group")?;
    let ts = number(body, "timestamp", -1)?;
    if ts < 0 {
        return Err(ApiError::bad(
            "missing field timestamp (ms since the epoch)",
        ));
    }
    let progress = a.consume_progress(group, None).await?;
    let topics: BTreeSet<&str> = progress
        .queues
        .iter()
        .map(|q| q.queue.topic.as_str())
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
async fn delete_group(a: &Admin, group: &str) -> Answer {
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

/// `?key=` (with `topic`), `?id=` (`topic` optional), or `?topic=&begin=&end=`.
async fn find_messages(a: &Admin, req: &Request) -> Answer {
    let now = now_ms();
    let time = |name: &str, default: i64| -> Result<i64, ApiError> {
        match req.param(name).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| ApiError::bad(format!("{name} must be ms since the epoch"))),
        }
    };
    let found = if let Some(id) = req.param("id").filter(|v| !v.is_empty()) {
        messages::by_id(a, id.trim(), req.param("topic").filter(|t| !t.is_empty())).await?
    } else if let Some(key) = req.param("key").filter(|v| !v.is_empty()) {
        let topic = param(req, "topic")?;
        messages::by_key(a, topic, key.trim(), time("begin", 0)?, time("end", now)?).await?
    } else {
        let topic = param(req, "topic")?;
        let begin = time("begin", now - 3_600_000)?;
        messages::by_time(a, topic, begin, time("end", now + 1)?).await?
    };
    Ok(json!(
        found.iter().map(messages::summary).collect::<Vec<_>>()
    ))
}

/// ACL accounts of every master, secret keys removed.
async fn acl(a: &Admin, editable: bool) -> Answer {
    let info = a.cluster_info().await?;
    let mut out = Vec::new();
    for cluster in info.cluster_addr_table.keys() {
        for (addr, mut cfg) in a.acl_configs(&Target::Cluster(cluster.clone())).await? {
            strip_secrets(&mut cfg);
            out.push(json!({"broker": addr, "config": cfg}));
        }
    }
    Ok(json!({"editable": editable, "brokers": out}))
}

/// Creates or updates an account on every master (UPDATE_AND_CREATE_ACL_CONFIG).
async fn update_account(a: &Admin, body: &Value) -> Answer {
    let text = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let list = |k: &str| {
        text(k).map(|v| {
            v.split(',')
                .map(|e| e.trim().to_owned())
                .filter(|e| !e.is_empty())
                .collect::<Vec<_>>()
        })
    };
    let account = AccessConfig {
        access_key: field(body, "accessKey")?.to_owned(),
        secret_key: text("secretKey"),
        white_remote_address: text("whiteRemoteAddress"),
        admin: body.get("admin").and_then(Value::as_bool).unwrap_or(false),
        default_topic_perm: text("defaultTopicPerm"),
        default_group_perm: text("defaultGroupPerm"),
        topic_perms: list("topicPerms"),
        group_perms: list("groupPerms"),
    };
    let mut done = Vec::new();
    for cluster in a.cluster_info().await?.cluster_addr_table.keys() {
        done.extend(
            a.update_acl_account(&Target::Cluster(cluster.clone()), &account)
                .await?,
        );
    }
    Ok(json!({"accessKey": account.access_key, "brokers": done}))
}

/// Removes every `secretKey` (any case) anywhere in `v`.
fn strip_secrets(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.eq_ignore_ascii_case("secretKey"));
            m.values_mut().for_each(strip_secrets);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_secrets),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_leave() {
        let mut v = json!({"accounts": [{"accessKey": "a", "secretKey": "s", "admin": true}],
                           "nested": {"SecretKey": "t"}});
        strip_secrets(&mut v);
        let text = v.to_string();
        assert!(!text.contains("\"s\"") && !text.contains("\"t\""), "{text}");
        assert!(text.contains("accessKey"));
    }

    #[test]
    fn only_loopback_names_pass_for_a_console_without_login() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "[::1]:8080",
            "127.0.0.1",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "10.0.0.1:8080",
            "",
            "[::2]:80",
            "localhost.evil:80",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn kinds_follow_rocketmq_names() {
        assert_eq!(kind("%RETRY%g"), "RETRY");
        assert_eq!(kind("%DLQ%g"), "DLQ");
        assert_eq!(kind("TBW102"), "SYSTEM");
        assert_eq!(kind("Orders"), "NORMAL");
    }
}
