//! Registration with the name servers: at start, every `registerNameServerPeriod`, and at
//! once when topics change; unregistration at shutdown. Each name server is independent:
//! one that is down does not delay the others.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tern_shell::body::RegisterBrokerBody;
use tern_shell::code::RequestCode;
use tern_shell::headers::{
    BrokerIdentityRequestHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
};
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RemotingError, ResponseCode};

use crate::BrokerCtx;

/// Request timeout for registration (RocketMQ uses 24 s; a live name server answers fast).
const REGISTER_TIMEOUT: Duration = Duration::from_secs(6);

fn identity(ctx: &BrokerCtx) -> (String, String) {
    (ctx.store_host.to_string(), ctx.ha_addr.to_string())
}

/// A peer's error answer to one of the broker's own requests (a name server's, the
/// master's, a controller's): its code and remark, said as `code {code} {remark}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorAnswer {
    /// The response code.
    pub code: i32,
    /// The peer's remark (empty when it gave none).
    pub remark: String,
}

impl ErrorAnswer {
    /// The code and remark of `resp`.
    pub fn of(resp: &RemotingCommand) -> Self {
        Self {
            code: resp.code,
            remark: resp.remark.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ErrorAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code {} {}", self.code, self.remark)
    }
}

impl std::error::Error for ErrorAnswer {}

/// Why a registration with one name server failed.
#[derive(Debug)]
enum RegisterError {
    /// The request failed on its connection.
    Remoting(RemotingError),
    /// The name server answered with an error.
    Refused(ErrorAnswer),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Remoting(e) => write!(f, "{e}"),
            Self::Refused(a) => write!(f, "{a}"),
        }
    }
}

impl std::error::Error for RegisterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Remoting(e) => Some(e),
            Self::Refused(a) => Some(a),
        }
    }
}

/// Registers with one name server.
async fn register_one(ctx: &BrokerCtx, addr: &str, body: &[u8]) -> Result<(), RegisterError> {
    let (broker_addr, ha) = identity(ctx);
    let header = RegisterBrokerRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr,
        cluster_name: ctx.config.cluster_name.clone(),
        ha_server_addr: ha,
        broker_id: ctx.broker_id(),
        heartbeat_timeout_millis: None,
        enable_acting_master: None,
        compressed: Some(false),
        body_crc32: Some(tern_engine::hash::body_crc(body)),
    };
    let req = ctx.signed(
        RemotingCommand::request(RequestCode::RegisterBroker, &header).with_body(body.to_vec()),
    );
    let resp = ctx
        .namesrv
        .invoke(addr, req, REGISTER_TIMEOUT)
        .await
        .map_err(RegisterError::Remoting)?;
    if resp.response_code() == ResponseCode::Success {
        // A slave learns its master from the answer.
        if ctx.role.get() == crate::config::BrokerRole::Slave {
            match resp.decode_header::<RegisterBrokerResponseHeader>() {
                // In controller mode only an answer about the master the controllers
                // named counts: a name server may still list a deposed one.
                Ok(h) if ctx.controller.is_some() => {
                    ctx.ha.learn_master_ha(h.master_addr, h.ha_server_addr)
                }
                Ok(h) => ctx.ha.set_master(
                    h.master_addr,
                    h.ha_server_addr,
                    ctx.config.ha_master_address.is_some(),
                ),
                Err(e) => log::warn!("registration answer of {addr}: {e}"),
            }
        }
        Ok(())
    } else {
        Err(RegisterError::Refused(ErrorAnswer::of(&resp)))
    }
}

/// The registration body: every topic, its perm ANDed with `brokerPermission` when that
/// lacks read or write (as RocketMQ's `registerBrokerAll`), so routes show what clients
/// may do here. In controller mode the data version's `stateVersion` is the master epoch
/// (RocketMQ's `dataVersion.nextVersion(epoch)` in `ReplicasManager`): name servers
/// ignore a registration for an id another live address holds with a higher one, so a
/// deposed master cannot take id 0 back.
fn registration_body(ctx: &BrokerCtx) -> Vec<u8> {
    let mut wrapper = ctx.topics.wrapper();
    if let Some(epoch) = ctx
        .controller
        .as_ref()
        .map(|cm| cm.replica.known().master_epoch)
    {
        wrapper.data_version.state_version = i64::from(epoch);
    }
    let broker_perm = ctx.live.broker_permission();
    let rw = crate::topics::PERM_READ | crate::topics::PERM_WRITE;
    if broker_perm & rw != rw {
        for t in wrapper.topic_config_table.values_mut() {
            t.perm &= broker_perm;
        }
    }
    tern_shell::body::to_json(&RegisterBrokerBody {
        topic_config_serialize_wrapper: wrapper,
        filter_server_list: Vec::new(),
    })
}

/// A broker in controller mode registers only once it knows its role (RocketMQ
/// isolates a broker until then).
fn fenced(ctx: &BrokerCtx) -> bool {
    ctx.controller
        .as_ref()
        .is_some_and(|cm| cm.replica.is_fenced())
}

/// Registers with every name server, concurrently.
pub async fn register_all(ctx: &Arc<BrokerCtx>) {
    if fenced(ctx) {
        return;
    }
    let body = Arc::new(registration_body(ctx));
    let mut handles = Vec::new();
    for addr in ctx.config.namesrv_addrs.clone() {
        let (ctx, body) = (ctx.clone(), body.clone());
        handles.push(runtime::spawn(async move {
            if let Err(e) = register_one(&ctx, &addr, &body).await {
                log::warn!("registering with name server {addr} failed: {e}");
                ctx.namesrv.close(&addr).await;
            }
        }));
    }
    for h in handles {
        h.await;
    }
}

/// Registers now, from a request handler that has the context by reference.
pub async fn register_all_now(ctx: &BrokerCtx) {
    if fenced(ctx) {
        return;
    }
    let body = registration_body(ctx);
    for addr in &ctx.config.namesrv_addrs {
        if let Err(e) = register_one(ctx, addr, &body).await {
            log::warn!("registering with name server {addr} failed: {e}");
        }
    }
}

/// Unregisters from every name server (shutdown).
pub async fn unregister_all(ctx: &Arc<BrokerCtx>) {
    let (broker_addr, _) = identity(ctx);
    let header = BrokerIdentityRequestHeader {
        broker_name: ctx.config.broker_name.clone(),
        broker_addr,
        cluster_name: ctx.config.cluster_name.clone(),
        broker_id: ctx.broker_id(),
    };
    for addr in &ctx.config.namesrv_addrs {
        let req = ctx.signed(RemotingCommand::request(
            RequestCode::UnregisterBroker,
            &header,
        ));
        if let Err(e) = ctx.namesrv.invoke(addr, req, Duration::from_secs(3)).await {
            log::warn!("unregistering from name server {addr} failed: {e}");
        }
    }
    ctx.namesrv.close_all().await;
}

/// The registration task: the first registration happened at start; then every period,
/// or at once when topics change.
pub async fn run(ctx: Arc<BrokerCtx>) {
    let mut asked = ctx.register_wanted.next();
    loop {
        let period = ctx.config.register_period;
        ctx.shutdown
            .until(runtime::race(runtime::sleep(period), asked.wait()))
            .await;
        if ctx.shutdown.is_triggered() {
            break;
        }
        // Taken before the registration: a change while it runs wakes the next wait.
        asked = ctx.register_wanted.next();
        register_all(&ctx).await;
    }
}
