//! The broker scenarios, against a real `tern-broker` process the harness starts, and the
//! peers measured in the same run:
//!
//! - `produce`: P senders (sync, async, oneway, batch) for ASYNC_FLUSH and SYNC_FLUSH;
//!   msgs/s, MB/s, latency percentiles. Peers: rocketmq-rust (every mode, same client),
//!   Redis streams (sync XADD), NATS JetStream (sync and async publish). Baseline: raw
//!   sequential `write()` bandwidth, measured right after each batched run.
//! - `e2e`: produce and consume at once; send → consume latency.
//! - `backlog`: catch-up over a backlog from offset 0, and the footprint: start-up empty,
//!   idle RSS, recovery after `kill -9`, start-up with the backlog grown past
//!   [`SuiteParams::big_bytes`].
//!
//! Systems run one after the other, alternated A/B per load level, so drift during the
//! run falls on both.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tern_shell::runtime::{self, block_on};

use crate::consume::{self, CatchUp};
use crate::load::{self, Load, LoadResult, Mode};
use crate::nats_peer;
use crate::proc::{Server, start_tern};
use crate::redis_peer;
use crate::rocketmq_peer::{self, RocketMq};
use crate::table::{Latency, Measure};

/// The benchmark topic.
pub const TOPIC: &str = "BenchTopic";
/// Name of Tern in tables.
pub const TERN: &str = "tern";
/// Name of the Rust peer in tables.
pub const RMQ: &str = "rocketmq-rust";
/// Name of the Debian peer in tables.
pub const REDIS: &str = "redis";
/// Name of the NATS JetStream peer in tables.
pub const NATS: &str = "nats";

/// What to measure.
#[derive(Clone, Debug)]
pub struct SuiteParams {
    /// Folder for brokers' data (removed afterwards).
    pub dir: PathBuf,
    /// Body bytes.
    pub body: usize,
    /// Sender counts for ASYNC_FLUSH.
    pub producers: Vec<u32>,
    /// Sender counts for SYNC_FLUSH.
    pub sync_flush_producers: Vec<u32>,
    /// Sender counts for e2e.
    pub e2e_producers: Vec<u32>,
    /// Timed part of each load run.
    pub duration: Duration,
    /// Untimed warm-up before it.
    pub warmup: Duration,
    /// Messages of the catch-up backlog (also the log recovered after kill -9).
    pub backlog: u64,
    /// Body bytes the store holds for the "start-up with data" measurement.
    pub big_bytes: u64,
    /// Extra broker.conf lines (store geometry).
    pub conf: String,
    /// Measure rocketmq-rust when installed.
    pub rocketmq: bool,
    /// Measure Redis when installed.
    pub redis: bool,
    /// Measure NATS JetStream when installed.
    pub nats: bool,
    /// Send modes of the produce scenario (`--modes`); SYNC_FLUSH runs sync and batch only.
    pub modes: Vec<Mode>,
    /// Flush policies of the produce scenario (`--flush`): false = ASYNC_FLUSH, true = SYNC_FLUSH.
    pub flush: Vec<bool>,
}

impl SuiteParams {
    /// The full comparison.
    pub fn full(dir: PathBuf) -> Self {
        SuiteParams {
            dir,
            body: 1024,
            producers: vec![1, 2, 4, 8, 16, 32, 64],
            sync_flush_producers: vec![1, 4, 16, 64],
            e2e_producers: vec![1, 16],
            duration: Duration::from_secs(3),
            warmup: Duration::from_millis(500),
            backlog: 1_000_000,
            big_bytes: 2_000_000_000,
            conf: String::new(),
            rocketmq: true,
            redis: true,
            nats: true,
            modes: Mode::ALL.to_vec(),
            flush: vec![false, true],
        }
    }

    /// `--quick`: one low and one high load, small backlog and segments; ~30 s.
    pub fn quick(dir: PathBuf) -> Self {
        SuiteParams {
            producers: vec![1, 16],
            sync_flush_producers: vec![64],
            e2e_producers: vec![4],
            duration: Duration::from_millis(1000),
            warmup: Duration::from_millis(200),
            backlog: 20_000,
            big_bytes: 40_000_000,
            conf: "mapedFileSizeCommitLog=67108864\n".into(),
            // A smoke test of Tern: the slow-building Rust peer is for the full run.
            rocketmq: false,
            ..Self::full(dir)
        }
    }
}

fn flush_name(sync: bool) -> &'static str {
    if sync { "SYNC_FLUSH" } else { "ASYNC_FLUSH" }
}

/// A load of `n` senders of `mode` to [`TOPIC`] through `namesrv`, with the run's body,
/// duration and warm-up.
pub(crate) fn load_of(p: &SuiteParams, namesrv: String, mode: Mode, n: u32) -> Load {
    Load {
        namesrv,
        topic: TOPIC.into(),
        mode,
        producers: n,
        body: p.body,
        duration: p.duration,
        warmup: p.warmup,
        tls: None,
    }
}

pub(crate) fn tern_conf(p: &SuiteParams, sync: bool) -> String {
    format!("flushDiskType={}\n{}", flush_name(sync), p.conf)
}

/// A RocketMQ-protocol broker under test: Tern or rocketmq-rust.
enum Broker {
    Tern(Server),
    Rmq(RocketMq),
}

impl Broker {
    fn name(&self) -> &'static str {
        match self {
            Broker::Tern(_) => TERN,
            Broker::Rmq(_) => RMQ,
        }
    }
    fn server(&mut self) -> &mut Server {
        match self {
            Broker::Tern(s) => s,
            Broker::Rmq(r) => &mut r.broker,
        }
    }
    fn namesrv(&self) -> String {
        match self {
            Broker::Tern(s) => s.namesrv.clone().unwrap_or_default(),
            Broker::Rmq(r) => r.namesrv.addr.clone(),
        }
    }
}

/// Starts the brokers of one flush policy (Tern, and rocketmq-rust when wanted and
/// installed), each with the topic created.
fn brokers(p: &SuiteParams, sync: bool, tag: &str) -> Result<Vec<Broker>, String> {
    let mut out = Vec::new();
    let tern = start_tern(&p.dir.join(format!("tern-{tag}")), &tern_conf(p, sync))?;
    out.push(Broker::Tern(tern));
    if p.rocketmq {
        match rocketmq_peer::start(&p.dir.join(format!("rmq-{tag}")), sync) {
            Ok(Some(r)) => out.push(Broker::Rmq(r)),
            Ok(None) => eprintln!(
                "{RMQ}: not installed in {} (run with --install-peers): skipped",
                rocketmq_peer::peers_root().display()
            ),
            // Like a peer that cannot take the topic, below.
            Err(e) => eprintln!("{RMQ}: {e}: its {tag} rows are left out"),
        }
    }
    let mut ready = Vec::with_capacity(out.len());
    for b in out {
        match block_on(load::create_topic(&b.namesrv(), TOPIC)) {
            Ok(()) => ready.push(b),
            // A peer that fails here costs its rows, not Tern's whole run (it is
            // stopped on drop).
            Err(e) if !matches!(b, Broker::Tern(_)) => {
                eprintln!("{}: {e}: its {tag} rows are left out", b.name())
            }
            Err(e) => return Err(format!("{}: {e}", b.name())),
        }
    }
    Ok(ready)
}

pub(crate) fn measured(
    scenario: &str,
    system: &str,
    case: &str,
    n: u32,
    body: usize,
    r: &LoadResult,
) -> Measure {
    Measure {
        latency: Latency::of(&r.hist),
        errors: r.errors,
        ..Measure::rate(scenario, system, case, n, body).with_rate(r.msgs, r.secs)
    }
}

pub(crate) fn log_row(m: &Measure) {
    let lat = m.latency.map_or(String::new(), |l| {
        format!(" p50 {:.0} µs p99 {:.0} µs", l.p50_us, l.p99_us)
    });
    eprintln!(
        "  {:<14} {:<22} P={:<3} {:>9.0} msgs/s {:>7.1} MB/s{lat}",
        m.system, m.case, m.producers, m.msgs_per_s, m.mb_per_s
    );
}

/// Raw sequential `write()` of `bytes` in 1 MiB chunks to a new file `path`, no fsync:
/// the bandwidth the page cache takes. Returns MB/s.
///
/// The file is kept until the caller removes it. A broker's log keeps its pages, so every
/// byte it appends lands in memory the kernel has to find and clear; a baseline that
/// deleted its file would hand those pages straight back to the next baseline, and on a
/// VM (where first use of a page costs a host fault) measured 2–10× faster than writing
/// to memory not recently freed. Keeping the baseline's bytes makes both pay alike.
pub fn raw_write_mb_s(path: &Path, bytes: u64) -> Result<f64, String> {
    let chunk = vec![0x5au8; 1 << 20];
    let mut f = fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let start = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).map_err(|e| e.to_string())?;
        left -= n as u64;
    }
    Ok(bytes as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6)
}

/// The produce scenario (and, for ASYNC_FLUSH, e2e on the same brokers).
pub fn produce(p: &SuiteParams, with_e2e: bool, rows: &mut Vec<Measure>) -> Result<(), String> {
    fs::create_dir_all(&p.dir).map_err(|e| format!("{}: {e}", p.dir.display()))?;
    for sync in p.flush.iter().copied() {
        let flush = flush_name(sync);
        let mut brokers = brokers(p, sync, flush)?;
        // Raw-write baselines live as long as the brokers' logs (see raw_write_mb_s).
        let mut raw_files = Vec::new();
        let redis = if p.redis {
            let r = redis_peer::start(&p.dir.join(format!("redis-{flush}")), sync)?;
            if r.is_none() {
                eprintln!(
                    "{REDIS}: redis-server not installed (apt-get install redis-server): skipped"
                );
            }
            r
        } else {
            None
        };
        let nats = if p.nats {
            nats_peer::start(&p.dir.join(format!("nats-{flush}")), sync)?
        } else {
            None
        };
        // SYNC_FLUSH: async and oneway senders measure the same group commit as sync.
        let modes: Vec<Mode> = p
            .modes
            .iter()
            .copied()
            .filter(|m| !sync || matches!(m, Mode::Sync | Mode::Batch))
            .collect();
        let counts = if sync {
            &p.sync_flush_producers
        } else {
            &p.producers
        };
        for &mode in &modes {
            let case = format!("{} {flush}", mode.name());
            eprintln!("produce: {case}");
            for (i, &n) in counts.iter().enumerate() {
                // A/B: alternate which system goes first at each load level.
                let mut order: Vec<usize> = (0..brokers.len()).collect();
                if i % 2 == 1 {
                    order.reverse();
                }
                for &b in &order {
                    let load = load_of(p, brokers[b].namesrv(), mode, n);
                    let cpu_before = brokers[b].server().cpu_time().ok();
                    let own_before = crate::proc::cpu_time_of("self").ok();
                    let r = block_on(load::run(&load))
                        .map_err(|e| format!("{}: {e}", brokers[b].name()))?;
                    let m = measured("produce", brokers[b].name(), &case, n, p.body, &r);
                    log_row(&m);
                    // CPU per message: steadier than rates on a shared machine. The CPU
                    // time spans the warm-up too; its messages are estimated.
                    let span = (p.warmup + p.duration).as_secs_f64() / p.duration.as_secs_f64();
                    let msgs = (r.msgs.max(1) as f64 * span).max(1.0);
                    let per_msg = |a: Option<Duration>, z: std::io::Result<Duration>| {
                        a.zip(z.ok())
                            .map(|(a, z)| format!("{:.2}", (z - a).as_secs_f64() * 1e6 / msgs))
                            .unwrap_or_else(|| "?".into())
                    };
                    eprintln!(
                        "  {:<14} CPU per message: broker {} µs, senders {} µs",
                        "",
                        per_msg(cpu_before, brokers[b].server().cpu_time()),
                        per_msg(own_before, crate::proc::cpu_time_of("self")),
                    );
                    rows.push(m);
                }
                if let (Mode::Sync, Some(redis)) = (mode, &redis) {
                    let r = redis_peer::load(&redis.addr, n, p.body, p.warmup, p.duration)?;
                    let m = measured(
                        "produce",
                        REDIS,
                        &format!("sync XADD {flush}"),
                        n,
                        p.body,
                        &r,
                    );
                    log_row(&m);
                    rows.push(m);
                }
                if let Some(nats) = &nats {
                    nats.produce(mode, flush, n, p, rows);
                }
                if mode == Mode::Batch && !sync {
                    let bytes = (rows.last().map_or(0.0, |m| m.mb_per_s)
                        * 1e6
                        * p.duration.as_secs_f64()) as u64;
                    let path = p.dir.join(format!("raw-write-{n}"));
                    let mb = raw_write_mb_s(&path, bytes.clamp(16 << 20, 1 << 30))?;
                    raw_files.push(path);
                    let m = Measure {
                        mb_per_s: mb,
                        msgs_per_s: mb * 1e6 / p.body as f64,
                        ..Measure::rate("produce", "raw write", "sequential write()", n, p.body)
                    };
                    log_row(&m);
                    rows.push(m);
                }
            }
        }
        if !sync {
            for b in &mut brokers {
                let rss = b.server().rss().unwrap_or_default();
                for (case, kib) in [
                    ("RSS peak (produce runs)", rss.peak_kib),
                    ("RSS anon after load", rss.anon_kib),
                ] {
                    let mib = kib as f64 / 1024.0;
                    rows.push(Measure::value("footprint", b.name(), case, mib, "MiB"));
                }
            }
            if with_e2e {
                e2e(p, &brokers, rows)?;
            }
        }
        for f in raw_files {
            let _ = fs::remove_file(f);
        }
    }
    Ok(())
}

fn e2e(p: &SuiteParams, brokers: &[Broker], rows: &mut Vec<Measure>) -> Result<(), String> {
    eprintln!("e2e: sync send → long-polling consumer");
    for &n in &p.e2e_producers {
        for b in brokers {
            let load = load_of(p, b.namesrv(), Mode::Sync, n);
            let r = block_on(consume::e2e(&load)).map_err(|e| format!("{} e2e: {e}", b.name()))?;
            let m = Measure {
                latency: Latency::of(&r.delivery),
                msgs_per_s: r.consumed_per_s,
                mb_per_s: r.consumed_per_s * p.body as f64 / 1e6,
                errors: r.send.errors,
                ..Measure::rate("e2e", b.name(), "send → consume", n, p.body)
            };
            log_row(&m);
            rows.push(m);
        }
    }
    Ok(())
}

/// A progress bar of `len` steps labelled `what` (the suite's and the stalls run's).
pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

fn fill(namesrv: &str, p: &SuiteParams, n: u64, what: &str) -> Result<f64, String> {
    let pb = bar(n, what);
    let r = block_on(load::fill(namesrv, TOPIC, p.body, n, 4, &|k| pb.inc(k)));
    pb.finish_and_clear();
    r
}

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Starts one broker of `system` (ASYNC_FLUSH) on `dir`, which may hold data already.
fn start_one(p: &SuiteParams, system: &str, dir: &Path) -> Result<Broker, String> {
    if system == RMQ {
        let r = rocketmq_peer::start(dir, false)?.ok_or("rocketmq-rust is not installed")?;
        Ok(Broker::Rmq(r))
    } else {
        Ok(Broker::Tern(start_tern(dir, &tern_conf(p, false))?))
    }
}

/// The backlog scenario: start-up and idle RSS, fill, kill -9 and recover, catch up from
/// offset 0, grow past `big_bytes`, stop cleanly and start again.
pub fn backlog(p: &SuiteParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    fs::create_dir_all(&p.dir).map_err(|e| format!("{}: {e}", p.dir.display()))?;
    let mut systems = vec![TERN];
    if p.rocketmq && rocketmq_peer::installed() {
        systems.push(RMQ);
    }
    for system in systems {
        match backlog_one(p, system, rows) {
            // A peer that fails here costs its rows, not Tern's whole run.
            Err(e) if system != TERN => eprintln!("{system}: backlog scenario failed: {e}"),
            r => r?,
        }
    }
    if p.nats {
        nats_peer::backlog(p, rows);
    }
    Ok(())
}

/// Reads the backlog from offset 0, by pull or by POP with batch acks, in its own consumer
/// group, and adds the row; a message not read counts as an error.
fn catch_up(
    p: &SuiteParams,
    namesrv: &str,
    system: &str,
    how: CatchUp,
    rows: &mut Vec<Measure>,
) -> Result<(), String> {
    let (what, group, case) = match how {
        CatchUp::Pop => (
            "pop catch-up",
            "bench_pop",
            "POP+batch ack from 0 (32/pop, 4 queues)",
        ),
        CatchUp::Pull => (
            "catch-up",
            "bench_catchup",
            "pull from 0 (32/pull, 4 queues)",
        ),
    };
    let pb = bar(p.backlog, &format!("{system} {what}"));
    let progress = |k| pb.inc(k);
    let r = block_on(consume::catch_up(namesrv, TOPIC, group, &progress, how));
    pb.finish_and_clear();
    let (n, secs) = r.map_err(|e| format!("{system} {what}: {e}"))?;
    let mut m = Measure::rate("catchup", system, case, 0, p.body).with_rate(n, secs);
    m.errors = p.backlog.saturating_sub(n);
    log_row(&m);
    rows.push(m);
    Ok(())
}

/// The backlog scenario for one system.
fn backlog_one(
    p: &SuiteParams,
    system: &'static str,
    rows: &mut Vec<Measure>,
) -> Result<(), String> {
    let push = |rows: &mut Vec<Measure>, case: &str, v: f64, unit: &str| {
        eprintln!("  {system:<14} {case:<34} {v:>9.1} {unit}");
        rows.push(Measure::value("footprint", system, case, v, unit));
    };
    eprintln!("backlog: {system}");
    // Start-up, empty: median of three fresh starts.
    let mut starts = Vec::new();
    let mut last: Option<(Broker, PathBuf)> = None;
    for i in 0..3 {
        // The previous one goes first: peers listen on fixed ports.
        if let Some((mut prev, prev_dir)) = last.take() {
            prev.server().kill9();
            let _ = fs::remove_dir_all(&prev_dir);
        }
        let dir = p.dir.join(format!("{system}-backlog-{i}"));
        let _ = fs::remove_dir_all(&dir);
        let mut v = start_one(p, system, &dir)?;
        starts.push(v.server().startup.as_secs_f64() * 1e3);
        last = Some((v, dir));
    }
    push(
        rows,
        "start-up to listening, empty",
        median_ms(starts),
        "ms",
    );
    let (mut b, dir) = last.ok_or("no broker")?;
    runtime::block_on(runtime::sleep(Duration::from_secs(1)));
    let rss = b.server().rss().unwrap_or_default();
    push(rows, "RSS idle", rss.total_mib(), "MiB");
    push(rows, "RSS idle, anon", rss.anon_kib as f64 / 1024.0, "MiB");
    block_on(load::create_topic(&b.namesrv(), TOPIC))?;
    let secs = fill(&b.namesrv(), p, p.backlog, &format!("{system} fill"))?;
    let m = Measure::rate("catchup", system, "fill (batch32, 4 senders)", 4, p.body)
        .with_rate(p.backlog, secs);
    log_row(&m);
    rows.push(m);
    // Crash and recover.
    b.server().kill9();
    drop(b);
    let mut b = start_one(p, system, &dir)?;
    let gib = p.backlog as f64 * p.body as f64 / (1u64 << 30) as f64;
    push(
        rows,
        &format!("recovery after kill -9, {gib:.2} GiB"),
        b.server().startup.as_secs_f64() * 1e3,
        "ms",
    );
    // Catch up from offset 0.
    block_on(load::wait_for_route(&b.namesrv(), TOPIC))?;
    catch_up(p, &b.namesrv(), system, CatchUp::Pull, rows)?;
    if system == TERN {
        // POP receive+ack over the same backlog, another group (Tern only: the peer's
        // POP needs its timer wheel and a proxy-era setup this run does not make).
        catch_up(p, &b.namesrv(), system, CatchUp::Pop, rows)?;
    }
    // Grow past big_bytes, stop cleanly, start again.
    let more = (p.big_bytes / p.body as u64).saturating_sub(p.backlog);
    if more > 0 {
        fill(&b.namesrv(), p, more, &format!("{system} grow"))?;
    }
    b.server().terminate(Duration::from_secs(30));
    drop(b);
    let total = p.backlog + more;
    let mut b = start_one(p, system, &dir)?;
    let gb = total as f64 * p.body as f64 / 1e9;
    push(
        rows,
        &format!("start-up to listening, {gb:.2} GB"),
        b.server().startup.as_secs_f64() * 1e3,
        "ms",
    );
    b.server().terminate(Duration::from_secs(30));
    let _ = fs::remove_dir_all(&dir);
    Ok(())
}
