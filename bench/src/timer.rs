//! The `timer` scenario: how accurately timer messages (RocketMQ 5's `TIMER_DELIVER_MS`)
//! arrive, and what a large wheel costs.
//!
//! 1. **Lateness.** [`TimerParams::due`] timer messages, all due on one whole second a few
//!    seconds ahead, are sent at once; long-polling consumers time each from its due time
//!    to its receipt. The baseline, in the same run: as many plain messages sent in one
//!    burst at that same second, timed from their send to their receipt (what a message
//!    takes end to end with no timer). The due time is on a slot boundary, so what the
//!    timer adds is its own processing, not the up-to-one-precision rounding of a due
//!    time inside a slot.
//! 2. **Pending.** [`TimerParams::pending`] timers due an hour ahead are sent and filed;
//!    the broker's RSS and the disk the wheel, the timer log and the commit log take are
//!    values, and the broker's start-up time after a clean stop and after `kill -9` (both
//!    recover the wheel) is compared with its start-up time on an empty store.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tern_client::admin::Admin;
use tern_client::{ClientConfig, Message, MessageBuilder};
use tern_shell::runtime::{self, block_on, now_ms};

use crate::consume::{self, Sub};
use crate::load::{self, now_ns, stamped_body};
use crate::proc::{Server, dir_bytes, start_tern};
use crate::table::{Latency, Measure, histogram, record};

/// Topic of the timer messages.
const TIMER_TOPIC: &str = "TimerBench";
/// Topic of the baseline's plain messages.
const PLAIN_TOPIC: &str = "TimerBenchPlain";
/// Topic of the pending timers.
const PENDING_TOPIC: &str = "TimerBenchPending";
/// Sends in flight per producer.
const WINDOW: usize = 64;
/// Broker settings of every run: the default wheel (RocketMQ's 1,209,600 slots).
const CONF: &str = "flushDiskType=ASYNC_FLUSH\n";

/// What to measure.
#[derive(Clone, Debug)]
pub struct TimerParams {
    /// Folder for the broker's data (removed afterwards).
    pub dir: PathBuf,
    /// Timers due in the same second.
    pub due: u64,
    /// Timers left pending in the wheel.
    pub pending: u64,
    /// Producers.
    pub producers: u32,
    /// Body bytes.
    pub body: usize,
}

impl TimerParams {
    /// The figures: 1,000 due together, 1,000,000 pending.
    pub fn full(dir: PathBuf) -> Self {
        TimerParams {
            dir,
            due: 1_000,
            pending: 1_000_000,
            producers: 8,
            body: 128,
        }
    }

    /// `--quick`: 200 due, 20,000 pending.
    pub fn quick(dir: PathBuf) -> Self {
        TimerParams {
            due: 200,
            pending: 20_000,
            ..Self::full(dir)
        }
    }
}

/// Runs the scenario, prints its section and adds its rows.
pub fn run(p: &TimerParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    let data = p.dir.join("tern");
    let mut server = start_tern(&data, CONF)?;
    let empty_start = server.startup;
    let ns = server
        .namesrv
        .clone()
        .ok_or("tern-broker: no name server")?;
    let result = (|| {
        let (late, plain) = block_on(lateness(p, &ns))?;
        for (case, h) in [
            (
                format!("{} timers due in one second: due → receipt", p.due),
                &late,
            ),
            (
                format!("{} plain sent in one second: send → receipt", p.due),
                &plain,
            ),
        ] {
            let l = Latency::of(h).ok_or("no deliveries measured")?;
            eprintln!(
                "timer: {case}: p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms",
                l.p50_us / 1e3,
                l.p99_us / 1e3,
                l.p999_us / 1e3
            );
            rows.push(Measure {
                latency: Some(l),
                ..Measure::rate("timer", "tern", &case, p.producers, p.body)
            });
        }
        pending(p, &ns, &data, &mut server, empty_start, rows)
    })();
    server.terminate(Duration::from_secs(30));
    let _ = fs::remove_dir_all(&p.dir);
    result
}

/// Sends the due-together timers and, at their due second, the plain burst; returns
/// the timers' due → receipt and the plain messages' send → receipt, in ns.
async fn lateness(p: &TimerParams, ns: &str) -> Result<(Histogram<u64>, Histogram<u64>), String> {
    load::create_topic(ns, TIMER_TOPIC).await?;
    load::create_topic(ns, PLAIN_TOPIC).await?;
    // A whole second far enough ahead for every send to be stored before it.
    let due_ms = (now_ms() / 1000 + 4) * 1000;
    let timers = receive(ns, TIMER_TOPIC, p.due, Some(due_ms));
    let plain = receive(ns, PLAIN_TOPIC, p.due, None);
    let make_timer = Arc::new(move |_| {
        Message::new(TIMER_TOPIC, stamped_body(128)).with_deliver_time_ms(due_ms)
    });
    let sent = send_all(ns, TIMER_TOPIC, p.due, p.producers, make_timer).await?;
    if now_ms() >= due_ms {
        return Err(format!(
            "sending {} timers took {sent:.1} s, past their due second",
            p.due
        ));
    }
    runtime::sleep(Duration::from_millis((due_ms - now_ms()).max(0) as u64)).await;
    let body = p.body;
    let make_plain = Arc::new(move |_| Message::new(PLAIN_TOPIC, stamped_body(body)));
    send_all(ns, PLAIN_TOPIC, p.due, p.producers, make_plain).await?;
    let (timers, plain) = runtime::race(async { (timers.await, plain.await) }, async {
        runtime::sleep(Duration::from_secs(60)).await;
        (
            Err("timers not all received within 60 s".into()),
            Err(String::new()),
        )
    })
    .await;
    Ok((timers?, plain?))
}

/// Receives `n` messages of `topic` from its queues' current ends; each is timed from
/// `due_ms` when given, else from the send stamp in its body.
fn receive(
    ns: &str,
    topic: &str,
    n: u64,
    due_ms: Option<i64>,
) -> runtime::JoinHandle<Result<Histogram<u64>, String>> {
    let (ns, topic) = (ns.to_owned(), topic.to_owned());
    runtime::spawn(async move {
        let (c, queues) = consume::consumer(&ns, &topic, &format!("bench_{topic}")).await?;
        let got = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for (q, addr) in queues {
            let start = c.max_offset(&q).await.map_err(|e| e.to_string())?;
            let (c, got) = (c.clone(), got.clone());
            tasks.push(runtime::spawn(async move {
                let mut hist = histogram();
                let mut offset = start;
                while got.load(Ordering::Relaxed) < n {
                    let pulled = consume::pull(&c, &addr, &q, offset, true, &Sub::ALL).await?;
                    let (now, wall) = (now_ns(), unix_ns());
                    for stamp in &pulled.stamps {
                        let took = match due_ms {
                            Some(d) => wall.saturating_sub(d as u64 * 1_000_000),
                            None => now.saturating_sub(*stamp),
                        };
                        record(&mut hist, took);
                    }
                    got.fetch_add(pulled.stamps.len() as u64, Ordering::Relaxed);
                    offset = pulled.next;
                }
                Ok::<_, String>(hist)
            }));
        }
        let mut hist = histogram();
        for t in tasks {
            let _ = hist.add(&t.await?);
        }
        c.shutdown().await;
        Ok(hist)
    })
}

/// Sends `total` messages made by `make` from `producers` producers, each with
/// [`WINDOW`] sends in flight; returns the seconds taken.
async fn send_all(
    ns: &str,
    topic: &str,
    total: u64,
    producers: u32,
    make: load::MakeMessage,
) -> Result<f64, String> {
    let prods = load::producers(ns, topic, producers).await?;
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for p in &prods {
        let (p, next, make) = (p.clone(), next.clone(), make.clone());
        tasks.push(runtime::spawn(async move {
            let mut window = std::collections::VecDeque::new();
            loop {
                while window.len() < WINDOW {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    window.push_back(p.send_async(make(i)));
                }
                let Some(f) = window.pop_front() else {
                    return Ok::<(), String>(());
                };
                f.await.map_err(|e| format!("send: {e}"))?;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    for p in &prods {
        p.shutdown().await;
    }
    Ok(secs)
}

/// Fills the wheel with pending timers, then measures its cost and the start-ups.
fn pending(
    p: &TimerParams,
    ns: &str,
    data: &Path,
    server: &mut Server,
    empty_start: Duration,
    rows: &mut Vec<Measure>,
) -> Result<(), String> {
    let body = p.body;
    let make =
        Arc::new(move |_| Message::new(PENDING_TOPIC, stamped_body(body)).with_delay_sec(3_600));
    let (secs, filed) = block_on(async {
        load::create_topic(ns, PENDING_TOPIC).await?;
        let secs = send_all(ns, PENDING_TOPIC, p.pending, p.producers, make).await?;
        let filed = wait_filed(ns, Duration::from_secs(600)).await?;
        Ok::<_, String>((secs, filed))
    })?;
    eprintln!(
        "timer: {} pending timers sent in {secs:.1} s ({:.0}/s), all filed {:.1} s after the \
         last send",
        p.pending,
        p.pending as f64 / secs,
        filed.as_secs_f64()
    );
    rows.push(
        Measure::rate(
            "timer",
            "tern",
            &format!("{} pending timers sent (async)", p.pending),
            p.producers,
            p.body,
        )
        .with_rate(p.pending, secs),
    );
    let store = data.join("store");
    let rss = server.rss().map_err(|e| e.to_string())?;
    let mib = |path: &Path| {
        let len =
            fs::metadata(path).map_or(0, |m| if m.is_dir() { dir_bytes(path) } else { m.len() });
        (allocated(path) as f64 / 1048576.0, len as f64 / 1048576.0)
    };
    let (wheel, wheel_len) = mib(&store.join("timerwheel"));
    let (timer_log, timer_log_len) = mib(&store.join("timerlog"));
    let (commit_log, commit_log_len) = mib(&store.join("commitlog"));
    eprintln!(
        "timer: file lengths: wheel {wheel_len:.1} MiB, timer log {timer_log_len:.1} MiB, \
         commit log {commit_log_len:.1} MiB (segments are preallocated)"
    );
    for (case, v) in [
        ("broker RSS", rss.total_mib()),
        ("broker RSS, anonymous (heap)", rss.anon_kib as f64 / 1024.0),
        (
            "broker RSS, file pages (mapped log, queues, wheel)",
            rss.file_kib as f64 / 1024.0,
        ),
        ("timer wheel on disk", wheel),
        ("timer log on disk", timer_log),
        ("commit log on disk", commit_log),
    ] {
        eprintln!("timer: {} pending: {case} {v:.1} MiB", p.pending);
        rows.push(Measure::value(
            "timer",
            "tern",
            &format!("{} pending: {case}", p.pending),
            v,
            "MiB",
        ));
    }
    server.terminate(Duration::from_secs(60));
    *server = start_tern(data, CONF)?;
    let clean = server.startup;
    server.kill9();
    *server = start_tern(data, CONF)?;
    let killed = server.startup;
    let ns = server
        .namesrv
        .clone()
        .ok_or("tern-broker: no name server")?;
    block_on(wait_filed(&ns, Duration::from_secs(600)))?;
    for (case, d) in [
        ("start-up, empty store".to_owned(), empty_start),
        (
            format!("start-up, {} pending, after a clean stop", p.pending),
            clean,
        ),
        (
            format!("start-up, {} pending, after kill -9", p.pending),
            killed,
        ),
    ] {
        eprintln!("timer: {case}: {:.0} ms", d.as_secs_f64() * 1e3);
        rows.push(Measure::value(
            "timer",
            "tern",
            &case,
            d.as_secs_f64() * 1e3,
            "ms",
        ));
    }
    Ok(())
}

/// Waits until the broker filed every timer-topic entry (`timerOffsetBehind` = 0);
/// returns how long that took.
async fn wait_filed(ns: &str, limit: Duration) -> Result<Duration, String> {
    let admin = Admin::new(ClientConfig::new(ns)).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let masters = admin.all_masters().await.map_err(|e| e.to_string())?;
    let addr = masters.first().ok_or("no broker")?.1.clone();
    let result = loop {
        let info = admin
            .broker_runtime_info(&addr)
            .await
            .map_err(|e| e.to_string())?;
        if info.get("timerOffsetBehind").map(String::as_str) == Some("0") {
            break Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            break Err(format!("timers not filed within {limit:?}: {info:?}"));
        }
        runtime::sleep(Duration::from_millis(100)).await;
    };
    admin.shutdown().await;
    result
}

/// Wall-clock nanoseconds since the Unix epoch (due times are wall-clock).
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Bytes `path` (a file, or a folder's files) takes on disk: blocks allocated, not
/// lengths.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = fs::metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return m.blocks() * 512;
    }
    fs::read_dir(path).map_or(0, |rd| rd.flatten().map(|e| allocated(&e.path())).sum())
}
