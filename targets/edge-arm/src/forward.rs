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
//! Runs of consecutive records of one topic and local queue go as one batch to the
//! central queue `local queue id mod central queue count`, so per-queue order holds on
//! the central side. While the uplink is down the batch is retried with a growing pause;
//! meanwhile the backlog (stored, not forwarded) is held to its budget by refusing local
//! sends, and forwarded segments are deleted as soon as they are behind. A message the
//! cluster refuses for good is kept aside as a dead letter rather than blocking the rest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tern_broker::store::{LogRecord, StoreService};
use tern_client::{ClientConfig, ClientError, Message, Producer, ProducerConfig};
use tern_shell::message::{MessageExt, decode_pulled};
use tern_shell::runtime::{self, Shutdown};

use crate::config::{EdgeConfig, progress_path};

/// Longest time between two saves of the progress while forwarding.
pub const SAVE_EVERY: Duration = Duration::from_millis(500);
/// First pause after a failed send; doubled up to `edgeRetryMaxMs`.
const FIRST_RETRY: Duration = Duration::from_millis(100);

/// Topics that hold the local broker's own state, never forwarded: delayed messages
/// wait in the schedule topic and are forwarded once delivered to their topic;
/// transaction halves are forwarded as their commit; retries and dead letters belong to
/// local consumer groups.
fn is_local_only(topic: &str) -> bool {
    topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || matches!(
            topic,
            "SCHEDULE_TOPIC_XXXX"
                | "RMQ_SYS_TRANS_HALF_TOPIC"
                | "RMQ_SYS_TRANS_OP_HALF_TOPIC"
                | "TRANS_CHECK_MAX_TIME_TOPIC"
                | "OFFSET_MOVED_EVENT"
        )
}

/// Properties the local broker added for its own bookkeeping; the central broker adds
/// its own.
const LOCAL_PROPERTIES: &[&str] = &[
    "REAL_TOPIC",
    "REAL_QID",
    "DELAY",
    "TRAN_MSG",
    "PGROUP",
    "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "MSG_REGION",
    "TRACE_ON",
];

/// Transaction bits of sysFlag: a prepared half or a rollback is not a message to send.
const SYSFLAG_TRANSACTION_MASK: i32 = 0x3 << 2;
const SYSFLAG_TRANSACTION_NOT_TYPE: i32 = 0;
const SYSFLAG_TRANSACTION_COMMIT: i32 = 0x2 << 2;

/// What is saved: the log offset below which everything was acknowledged centrally.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Log offset.
    pub forwarded: u64,
}

/// What the forwarder did, for the log and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages acknowledged by the central cluster.
    pub forwarded: u64,
    /// Failed attempts (uplink down, central refusal).
    pub failures: u64,
    /// Messages the cluster refused for good, kept aside.
    pub dead_letters: u64,
}

/// The forwarder's state.
#[derive(Debug)]
pub struct Forwarder {
    store: Arc<StoreService>,
    producer: Producer,
    cfg: EdgeConfig,
    progress: Progress,
    saved: Progress,
    saved_at: Instant,
    deleted_below: u64,
    stats: Stats,
}

/// One run of records of the same topic and local queue.
struct Run {
    topic: String,
    local_queue: i32,
    msgs: Vec<Message>,
    /// Each message's record offset in the local log (for dead letters).
    offsets: Vec<u64>,
}

impl Forwarder {
    /// A forwarder over `store`, resuming from its saved progress (clamped into the
    /// durable log: the store may have lost an unflushed tail).
    pub fn new(store: Arc<StoreService>, cfg: EdgeConfig) -> Result<Forwarder, String> {
        let path = progress_path(&cfg);
        let saved: Progress = tern_engine_fs::meta::load(&path)
            .map_err(|e| format!("forwarding progress {}: {e}", path.display()))?
            .unwrap_or_default();
        let (min, _, _) = store.log_span();
        let durable = store.durable_end();
        // Nothing saved yet is 0: the log's start. An offset inside a segment's blank
        // tail is fine: the reader skips it.
        let start = saved.forwarded.clamp(min, durable.max(min));
        if start != saved.forwarded && saved.forwarded != 0 {
            log::warn!(
                "forwarding progress {} is outside the stored log [{min}, {durable}]: resuming at {start}",
                saved.forwarded
            );
        }
        let mut client = ClientConfig::new(&cfg.upstream);
        client.instance_name = Some(format!("tern-edge-{}", std::process::id()));
        let mut pc = ProducerConfig::new(cfg.producer_group.clone());
        // The forwarder retries itself, forever and in order; the producer must not
        // reorder by retrying elsewhere behind its back.
        pc.retry_times_when_send_failed = 0;
        let producer = Producer::new(pc, client).map_err(|e| e.to_string())?;
        log::info!(
            "forwarding to {} from log offset {start} (durable end {durable})",
            cfg.upstream
        );
        Ok(Forwarder {
            store,
            producer,
            progress: Progress { forwarded: start },
            saved,
            saved_at: Instant::now(),
            deleted_below: min,
            cfg,
            stats: Stats::default(),
        })
    }

    /// Forwards until `shutdown`, then saves the progress.
    pub async fn run(mut self, shutdown: Shutdown) -> Stats {
        self.producer.start();
        self.maintain();
        while !shutdown.is_triggered() {
            let flushed = self.store.listen_flushed();
            let at = self.progress.forwarded;
            let read = self.store.read_records(
                at,
                self.store.durable_end(),
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
                    runtime::race(
                        async {
                            let _ = runtime::timeout(Duration::from_millis(500), flushed).await;
                        },
                        shutdown.wait(),
                    )
                    .await;
                }
                continue;
            }
            for run in runs(&records) {
                if !self.send_run(run, &shutdown).await {
                    break;
                }
            }
            if shutdown.is_triggered() {
                break;
            }
            self.progress.forwarded = next;
            self.maintain();
        }
        self.save(true);
        self.producer.shutdown().await;
        self.stats
    }

    /// Sends one run until the central cluster takes it; false at shutdown. A run the
    /// cluster refuses for good is sent again one message at a time, and a message it
    /// refuses for good is set aside as a dead letter, so it cannot hold up the rest.
    async fn send_run(&mut self, run: Run, shutdown: &Shutdown) -> bool {
        let mut wait = FIRST_RETRY;
        let n = run.msgs.len() as u64;
        loop {
            match self.try_send(&run.topic, run.local_queue, &run.msgs).await {
                Ok(()) => {
                    self.stats.forwarded += n;
                    return true;
                }
                Err(e) if refused_for_good(&e) && run.msgs.len() > 1 => {
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
                        };
                        if !Box::pin(self.send_run(one, shutdown)).await {
                            return false;
                        }
                    }
                    return true;
                }
                Err(e) if refused_for_good(&e) => {
                    self.dead_letter(run.offsets[0], &run.topic, &e);
                    return true;
                }
                Err(e) => {
                    self.stats.failures += 1;
                    log::warn!(
                        "forwarding {n} message(s) of {} (local queue {}) failed, retrying in {wait:?}: {e}",
                        run.topic,
                        run.local_queue
                    );
                    self.maintain();
                    if !self.pause(wait, shutdown).await {
                        return false;
                    }
                    wait = (wait * 2).min(self.cfg.retry_max);
                }
            }
        }
    }

    async fn try_send(
        &self,
        topic: &str,
        local_queue: i32,
        msgs: &[Message],
    ) -> Result<(), ClientError> {
        let info = self.producer.publish_info(topic).await?;
        let Some(queue) = info
            .queues
            .get(local_queue.unsigned_abs() as usize % info.queues.len().max(1))
        else {
            return Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            });
        };
        self.producer
            .send_batch_to_queue(msgs.to_vec(), queue)
            .await
            .map(drop)
    }

    /// Keeps the record at `offset` in `<store>/dead-letter/<offset>.record` (its stored
    /// bytes, durable before forwarding moves past it) and logs why. Forwarded segments
    /// are deleted, so the local log is no place to leave it.
    fn dead_letter(&mut self, offset: u64, topic: &str, why: &ClientError) {
        let dir = self.cfg.broker.store_root.join("dead-letter");
        let path = dir.join(format!("{offset:020}.record"));
        let kept = self
            .store
            .read_records(offset, u64::MAX, 1, 1)
            .map_err(|e| e.to_string())
            .and_then(|(r, _)| r.into_iter().next().ok_or_else(|| "gone".to_owned()))
            .and_then(|r| write_durably(&dir, &path, &r.bytes).map_err(|e| e.to_string()));
        self.stats.dead_letters += 1;
        match kept {
            Ok(()) => log::error!(
                "the cluster refused the message at local offset {offset} of {topic} for good ({why}): kept in {}",
                path.display()
            ),
            Err(e) => log::error!(
                "the cluster refused the message at local offset {offset} of {topic} for good ({why}), and keeping it failed: {e}"
            ),
        }
    }

    /// Waits `d` or until shutdown; false at shutdown.
    async fn pause(&self, d: Duration, shutdown: &Shutdown) -> bool {
        runtime::race(runtime::sleep(d), shutdown.wait()).await;
        !shutdown.is_triggered()
    }

    /// Saves progress when due, holds the backlog to its budget, drops forwarded
    /// segments.
    fn maintain(&mut self) {
        self.save(false);
        self.store.set_write_limit(
            self.progress
                .forwarded
                .saturating_add(self.cfg.backlog_budget),
        );
        // Only what the saved progress covers may go: a crash resumes from there.
        let below = self.saved.forwarded;
        if !self.cfg.keep_forwarded && below > self.deleted_below {
            match self.store.delete_log_before(below) {
                Ok(n) if n > 0 => log::info!("deleted {n} forwarded segment(s) below {below}"),
                Ok(_) => {}
                Err(e) => log::warn!("deleting forwarded segments: {e}"),
            }
            self.deleted_below = below;
        }
    }

    fn save(&mut self, now: bool) {
        if self.progress == self.saved || (!now && self.saved_at.elapsed() < SAVE_EVERY) {
            return;
        }
        match tern_engine_fs::meta::save(&progress_path(&self.cfg), &self.progress) {
            Ok(()) => {
                self.saved = self.progress;
                self.saved_at = Instant::now();
            }
            Err(e) => log::error!("saving forwarding progress: {e}"),
        }
    }
}

/// The message to send for a stored record, or `None` for records that stay local.
fn to_forward(m: MessageExt) -> Option<Message> {
    if is_local_only(&m.topic) {
        return None;
    }
    match m.sys_flag & SYSFLAG_TRANSACTION_MASK {
        SYSFLAG_TRANSACTION_NOT_TYPE | SYSFLAG_TRANSACTION_COMMIT => {}
        _ => return None,
    }
    let mut out = Message::new(m.topic, m.body);
    out.flag = m.flag;
    out.properties = m.properties;
    for k in LOCAL_PROPERTIES {
        out.properties.remove(*k);
    }
    Some(out)
}

/// Splits records into runs of one topic and local queue, in log order.
fn runs(records: &[LogRecord]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for r in records {
        let m = match decode_pulled(&r.bytes, true) {
            Ok(mut v) if v.len() == 1 => v.remove(0),
            Ok(_) | Err(_) => {
                // The log's own records were verified when stored; this is a bug or
                // rot. Keep going: stopping would block every later message.
                log::error!("record at log offset {} does not decode: skipped", r.offset);
                continue;
            }
        };
        let queue = m.queue_id;
        let Some(msg) = to_forward(m) else {
            continue;
        };
        match out.last_mut() {
            Some(run) if run.topic == msg.topic && run.local_queue == queue => {
                run.msgs.push(msg);
                run.offsets.push(r.offset);
            }
            _ => out.push(Run {
                topic: msg.topic.clone(),
                local_queue: queue,
                msgs: vec![msg],
                offsets: vec![r.offset],
            }),
        }
    }
    out
}

/// Errors no retry can cure: the message itself is unacceptable to the cluster (too
/// large, malformed). Anything else (no route, network, busy, permission, topic missing)
/// may pass later, and is retried.
fn refused_for_good(e: &ClientError) -> bool {
    match e {
        ClientError::MessageTooLarge { .. } | ClientError::InvalidMessage(_) => true,
        ClientError::Broker { code, .. } => *code == tern_shell::ResponseCode::MessageIllegal.raw(),
        _ => false,
    }
}

fn write_durably(
    dir: &std::path::Path,
    path: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}
