//! Scenario `engine`: how fast the storage engine appends, against the disk's own speed.
//!
//! Two measurements, each paired with a baseline that writes the same bytes:
//!
//! - **append**: `put` of N messages into an [`FsStore`] (encode into the mapped segment,
//!   no flush) against N `write()` calls of the encoded record's size to a plain file.
//!   This is the broker's hot path under ASYNC_FLUSH; the ratio shows what the engine
//!   costs over copying the bytes into the page cache.
//! - **flush G=n**: groups of `n` puts, each group made durable by one `flush_log`
//!   (msync of the group's pages), against `n` `write()` calls and one `fdatasync`. This
//!   is SYNC_FLUSH with group commit; the rate is bounded by the device's flush latency.
//!
//! Every measurement starts from an empty store or file, which is deleted afterwards so
//! its dirty pages are dropped rather than written back under the next measurement.
//! Segments are 256 MiB, not the server's 1 GiB: creating a segment preallocates it
//! (`fallocate`), and a quarter of the size keeps disk use and setup per run modest while
//! still rolling segments inside the longer runs, which the engine must pay for.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tern_engine::index::IndexConfig;
use tern_engine::properties::{append, key};
use tern_engine::record::MessageIn;
use tern_engine::store::StoreConfig;
use tern_engine_fs::{FsStore, FsStoreError};

use crate::report::{Rate, Row, median};

/// Queues the messages are spread over, round robin, as producers spread them.
const QUEUES: i32 = 4;
/// Store time stamped on every message: the engine does not read it on append.
const STORE_TIME_MS: i64 = 1_700_000_000_000;

/// How much to measure.
#[derive(Clone, Debug)]
pub struct EngineParams {
    /// Folder for the stores and files written (emptied and removed afterwards).
    pub dir: PathBuf,
    /// Message body sizes for the append measurement.
    pub body_sizes: Vec<usize>,
    /// Record bytes written per append measurement (the message count follows).
    pub append_bytes: u64,
    /// Group sizes for the flushed measurement.
    pub groups: Vec<u64>,
    /// Body size for the flushed measurement.
    pub flush_body: usize,
    /// How long each flushed measurement runs.
    pub flush_time: Duration,
    /// A/B rounds of every measurement.
    pub rounds: u32,
    /// Commit-log segment size of the store.
    pub segment_bytes: u64,
}

impl EngineParams {
    /// The real run: 512 MiB per append measurement, 1.5 s per flushed one, 5 rounds.
    pub fn full(dir: PathBuf) -> Self {
        EngineParams {
            dir,
            body_sizes: vec![128, 1024, 4096],
            append_bytes: 512 << 20,
            groups: vec![1, 8, 64],
            flush_body: 1024,
            flush_time: Duration::from_millis(1500),
            rounds: 5,
            segment_bytes: 256 << 20,
        }
    }

    /// `--quick`: the same cases, small enough to finish in seconds.
    pub fn quick(dir: PathBuf) -> Self {
        EngineParams {
            append_bytes: 32 << 20,
            flush_time: Duration::from_millis(200),
            rounds: 2,
            segment_bytes: 64 << 20,
            ..Self::full(dir)
        }
    }

    /// For tests: every case, a few milliseconds each.
    pub fn tiny(dir: PathBuf) -> Self {
        EngineParams {
            append_bytes: 256 << 10,
            flush_time: Duration::from_millis(10),
            rounds: 1,
            segment_bytes: 1 << 20,
            ..Self::full(dir)
        }
    }

    fn config(&self) -> StoreConfig {
        StoreConfig {
            log_segment_size: self.segment_bytes,
            // Appends alone never write the queues or the index; a small index keeps
            // a store's setup from preallocating the server's 420 MB index file.
            index: IndexConfig {
                slots: 1 << 16,
                entries: 1 << 18,
            },
            ..StoreConfig::SERVER
        }
    }
}

/// Why the scenario stopped.
#[derive(Debug)]
pub enum BenchError {
    /// The store failed.
    Store(FsStoreError),
    /// The baseline's file (or the data folder) failed.
    Io(PathBuf, io::Error),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Store(e) => write!(f, "{e}"),
            BenchError::Io(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<FsStoreError> for BenchError {
    fn from(e: FsStoreError) -> Self {
        BenchError::Store(e)
    }
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> BenchError + '_ {
    move |e| BenchError::Io(path.to_path_buf(), e)
}

/// The messages of one case: the body and the properties a producer typically sends
/// (a tag, a unique key, the wait flag), encoded once and reused.
struct Messages {
    body: Vec<u8>,
    props: Vec<u8>,
}

impl Messages {
    fn new(body_bytes: usize) -> Self {
        let body = (0..body_bytes).map(|i| (i % 251) as u8).collect();
        let mut props = vec![0u8; 256];
        let mut n = 0;
        for (k, v) in [
            (key::TAGS, "TagA"),
            (key::UNIQ_KEY, "7F0000010001000000000000000000AB"),
            (key::WAIT, "true"),
        ] {
            append(&mut props, &mut n, k, v).unwrap_or_else(|| unreachable!("256 bytes fit"));
        }
        props.truncate(n);
        Messages { body, props }
    }

    fn get(&self, i: u64) -> MessageIn<'_> {
        let queue_id = (i % QUEUES as u64) as i32;
        MessageIn {
            born_timestamp: STORE_TIME_MS,
            ..tern_engine::testkit::message("BenchTopic", queue_id, &self.body, &self.props)
        }
    }

    /// Bytes of one stored record: what the baseline writes per message.
    fn record_bytes(&self) -> usize {
        self.get(0)
            .encoded_len()
            .unwrap_or_else(|_| unreachable!("bench messages are valid"))
    }
}

/// Runs the scenario and returns one row per case.
pub fn run(p: &EngineParams) -> Result<Vec<Row>, BenchError> {
    fs::create_dir_all(&p.dir).map_err(io_at(&p.dir))?;
    let mut rows = Vec::new();
    for &body in &p.body_sizes {
        let msgs = Messages::new(body);
        let record = msgs.record_bytes();
        let n = (p.append_bytes / record as u64).max(1);
        let pair = measure(p.rounds, |round| {
            let run_engine = || engine_append(p, &msgs, n, round);
            let run_raw = || raw_append(&p.dir, record, n, round);
            ab(round, run_engine, run_raw)
        })?;
        rows.push(row("append".into(), body, record, pair));
    }
    for &group in &p.groups {
        let msgs = Messages::new(p.flush_body);
        let record = msgs.record_bytes();
        let pair = measure(p.rounds, |round| {
            let run_engine = || engine_flushed(p, &msgs, group, round);
            let run_raw = || raw_flushed(p, record, group, round);
            ab(round, run_engine, run_raw)
        })?;
        rows.push(row(format!("flush G={group}"), p.flush_body, record, pair));
    }
    let _ = fs::remove_dir(&p.dir);
    Ok(rows)
}

/// One timed run: messages written and seconds taken.
type Timed = (u64, f64);

/// Runs A then B on even rounds and B then A on odd ones, so neither always runs on a
/// cache the other warmed. Each starts on a quiet disk: see [`settle`].
fn ab(
    round: u32,
    a: impl FnOnce() -> Result<Timed, BenchError>,
    b: impl FnOnce() -> Result<Timed, BenchError>,
) -> Result<(Timed, Timed), BenchError> {
    if round % 2 == 0 {
        settle();
        let a = a()?;
        settle();
        Ok((a, b()?))
    } else {
        settle();
        let b = b()?;
        settle();
        Ok((a()?, b))
    }
}

/// Waits, untimed, until the system's dirty pages are written back (`sync(2)`).
///
/// Without it, a measurement runs while the device still drains what the one before it
/// left in the page cache (deleting a file does not cancel writeback already started),
/// and the flushed cases measure the previous case's writeback as much as their own.
fn settle() {
    rustix::fs::sync();
}

fn measure(
    rounds: u32,
    mut f: impl FnMut(u32) -> Result<(Timed, Timed), BenchError>,
) -> Result<Vec<(Timed, Timed)>, BenchError> {
    (0..rounds.max(1)).map(&mut f).collect()
}

fn row(case: String, body: usize, record: usize, pairs: Vec<(Timed, Timed)>) -> Row {
    let rate = |(msgs, secs): Timed| Rate::of(msgs, record, secs);
    let engine: Vec<Rate> = pairs.iter().map(|&(e, _)| rate(e)).collect();
    let raw: Vec<Rate> = pairs.iter().map(|&(_, r)| rate(r)).collect();
    let ratios: Vec<f64> = engine
        .iter()
        .zip(&raw)
        .map(|(e, r)| e.msgs_per_s / r.msgs_per_s)
        .collect();
    let med = |v: &[Rate]| Rate {
        msgs_per_s: median(&v.iter().map(|r| r.msgs_per_s).collect::<Vec<_>>()),
        mb_per_s: median(&v.iter().map(|r| r.mb_per_s).collect::<Vec<_>>()),
    };
    Row {
        case,
        body_bytes: body,
        record_bytes: record,
        engine: med(&engine),
        raw: med(&raw),
        ratio: median(&ratios),
        ratio_range: ratios
            .iter()
            .fold((f64::INFINITY, 0.0), |(lo, hi), &r| (lo.min(r), hi.max(r))),
        rounds: pairs.len() as u32,
    }
}

/// An empty store for one measurement; removed by [`discard_store`].
fn fresh_store(p: &EngineParams, name: &str) -> Result<(FsStore, PathBuf), BenchError> {
    let root = p.dir.join(name);
    remove_all(&root)?;
    let (store, _) = FsStore::open(&root, p.config())?;
    Ok((store, root))
}

/// Drops the store without closing it (a clean close would dispatch every message to
/// queues and index, which is not what is measured) and deletes its files, so their
/// dirty pages are dropped instead of written back under the next measurement.
fn discard_store(store: FsStore, root: &Path) -> Result<(), BenchError> {
    drop(store);
    remove_all(root)
}

fn remove_all(path: &Path) -> Result<(), BenchError> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(BenchError::Io(path.into(), e)),
        _ => Ok(()),
    }
}

fn engine_append(
    p: &EngineParams,
    msgs: &Messages,
    n: u64,
    round: u32,
) -> Result<Timed, BenchError> {
    let (mut store, root) = fresh_store(p, &format!("engine-append-{round}"))?;
    let start = Instant::now();
    for i in 0..n {
        store
            .engine_mut()
            .put(&msgs.get(i), STORE_TIME_MS)
            .map_err(|e| store.error("put", e))?;
    }
    let secs = start.elapsed().as_secs_f64();
    discard_store(store, &root)?;
    Ok((n, secs))
}

fn raw_file(dir: &Path, name: &str) -> Result<(File, PathBuf), BenchError> {
    let path = dir.join(name);
    let file = File::create(&path).map_err(io_at(&path))?;
    Ok((file, path))
}

fn raw_append(dir: &Path, record: usize, n: u64, round: u32) -> Result<Timed, BenchError> {
    let (mut file, path) = raw_file(dir, &format!("raw-append-{round}"))?;
    let buf: Vec<u8> = (0..record).map(|i| (i % 251) as u8).collect();
    let start = Instant::now();
    for _ in 0..n {
        file.write_all(&buf).map_err(io_at(&path))?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(file);
    fs::remove_file(&path).map_err(io_at(&path))?;
    Ok((n, secs))
}

fn engine_flushed(
    p: &EngineParams,
    msgs: &Messages,
    group: u64,
    round: u32,
) -> Result<Timed, BenchError> {
    let (mut store, root) = fresh_store(p, &format!("engine-flush-{round}"))?;
    let mut i = 0u64;
    let start = Instant::now();
    while start.elapsed() < p.flush_time {
        for _ in 0..group {
            store
                .engine_mut()
                .put(&msgs.get(i), STORE_TIME_MS)
                .map_err(|e| store.error("put", e))?;
            i += 1;
        }
        store
            .engine_mut()
            .flush_log()
            .map_err(|e| store.error("flush", e))?;
    }
    let secs = start.elapsed().as_secs_f64();
    discard_store(store, &root)?;
    Ok((i, secs))
}

fn raw_flushed(
    p: &EngineParams,
    record: usize,
    group: u64,
    round: u32,
) -> Result<Timed, BenchError> {
    let (mut file, path) = raw_file(&p.dir, &format!("raw-flush-{round}"))?;
    let buf: Vec<u8> = (0..record).map(|i| (i % 251) as u8).collect();
    let mut i = 0u64;
    let start = Instant::now();
    while start.elapsed() < p.flush_time {
        for _ in 0..group {
            file.write_all(&buf).map_err(io_at(&path))?;
            i += 1;
        }
        file.sync_data().map_err(io_at(&path))?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(file);
    fs::remove_file(&path).map_err(io_at(&path))?;
    Ok((i, secs))
}
