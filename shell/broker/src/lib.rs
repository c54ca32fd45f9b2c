//! Tern's broker: RocketMQ's remoting processors over the Tern storage engine.
//!
//! [`Broker::start`] opens and recovers the store, starts the listeners (the remoting port
//! and, as RocketMQ does, the VIP port two below it), the store tasks (reput, flush,
//! checkpoint, retention), delayed-message delivery, client housekeeping, offset
//! persistence, and registration with every name server. [`Broker::shutdown`] drains
//! connections, unregisters, flushes, persists offsets and configs, closes the store
//! cleanly (removing the abort marker), then saves the delay offsets.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_shell::body::MessageQueue;
use tern_shell::runtime::{self, JoinHandle, Shutdown};
use tern_shell::{RemotingCommand, Server, ServerConfig};

pub mod acl;
pub mod clients;
pub mod config;
pub mod controller;
pub mod dedup;
mod error;
pub mod filter;
pub mod groups;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod ha;
pub mod longpoll;
pub mod metrics;
pub mod offsets;
pub mod pending;
pub mod persist;
pub mod pop;
pub mod processor;
pub mod register;
pub mod retention;
pub mod role;
pub mod schedule;
pub mod slave_sync;
pub mod status;
pub mod store;
pub mod timer;
pub mod topics;
pub mod transaction;

use config::BrokerConfig;
pub use error::{Listener, StartError};

/// Everything the processors and tasks share.
#[derive(Debug)]
pub struct BrokerCtx {
    /// Effective configuration, as it was at start.
    pub(crate) config: BrokerConfig,
    /// The role now (`brokerRole` at start): read it here, not in `config`.
    pub(crate) role: role::RoleCell,
    /// The keys UPDATE_BROKER_CONFIG changes at run time, and what GET_BROKER_CONFIG
    /// answers: readers of those keys read them here, not in `config`.
    pub(crate) live: config::live::LiveConfig,
    /// The store and its watermarks.
    pub(crate) store: Arc<store::StoreService>,
    /// Topic table.
    pub(crate) topics: topics::Topics,
    /// Consumer offsets.
    pub(crate) offsets: offsets::Offsets,
    /// Subscription groups.
    pub(crate) groups: groups::Groups,
    /// Connected clients and queue locks.
    pub(crate) clients: clients::Clients,
    /// Held pulls.
    pub(crate) holds: longpoll::PullHolds,
    /// Delayed messages: levels and delivery progress.
    pub(crate) schedule: schedule::ScheduleService,
    /// Timer messages: the wheel and its task's progress.
    pub(crate) timer: timer::TimerService,
    /// Compiled SQL92 subscriptions.
    pub(crate) filters: filter::Filters,
    /// `brokerIP1:port`: what clients dial, and what message ids encode.
    pub(crate) store_host: SocketAddr,
    /// Wakes the registration task (topics changed since its last registration began).
    pub(crate) register_wanted: runtime::Wakeup,
    /// When the broker started.
    pub(crate) started: Instant,
    /// Triggered at shutdown; held pulls answer at once.
    pub(crate) shutdown: Shutdown,
    /// Connections to the name servers.
    pub(crate) namesrv: tern_shell::ConnectionPool,
    /// A slave's connection to its master, for the metadata copy ([`slave_sync`]); kept
    /// apart from the name servers' so closing one set never drops the other.
    pub(crate) master_conn: tern_shell::ConnectionPool,
    /// Transaction bookkeeping (half and op queues, check-back progress).
    pub(crate) transactions: transaction::Transactions,
    /// Replication: slaves' acknowledgements (master), the master followed (slave).
    pub(crate) ha: ha::HaService,
    /// `brokerIP1:haPort`, what slaves dial (advertised as `haServerAddr`).
    pub(crate) ha_addr: SocketAddr,
    /// Access control, when `aclEnable` is set.
    pub(crate) acl: Option<Arc<tern_shell::acl::guard::Acl>>,
    /// The idempotent-produce window (`duplicateCheckWindowSeconds`), consulted by
    /// [`BrokerCtx::put`] and [`BrokerCtx::put_batch`].
    pub(crate) dedup: dedup::Window,
    /// Runtime-info entries added by the embedding process (the edge gateway's).
    pub(crate) extra_stats: status::ExtraStats,
    /// Counters for the metrics endpoint.
    pub(crate) metrics: metrics::Metrics,
    /// POP consumption: queue locks, held POPs, orderly batches, request modes.
    pub(crate) pop: pop::PopService,
    /// Controller mode (`enableControllerMode`): the replica's state and the controllers.
    pub(crate) controller: Option<Arc<controller::ControllerMode>>,
}

/// Where a put left one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Put {
    /// Its record and queue offset: for a duplicate, its first copy's.
    pub stored: tern_engine::store::Stored,
    /// The queue id of the message as given to the put (before a delay moves it to the
    /// schedule topic); for a duplicate, its first copy's: what a send is answered with.
    pub queue_id: i32,
    /// Not stored: the idempotent-produce window found its first copy.
    pub duplicate: bool,
    /// Stored as a timer message filed under this slot time (`TIMER_OUT_MS`).
    pub timed: Option<i64>,
}

impl Put {
    /// The log offset past its record: what the answer waits to be durable.
    pub fn end(&self) -> u64 {
        self.stored.at.offset + u64::from(self.stored.at.size)
    }
}

impl BrokerCtx {
    /// The store, through its named operations (an embedding process, the edge gateway,
    /// reads and trims the log with them).
    pub fn store(&self) -> &store::StoreService {
        &self.store
    }

    /// The address the broker announces for its remoting port.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }

    /// Extra GET_BROKER_RUNTIME_INFO entries an embedding process adds.
    pub fn extra_stats(&self) -> &status::ExtraStats {
        &self.extra_stats
    }

    /// Queue `queue_id` of `topic` on this broker, as answers name it.
    pub(crate) fn queue(&self, topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue::new(topic, self.config.broker_name.clone(), queue_id)
    }

    /// A record the broker writes for itself (a POP checkpoint or ack, a transaction
    /// op): born and stored here, now, with no flags.
    pub(crate) fn own_record<'a>(
        &self,
        topic: &'a str,
        queue_id: i32,
        body: &'a [u8],
        properties: &'a [u8],
    ) -> tern_engine::record::MessageIn<'a> {
        let me = processor::send::host(self.store_host);
        tern_engine::record::MessageIn {
            topic,
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: runtime::now_ms(),
            born_host: me,
            store_host: me,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            properties,
        }
    }

    /// The id this broker registers with the name servers under: `brokerId`, or in
    /// controller mode 0 as master and the controller's id as slave.
    pub(crate) fn broker_id(&self) -> i64 {
        match &self.controller {
            None => self.config.broker_id,
            Some(_) if !self.role.is_slave() => 0,
            Some(cm) => cm.replica.broker_id().unwrap_or(self.config.broker_id),
        }
    }

    /// `req` signed with the broker's own account (`innerClientAuthenticationCredentials`)
    /// when it has one: registration at name servers and a slave's requests to its
    /// master, which refuse unsigned requests when their `aclEnable` is on.
    pub fn signed(&self, mut req: RemotingCommand) -> RemotingCommand {
        if let Some(c) = &self.config.inner_credentials {
            c.sign(&mut req);
        }
        req
    }

    /// Asks for a registration with every name server soon (topics changed). A request
    /// that arrives while one is running is not lost: the flag makes the task go again.
    pub fn request_registration(&self) {
        self.register_wanted.wake();
    }

    /// Appends one message: the one way processors, send-backs and transaction commits
    /// store a message. One asking for a delay level goes to the schedule topic instead
    /// (RocketMQ does this in its store), one asking for a due time to the timer topic
    /// ([`timer::message::inbound`]), so each of them gets delays. With the
    /// idempotent-produce window on, a message whose UNIQ_KEY was stored in its topic
    /// within the window is not stored again: the answer is its first copy ([`dedup`]).
    pub fn put(&self, msg: &tern_engine::record::MessageIn<'_>) -> Result<Put, store::PutError> {
        let one = std::slice::from_ref(msg);
        let claim = self.dedup.claim(one, runtime::now_ms());
        if !claim.is_fresh(0) {
            return Ok(claim.settle(one, &[], runtime::now_ms())[0]);
        }
        let inbound = timer::message::inbound(msg, &self.config.timer, runtime::now_ms())?;
        let as_stored = inbound.message(msg);
        let scheduled = schedule::to_schedule(&as_stored, &self.config.delay_levels)?;
        let stored = self.store.put(
            &scheduled
                .as_ref()
                .map_or(as_stored, |s| s.message(&as_stored)),
        )?;
        self.count_in(msg, scheduled.is_some() || inbound.slot_ms().is_some());
        let put = claim.settle(one, &[stored], runtime::now_ms());
        Ok(Put {
            timed: inbound.slot_ms(),
            ..put[0]
        })
    }

    /// Appends a batch to one queue; returns where each message is, in order. RocketMQ
    /// refuses delayed messages in a batch (one batch, one queue). With the window on,
    /// only the messages not seen in it are stored (one append, so their queue offsets
    /// follow each other); the others are where their first copies are.
    pub fn put_batch(
        &self,
        msgs: &[tern_engine::record::MessageIn<'_>],
    ) -> Result<Vec<Put>, store::PutError> {
        for m in msgs {
            if schedule::message::wanted_level(m)?.is_some() {
                return Err(store::PutError::Illegal(
                    "delayed messages cannot be sent in a batch".into(),
                ));
            }
            // RocketMQ stores a batch's timer messages as plain ones, delivered at once:
            // refused here rather than early.
            if let timer::message::Inbound::Timed(_) =
                timer::message::inbound(m, &self.config.timer, runtime::now_ms())?
            {
                return Err(store::PutError::Illegal(
                    "timer messages cannot be sent in a batch".into(),
                ));
            }
        }
        let claim = self.dedup.claim(msgs, runtime::now_ms());
        let fresh: Vec<tern_engine::record::MessageIn<'_>> = msgs
            .iter()
            .enumerate()
            .filter(|(i, _)| claim.is_fresh(*i))
            .map(|(_, m)| *m)
            .collect();
        let stored = if fresh.is_empty() {
            Vec::new()
        } else {
            self.store.put_batch(&fresh)?
        };
        for m in &fresh {
            self.count_in(m, false);
        }
        Ok(claim.settle(msgs, &stored, runtime::now_ms()))
    }

    /// Counts a stored message for the metrics, under its real topic: a half message's
    /// (`Transaction`), a delayed or timer one's (`Delay`).
    fn count_in(&self, msg: &tern_engine::record::MessageIn<'_>, delayed: bool) {
        let (topic, kind) = if msg.topic == transaction::half::HALF_TOPIC {
            let real = tern_engine::properties::get(
                msg.properties,
                tern_engine::properties::key::REAL_TOPIC,
            );
            (real.unwrap_or(msg.topic), metrics::MessageType::Transaction)
        } else if delayed {
            (msg.topic, metrics::MessageType::Delay)
        } else {
            (msg.topic, metrics::MessageType::Normal)
        };
        self.metrics.message_in(topic, kind, msg.body.len());
    }

    /// Waits until a stored record ending at `end` is as safe as the policy promises
    /// before a send is answered: on disk for SYNC_FLUSH, then on a slave for
    /// SYNC_MASTER (both bounded by `syncFlushTimeout`).
    pub async fn await_stored(&self, end: u64) -> store::Durability {
        if let Some(cm) = &self.controller {
            return self.await_in_sync(cm, end).await;
        }
        let durable = self.store.await_durable(end).await;
        if durable != store::Durability::Durable
            || self.role.get() != config::BrokerRole::SyncMaster
        {
            return durable;
        }
        let waited = self.ha.await_replicated(
            end,
            self.config.ha_max_gap_not_in_sync,
            self.config.sync_flush_timeout,
        );
        match waited.await {
            ha::Replication::Replicated => store::Durability::Durable,
            ha::Replication::SlaveNotAvailable => store::Durability::SlaveNotAvailable,
            ha::Replication::Timeout => store::Durability::SlaveTimeout,
        }
    }
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    ctx: Arc<BrokerCtx>,
    servers: Vec<Server>,
    tasks: Vec<JoinHandle<()>>,
    metrics: Option<tern_shell::http::HttpServer>,
    #[cfg(feature = "grpc")]
    grpc: Option<tern_proxy::Endpoint>,
}

impl Broker {
    /// Opens the store and starts serving. The listen port may be 0 (ephemeral): the
    /// advertised address then uses the bound port.
    pub async fn start(config: BrokerConfig) -> Result<Broker, StartError> {
        let started = Instant::now();
        // A broker told to check access must not serve without its rules.
        let acl = config.acl.open().map_err(StartError::Acl)?;
        let store = store::StoreService::open(&config).map_err(StartError::Store)?;
        if config.controller.enabled {
            // Fenced: a slave that follows nobody until the controllers say otherwise.
            store.set_follower(true);
        }
        let dedup = open_window(&config, &store);
        let timer = timer::TimerService::open(
            config.timer,
            &config.store_root,
            &store,
            // In controller mode any replica may become master; its timer task waits
            // while it is a slave.
            config.role != config::BrokerRole::Slave || config.controller.enabled,
        )
        .map_err(StartError::Timer)?;
        let listen = SocketAddr::new(config.listen_ip, config.listen_port);
        // TLS files are read now: a broker told to serve TLS must not start without it.
        let server_tls =
            tern_shell::tls::ServerTls::new(&config.tls.server).map_err(StartError::Tls)?;
        let client_tls =
            tern_shell::tls::ClientTls::new(&config.tls.client).map_err(StartError::Tls)?;
        let outbound = tern_shell::ConnectionConfig {
            tls: client_tls,
            ..tern_shell::ConnectionConfig::default()
        };
        // The HA port takes the same TLS as the remoting port, and a slave dials its
        // master's with the same client settings as its other connections.
        let ha_tls = (server_tls.clone(), outbound.tls.clone());
        // And the metrics endpoint (HTTPS; plain HTTP too under `permissive`).
        let http_tls = server_tls.clone();
        let server_config = ServerConfig {
            tls: server_tls,
            ..ServerConfig::default()
        };
        // Bound before the context is built (it advertises the bound port); served once
        // it is, so no request meets a broker without one.
        let main = tern_shell::Bound::bind(&listen.to_string())
            .await
            .map_err(|error| StartError::Bind {
                listener: Listener::Remoting,
                addr: listen,
                error,
            })?;
        let port = main.local_addr().port();
        // Masters serve slaves on the HA port; a slave advertises the port it would use.
        // In controller mode every replica may become master: each binds its HA port.
        let ha_listener = if config.role == config::BrokerRole::Slave && !config.controller.enabled
        {
            None
        } else {
            Some(ha::master::bind(&config, port).await?)
        };
        let ha_port = match &ha_listener {
            Some(l) => l.local_addr().map_err(StartError::HaAddr)?.port(),
            None => config.ha_listen_port.unwrap_or(port.wrapping_add(1)),
        };
        let mut listeners = vec![main];
        if config.listen_port > 2 {
            let vip = SocketAddr::new(config.listen_ip, config.listen_port - 2);
            match tern_shell::Bound::bind(&vip.to_string()).await {
                Ok(l) => listeners.push(l),
                Err(e) => log::warn!(
                    "VIP port {vip} unavailable ({e}); old Java clients must disable vipChannel"
                ),
            }
        }
        let controller = if config.controller.enabled {
            let pool = tern_shell::ConnectionPool::new(outbound.clone(), Duration::from_secs(3));
            Some(Arc::new(
                controller::ControllerMode::open(&config.controller, &config.store_root, pool)
                    .map_err(StartError::Controller)?,
            ))
        } else {
            None
        };
        let ctx = Arc::new(BrokerCtx {
            topics: topics::Topics::load(
                &config.store_root,
                &config.cluster_name,
                &config.broker_name,
                config.auto_create_topic,
                config.default_topic_queue_nums,
                config.trace_topic.as_deref(),
            ),
            offsets: offsets::Offsets::load(&config.store_root),
            groups: groups::Groups::load(&config.store_root, config.auto_create_subscription_group),
            clients: clients::Clients::default(),
            holds: longpoll::PullHolds::default(),
            schedule: schedule::ScheduleService::new(&config.store_root, config.delay_levels),
            timer,
            filters: filter::Filters::default(),
            store_host: config.advertised_addr(port),
            register_wanted: runtime::Wakeup::new(),
            started,
            shutdown: Shutdown::new(),
            namesrv: tern_shell::ConnectionPool::new(outbound.clone(), Duration::from_secs(3)),
            master_conn: tern_shell::ConnectionPool::new(outbound, slave_sync::CONNECT_TIMEOUT),
            transactions: transaction::Transactions::default(),
            ha: ha::HaService::new(config.ha_master_address.clone()),
            ha_addr: SocketAddr::new(config.broker_ip2, ha_port),
            acl,
            dedup,
            extra_stats: status::ExtraStats::default(),
            metrics: metrics::Metrics::default(),
            pop: pop::PopService::load(&config.store_root),
            live: config::live::LiveConfig::new(&config),
            role: role::RoleCell::new(config.role),
            controller,
            store,
            config,
        });
        let processor = Arc::new(processor::BrokerProcessor::new(ctx.clone()));
        let servers: Vec<Server> = listeners
            .into_iter()
            .map(|l| l.serve(server_config.clone(), processor.clone()))
            .collect();
        // Register before reporting ready: a client that starts right after must find
        // the broker's routes. A name server that is down only costs its connect error.
        register::register_all(&ctx).await;
        let mut tasks = spawn_tasks(&ctx);
        // A master serves slaves; a slave follows its master; in controller mode a
        // replica does either as its role says, so it runs both.
        let follows = ha_listener.is_none() || ctx.controller.is_some();
        if let Some(l) = ha_listener {
            tasks.push(runtime::spawn(ha::master::run(ctx.clone(), l, ha_tls.0)));
        }
        if follows {
            tasks.push(runtime::spawn(ha::slave::run(ctx.clone(), ha_tls.1)));
            let c = ctx.clone();
            tasks.push(runtime::spawn(slave_sync::run(ctx.clone(), move || {
                c.ha.master().addr
            })));
        }
        if let Some(cm) = &ctx.controller {
            tasks.push(runtime::spawn(controller::manager::run(
                ctx.clone(),
                cm.clone(),
            )));
        }
        let metrics = serve_metrics(&ctx, http_tls).await;
        #[cfg(feature = "grpc")]
        let grpc = match &ctx.config.proxy {
            Some(settings) => Some(grpc::start(&ctx, settings.clone())?),
            None => None,
        };
        log::info!(
            "broker {} of {} serving on {} (started in {:?})",
            ctx.config.broker_name,
            ctx.config.cluster_name,
            ctx.store_host,
            started.elapsed()
        );
        Ok(Broker {
            ctx,
            servers,
            tasks,
            metrics,
            #[cfg(feature = "grpc")]
            grpc,
        })
    }

    /// Where the metrics endpoint listens, when it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.local_addr())
    }

    /// Where the gRPC endpoint listens, when it runs.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "grpc")]
        return self.grpc.as_ref().map(|g| g.local_addr());
        #[cfg(not(feature = "grpc"))]
        None
    }

    /// The address the remoting port is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.servers[0].local_addr()
    }

    /// The address the broker announces for its remoting port (brokerIP1 and the bound
    /// port): where clients reach it.
    pub fn store_host(&self) -> SocketAddr {
        self.ctx.store_host
    }

    /// The shared context (tests and the embedded name server use it).
    pub fn ctx(&self) -> &Arc<BrokerCtx> {
        &self.ctx
    }

    /// Stops serving and closes the store cleanly; the error is the store's close's.
    pub async fn shutdown(self) -> Result<(), store::CloseError> {
        let Broker {
            ctx,
            servers,
            tasks,
            metrics,
            #[cfg(feature = "grpc")]
            grpc,
        } = self;
        // The gRPC clients first: their calls still reach the remoting port meanwhile.
        #[cfg(feature = "grpc")]
        if let Some(g) = grpc {
            runtime::spawn_blocking(move || g.shutdown()).await;
        }
        ctx.shutdown.trigger();
        if let Some(m) = metrics {
            m.shutdown().await;
        }
        ctx.holds.wake_all();
        register::unregister_all(&ctx).await;
        for s in servers {
            s.shutdown().await;
        }
        for t in tasks {
            t.await;
        }
        ctx.master_conn.close_all().await;
        // Queued again in case a write failed; then every write is waited for.
        ctx.offsets.persist();
        ctx.topics.persist();
        ctx.groups.persist();
        ctx.offsets.persisted().await;
        ctx.topics.persisted().await;
        ctx.groups.persisted().await;
        let closed = ctx.store.close();
        // Only now is every delivered copy durable, so the offsets counting them may go.
        if closed.is_ok() {
            ctx.schedule.offsets().save_all();
            ctx.timer.close(&ctx.store);
            ctx.pop.progress.commit_durable(&ctx, true);
            ctx.offsets.persist();
            ctx.offsets.persisted().await;
        }
        ctx.pop.order.persisted().await;
        ctx.pop.modes.persisted().await;
        closed
    }
}

/// Starts the Prometheus endpoint when `metricsExporterType=PROM`.
async fn serve_metrics(
    ctx: &Arc<BrokerCtx>,
    tls: Option<tern_shell::tls::ServerTls>,
) -> Option<tern_shell::http::HttpServer> {
    let c = ctx.clone();
    let render = Arc::new(move || metrics::render(&c));
    tern_shell::metrics::serve(&ctx.config.metrics, render, tls).await
}

/// The idempotent-produce window, rebuilt from the log before the context (and so any
/// send) exists: sends that arrive meanwhile are answered SYSTEM_BUSY and retried.
fn open_window(config: &BrokerConfig, store: &store::StoreService) -> dedup::Window {
    // A slave takes no sends; restarted as a master it rebuilds from its replicated log.
    let span = if config.role == config::BrokerRole::Slave {
        Duration::ZERO
    } else {
        config.duplicate_check_window
    };
    let window = dedup::Window::new(span, config.duplicate_check_max_keys);
    if !window.is_on() {
        return window;
    }
    match window.rebuild(store, runtime::now_ms()) {
        Ok(r) => log::info!(
            "duplicate check window ({:?}, at most {} keys): {} keys from {} records at log \
             offset {} and after, rebuilt in {:?}",
            config.duplicate_check_window,
            config.duplicate_check_max_keys,
            r.keys,
            r.records,
            r.from,
            r.took
        ),
        // The store recovered and verified these records; a failure here is a read
        // error. The broker still serves, with the keys read so far.
        Err(e) => log::error!(
            "duplicate check window: rebuilding from the log failed ({e}); it holds the {} keys \
             read before the failure",
            window.len()
        ),
    }
    window
}

fn spawn_tasks(ctx: &Arc<BrokerCtx>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    let sd = ctx.shutdown.clone();
    tasks.push(runtime::spawn(ctx.store.clone().run_flush(sd.clone())));
    tasks.push(runtime::spawn(ctx.store.clone().run_warm(sd.clone())));
    tasks.push(runtime::spawn(ctx.store.clone().run_prepare(sd.clone())));
    let holds_ctx = ctx.clone();
    tasks.push(runtime::spawn(ctx.store.clone().run_reput(
        sd.clone(),
        move |t, q| {
            if holds_ctx.role.get() == config::BrokerRole::Slave {
                holds_ctx.topics.ensure_replicated(t, q);
            }
            holds_ctx.holds.wake(t, q);
            holds_ctx.schedule.dispatched(t, q);
            holds_ctx.timer.dispatched(t);
        },
    )));
    tasks.push(runtime::spawn(schedule::run(ctx.clone())));
    tasks.push(runtime::spawn(timer::run(ctx.clone())));
    tasks.push(runtime::spawn(
        ctx.store
            .clone()
            .run_checkpoint(sd.clone(), Duration::from_secs(1)),
    ));
    tasks.push(runtime::spawn(register::run(ctx.clone())));
    tasks.push(runtime::spawn(retention::run(ctx.clone())));
    tasks.push(runtime::spawn(metrics::windows::run(ctx.clone())));
    tasks.push(runtime::spawn(transaction::check::run(ctx.clone())));
    tasks.push(runtime::spawn(pop::revive::run(ctx.clone())));
    tasks.push(runtime::spawn(metrics::daily::run(ctx.clone())));
    if let Some(acl) = &ctx.acl {
        tasks.push(runtime::spawn(acl.clone().run_reload(sd.clone())));
    }
    let c = ctx.clone();
    tasks.push(runtime::spawn(async move {
        while !c.shutdown.is_triggered() {
            let _ = runtime::race(runtime::sleep(Duration::from_secs(5)), c.shutdown.wait()).await;
            c.offsets.persist();
        }
    }));
    let c = ctx.clone();
    tasks.push(runtime::spawn(async move {
        while !c.shutdown.is_triggered() {
            let _ = runtime::race(runtime::sleep(Duration::from_secs(10)), c.shutdown.wait()).await;
            let (dead, changed) = c.clients.expire(c.config.client_expiry);
            for conn in dead {
                log::info!("closing silent client connection {}", conn.peer_addr());
                conn.close();
            }
            for g in changed {
                processor::client::notify_ids_changed(&c, &g);
            }
        }
    }));
    tasks
}
