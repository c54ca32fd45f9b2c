//! Load through the Tern client against any RocketMQ-protocol broker (Tern or a peer): P
//! senders, each with its own producer (its own client instance and connection), sending
//! for a fixed time after a warm-up, each send timed into a latency histogram.
//!
//! The first 8 bytes of every body are the send time (nanoseconds since [`epoch`]), so a
//! consumer in this process can time delivery.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tern_client::admin::Admin;
use tern_client::{ClientConfig, ClientTls, Message, Producer, ProducerConfig, Target};
use tern_shell::body::TopicConfig;
use tern_shell::runtime;

use crate::table::{histogram, record};

/// Queues of the benchmark topic (RocketMQ's default for a new topic).
pub const QUEUES: i32 = 4;
/// Messages per batch in `batch` mode (RocketMQ's default pull batch, too).
pub const BATCH: usize = 32;
/// Sends in flight per sender in `async` mode.
pub const ASYNC_WINDOW: usize = 16;

/// How a sender sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `send`: one at a time, waiting for the answer.
    Sync,
    /// `send_async`: up to [`ASYNC_WINDOW`] in flight.
    Async,
    /// `send_oneway`: no answer (latency is the time to hand it to the socket).
    Oneway,
    /// `send_batch` of [`BATCH`] messages, one at a time.
    Batch,
}

impl Mode {
    /// Every mode, in table order.
    pub const ALL: [Mode; 4] = [Mode::Sync, Mode::Async, Mode::Oneway, Mode::Batch];

    /// The mode named `s` (`sync`, `async`, `oneway`, `batch`).
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "sync" => Some(Mode::Sync),
            "async" => Some(Mode::Async),
            "oneway" => Some(Mode::Oneway),
            "batch" | "batch32" => Some(Mode::Batch),
            _ => None,
        }
    }

    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::Oneway => "oneway",
            Mode::Batch => "batch32",
        }
    }
}

/// One load run.
#[derive(Clone, Debug)]
pub struct Load {
    /// Name server address.
    pub namesrv: String,
    /// Topic (created beforehand with [`create_topic`]).
    pub topic: String,
    /// Send mode.
    pub mode: Mode,
    /// Concurrent senders.
    pub producers: u32,
    /// Body bytes.
    pub body: usize,
    /// Timed part of the run.
    pub duration: Duration,
    /// Untimed sends before it (connections, routes, caches).
    pub warmup: Duration,
    /// Connect with TLS (the `tls` scenario); none sends in plaintext.
    pub tls: Option<ClientTls>,
}

/// What a run measured: messages acknowledged (or written, for oneway) in the timed part.
#[derive(Debug)]
pub struct LoadResult {
    /// Messages.
    pub msgs: u64,
    /// Seconds of the timed part.
    pub secs: f64,
    /// Per-send latency, nanoseconds (per batch in batch mode).
    pub hist: Histogram<u64>,
    /// Failed sends.
    pub errors: u64,
}

/// The process-wide time origin for send stamps.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`].
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// A body of `len` bytes stamped with the current time in its first 8 bytes.
pub fn stamped_body(len: usize) -> Vec<u8> {
    // The pattern is built once per length: generating it byte by byte per message cost
    // the sending side ~8% of the machine in batch runs, time the broker then lacked.
    thread_local! {
        static PATTERN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let len = len.max(8);
    let mut b = PATTERN.with_borrow_mut(|p| {
        if p.len() != len {
            *p = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
        }
        p.clone()
    });
    b[..8].copy_from_slice(&now_ns().to_le_bytes());
    b
}

/// The send stamp of a body made by [`stamped_body`].
pub fn stamp_of(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(..8)?.try_into().ok()?))
}

/// Creates `topic` with [`QUEUES`] queues on every broker the name server knows.
pub async fn create_topic(namesrv: &str, topic: &str) -> Result<(), String> {
    let admin = Admin::new(ClientConfig::new(namesrv)).map_err(|e| e.to_string())?;
    let masters = admin.all_masters().await.map_err(|e| e.to_string())?;
    let cfg = TopicConfig {
        topic_name: topic.into(),
        read_queue_nums: QUEUES,
        write_queue_nums: QUEUES,
        ..TopicConfig::default()
    };
    for (_, addr) in masters {
        admin
            .create_topic(&Target::Broker(addr), &cfg)
            .await
            .map_err(|e| e.to_string())?;
    }
    admin.shutdown().await;
    // The broker registers the topic with the name server; wait until routes show it.
    wait_for_route(namesrv, topic).await
}

/// Waits (up to 60 s) until the name server routes `topic`: after a restart a broker
/// may register its topics only on its next registration round.
pub async fn wait_for_route(namesrv: &str, topic: &str) -> Result<(), String> {
    let admin = Admin::new(ClientConfig::new(namesrv)).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut result = Ok(());
    while admin.topic_route(topic).await.is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            result = Err(format!("topic {topic} has no route after 60 s"));
            break;
        }
        runtime::sleep(Duration::from_millis(50)).await;
    }
    admin.shutdown().await;
    result
}

/// Starts `n` producers, each with its own client instance, and warms their routes.
pub async fn producers(namesrv: &str, topic: &str, n: u32) -> Result<Vec<Producer>, String> {
    producers_with(namesrv, topic, n, None).await
}

/// [`producers`], connecting with `tls` when given.
pub async fn producers_with(
    namesrv: &str,
    topic: &str,
    n: u32,
    tls: Option<&ClientTls>,
) -> Result<Vec<Producer>, String> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut cfg = ProducerConfig::new(format!("bench_producer_{i}"));
        cfg.send_timeout = Duration::from_secs(10);
        cfg.compress_over_bytes = usize::MAX;
        let mut client = ClientConfig::new(namesrv);
        client.tls = tls.cloned();
        let p = Producer::new(cfg, client).map_err(|e| e.to_string())?;
        p.start();
        p.publish_info(topic).await.map_err(|e| e.to_string())?;
        out.push(p);
    }
    Ok(out)
}

/// Runs the load; producers are created for it and shut down after.
pub async fn run(load: &Load) -> Result<LoadResult, String> {
    let prods = producers_with(
        &load.namesrv,
        &load.topic,
        load.producers,
        load.tls.as_ref(),
    )
    .await?;
    let t0 = Instant::now() + load.warmup;
    let end = t0 + load.duration;
    let errors = std::sync::Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for p in &prods {
        let (p, load, errors) = (p.clone(), load.clone(), errors.clone());
        tasks.push(runtime::spawn(async move {
            sender(&p, &load, t0, end, &errors).await
        }));
    }
    let mut hist = histogram();
    let mut msgs = 0;
    for t in tasks {
        let (n, h) = t.await;
        msgs += n;
        let _ = hist.add(&h);
    }
    let secs = (Instant::now().min(end).max(t0) - t0).as_secs_f64();
    for p in &prods {
        p.shutdown().await;
    }
    Ok(LoadResult {
        msgs,
        secs: secs.max(load.duration.as_secs_f64() * 0.5),
        hist,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// One sender's loop; returns messages done in the timed part and their latencies.
async fn sender(
    p: &Producer,
    load: &Load,
    t0: Instant,
    end: Instant,
    errors: &AtomicU64,
) -> (u64, Histogram<u64>) {
    let mut hist = histogram();
    let mut msgs = 0u64;
    let msg = || Message::new(load.topic.clone(), stamped_body(load.body));
    let mut window = VecDeque::new();
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        let (ok, n) = match load.mode {
            Mode::Sync => (p.send(msg()).await.is_ok(), 1),
            Mode::Oneway => (p.send_oneway(msg()).await.is_ok(), 1),
            Mode::Batch => (
                p.send_batch((0..BATCH).map(|_| msg()).collect())
                    .await
                    .is_ok(),
                BATCH,
            ),
            Mode::Async => {
                while window.len() < ASYNC_WINDOW {
                    window.push_back((Instant::now(), p.send_async(msg())));
                }
                let Some((sent, fut)) = window.pop_front() else {
                    continue;
                };
                let ok = fut.await.is_ok();
                let done = Instant::now();
                if ok && sent >= t0 && done <= end {
                    record(&mut hist, (done - sent).as_nanos() as u64);
                    msgs += 1;
                } else if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
        };
        let done = Instant::now();
        if !ok {
            errors.fetch_add(1, Ordering::Relaxed);
        } else if start >= t0 && done <= end {
            record(&mut hist, (done - start).as_nanos() as u64);
            msgs += n as u64;
        }
    }
    for (_, fut) in window {
        let _ = fut.await;
    }
    (msgs, hist)
}

/// Sends `total` messages of `body` bytes in batches from `senders` tasks, calling
/// `progress` with each batch's count; returns the seconds taken.
pub async fn fill(
    namesrv: &str,
    topic: &str,
    body: usize,
    total: u64,
    senders: u32,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<f64, String> {
    let t = topic.to_owned();
    let make = std::sync::Arc::new(move |_| Message::new(t.clone(), stamped_body(body)));
    fill_with(namesrv, topic, total, senders, progress, make).await
}

/// Builds message number `n` (0-based) of a fill.
pub type MakeMessage = std::sync::Arc<dyn Fn(u64) -> Message + Send + Sync>;

/// [`fill`] with messages from `make`, given each message's number.
pub async fn fill_with(
    namesrv: &str,
    topic: &str,
    total: u64,
    senders: u32,
    progress: &(dyn Fn(u64) + Sync),
    make: MakeMessage,
) -> Result<f64, String> {
    let prods = producers(namesrv, topic, senders).await?;
    let left = std::sync::Arc::new(AtomicU64::new(total));
    let done = std::sync::Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for p in &prods {
        let (p, make, left, done) = (p.clone(), make.clone(), left.clone(), done.clone());
        tasks.push(runtime::spawn(async move {
            loop {
                let (n, first) = left
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
                        (l > 0).then(|| l.saturating_sub(BATCH as u64))
                    })
                    .map_or((0, 0), |l| {
                        let n = l.min(BATCH as u64);
                        (n, total - l)
                    });
                if n == 0 {
                    return Ok(());
                }
                let batch = (first..first + n).map(|i| make(i)).collect();
                p.send_batch(batch).await.map_err(|e| e.to_string())?;
                done.fetch_add(n, Ordering::Relaxed);
            }
        }));
    }
    let mut seen = 0;
    let mut result = Ok(());
    let mut tasks: VecDeque<_> = tasks.into();
    while let Some(t) = tasks.pop_front() {
        // Report progress while waiting for the tasks one by one.
        let t = Box::pin(t);
        let mut t = t;
        loop {
            match runtime::timeout(Duration::from_millis(200), &mut t).await {
                Ok(r) => {
                    if let Err(e) = r {
                        result = Err(e);
                    }
                    break;
                }
                Err(_) => {
                    let now = done.load(Ordering::Relaxed);
                    progress(now - seen);
                    seen = now;
                }
            }
        }
    }
    progress(done.load(Ordering::Relaxed) - seen);
    let secs = start.elapsed().as_secs_f64();
    for p in &prods {
        p.shutdown().await;
    }
    result.map(|()| secs)
}
