//! A store over fault-injecting RAM media for the integration tests: the geometry, the
//! engine's fixed queue table over RAM directories, a message generator, and the buffers
//! it all borrows. Each test file uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;

use tern_engine::Error;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::index::IndexConfig;
use tern_engine::properties;
use tern_engine::ram::{RamDir, RamError, RamQueues};
use tern_engine::record::MessageIn;
use tern_engine::store::StoreConfig;
use tern_engine::testkit::{self, RamEngine, RamParts};

pub const LOG_SEG: u64 = 2048;
pub const CQ_ENTRIES: u64 = 16;
pub const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: LOG_SEG,
    queue_entries_per_file: CQ_ENTRIES,
    index: IndexConfig {
        slots: 8,
        entries: 24,
    },
    ..StoreConfig::SERVER
};
pub const TOPICS: [&str; 3] = ["orders", "%RETRY%g", "audit-log"];
/// Store time of the tests' first message.
pub const TS: i64 = 1_700_000_000_000;

/// Segments the log's and the index's directory each hold.
pub const DIR_SEGS: usize = 128;

/// Buffers of the arena, per structure. Each queue takes `QUEUE_FILES`.
pub const LOG_FILES: usize = 96;
pub const INDEX_FILES: usize = 64;
pub const QUEUE_FILES: usize = 24;
/// Six queues of the three topics (two ids each), and the timer topic's.
pub const QUEUES: usize = 7;
pub type QueueDir<'a> = RamDir<'a, QUEUE_FILES>;
pub type Table<'a> = RamQueues<QueueDir<'a>, QUEUES>;
pub type TestEngine<'a> = RamEngine<'a, DIR_SEGS, QUEUE_FILES, QUEUES>;
/// The parts a store is opened from and given back as.
pub type Parts<'a> = RamParts<'a, DIR_SEGS, QUEUE_FILES, QUEUES>;

/// SplitMix64: small, fast, and the same on every machine.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a test knows of one appended message.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub topic: &'static str,
    pub queue_id: i32,
    pub body: Vec<u8>,
    pub props: Vec<u8>,
    pub key: Option<String>,
    pub offset: u64,
    pub queue_offset: u64,
}

pub fn message(s: &Sent) -> MessageIn<'_> {
    testkit::message(s.topic, s.queue_id, &s.body, &s.props)
}

/// Message number `n`: a random topic, queue and body, a UNIQ_KEY, and often a key.
pub fn new_message(rng: &mut Rng, n: u64) -> Sent {
    let topic = TOPICS[rng.below(3) as usize];
    let len = rng.below(220) as usize;
    let mut body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    body.extend_from_slice(&n.to_be_bytes());
    let mut props = vec![0u8; 128];
    let mut plen = 0;
    let key = rng.chance(60).then(|| format!("k{}", n));
    if let Some(k) = &key {
        properties::append(&mut props, &mut plen, properties::key::KEYS, k).unwrap();
    }
    properties::append(
        &mut props,
        &mut plen,
        properties::key::UNIQ_KEY,
        &format!("U{n:08}"),
    )
    .unwrap();
    props.truncate(plen);
    Sent {
        topic,
        queue_id: rng.below(2) as i32,
        body,
        props,
        key,
        offset: 0,
        queue_offset: 0,
    }
}

/// What a crash does to one media with `pending` writes not flushed: a process crash
/// keeps them; a power cut drops them, or keeps some and tears the next.
pub fn crash_kind(rng: &mut Rng, pending: usize, process: bool) -> Crash {
    if process {
        Crash::Process
    } else if pending == 0 || rng.chance(40) {
        Crash::DropUnflushed
    } else {
        Crash::Torn {
            keep: rng.below(pending as u64) as usize,
            tear_at: rng.below(600) as usize,
        }
    }
}

/// Crashes one media its own way ([`crash_kind`]).
pub fn crash_media(m: &mut FaultyMedia<'_>, rng: &mut Rng, process: bool) {
    let kind = crash_kind(rng, m.pending_writes(), process);
    m.crash(kind);
}

/// Crashes every segment of `d`, each its own way.
pub fn crash_dir<const N: usize>(d: &mut RamDir<'_, N>, rng: &mut Rng, process: bool) {
    for (_, m) in d.segments_mut() {
        crash_media(m, rng, process);
    }
}

/// Cuts power (or kills the process) under every media of `parts`, each its own way, in
/// [`RamParts::for_each_media`]'s order: log, index, queues, checkpoint.
pub fn crash_each(parts: &mut Parts<'_>, rng: &mut Rng, process: bool) {
    parts.for_each_media(|m| crash_media(m, rng, process));
}

/// The buffers of one store: log segments, index files, queue files and the checkpoint
/// page, each twice its media (current and durable image).
pub struct Arena {
    log: Vec<Vec<u8>>,
    index: Vec<Vec<u8>>,
    queues: Vec<Vec<u8>>,
    checkpoint: Vec<u8>,
}

impl Arena {
    pub fn new() -> Self {
        Arena {
            log: (0..LOG_FILES)
                .map(|_| vec![0u8; 2 * LOG_SEG as usize])
                .collect(),
            index: (0..INDEX_FILES)
                .map(|_| vec![0u8; 2 * CONFIG.index.file_size() as usize])
                .collect(),
            queues: (0..QUEUES * QUEUE_FILES)
                .map(|_| vec![0u8; 2 * (CQ_ENTRIES * 20) as usize])
                .collect(),
            checkpoint: vec![0u8; 2 * 4096],
        }
    }

    /// Empty directories and a zeroed checkpoint page over these buffers.
    pub fn parts<'a>(&'a mut self, plan: &'a FaultPlan) -> Parts<'a> {
        Parts::with_buffers(
            plan,
            &mut self.log,
            &mut self.index,
            &mut self.queues,
            &mut self.checkpoint,
            4096,
        )
        .unwrap()
    }
}

/// Runs `f` on a big stack with a new, empty store over a new arena, and the fault plan
/// its media share.
pub fn with_store(f: impl for<'a> FnOnce(TestEngine<'a>, &'a FaultPlan) + Send + 'static) {
    in_big_stack(|| {
        let plan = FaultPlan::none();
        let mut arena = Arena::new();
        let store = arena.parts(&plan).open(CONFIG, false).unwrap();
        f(store, &plan);
    })
    .unwrap();
}

/// Stops `store` as a crash of `kind` would (every media the same way) and recovers it.
pub fn recover<'a>(store: TestEngine<'a>, kind: Crash) -> Result<TestEngine<'a>, Error<RamError>> {
    let mut parts = Parts::from_store(store);
    parts.crash(kind);
    parts.open(CONFIG, true)
}

/// Runs `f` on a thread with a big stack: the RAM directories are fixed-capacity tables
/// held by value.
pub fn in_big_stack(f: impl FnOnce() + Send + 'static) -> std::thread::Result<()> {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
}

/// Runs a simulation's `case` on a big stack for each of its seeds: only `{prefix}_SEED`
/// when that is set (a replay), else `{prefix}_CASES` seeds (default `cases`) counting
/// from `{prefix}_BASE` (default `base`). A failed case panics naming its seed and how to
/// replay it. Returns how many cases ran; `None` after a replay.
pub fn run_seeds(prefix: &str, cases: u64, base: u64, what: &str, case: fn(u64)) -> Option<u64> {
    let var = |name: &str| std::env::var(format!("{prefix}_{name}")).ok();
    if let Some(seed) = var("SEED") {
        let seed = seed
            .parse()
            .unwrap_or_else(|e| panic!("{prefix}_SEED is a number: {e}"));
        in_big_stack(move || case(seed)).expect("replayed case failed");
        return None;
    }
    let cases = var("CASES").and_then(|c| c.parse().ok()).unwrap_or(cases);
    let base = var("BASE").and_then(|c| c.parse().ok()).unwrap_or(base);
    for seed in base..base + cases {
        if in_big_stack(move || case(seed)).is_err() {
            panic!("{what} failed; replay with {prefix}_SEED={seed}");
        }
    }
    Some(cases)
}

/// Every record of the log, in order, as (offset, body); each one's CRC checked.
pub fn log_records(store: &TestEngine<'_>) -> Vec<(u64, Vec<u8>)> {
    use tern_engine::commitlog::Slot;
    let log = store.log();
    let mut out = Vec::new();
    let mut pos = log.min_offset();
    while pos < log.max_offset() {
        match log.slot_at(pos).unwrap() {
            Slot::Skip(next) => pos = next,
            Slot::End => break,
            Slot::Record(size) => {
                log.with_record(pos, size, &mut [], |v| {
                    let v = v.unwrap();
                    v.verify_crc().unwrap();
                    out.push((pos, v.body().to_vec()));
                    Ok(())
                })
                .unwrap();
                pos += u64::from(size);
            }
        }
    }
    out
}

/// Each message's consume-queue entry points at its record.
pub fn assert_queued(store: &TestEngine<'_>, sent: &[Sent]) {
    for s in sent {
        let q = store.queue(s.topic, s.queue_id).unwrap();
        assert_eq!(
            q.get(s.queue_offset).unwrap().unwrap().physical_offset,
            s.offset
        );
    }
}

/// Appends `s` and records where it went.
pub fn put(store: &mut TestEngine<'_>, s: &mut Sent, ts: i64) -> Result<(), Error<RamError>> {
    let stored = store.put(&message(s), ts)?;
    s.offset = stored.at.offset;
    s.queue_offset = stored.queue_offset;
    Ok(())
}

/// Dispatches every record the log holds, telling no one: what a test does in place of
/// the broker's reput passes.
pub fn dispatch_all(store: &mut TestEngine<'_>) -> Result<u64, Error<RamError>> {
    store.dispatch(&mut [], &mut |_| {})
}

/// The log offsets the index holds for `key` of `topic`, over all time.
pub fn index_hits(store: &TestEngine<'_>, topic: &str, key: &str) -> Vec<u64> {
    let mut hits = Vec::new();
    store
        .index()
        .query(topic, key, 64, 0, i64::MAX, &mut |o| hits.push(o))
        .unwrap();
    hits
}

/// What a test appends: the generator of its messages and every message sent so far, in
/// log order.
pub struct Traffic {
    pub rng: Rng,
    pub sent: Vec<Sent>,
}

impl Traffic {
    /// No message sent yet; the generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Traffic {
            rng: Rng(seed),
            sent: Vec::new(),
        }
    }

    /// Appends `n` new messages ([`put_next`]).
    pub fn put_n(&mut self, store: &mut TestEngine<'_>, n: usize) {
        for _ in 0..n {
            put_next(store, &mut self.rng, &mut self.sent);
        }
    }

    /// Appends new messages ([`put_next`]) until the log reaches `end`.
    pub fn put_until(&mut self, store: &mut TestEngine<'_>, end: u64) {
        while store.log().max_offset() < end {
            put_next(store, &mut self.rng, &mut self.sent);
        }
    }
}

/// How many of `sent` (in log order) lie below `flushed`: the messages a flush, checkpoint
/// or recovery that returned `Ok` with that offset acknowledged.
pub fn acked(sent: &[Sent], flushed: u64) -> usize {
    sent.iter().take_while(|s| s.offset < flushed).count()
}

/// Appends a new message, number `sent.len()`, stored at `TS + sent.len()`, and records it
/// in `sent`.
pub fn put_next(store: &mut TestEngine<'_>, rng: &mut Rng, sent: &mut Vec<Sent>) {
    let mut s = new_message(rng, sent.len() as u64);
    put(store, &mut s, TS + sent.len() as i64).unwrap();
    sent.push(s);
}

/// Each queue of the tests (every topic, ids 0 and 1) holds exactly its messages of
/// `survivors`, at consecutive queue offsets from 0; an entry is checked for each one at
/// or above the log's start `min` (retention took the others' records).
pub fn assert_queues_hold(store: &TestEngine<'_>, survivors: &[Sent], min: u64, seed: u64) {
    let mut per_queue: HashMap<(&str, i32), Vec<&Sent>> = HashMap::new();
    for s in survivors {
        per_queue.entry((s.topic, s.queue_id)).or_default().push(s);
    }
    for topic in TOPICS {
        for q in 0..2 {
            let want = per_queue.get(&(topic, q)).map(Vec::as_slice).unwrap_or(&[]);
            let Some(cq) = store.queue(topic, q) else {
                assert!(want.is_empty(), "seed {seed}: queue {topic}/{q} missing");
                continue;
            };
            assert_eq!(
                cq.max_offset(),
                want.len() as u64,
                "seed {seed}: {topic}/{q} length"
            );
            for (i, s) in want.iter().enumerate() {
                assert_eq!(s.queue_offset, i as u64, "seed {seed}: model queue offset");
                if s.offset < min {
                    continue;
                }
                let e = cq.get(i as u64).unwrap().unwrap_or_else(|| {
                    panic!(
                        "seed {seed}: {topic}/{q}#{i} missing (min {}, max {}, want {:?})",
                        cq.min_offset(),
                        cq.max_offset(),
                        want.iter().map(|s| s.offset).collect::<Vec<_>>()
                    )
                });
                assert_eq!(e.physical_offset, s.offset, "seed {seed}: {topic}/{q}#{i}");
            }
        }
    }
}
