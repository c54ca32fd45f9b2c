//! The second Debian peer: NATS JetStream (`nats-server` from Debian, driven by
//! `async-nats`, the NATS maintainers' Rust client). A file-backed stream is what a user
//! who wants a light durable log with acknowledged publishes would pick instead of a
//! RocketMQ broker.
//!
//! Durability is matched to the broker's flush policy, as for Redis: ASYNC_FLUSH runs
//! JetStream's default (the PubAck leaves once the message is in the stream's store,
//! before any fsync; blocks are fsynced on the sync interval, 2 minutes), SYNC_FLUSH runs `jetstream { sync_interval: always }` (fsync
//! before the ack). That option came with NATS 2.10; Debian's 2.9 refuses it, and then
//! the SYNC_FLUSH rows are skipped rather than run with a weaker promise.
//!
//! Each sender has its own connection (its own client), as each Tern sender has its own
//! producer. Sync publish: one publish, then its PubAck, in turn. Async publish:
//! [`ASYNC_WINDOW`] publishes in flight, as Tern's async sender. The backlog scenario's
//! rows: a fill, recovery after `kill -9`, and catch-up from sequence 1 with an ordered
//! consumer, the client's way to read a stream through.
//!
//! async-nats runs on tokio; the peer has a runtime of its own, with as many workers as
//! cores (Tern's client runs on async-std, one thread per core).

use std::collections::VecDeque;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, Context, consumer::push, stream};
use hdrhistogram::Histogram;
use tokio::runtime::Runtime;
use tokio_stream::StreamExt as _;

use crate::load::{ASYNC_WINDOW, LoadResult, Mode, stamped_body};
use crate::proc::{Server, free_port, start_listening, which};
use crate::suite::{NATS, SuiteParams, log_row, measured};
use crate::table::{Measure, histogram, record};

/// The stream every row uses, and the one subject it holds.
const STREAM: &str = "bench";
const SUBJECT: &str = "bench.msgs";
/// Publishes in flight per fill sender: enough that the fill is bound by the server.
const FILL_WINDOW: usize = 256;
/// Fill senders, as Tern's fill uses.
const FILL_SENDERS: u32 = 4;

/// A running `nats-server` with the benchmark stream, and the runtime its clients use.
#[derive(Debug)]
pub struct Nats {
    /// The server process (killed when dropped).
    pub server: Server,
    rt: Runtime,
}

/// Starts `nats-server` with JetStream storing in `dir`, and creates the stream (or finds
/// it, when `dir` holds one). `None`, with the reason on stderr, when it is not
/// installed or cannot give the durability asked for.
pub fn start(dir: &Path, fsync_always: bool) -> Result<Option<Nats>, String> {
    let Some(bin) = which("nats-server") else {
        eprintln!("{NATS}: nats-server not installed (apt-get install nats-server): skipped");
        return Ok(None);
    };
    let store = dir.join("store");
    fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
    let port = free_port().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
    if fsync_always {
        // Only a config file sets the sync interval, and the server refuses a store_dir
        // given both there and as -sd: the config file carries the whole jetstream block.
        let conf = dir.join("nats.conf");
        let text = format!("jetstream {{\n  store_dir: {store:?}\n  sync_interval: always\n}}\n");
        fs::write(&conf, text).map_err(|e| format!("{}: {e}", conf.display()))?;
        cmd.arg("-c").arg(&conf);
    } else {
        cmd.arg("-js").arg("-sd").arg(&store);
    }
    let addr = format!("127.0.0.1:{port}");
    let log = dir.join("nats.log");
    let server = match start_listening("nats-server", cmd, &addr, log.clone()) {
        Ok(s) => s,
        Err(_)
            if fsync_always
                && fs::read_to_string(&log).is_ok_and(|l| l.contains("sync_interval")) =>
        {
            eprintln!(
                "{NATS}: this nats-server has no `sync_interval: always` (NATS 2.10+): \
                 SYNC_FLUSH rows skipped"
            );
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let workers = thread::available_parallelism().map_or(2, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nats-peer")
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let js = connect(&addr).await?;
        let config = stream::Config {
            name: STREAM.into(),
            subjects: vec![SUBJECT.into()],
            storage: stream::StorageType::File,
            ..Default::default()
        };
        js.get_or_create_stream(config)
            .await
            .map_err(|e| format!("{NATS}: create stream: {e}"))
    })?;
    Ok(Some(Nats { server, rt }))
}

/// A JetStream context on a new connection to `addr`.
async fn connect(addr: &str) -> Result<Context, String> {
    let client = async_nats::connect(addr)
        .await
        .map_err(|e| format!("{NATS} {addr}: {e}"))?;
    Ok(jetstream::new(client))
}

impl Nats {
    /// The produce scenario's row for `mode` at `n` senders, logged and pushed to `rows`:
    /// sync publish (one in flight) or async publish ([`ASYNC_WINDOW`] in flight); other
    /// modes have no JetStream counterpart. A failure costs the row, not the run.
    pub fn produce(
        &self,
        mode: Mode,
        flush: &str,
        n: u32,
        p: &SuiteParams,
        rows: &mut Vec<Measure>,
    ) {
        let (window, name) = match mode {
            Mode::Sync => (1, "sync publish"),
            Mode::Async => (ASYNC_WINDOW, "async publish"),
            Mode::Oneway | Mode::Batch => return,
        };
        let cpu_before = self.server.cpu_time().ok();
        let r = match self.load(n, window, p.body, p.warmup, p.duration) {
            Ok(r) => r,
            Err(e) => return eprintln!("{NATS}: {name} {flush} P={n}: {e}"),
        };
        let m = measured("produce", NATS, &format!("{name} {flush}"), n, p.body, &r);
        log_row(&m);
        // The server's CPU per message, as printed for the brokers (warm-up included,
        // its messages estimated).
        let span = (p.warmup + p.duration).as_secs_f64() / p.duration.as_secs_f64();
        let msgs = (r.msgs.max(1) as f64 * span).max(1.0);
        if let (Some(a), Ok(z)) = (cpu_before, self.server.cpu_time()) {
            let us = (z - a).as_secs_f64() * 1e6 / msgs;
            eprintln!("  {:<14} CPU per message: server {us:.2} µs", "");
        }
        rows.push(m);
    }

    /// `senders` connections publishing `body`-byte messages with `window` in flight each
    /// for `warmup` + `duration`; the stream is purged after.
    fn load(
        &self,
        senders: u32,
        window: usize,
        body: usize,
        warmup: Duration,
        duration: Duration,
    ) -> Result<LoadResult, String> {
        let addr = self.server.addr.as_str();
        self.rt.block_on(async {
            let mut contexts = Vec::new();
            for _ in 0..senders {
                contexts.push(connect(addr).await?);
            }
            let t0 = Instant::now() + warmup;
            let end = t0 + duration;
            let errors = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = contexts
                .into_iter()
                .map(|js| tokio::spawn(sender(js, window, body, t0, end, errors.clone())))
                .collect();
            let mut hist = histogram();
            let mut msgs = 0;
            for t in tasks {
                let (n, h) = t.await.map_err(|e| format!("sender: {e}"))?;
                msgs += n;
                let _ = hist.add(&h);
            }
            // Keep the disk flat between runs, as the Redis peer deletes its stream.
            if let Ok(s) = connect(addr).await?.get_stream(STREAM).await {
                let _ = s.purge().await;
            }
            Ok(LoadResult {
                msgs,
                secs: duration.as_secs_f64(),
                hist,
                errors: errors.load(Ordering::Relaxed),
            })
        })
    }

    /// Publishes `total` messages of `body` bytes from [`FILL_SENDERS`] connections,
    /// [`FILL_WINDOW`] in flight each; returns the seconds until the last PubAck.
    fn fill(&self, total: u64, body: usize) -> Result<f64, String> {
        let addr = self.server.addr.as_str();
        self.rt.block_on(async {
            let left = Arc::new(AtomicU64::new(total));
            let mut contexts = Vec::new();
            for _ in 0..FILL_SENDERS {
                contexts.push(connect(addr).await?);
            }
            let start = Instant::now();
            let tasks: Vec<_> = contexts
                .into_iter()
                .map(|js| tokio::spawn(fill_sender(js, body, left.clone())))
                .collect();
            for t in tasks {
                t.await.map_err(|e| format!("fill: {e}"))??;
            }
            Ok(start.elapsed().as_secs_f64())
        })
    }

    /// Reads the whole stream from sequence 1 with an ordered push consumer (no acks,
    /// flow control); returns messages read and seconds from creating the consumer to the
    /// last message. The push form: it read 100k messages ~10% faster here than the
    /// ordered pull consumer (500 per pull), and the peer should be measured at its best.
    fn catch_up(&self) -> Result<(u64, f64), String> {
        let addr = self.server.addr.as_str();
        self.rt.block_on(async {
            let js = connect(addr).await?;
            let mut s = js.get_stream(STREAM).await.map_err(|e| e.to_string())?;
            let total = s.info().await.map_err(|e| e.to_string())?.state.messages;
            let start = Instant::now();
            let consumer = s
                .create_consumer(push::OrderedConfig {
                    deliver_subject: js.client().new_inbox(),
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("ordered consumer: {e}"))?;
            let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
            let read = async {
                let mut got = 0u64;
                while got < total {
                    match messages.next().await {
                        Some(Ok(_)) => got += 1,
                        Some(Err(e)) => return Err(format!("at {got} of {total}: {e}")),
                        None => break,
                    }
                }
                Ok(got)
            };
            // Bounded: a consumer that stops delivering must not hang the run.
            let limit = Duration::from_secs(60 + total / 10_000);
            let got = tokio::time::timeout(limit, read)
                .await
                .map_err(|_| format!("catch-up stalled after {limit:?}"))??;
            Ok((got, start.elapsed().as_secs_f64()))
        })
    }
}

/// One sender's loop: keeps `window` publishes in flight until `end`, then waits for the
/// rest; times each from its publish to its PubAck. Returns the timed part's messages.
async fn sender(
    js: Context,
    window: usize,
    body: usize,
    t0: Instant,
    end: Instant,
    errors: Arc<AtomicU64>,
) -> (u64, Histogram<u64>) {
    let mut hist = histogram();
    let mut msgs = 0u64;
    let mut in_flight = VecDeque::with_capacity(window);
    loop {
        while in_flight.len() < window && Instant::now() < end {
            let sent = Instant::now();
            match js.publish(SUBJECT, stamped_body(body).into()).await {
                Ok(ack) => in_flight.push_back((sent, ack)),
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let Some((sent, ack)) = in_flight.pop_front() else {
            break;
        };
        let ok = ack.await.is_ok();
        let done = Instant::now();
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        } else if sent >= t0 && done <= end {
            record(&mut hist, (done - sent).as_nanos() as u64);
            msgs += 1;
        }
    }
    (msgs, hist)
}

/// A fill sender: takes messages from `left` and publishes them, [`FILL_WINDOW`] in
/// flight; the first failed publish ends the fill.
async fn fill_sender(js: Context, body: usize, left: Arc<AtomicU64>) -> Result<(), String> {
    let mut in_flight = VecDeque::with_capacity(FILL_WINDOW);
    loop {
        while in_flight.len() < FILL_WINDOW
            && left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| l.checked_sub(1))
                .is_ok()
        {
            let ack = js.publish(SUBJECT, stamped_body(body).into()).await;
            in_flight.push_back(ack.map_err(|e| format!("publish: {e}"))?);
        }
        let Some(ack) = in_flight.pop_front() else {
            return Ok(());
        };
        ack.await.map_err(|e| format!("PubAck: {e}"))?;
    }
}

/// The backlog scenario's JetStream rows: start-up and idle RSS, a fill of
/// `p.backlog` messages, recovery after `kill -9`, catch-up from sequence 1. A failure
/// costs these rows, not the run.
pub fn backlog(p: &SuiteParams, rows: &mut Vec<Measure>) {
    let dir = p.dir.join("nats-backlog");
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = backlog_in(p, &dir, rows) {
        eprintln!("{NATS}: backlog scenario failed: {e}");
    }
    let _ = fs::remove_dir_all(&dir);
}

fn backlog_in(p: &SuiteParams, dir: &Path, rows: &mut Vec<Measure>) -> Result<(), String> {
    let push = |rows: &mut Vec<Measure>, case: &str, v: f64, unit: &str| {
        eprintln!("  {NATS:<14} {case:<34} {v:>9.1} {unit}");
        rows.push(Measure::value("footprint", NATS, case, v, unit));
    };
    let Some(mut nats) = start(dir, false)? else {
        return Ok(());
    };
    eprintln!("backlog: {NATS}");
    let startup = nats.server.startup.as_secs_f64() * 1e3;
    push(rows, "start-up to listening, empty", startup, "ms");
    // As for the brokers: RSS once it has settled.
    thread::sleep(Duration::from_secs(1));
    let rss = nats.server.rss().unwrap_or_default();
    push(rows, "RSS idle", rss.total_mib(), "MiB");
    push(rows, "RSS idle, anon", rss.anon_kib as f64 / 1024.0, "MiB");
    let secs = nats.fill(p.backlog, p.body)?;
    let case = format!("fill (async publish, {FILL_SENDERS} senders)");
    let m = Measure::rate("catchup", NATS, &case, FILL_SENDERS, p.body).with_rate(p.backlog, secs);
    log_row(&m);
    rows.push(m);
    // Crash and recover, as the brokers do before their catch-up.
    nats.server.kill9();
    drop(nats);
    let nats = start(dir, false)?.ok_or("nats-server went missing")?;
    let gib = p.backlog as f64 * p.body as f64 / (1u64 << 30) as f64;
    let ms = nats.server.startup.as_secs_f64() * 1e3;
    push(
        rows,
        &format!("recovery after kill -9, {gib:.2} GiB"),
        ms,
        "ms",
    );
    let (n, secs) = nats.catch_up()?;
    let mut m =
        Measure::rate("catchup", NATS, "ordered consumer from seq 1", 0, p.body).with_rate(n, secs);
    m.errors = p.backlog.saturating_sub(n);
    log_row(&m);
    rows.push(m);
    Ok(())
}
