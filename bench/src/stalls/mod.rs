//! The `stalls` scenario: does one request wait on another's disk work in the broker?
//!
//! [`StallsParams::senders`] sync senders (1 KiB bodies, a unique KEYS and property `a` on
//! every message) against a real `tern-broker` (ASYNC_FLUSH, small commit-log segments
//! so the log rolls every fraction of a second, `enablePropertyFilter=true`), twice, each
//! on a fresh broker in the same state:
//!
//! 1. start, pre-fill a backlog of [`StallsParams::backlog`] keyed messages, stop cleanly
//!    and start again (so the broker no longer maps the backlog's pages), and drop the
//!    commit log from the page cache with `posix_fadvise(DONTNEED)` ([`cache`]);
//! 2. send for the warm-up and the timed part: *quiet* with nothing else (segment rolls
//!    and the broker's 1 s checkpoint happen in both runs), *loaded* with the
//!    [`background`] load beside it: a QUERY_MESSAGE-by-key flood, two SQL92 consumers
//!    and a cold catch-up consumer from offset 0.
//!
//! Then the same two runs again with *paced* senders ([`StallsParams::paced`]): together
//! they offer a fixed rate, a fraction of what the quiet run reached, so the machine has
//! CPU to spare. Closed-loop senders on a machine they saturate lose throughput to any
//! background work by CPU share alone; at a rate the machine can carry, a loaded run that
//! falls short of the offered rate, or whose latencies jump, shows a request waiting on
//! another's work.
//!
//! Reported per run: throughput, p50 / p99 / p99.9 / max send latency, the sends over
//! 5 ms and where they were stored (just after a segment roll or not), each process's CPU,
//! a 100 ms timeline (CSV and SVG), and for the loaded runs how much background work was
//! done and what failed ([`report`]). Goals (in [`crate::goals`]): loaded throughput ≥ 90%
//! of quiet (closed loop, and paced), loaded p99.9 < 5 ms, loaded max < 25 ms. Nothing
//! fails the run on a miss.

pub mod background;
pub mod cache;
pub mod events;
mod report;
pub mod send;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tern_shell::runtime::block_on;

use crate::load;
use crate::proc::{Server, cpu_time_of, machine_busy, start_tern};
use crate::suite::{TERN, TOPIC, bar};
use crate::table::{Latency, Measure};
use background::Counters;
use cache::CacheDrop;
use send::{BUCKET, SLOW, Sent};

/// Row case of the quiet run's sends.
pub const CASE_QUIET: &str = "sync send with KEYS (quiet)";
/// Row case of the loaded run's sends.
pub const CASE_LOADED: &str = "sync send with KEYS (loaded)";
/// Row case of the paced quiet run's sends.
pub const CASE_QUIET_PACED: &str = "sync send with KEYS (quiet, paced)";
/// Row case of the paced loaded run's sends.
pub const CASE_LOADED_PACED: &str = "sync send with KEYS (loaded, paced)";
/// Row case of the loaded run's max latency.
pub const MAX_LOADED: &str = "max send latency (loaded)";
/// Row cases of the background counts (loaded run).
pub const QUERIES: &str = "QUERY_MESSAGE by key (loaded)";
/// … SQL92-filtered messages.
pub const SQL_MSGS: &str = "SQL92-filtered messages (loaded)";
/// … catch-up messages.
pub const CATCHUP_MSGS: &str = "catch-up messages from offset 0 (loaded)";
/// A slow send stored this close after a segment's start is counted as at a roll.
pub const ROLL_SPAN: u64 = 256 << 10;

/// What to measure.
#[derive(Clone, Debug)]
pub struct StallsParams {
    /// Folder for the brokers' data (removed afterwards).
    pub dir: PathBuf,
    /// Folder for the timeline CSV and SVG.
    pub out: PathBuf,
    /// Sync senders.
    pub senders: u32,
    /// Body bytes.
    pub body: usize,
    /// Timed part of each run.
    pub duration: Duration,
    /// Untimed sends before it.
    pub warmup: Duration,
    /// Messages pre-filled before each run.
    pub backlog: u64,
    /// `mapedFileSizeCommitLog` of both runs.
    pub segment_bytes: u64,
    /// The paced runs offer this fraction of the quiet run's throughput; `None` skips them.
    pub paced: Option<f64>,
}

impl StallsParams {
    /// The full scenario: 60 s per run, ~350 MB of backlog, 16 MiB segments.
    pub fn full(dir: PathBuf, out: PathBuf) -> Self {
        StallsParams {
            dir,
            out,
            senders: 16,
            body: 1024,
            duration: Duration::from_secs(60),
            warmup: Duration::from_secs(1),
            backlog: 300_000,
            segment_bytes: 16 << 20,
            paced: Some(0.5),
        }
    }

    /// `--quick`: 2 s per run, ~24 MB of backlog, 8 MiB segments; ~10 s in all.
    pub fn quick(dir: PathBuf, out: PathBuf) -> Self {
        StallsParams {
            duration: Duration::from_secs(2),
            warmup: Duration::from_millis(300),
            backlog: 20_000,
            segment_bytes: 8 << 20,
            ..Self::full(dir, out)
        }
    }

    fn conf(&self) -> String {
        format!(
            "flushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog={}\nenablePropertyFilter=true\n",
            self.segment_bytes
        )
    }
}

/// One run's results.
#[derive(Debug)]
struct Run {
    name: &'static str,
    /// The rate the senders were paced to, msgs/s (`None`: as fast as answered).
    paced: Option<f64>,
    sent: Sent,
    background: Option<Arc<Counters>>,
    cache: CacheDrop,
    /// Cores the broker, the harness and every other process used from the first send
    /// to the last.
    broker_cores: Option<f64>,
    harness_cores: Option<f64>,
    other_cores: Option<f64>,
    /// Warnings and errors the broker logged.
    broker_log: Vec<String>,
    /// When the checkpoint file was written, from the start of the timed part.
    checkpoints: Vec<Duration>,
    /// Commit-log segments created from the first send to the last.
    rolls: usize,
}

/// Runs the scenario, prints its section and adds its rows.
pub fn run(p: &StallsParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    fs::create_dir_all(&p.dir).map_err(|e| format!("{}: {e}", p.dir.display()))?;
    eprintln!(
        "stalls: {} sync senders, {} s per run, {} backlog messages, {} MiB segments",
        p.senders,
        p.duration.as_secs_f64(),
        p.backlog,
        p.segment_bytes >> 20
    );
    let quiet = run_one(p, false, None)?;
    let loaded = run_one(p, true, None)?;
    let mut runs = vec![quiet, loaded];
    if let Some(f) = p.paced {
        let rate = f * runs[0].sent.msgs_per_s();
        eprintln!(
            "  paced runs: {rate:.0} msgs/s offered ({:.0}% of quiet)",
            f * 100.0
        );
        runs.push(run_one(p, false, Some(rate))?);
        runs.push(run_one(p, true, Some(rate))?);
    }
    let runs: Vec<&Run> = runs.iter().collect();
    for r in &runs {
        rows.extend(measures(p, r));
    }
    println!("\n## stalls\n\n{}", report::markdown(p, &runs));
    match report::write_timeline(&p.out, &runs) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write the stalls timeline: {e}"),
    }
    let series: Vec<(String, Vec<(f64, f64)>)> = runs
        .iter()
        .map(|r| {
            let pts = r
                .sent
                .timeline
                .iter()
                .enumerate()
                .filter(|(_, b)| b.max_ns > 0)
                .map(|(i, b)| (i as f64 * BUCKET.as_secs_f64(), b.max_ns as f64 / 1e3))
                .collect();
            (format!("{} max per 100 ms", r.name), pts)
        })
        .collect();
    match crate::plot::timeline(&p.out.join("stalls-timeline.svg"), &series) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not plot the stalls timeline: {e}"),
    }
    Ok(())
}

fn namesrv(b: &Server) -> Result<String, String> {
    b.namesrv
        .clone()
        .ok_or_else(|| "tern-broker announced no name server".into())
}

/// One run on a fresh broker: with the background load when `loaded`, senders paced to
/// `paced` msgs/s in all when set.
fn run_one(p: &StallsParams, loaded: bool, paced: Option<f64>) -> Result<Run, String> {
    let name = match (loaded, paced.is_some()) {
        (false, false) => "quiet",
        (true, false) => "loaded",
        (false, true) => "quiet, paced",
        (true, true) => "loaded, paced",
    };
    let dir = p
        .dir
        .join(format!("tern-stalls-{}", name.replace(", ", "-")));
    let _ = fs::remove_dir_all(&dir);
    let r = run_in(p, loaded, paced, name, &dir);
    let _ = fs::remove_dir_all(&dir);
    r
}

fn run_in(
    p: &StallsParams,
    loaded: bool,
    paced: Option<f64>,
    name: &'static str,
    dir: &Path,
) -> Result<Run, String> {
    let mut b = start_tern(dir, &p.conf())?;
    block_on(load::create_topic(&namesrv(&b)?, TOPIC))?;
    let pb = bar(p.backlog, &format!("{name}: backlog"));
    let filled = block_on(send::fill_backlog(
        &namesrv(&b)?,
        TOPIC,
        p.body,
        p.backlog,
        &|k| pb.inc(k),
    ));
    pb.finish_and_clear();
    let secs = filled.map_err(|e| format!("stalls {name}: backlog: {e}"))?;
    eprintln!("  {name}: backlog of {} messages in {secs:.1} s", p.backlog);
    // A clean stop unmaps and flushes the backlog; only then can its pages be dropped.
    b.terminate(Duration::from_secs(30));
    drop(b);
    let mut b = start_tern(dir, &p.conf())?;
    let ns = namesrv(&b)?;
    block_on(load::wait_for_route(&ns, TOPIC))?;
    let cache = cache::drop_commit_log(dir);
    eprintln!("  {name}: page cache: {}", cache.describe());
    let segments = || cache::commit_log_files(dir).map_or(0, |f| f.len());
    let before = segments();
    let watcher = events::checkpoint_file(dir).map(events::Watcher::start);
    let t = block_on(timed(p, &ns, loaded, paced, &b))?;
    let checkpoints = watcher.map_or_else(Vec::new, |w| events::since(&w.stop(), t.t0, t.end));
    let rolls = segments().saturating_sub(before);
    let broker_log = broker_problems(&b.log);
    b.terminate(Duration::from_secs(30));
    let run = Run {
        name,
        paced,
        sent: t.sent,
        background: t.background,
        cache,
        broker_cores: t.broker_cores,
        harness_cores: t.harness_cores,
        other_cores: t.other_cores,
        broker_log,
        checkpoints,
        rolls,
    };
    log_run(&run);
    Ok(run)
}

/// What [`timed`] measured.
struct Timed {
    sent: Sent,
    background: Option<Arc<Counters>>,
    broker_cores: Option<f64>,
    harness_cores: Option<f64>,
    other_cores: Option<f64>,
    t0: Instant,
    end: Instant,
}

/// The warm-up and the timed part; with the background load when `loaded`, paced to
/// `paced` msgs/s when set.
async fn timed(
    p: &StallsParams,
    ns: &str,
    loaded: bool,
    paced: Option<f64>,
    b: &Server,
) -> Result<Timed, String> {
    let prods = load::producers(ns, TOPIC, p.senders).await?;
    let acked: send::Acked = Arc::new((0..p.senders).map(|_| AtomicU64::new(0)).collect());
    let bg = if loaded {
        Some(background::start(ns, TOPIC, p.backlog, &acked).await?)
    } else {
        None
    };
    let cpu = || {
        (
            b.cpu_time().ok(),
            cpu_time_of("self").ok(),
            machine_busy().ok(),
        )
    };
    let (broker0, own0, all0) = cpu();
    let started = Instant::now();
    let t0 = started + p.warmup;
    let end = t0 + p.duration;
    if let Some(bg) = &bg {
        bg.go(t0);
    }
    let sent = send::run(&prods, TOPIC, p.body, (t0, end), paced, &acked).await;
    let wall = started.elapsed().as_secs_f64().max(1e-9);
    let (broker1, own1, all1) = cpu();
    let cores = |a: Option<Duration>, z: Option<Duration>| {
        a.zip(z)
            .map(|(a, z)| z.saturating_sub(a).as_secs_f64() / wall)
    };
    let (broker, own) = (cores(broker0, broker1), cores(own0, own1));
    let other = cores(all0, all1)
        .zip(broker.zip(own))
        .map(|(all, (b, o))| (all - b - o).max(0.0));
    let counters = match bg {
        Some(bg) => Some(bg.stop().await),
        None => None,
    };
    for p in &prods {
        p.shutdown().await;
    }
    Ok(Timed {
        sent,
        background: counters,
        broker_cores: broker,
        harness_cores: own,
        other_cores: other,
        t0,
        end,
    })
}

/// Lines the broker logged in the run, both starts (at `--log-level warn`: warnings and
/// errors).
fn broker_problems(log: &Path) -> Vec<String> {
    let text = fs::read(log).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn log_run(r: &Run) {
    let l = r.sent.latency();
    eprintln!(
        "  {:<7} {:>9.0} msgs/s  p50 {:.0} µs  p99 {:.0} µs  p99.9 {:.0} µs  max {:.0} µs  {} sends > {} ms  {} errors",
        r.name,
        r.sent.msgs_per_s(),
        l.p50_us,
        l.p99_us,
        l.p999_us,
        us(r.sent.hist.max()),
        r.sent.slow.len(),
        SLOW.as_millis(),
        r.sent.errors
    );
    for e in &r.sent.first_errors {
        eprintln!("          send failure: {e}");
    }
    if let Some(c) = &r.background {
        eprintln!(
            "          background: {} queries, {} SQL92 messages, {} catch-up messages, {} errors",
            c.queries(),
            c.sql_msgs.load(Ordering::Relaxed),
            c.catchup_msgs.load(Ordering::Relaxed),
            c.errors()
        );
        for e in c.first_errors() {
            eprintln!("          background failure: {e}");
        }
    }
    for l in r.broker_log.iter().take(5) {
        eprintln!("          broker: {l}");
    }
}

fn measures(p: &StallsParams, r: &Run) -> Vec<Measure> {
    let case = match (r.background.is_some(), r.paced.is_some()) {
        (false, false) => CASE_QUIET,
        (true, false) => CASE_LOADED,
        (false, true) => CASE_QUIET_PACED,
        (true, true) => CASE_LOADED_PACED,
    };
    let mut out = vec![Measure {
        latency: Latency::of(&r.sent.hist),
        errors: r.sent.errors,
        ..Measure::rate("stalls", TERN, case, p.senders, p.body).with_rate(r.sent.msgs, r.sent.secs)
    }];
    let v =
        |case: String, value: f64, unit: &str| Measure::value("stalls", TERN, &case, value, unit);
    out.push(v(
        format!("max send latency ({})", r.name),
        us(r.sent.hist.max()),
        "µs",
    ));
    out.push(v(
        format!("sends > {} ms ({})", SLOW.as_millis(), r.name),
        r.sent.slow.len() as f64,
        "sends",
    ));
    if let Some(a) = r.cache.after {
        out.push(v(
            format!("backlog resident after fadvise ({})", r.name),
            a * 100.0,
            "%",
        ));
    }
    if let Some(c) = r.broker_cores {
        out.push(v(format!("broker CPU ({})", r.name), c, "cores"));
    }
    if let Some(c) = r.harness_cores {
        out.push(v(format!("harness CPU ({})", r.name), c, "cores"));
    }
    if let Some(c) = r.other_cores {
        out.push(v(format!("other processes' CPU ({})", r.name), c, "cores"));
    }
    // The background's rows are the closed-loop run's; the paced run's are in its section.
    if let Some(c) = r.background.as_ref().filter(|_| r.paced.is_none()) {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let with_errors = |mut m: Measure, e: u64| {
            m.errors = e;
            m
        };
        out.push(with_errors(
            v(QUERIES.into(), c.queries() as f64, "queries"),
            n(&c.query_errors) + n(&c.cold_missed),
        ));
        out.push(with_errors(
            v(SQL_MSGS.into(), n(&c.sql_msgs) as f64, "msgs"),
            n(&c.sql_errors) + n(&c.sql_mismatched),
        ));
        out.push(with_errors(
            v(CATCHUP_MSGS.into(), n(&c.catchup_msgs) as f64, "msgs"),
            n(&c.catchup_errors),
        ));
        let done = n(&c.cold_done_ns);
        if done > 0 {
            out.push(v(
                "cold catch-up pass (loaded)".into(),
                done as f64 / 1e9,
                "s",
            ));
        }
    }
    out
}
