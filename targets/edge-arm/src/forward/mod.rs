//! The forwarder: follows the local commit log in order and sends every user message to
//! the central cluster, at least once, keeping its UNIQ_KEY (its message id) so the
//! central side's consumers can drop a duplicate.
//!
//! Only records already on the local disk are forwarded, so the saved progress never
//! runs past what a power loss keeps: after one, forwarding resumes at or before the
//! recovered end and nothing written later is skipped. Progress is saved after the
//! central cluster acknowledged, at most every [`SAVE_EVERY`] and at shutdown: a crash
//! forwards the last stretch again (duplicates, never gaps).
//!
//! Runs of consecutive records of one topic and local queue go as one batch to one
//! central queue ([`route`]), so per-queue order holds on the central side. While the
//! uplink is down the batch is retried with a growing pause; meanwhile the backlog
//! (stored, not forwarded) is held to its budget by refusing local sends.
//!
//! Three kinds of failure are told apart ([`Failure`]):
//! - passing ones (uplink down, cluster busy, timeouts): the same batch is retried, in
//!   place, every topic waits (order);
//! - a topic the cluster refuses until an operator acts (NO_PERMISSION,
//!   TOPIC_NOT_EXIST, no route): the topic is *parked* ([`progress::Progress::parked`]):
//!   its records from the first unsent one wait in the local log while the other topics
//!   move on; it is tried again after `edgeBlockedRetryMs`, doubling to
//!   `edgeBlockedRetryMaxMs`, and once the cluster takes it its parked records are read
//!   again from the log and sent in order before the main pass sends more of it. Each
//!   change of a topic's state is logged once;
//! - a message refused for good (too large, malformed) or a record that cannot be
//!   decoded becomes a dead letter ([`dead_letter`]) and the rest moves on.
//!
//! Segments are deleted early (without waiting for `fileReservedTime`) only below both
//! the saved progress's oldest unsent record and the oldest record the local broker still
//! needs ([`tern_broker::pending`]: delayed, unresolved transaction halves, unconsumed
//! retries).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_broker::BrokerCtx;
use tern_client::{Message, Producer, ProducerConfig};
use tern_shell::runtime::{self, Shutdown, now_ms};

use crate::config::EdgeConfig;

pub mod dead_letter;
mod failure;
mod parked;
pub mod progress;
pub mod records;
mod report;
pub mod route;

use dead_letter::DeadLetters;
pub use failure::Failure;
use parked::Blocked;
use progress::Progress;
use records::{Item, Run};
pub use report::Report;

/// Longest time between two saves of the progress while forwarding.
pub const SAVE_EVERY: Duration = Duration::from_millis(500);
/// First pause after a failed send; doubled up to `edgeRetryMaxMs`.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// Longest the main pass waits for new records before looking again.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// What the forwarder did, for the log and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages acknowledged by the central cluster.
    pub forwarded: u64,
    /// Failed attempts (uplink down, central refusal).
    pub failures: u64,
    /// Records set aside as dead letters since start.
    pub dead_letters: u64,
}

/// How a run's send ended.
enum Sent {
    /// Taken (or set aside as dead letters).
    Done,
    /// Its topic is parked from the first message not taken.
    Parked,
    /// Shutdown came first.
    Shutdown,
}

/// How a stretch of items ended.
enum Flow {
    /// Every item was dealt with.
    Go,
    /// A catch-up was refused again.
    Parked,
    /// Shutdown came first.
    Shutdown,
}

/// The forwarder's state.
#[derive(Debug)]
pub struct Forwarder {
    ctx: Arc<BrokerCtx>,
    producer: Producer,
    cfg: EdgeConfig,
    dead: DeadLetters,
    progress: Progress,
    saved: Progress,
    saved_at: Instant,
    deleted_below: u64,
    checked_pending_at: Option<Instant>,
    blocked: BTreeMap<String, Blocked>,
    routes: route::Routes,
    report: Arc<Mutex<Report>>,
    stats: Stats,
}

impl Forwarder {
    /// A forwarder over the local broker `ctx`, resuming from its saved progress
    /// (clamped into the durable log: the store may have lost an unflushed tail).
    pub fn new(ctx: Arc<BrokerCtx>, cfg: EdgeConfig) -> Result<Forwarder, String> {
        let mut saved = progress::load(&cfg)?;
        let store = ctx.store();
        let (min, _, _) = store.log_span();
        let durable = store.durable_end();
        // Nothing saved yet is 0: the log's start. An offset inside a segment's blank
        // tail is fine: the reader skips it.
        let clamp = |what: &str, at: u64| {
            let to = at.clamp(min, durable.max(min));
            if to != at && at != 0 {
                log::warn!(
                    "forwarding progress ({what}) {at} is outside the stored log [{min}, {durable}]: resuming at {to}"
                );
            }
            to
        };
        saved.forwarded = clamp("main pass", saved.forwarded);
        for (topic, at) in saved.parked.iter_mut() {
            *at = clamp(topic, *at);
        }
        let mut client = cfg.upstream_client()?;
        client.instance_name = Some(format!("tern-edge-{}", std::process::id()));
        let mut pc = ProducerConfig::new(cfg.producer_group.clone());
        // The forwarder retries itself, forever and in order; the producer must not
        // reorder by retrying elsewhere behind its back.
        pc.retry_times_when_send_failed = 0;
        let producer = Producer::new(pc, client).map_err(|e| e.to_string())?;
        log::info!(
            "forwarding to {} from log offset {} (durable end {durable}){}",
            cfg.upstream,
            saved.forwarded,
            if saved.parked.is_empty() {
                String::new()
            } else {
                format!(
                    "; parked before the restart: {}",
                    saved.parked.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            }
        );
        let now = Instant::now();
        let blocked = saved
            .parked
            .keys()
            .map(|t| {
                (
                    t.clone(),
                    Blocked {
                        state: "PARKED",
                        detail: "parked before the restart".into(),
                        since_ms: now_ms(),
                        retry_at: now,
                        wait: cfg.blocked_retry,
                    },
                )
            })
            .collect();
        Ok(Forwarder {
            dead: DeadLetters::new(&cfg.broker.store_root),
            ctx,
            producer,
            progress: saved.clone(),
            saved,
            saved_at: now,
            deleted_below: min,
            checked_pending_at: None,
            blocked,
            routes: route::Routes::new(cfg.route_hold),
            report: Arc::new(Mutex::new(Report::default())),
            cfg,
            stats: Stats::default(),
        })
    }

    /// The state operators see, updated as the forwarder goes.
    pub fn report(&self) -> Arc<Mutex<Report>> {
        self.report.clone()
    }

    /// Forwards until `shutdown`, then saves the progress.
    pub async fn run(mut self, shutdown: Shutdown) -> Stats {
        self.producer.start();
        self.maintain();
        while !shutdown.is_triggered() {
            if !self.retry_blocked(&shutdown).await {
                break;
            }
            let flushed = self.ctx.store().listen_flushed();
            let at = self.past_deleted(self.progress.forwarded, "the main pass");
            self.progress.forwarded = at;
            let read = self.ctx.store().read_records(
                at,
                self.ctx.store().durable_end(),
                self.cfg.batch_bytes,
                self.cfg.batch_messages,
            );
            let (records, next) = match read {
                Ok(r) => r,
                Err(e) => {
                    log::error!("reading the local log for forwarding: {e}");
                    self.pause(Duration::from_secs(1), &shutdown).await;
                    continue;
                }
            };
            if records.is_empty() {
                self.progress.forwarded = next;
                self.maintain();
                if next == at {
                    let wait = self.idle_wait();
                    runtime::race(
                        async {
                            let _ = runtime::timeout(wait, flushed).await;
                        },
                        shutdown.wait(),
                    )
                    .await;
                }
                continue;
            }
            let parked = |t: &str| self.progress.parked.contains_key(t);
            let items = records::items(&records, parked);
            if let Flow::Shutdown = self.send_items(items, None, &shutdown).await {
                break;
            }
            self.progress.forwarded = next;
            self.maintain();
        }
        self.save(true);
        self.publish_report();
        self.producer.shutdown().await;
        self.stats
    }

    /// How long the idle main pass may wait: until a parked topic is due, at most
    /// [`IDLE_WAIT`].
    fn idle_wait(&self) -> Duration {
        let now = Instant::now();
        self.blocked
            .values()
            .map(|b| b.retry_at.saturating_duration_since(now))
            .fold(IDLE_WAIT, Duration::min)
            .max(Duration::from_millis(1))
    }

    /// Sends `items` in order; with `only`, just that topic's (a parked topic's
    /// catch-up, which stops at the first refusal).
    async fn send_items(
        &mut self,
        items: Vec<Item>,
        only: Option<&str>,
        shutdown: &Shutdown,
    ) -> Flow {
        for item in items {
            match item {
                Item::Run(run) => {
                    // The main pass leaves a topic parked meanwhile to its catch-up.
                    if only.is_none() && self.progress.parked.contains_key(&run.topic) {
                        continue;
                    }
                    match self.send_run(run, shutdown).await {
                        Sent::Done => {}
                        Sent::Parked if only.is_some() => return Flow::Parked,
                        Sent::Parked => {}
                        Sent::Shutdown => return Flow::Shutdown,
                    }
                }
                Item::Undecodable { offset, topic, why } => {
                    let mine = match (only, &topic) {
                        (Some(only), t) => t.as_deref() == Some(only),
                        (None, Some(t)) => !self.progress.parked.contains_key(t),
                        (None, None) => true,
                    };
                    if !mine {
                        continue;
                    }
                    let topic = topic.unwrap_or_else(|| "?".into());
                    let why = format!("undecodable: {why}");
                    if !self.dead_letter(offset, &topic, &why, shutdown).await {
                        return Flow::Shutdown;
                    }
                }
            }
        }
        Flow::Go
    }

    /// Sends one run until the central cluster takes it (see the module docs for what
    /// each failure does).
    async fn send_run(&mut self, run: Run, shutdown: &Shutdown) -> Sent {
        let mut wait = FIRST_RETRY;
        let n = run.msgs.len() as u64;
        loop {
            let failure = match self
                .try_send(&run.topic, run.local_queue, &run.msgs, run.compression)
                .await
            {
                Ok(()) => {
                    self.stats.forwarded += n;
                    self.report_lock().last_failure = None;
                    return Sent::Done;
                }
                Err(f) => f,
            };
            self.stats.failures += 1;
            match failure {
                Failure::ForGood(e) if run.msgs.len() > 1 => {
                    log::warn!(
                        "the cluster refused a batch of {n} of {} for good ({e}): sending them one by one",
                        run.topic
                    );
                    for (msg, offset) in run.msgs.into_iter().zip(run.offsets) {
                        let one = Run {
                            topic: run.topic.clone(),
                            local_queue: run.local_queue,
                            msgs: vec![msg],
                            offsets: vec![offset],
                            compression: run.compression,
                        };
                        match Box::pin(self.send_run(one, shutdown)).await {
                            Sent::Done => {}
                            other => return other,
                        }
                    }
                    return Sent::Done;
                }
                Failure::ForGood(e) => {
                    let why = format!("refused for good by the cluster: {e}");
                    return if self
                        .dead_letter(run.offsets[0], &run.topic, &why, shutdown)
                        .await
                    {
                        Sent::Done
                    } else {
                        Sent::Shutdown
                    };
                }
                Failure::Blocked { state, detail } => {
                    self.park(&run.topic, run.offsets[0], state, detail);
                    return Sent::Parked;
                }
                Failure::Passing(e) => {
                    log::warn!(
                        "forwarding {n} message(s) of {} (local queue {}) failed, retrying in {wait:?}: {e}",
                        run.topic,
                        run.local_queue
                    );
                    self.report_lock().last_failure = Some(e);
                    self.maintain();
                    if !self.pause(wait, shutdown).await {
                        return Sent::Shutdown;
                    }
                    wait = (wait * 2).min(self.cfg.retry_max);
                }
            }
        }
    }

    /// Sends `msgs` to the central queue of `local_queue`: as one batch, or (with
    /// `compression`, one message) with its body compressed as stored.
    async fn try_send(
        &mut self,
        topic: &str,
        local_queue: i32,
        msgs: &[Message],
        compression: Option<i32>,
    ) -> Result<(), Failure> {
        let info = self
            .producer
            .publish_info(topic)
            .await
            .map_err(|e| Failure::of(&e))?;
        let queue =
            self.routes
                .queue_for(&mut self.progress.routes, topic, local_queue, &info.queues)?;
        let sent = match (compression, msgs) {
            (Some(bits), [one]) => {
                self.producer
                    .send_compressed_to_queue(one.clone(), bits, &queue)
                    .await
            }
            (None, [one]) if records::is_timed(one) => {
                self.producer.send_to_queue(one.clone(), &queue).await
            }
            _ => {
                self.producer
                    .send_batch_to_queue(msgs.to_vec(), &queue)
                    .await
            }
        };
        sent.map(drop).map_err(|e| Failure::of(&e))
    }

    /// `at`, or the log's start when retention (age or disk pressure) deleted the
    /// records there before they were forwarded: said at ERROR, since they are lost.
    fn past_deleted(&self, at: u64, what: &str) -> u64 {
        let min = self.ctx.store().log_span().0;
        if at < min {
            log::error!(
                "retention deleted the log below {min} before {what} forwarded it (from {at}): \
                 those records are lost; continuing at {min}"
            );
            return min;
        }
        at
    }

    /// Keeps the record at `offset` as a dead letter with `why`; retried (the disk may
    /// be full) until kept, since forwarding must not move past a record it has not
    /// kept. False at shutdown.
    async fn dead_letter(
        &mut self,
        offset: u64,
        topic: &str,
        why: &str,
        shutdown: &Shutdown,
    ) -> bool {
        loop {
            let kept = self
                .ctx
                .store()
                .read_records(offset, u64::MAX, 1, 1)
                .and_then(|(r, _)| r.into_iter().next().ok_or_else(|| "gone".to_owned()))
                .and_then(|r| {
                    self.dead
                        .keep(offset, &r.bytes, why)
                        .map_err(|e| e.to_string())
                });
            match kept {
                Ok(path) => {
                    self.stats.dead_letters += 1;
                    log::error!(
                        "the message at local offset {offset} of {topic} cannot be forwarded ({why}): kept in {}",
                        path.display()
                    );
                    self.publish_report();
                    return true;
                }
                Err(e) => {
                    log::error!(
                        "the message at local offset {offset} of {topic} cannot be forwarded ({why}), \
                         and keeping it as a dead letter failed ({e}): trying again"
                    );
                    if !self.pause(self.cfg.retry_max, shutdown).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Waits `d` or until shutdown; false at shutdown.
    async fn pause(&self, d: Duration, shutdown: &Shutdown) -> bool {
        runtime::race(runtime::sleep(d), shutdown.wait()).await;
        !shutdown.is_triggered()
    }

    fn report_lock(&self) -> std::sync::MutexGuard<'_, Report> {
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish_report(&self) {
        let blocked = self
            .blocked
            .iter()
            .map(|(t, b)| {
                let at = self.progress.parked.get(t).copied().unwrap_or_default();
                (
                    t.clone(),
                    format!("{} since {} at {at}: {}", b.state, b.since_ms, b.detail),
                )
            })
            .collect();
        let mut r = self.report_lock();
        r.stats = self.stats;
        r.forwarded_offset = self.progress.forwarded;
        r.oldest_unsent = self.progress.oldest_unsent();
        r.blocked = blocked;
    }

    /// Saves progress when due, holds the backlog to its budget, drops segments no one
    /// needs.
    fn maintain(&mut self) {
        self.save(false);
        // The budget counts every byte not yet forwarded, parked topics' included: a
        // topic blocked for long ends in refused local sends, not in a full disk.
        self.ctx.store().set_write_limit(
            self.progress
                .oldest_unsent()
                .saturating_add(self.cfg.backlog_budget),
        );
        self.publish_report();
        if self.cfg.keep_forwarded {
            return;
        }
        // Only what the saved progress covers may go: a crash resumes from there.
        let below = self.saved.oldest_unsent();
        if below <= self.deleted_below
            || self
                .checked_pending_at
                .is_some_and(|t| t.elapsed() < SAVE_EVERY)
        {
            return;
        }
        self.checked_pending_at = Some(Instant::now());
        let pending = self.ctx.oldest_pending();
        self.report_lock().oldest_pending = pending.as_ref().map(ToString::to_string);
        let cut = pending.as_ref().map_or(below, |p| p.log_offset.min(below));
        if cut <= self.deleted_below {
            return;
        }
        match self.ctx.store().delete_log_before(cut) {
            Ok(n) if n > 0 => log::info!(
                "deleted {n} segment(s) below {cut}{}",
                match &pending {
                    Some(p) if p.log_offset < below => format!(" (kept from there: a {p})"),
                    _ => String::new(),
                }
            ),
            Ok(_) => {}
            Err(e) => log::warn!("deleting forwarded segments: {e}"),
        }
        // The store deletes no segment past its last durable checkpoint (a second old at
        // most): what it could not take yet is tried again on a later pass, even if
        // nothing more is forwarded meanwhile.
        let seg = self.cfg.broker.commit_log_segment_bytes.max(1);
        let (min, _, _) = self.ctx.store().log_span();
        self.deleted_below = if min >= cut - cut % seg { cut } else { min };
    }

    fn save(&mut self, now: bool) {
        if self.progress == self.saved || (!now && self.saved_at.elapsed() < SAVE_EVERY) {
            return;
        }
        match progress::save(&self.cfg, &self.progress) {
            Ok(()) => {
                self.saved = self.progress.clone();
                self.saved_at = Instant::now();
            }
            Err(e) => log::error!("saving forwarding progress: {e}"),
        }
    }
}
