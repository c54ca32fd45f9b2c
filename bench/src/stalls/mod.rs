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
//! Reported per run: throughput, p50 / p99 / p99.9 / max send latency, the sends over
//! 5 ms and where they were stored (just after a segment roll or not), a 100 ms timeline
//! (CSV and SVG), and for the loaded run how much background work was done and what
//! failed. Goals (in [`crate::goals`]): loaded throughput ≥ 90% of quiet, loaded p99.9
//! < 5 ms, loaded max < 25 ms. Nothing fails the run on a miss.

pub mod background;
pub mod cache;
pub mod events;
pub mod send;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tern_shell::runtime::block_on;

use crate::load;
use crate::proc::{Server, cpu_time_of, machine_busy, start_tern};
use crate::suite::{TERN, TOPIC};
use crate::table::{Latency, Measure, unix_secs};
use background::{Counters, QUERY_TASKS, SQL_CONSUMERS, SQL_EXPR};
use cache::CacheDrop;
use send::{BUCKET, SLOW, Sent};

/// Row case of the quiet run's sends.
pub const CASE_QUIET: &str = "sync send with KEYS (quiet)";
/// Row case of the loaded run's sends.
pub const CASE_LOADED: &str = "sync send with KEYS (loaded)";
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
    let quiet = run_one(p, false)?;
    let loaded = run_one(p, true)?;
    for r in [&quiet, &loaded] {
        rows.extend(measures(p, r));
    }
    println!("\n## stalls\n\n{}", markdown(p, &quiet, &loaded));
    match write_timeline(&p.out, &[&quiet, &loaded]) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write the stalls timeline: {e}"),
    }
    let series: Vec<(String, Vec<(f64, f64)>)> = [&quiet, &loaded]
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

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

fn namesrv(b: &Server) -> Result<String, String> {
    b.namesrv
        .clone()
        .ok_or_else(|| "tern-broker announced no name server".into())
}

/// One run on a fresh broker.
fn run_one(p: &StallsParams, loaded: bool) -> Result<Run, String> {
    let name = if loaded { "loaded" } else { "quiet" };
    let dir = p.dir.join(format!("tern-stalls-{name}"));
    let _ = fs::remove_dir_all(&dir);
    let r = run_in(p, loaded, name, &dir);
    let _ = fs::remove_dir_all(&dir);
    r
}

fn run_in(p: &StallsParams, loaded: bool, name: &'static str, dir: &Path) -> Result<Run, String> {
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
    let t = block_on(timed(p, &ns, loaded, &b))?;
    let checkpoints = watcher.map_or_else(Vec::new, |w| events::since(&w.stop(), t.t0, t.end));
    let rolls = segments().saturating_sub(before);
    let broker_log = broker_problems(&b.log);
    b.terminate(Duration::from_secs(30));
    let run = Run {
        name,
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

/// The warm-up and the timed part; with the background load when `loaded`.
async fn timed(p: &StallsParams, ns: &str, loaded: bool, b: &Server) -> Result<Timed, String> {
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
    let sent = send::run(&prods, TOPIC, p.body, t0, end, &acked).await;
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
    let l = Latency::of(&r.sent.hist).unwrap_or_default();
    eprintln!(
        "  {:<7} {:>9.0} msgs/s  p50 {:.0} µs  p99 {:.0} µs  p99.9 {:.0} µs  max {:.0} µs  {} sends > {} ms  {} errors",
        r.name,
        r.sent.msgs as f64 / r.sent.secs,
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
    let case = if r.background.is_some() {
        CASE_LOADED
    } else {
        CASE_QUIET
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
    if let Some(c) = r.other_cores {
        out.push(v(format!("other processes' CPU ({})", r.name), c, "cores"));
    }
    if let Some(c) = &r.background {
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

/// The section printed for the scenario.
fn markdown(p: &StallsParams, quiet: &Run, loaded: &Run) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} sync senders, {} B bodies (a unique KEYS and property `a` on each), ASYNC_FLUSH, \
         {} MiB commit-log segments, enablePropertyFilter=true; {:.0} s timed after {:.1} s of \
         warm-up. Each run is on a fresh broker holding a {}-message backlog, restarted and then \
         dropped from the page cache. Both runs roll segments and take the broker's 1 s \
         checkpoint; the loaded run adds {QUERY_TASKS} QUERY_MESSAGE-by-key tasks, \
         {SQL_CONSUMERS} SQL92 consumers (`{SQL_EXPR}`) and a catch-up consumer from offset 0.\n",
        p.senders,
        p.body,
        p.segment_bytes >> 20,
        p.duration.as_secs_f64(),
        p.warmup.as_secs_f64(),
        p.backlog,
    );
    s.push_str(
        "| run | msgs/s | p50 µs | p99 µs | p99.9 µs | max µs | sends > 5 ms | send errors | broker CPU | harness CPU | other processes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cores = |c: Option<f64>| c.map_or("?".into(), |c| format!("{c:.2} cores"));
    for r in [quiet, loaded] {
        let l = Latency::of(&r.sent.hist).unwrap_or_default();
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            r.name,
            r.sent.msgs as f64 / r.sent.secs,
            l.p50_us,
            l.p99_us,
            l.p999_us,
            us(r.sent.hist.max()),
            r.sent.slow.len(),
            r.sent.errors,
            cores(r.broker_cores),
            cores(r.harness_cores),
            cores(r.other_cores),
        );
    }
    if let Some(c) = &loaded.background {
        background_table(&mut s, c, p.duration);
    }
    let _ = writeln!(s, "\nPage cache before each run:\n");
    for r in [quiet, loaded] {
        let _ = writeln!(s, "- {}: {}", r.name, r.cache.describe());
    }
    let _ = writeln!(s, "\nWhere sends stalled:\n");
    for r in [quiet, loaded] {
        where_stalled(&mut s, p, r);
    }
    let _ = writeln!(s, "\nFailures:\n");
    for r in [quiet, loaded] {
        failures(&mut s, r);
    }
    s
}

fn background_table(s: &mut String, c: &Counters, duration: Duration) {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let per_s = |x: u64| x as f64 / duration.as_secs_f64();
    s.push_str(
        "\n| background (loaded run) | count | per s | errors | detail |\n|---|---:|---:|---:|---|\n",
    );
    let q = c.queries();
    let _ = writeln!(
        s,
        "| QUERY_MESSAGE by key ({QUERY_TASKS} tasks) | {q} | {:.0} | {} | backlog keys: {} found, {} not found; live keys: {} found, {} not found yet |",
        per_s(q),
        n(&c.query_errors) + n(&c.cold_missed),
        n(&c.cold_found),
        n(&c.cold_missed),
        n(&c.live_found),
        n(&c.live_missed),
    );
    let sql = n(&c.sql_msgs);
    let _ = writeln!(
        s,
        "| SQL92-filtered messages (`{SQL_EXPR}`, {SQL_CONSUMERS} consumers) | {sql} | {:.0} | {} | {} delivered that do not match |",
        per_s(sql),
        n(&c.sql_errors) + n(&c.sql_mismatched),
        n(&c.sql_mismatched),
    );
    let cu = n(&c.catchup_msgs);
    let cold = n(&c.cold_msgs);
    let done = n(&c.cold_done_ns);
    let pass = if done > 0 {
        let secs = done as f64 / 1e9;
        format!(
            "cold pass over the backlog: {cold} msgs in {secs:.2} s ({:.0} msgs/s), then following the live end",
            cold as f64 / secs
        )
    } else {
        format!("cold pass over the backlog not finished: {cold} msgs read")
    };
    let _ = writeln!(
        s,
        "| catch-up messages from offset 0 | {cu} | {:.0} | {} | {pass} |",
        per_s(cu),
        n(&c.catchup_errors),
    );
}

/// The slow sends by cause (a segment roll, a checkpoint, other), the cold pass against
/// the rest, and the worst windows.
fn where_stalled(s: &mut String, p: &StallsParams, r: &Run) {
    let slow = &r.sent.slow;
    let at_roll = |x: &send::Slow| {
        x.log_offset
            .is_some_and(|o| o % p.segment_bytes < ROLL_SPAN)
    };
    let at_ckpt = |x: &send::Slow| events::overlaps(&r.checkpoints, x.at, x.latency);
    let rolls = slow.iter().filter(|x| at_roll(x)).count();
    let ckpts = slow.iter().filter(|x| !at_roll(x) && at_ckpt(x)).count();
    let _ = write!(
        s,
        "- {}: {} sends > {} ms over {} segment rolls and {} checkpoints: {rolls} stored in the \
         first {} KiB of a segment (just after a roll; {:.1}% of the log), {ckpts} more in flight \
         when the checkpoint file was written, {} other",
        r.name,
        slow.len(),
        SLOW.as_millis(),
        r.rolls,
        r.checkpoints.len(),
        ROLL_SPAN >> 10,
        ROLL_SPAN as f64 * 100.0 / p.segment_bytes as f64,
        slow.len() - rolls - ckpts,
    );
    let tl = &r.sent.timeline;
    let empty = tl
        .iter()
        .take(tl.len().saturating_sub(1))
        .filter(|b| b.sends == 0)
        .count();
    if empty > 0 {
        let _ = write!(s, "; {empty} windows of 100 ms without a completed send");
    }
    let cold_ns = r
        .background
        .as_ref()
        .map_or(0, |c| c.cold_done_ns.load(Ordering::Relaxed));
    if cold_ns > 0 {
        let edge = (cold_ns as u128).div_ceil(BUCKET.as_nanos()) as usize;
        let part = |b: &[send::Bucket]| {
            let max = b.iter().map(|b| b.max_ns).max().unwrap_or(0);
            let n: u32 = b.iter().map(|b| b.slow).sum();
            format!(
                "{n} sends > {} ms, max {:.1} ms",
                SLOW.as_millis(),
                max as f64 / 1e6
            )
        };
        let (during, after) = tl.split_at(edge.min(tl.len()));
        let _ = write!(
            s,
            "; during the cold catch-up pass (first {:.2} s): {}; after it: {}",
            cold_ns as f64 / 1e9,
            part(during),
            part(after)
        );
    }
    let mut worst: Vec<(usize, &send::Bucket)> = tl.iter().enumerate().collect();
    worst.sort_by_key(|(_, b)| std::cmp::Reverse(b.max_ns));
    let mut top: Vec<_> = worst
        .into_iter()
        .take(5)
        .filter(|(_, b)| b.max_ns > 0)
        .collect();
    top.sort_by_key(|(i, _)| *i);
    let list: Vec<String> = top
        .iter()
        .map(|(i, b)| {
            let from = BUCKET * *i as u32;
            let to = from + BUCKET;
            let inside: Vec<&send::Slow> =
                slow.iter().filter(|x| x.at >= from && x.at < to).collect();
            let mut why = Vec::new();
            if inside.iter().any(|x| at_roll(x)) {
                why.push("roll");
            }
            if inside.iter().any(|x| at_ckpt(x)) {
                why.push("checkpoint");
            }
            format!(
                "{:.1} s: {:.1} ms, {} slow of {}{}",
                from.as_secs_f64(),
                b.max_ns as f64 / 1e6,
                b.slow,
                b.sends,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join(", "))
                }
            )
        })
        .collect();
    let _ = writeln!(s, ". Worst 100 ms windows: {}.", list.join("; "));
}

fn failures(s: &mut String, r: &Run) {
    let mut parts = Vec::new();
    if r.sent.errors > 0 {
        parts.push(format!(
            "**{} failed sends** ({})",
            r.sent.errors,
            r.sent.first_errors.join("; ")
        ));
    }
    if let Some(c) = &r.background {
        let e = c.errors();
        if e > 0 {
            parts.push(format!(
                "**{e} failed background operations** ({})",
                c.first_errors().join("; ")
            ));
        }
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (what, count) in [
            ("QUERY_MESSAGE", c.queries()),
            ("SQL92 consumer", n(&c.sql_msgs)),
            ("catch-up consumer", n(&c.catchup_msgs)),
        ] {
            if count == 0 {
                parts.push(format!("**the {what} did nothing**"));
            }
        }
    }
    if r.cache.worked() != Some(true) {
        parts.push("the backlog was not dropped from the page cache".into());
    }
    if !r.broker_log.is_empty() {
        parts.push(format!(
            "the broker logged {} warnings or errors (first: {})",
            r.broker_log.len(),
            r.broker_log[0]
        ));
    }
    let text = if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join("; ")
    };
    let _ = writeln!(s, "- {}: {text}", r.name);
}

/// Writes both runs' timelines to `<dir>/stalls-timeline-<unix seconds>.csv`.
fn write_timeline(dir: &Path, runs: &[&Run]) -> std::io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut csv = String::from("run,t_ms,sends,mean_us,max_us,slow_sends,checkpoints\n");
    for r in runs {
        for (i, b) in r.sent.timeline.iter().enumerate() {
            let from = BUCKET * i as u32;
            let ckpts = r
                .checkpoints
                .iter()
                .filter(|c| **c >= from && **c < from + BUCKET)
                .count();
            let mean = if b.sends > 0 {
                b.sum_ns as f64 / f64::from(b.sends) / 1e3
            } else {
                0.0
            };
            let _ = writeln!(
                csv,
                "{},{},{},{mean:.1},{:.1},{},{ckpts}",
                r.name,
                from.as_millis(),
                b.sends,
                us(b.max_ns),
                b.slow
            );
        }
    }
    let path = dir.join(format!("stalls-timeline-{}.csv", unix_secs()));
    fs::write(&path, csv)?;
    Ok(path)
}
