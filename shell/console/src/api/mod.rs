//! The JSON API under `/api/`: one route per page action, each a few admin calls (the
//! pages' own routes in [`topics`], [`groups`] and [`acl`]). Errors
//! come back as `{"error": "..."}` with a status a page can act on: 400 for bad input,
//! 401 without a session, 404 for what does not exist, 502 when the cluster refused or
//! could not be reached (the text says which name server or broker, and why).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tern_client::{Admin, ClientError, Target};
use tern_shell::http::{Request, Response};
use tern_shell::runtime::{self, now_ms};
use tern_shell::sync::MutexExt;

mod acl;
mod groups;
mod topics;

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
    pub(super) fn bad(message: impl Into<String>) -> Self {
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

pub(super) type Answer = Result<Value, ApiError>;

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
            return refused(r);
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
        if auth::changes(req)
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
        if let Err(r) = auth::check_csrf(req) {
            return refused(r);
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
            ("GET", "topics") => topics::topics(a).await,
            ("POST", "topics") => topics::create_topic(a, body).await,
            ("GET", "topic") => topics::topic_detail(a, param(req, "topic")?).await,
            ("POST", "topic/delete") => topics::delete_topic(a, field(body, "topic")?).await,
            ("GET", "groups") => groups::groups(a).await,
            ("GET", "group") => groups::group_detail(a, param(req, "group")?).await,
            ("POST", "group/reset") => groups::reset_group(a, body).await,
            ("POST", "group/delete") => groups::delete_group(a, field(body, "group")?).await,
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
            ("GET", "acl") => acl::acl(a, self.acl_editable).await,
            ("POST", "acl/account" | "acl/delete") if !self.acl_editable => Err(ApiError {
                status: 403,
                message: "the console has no admin credentials (consoleAccessKey and \
                          consoleSecretKey): ACL accounts are read-only here"
                    .into(),
            }),
            ("POST", "acl/account") => acl::update_account(a, body).await,
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

/// The answer to a request [`Auth`] refused.
fn refused(r: Refusal) -> Response {
    let (status, text) = match r {
        Refusal::LoginRequired => (401, "log in first"),
        Refusal::MissingCsrfHeader => (403, "changing requests need X-Tern-Console: 1"),
    };
    json_response(status, &json!({ "error": text }))
}

fn json_response(status: u16, v: &Value) -> Response {
    Response::with_status(status, "application/json", v.to_string())
        .header("Cache-Control", "no-store")
}

pub(super) fn param<'r>(req: &'r Request, name: &str) -> Result<&'r str, ApiError> {
    req.param(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad(format!("missing parameter {name}")))
}

pub(super) fn field<'b>(body: &'b Value, name: &str) -> Result<&'b str, ApiError> {
    body.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad(format!("missing field {name}")))
}

pub(super) fn number(body: &Value, name: &str, default: i64) -> Result<i64, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            .ok_or_else(|| ApiError::bad(format!("{name} must be a number"))),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
