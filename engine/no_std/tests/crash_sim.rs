//! Deterministic crash simulation: random appends, flushes, dispatches and checkpoints over
//! fault-injecting media, a power cut (or process crash, or failing media) at a random
//! point, recovery, and a comparison with a model of what was acknowledged.
//!
//! Every case is a seed. A failure prints it; replay one with
//! `TERN_SIM_SEED=<seed> cargo test -p tern-engine --test crash_sim`. `TERN_SIM_CASES`
//! sets how many cases run (default 2000).

use std::collections::HashMap;

use tern_engine::Error;
use tern_engine::commitlog::Slot;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::index::IndexConfig;
use tern_engine::properties;
use tern_engine::ram::{RamDir, RamError};
use tern_engine::record::{Host, MessageIn, RecordView};
use tern_engine::store::{QueueSlot, QueueTable, Store, StoreConfig};

const LOG_SEG: u64 = 2048;
const CQ_ENTRIES: u64 = 16;
const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: LOG_SEG,
    queue_entries_per_file: CQ_ENTRIES,
    index: IndexConfig {
        slots: 8,
        entries: 24,
    },
    ..StoreConfig::SERVER
};
const TOPICS: [&str; 3] = ["orders", "%RETRY%g", "audit-log"];

type Dir<'a> = RamDir<'a, 64>;

/// SplitMix64: small, fast, and the same on every machine.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The caller-side queue table, on the heap as a broker's would be.
struct Table<'a> {
    plan: &'a FaultPlan,
    pool: Vec<&'a mut [u8]>,
    live: HashMap<(String, i32), QueueSlot<Dir<'a>>>,
    closed: Vec<((String, i32), Dir<'a>)>,
    pending_key: Option<(String, i32)>,
}

impl<'a> Table<'a> {
    fn crash(&mut self, rng: &mut Rng) {
        for (k, slot) in self.live.drain() {
            self.closed.push((k, slot.queue.into_dir()));
        }
        for (_, d) in self.closed.iter_mut() {
            crash_dir(d, rng);
        }
    }
}

fn crash_kind(rng: &mut Rng, pending: usize, process: bool) -> Crash {
    if process {
        return Crash::Process;
    }
    if pending == 0 || rng.chance(40) {
        Crash::DropUnflushed
    } else {
        Crash::Torn {
            keep: rng.below(pending as u64) as usize,
            tear_at: rng.below(600) as usize,
        }
    }
}

static PROCESS_CRASH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn crash_dir(d: &mut Dir<'_>, rng: &mut Rng) {
    let process = PROCESS_CRASH.load(std::sync::atomic::Ordering::Relaxed);
    for (_, m) in d.segments_mut() {
        let kind = crash_kind(rng, m.pending_writes(), process);
        m.crash(kind);
    }
}

impl<'a> QueueTable for Table<'a> {
    type Dir = Dir<'a>;

    fn get(&self, topic: &str, queue_id: i32) -> Option<&QueueSlot<Dir<'a>>> {
        self.live.get(&(topic.to_string(), queue_id))
    }
    fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut QueueSlot<Dir<'a>>> {
        self.live.get_mut(&(topic.to_string(), queue_id))
    }
    fn create_dir(&mut self, _topic: &str, _queue_id: i32) -> Result<Dir<'a>, Error<RamError>> {
        let mut d = RamDir::new(self.plan);
        for _ in 0..12 {
            let b = self.pool.pop().ok_or(Error::TableFull)?;
            d.give(b).map_err(Error::Media)?;
        }
        Ok(d)
    }
    fn insert(
        &mut self,
        topic: &str,
        queue_id: i32,
        slot: QueueSlot<Dir<'a>>,
    ) -> Result<(), Error<RamError>> {
        self.live.insert((topic.to_string(), queue_id), slot);
        Ok(())
    }
    fn open_existing(
        &mut self,
        open: &mut dyn FnMut(Dir<'a>) -> Result<QueueSlot<Dir<'a>>, Error<RamError>>,
    ) -> Result<(), Error<RamError>> {
        for (k, d) in std::mem::take(&mut self.closed) {
            self.pending_key = Some(k.clone());
            let slot = open(d)?;
            self.live.insert(k, slot);
        }
        self.pending_key = None;
        Ok(())
    }
    fn for_each_mut(
        &mut self,
        f: &mut dyn FnMut(&str, i32, &mut QueueSlot<Dir<'a>>) -> Result<(), Error<RamError>>,
    ) -> Result<(), Error<RamError>> {
        for ((t, q), s) in self.live.iter_mut() {
            f(t, *q, s)?;
        }
        Ok(())
    }
}

/// What the model knows of one appended message.
#[derive(Clone, Debug, PartialEq)]
struct Sent {
    topic: &'static str,
    queue_id: i32,
    body: Vec<u8>,
    props: Vec<u8>,
    key: Option<String>,
    offset: u64,
    queue_offset: u64,
}

fn message<'m>(s: &'m Sent) -> MessageIn<'m> {
    MessageIn {
        topic: s.topic,
        queue_id: s.queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: Host::V4 {
            ip: [127, 0, 0, 1],
            port: 40000,
        },
        store_host: Host::V4 {
            ip: [127, 0, 0, 1],
            port: 10911,
        },
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &s.body,
        properties: &s.props,
    }
}

fn new_message(rng: &mut Rng, n: u64) -> Sent {
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

type TestStore<'a> = Store<Dir<'a>, Dir<'a>, Table<'a>, FaultyMedia<'a>>;

struct Parts<'a> {
    log: Dir<'a>,
    index: Dir<'a>,
    table: Table<'a>,
    checkpoint: FaultyMedia<'a>,
}

fn open<'a>(p: Parts<'a>, crashed: bool) -> Result<TestStore<'a>, Error<RamError>> {
    Store::open(
        CONFIG,
        p.log,
        p.index,
        p.table,
        p.checkpoint,
        crashed,
        &mut [],
    )
    .map(|(s, _)| s)
}

/// Runs random operations until `ops` are done or the media fail.
fn run_ops(
    store: &mut TestStore<'_>,
    rng: &mut Rng,
    sent: &mut Vec<Sent>,
    acked: &mut usize,
    ops: u64,
) -> Result<(), Error<RamError>> {
    for _ in 0..ops {
        match rng.below(100) {
            0..=59 => {
                let mut s = new_message(rng, sent.len() as u64);
                let stored = store.put(&message(&s), 1_700_000_000_000 + sent.len() as i64 * 7)?;
                s.offset = stored.at.offset;
                s.queue_offset = stored.queue_offset;
                sent.push(s);
            }
            60..=69 => {
                let first = new_message(rng, sent.len() as u64);
                let n = 1 + rng.below(4);
                let mut batch = vec![first.clone()];
                for i in 1..n {
                    let mut m = new_message(rng, sent.len() as u64 + i);
                    m.topic = first.topic;
                    m.queue_id = first.queue_id;
                    batch.push(m);
                }
                let msgs: Vec<MessageIn<'_>> = batch.iter().map(message).collect();
                let mut landed = Vec::new();
                store.put_batch(&msgs, 1_700_000_000_000 + sent.len() as i64 * 7, &mut |s| {
                    landed.push(s)
                })?;
                for (mut m, s) in batch.into_iter().zip(landed) {
                    m.offset = s.at.offset;
                    m.queue_offset = s.queue_offset;
                    sent.push(m);
                }
            }
            70..=84 => {
                let flushed = store.flush_log()?;
                *acked = sent.iter().take_while(|s| s.offset < flushed).count();
            }
            85..=94 => {
                store.dispatch(&mut [], &mut |_| {})?;
            }
            _ => {
                store.dispatch(&mut [], &mut |_| {})?;
                store.checkpoint()?;
                let flushed = store.log().flushed_offset();
                *acked = sent.iter().take_while(|s| s.offset < flushed).count();
            }
        }
    }
    Ok(())
}

/// Checks the recovered store against the model; returns how many sent messages survived.
fn verify(
    store: &TestStore<'_>,
    sent: &[Sent],
    acked: usize,
    process_crash: bool,
    seed: u64,
) -> usize {
    // 1. The log is a prefix of what was sent, at least as long as what was flushed.
    let log = store.log();
    let mut pos = log.min_offset();
    let mut found = 0usize;
    while pos < log.max_offset() {
        match log.slot_at(pos).unwrap() {
            Slot::Skip(next) => pos = next,
            Slot::End => break,
            Slot::Record(size) => {
                let s = sent
                    .get(found)
                    .unwrap_or_else(|| panic!("seed {seed}: record at {pos} was never sent"));
                log.with_record(pos, size, &mut [], |v| {
                    let v: RecordView<'_> = v.unwrap();
                    v.verify_crc().unwrap();
                    assert_eq!(v.physical_offset() as u64, s.offset, "seed {seed}: order");
                    assert_eq!(v.body(), &s.body[..], "seed {seed}: body of #{found}");
                    assert_eq!(v.topic(), s.topic.as_bytes());
                    assert_eq!(v.queue_id(), s.queue_id);
                    assert_eq!(
                        v.queue_offset() as u64,
                        s.queue_offset,
                        "seed {seed}: queue offset of #{found}"
                    );
                    Ok(())
                })
                .unwrap();
                found += 1;
                pos += u64::from(size);
            }
        }
    }
    assert_eq!(pos, log.max_offset(), "seed {seed}: log end");
    assert!(
        found >= acked,
        "seed {seed}: {acked} acknowledged but only {found} recovered"
    );
    if process_crash {
        assert_eq!(
            found,
            sent.len(),
            "seed {seed}: a process crash loses nothing written"
        );
    }
    // 2. Every surviving message is in its queue exactly once, in order; nothing else is.
    let mut per_queue: HashMap<(&str, i32), Vec<&Sent>> = HashMap::new();
    for s in &sent[..found] {
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
    // 3. The index finds every surviving key.
    for s in &sent[..found] {
        if let Some(k) = &s.key {
            let mut hits = Vec::new();
            store
                .index()
                .query(s.topic, k, 64, 0, i64::MAX, &mut |o| hits.push(o))
                .unwrap();
            assert!(
                hits.contains(&s.offset),
                "seed {seed}: key {k} at {} not indexed (found {hits:?}, acked {acked}, process {process_crash}, files {})",
                s.offset,
                store.index().file_count()
            );
        }
    }
    found
}

fn run_case(seed: u64) {
    let mut rng = Rng(seed);
    let plan = FaultPlan::none();
    // One arena per case: the directories borrow their buffers from it.
    let mut log_bufs: Vec<Vec<u8>> = (0..40).map(|_| vec![0u8; 2 * LOG_SEG as usize]).collect();
    let mut idx_bufs: Vec<Vec<u8>> = (0..24)
        .map(|_| vec![0u8; 2 * CONFIG.index.file_size() as usize])
        .collect();
    let mut cq_bufs: Vec<Vec<u8>> = (0..72)
        .map(|_| vec![0u8; 2 * (CQ_ENTRIES * 20) as usize])
        .collect();
    let mut ckpt_buf = vec![0u8; 2 * 4096];
    let mut log = RamDir::new(&plan);
    for b in log_bufs.iter_mut() {
        log.give(b).unwrap();
    }
    let mut index = RamDir::new(&plan);
    for b in idx_bufs.iter_mut() {
        index.give(b).unwrap();
    }
    let table = Table {
        plan: &plan,
        pool: cq_bufs.iter_mut().map(|b| b.as_mut_slice()).collect(),
        live: HashMap::new(),
        closed: Vec::new(),
        pending_key: None,
    };
    let checkpoint = FaultyMedia::new(&mut ckpt_buf, 4096, &plan).unwrap();
    let mut store = open(
        Parts {
            log,
            index,
            table,
            checkpoint,
        },
        false,
    )
    .unwrap();

    let mut sent = Vec::new();
    let mut acked = 0;
    // Sometimes the media start failing partway: the run stops at the first error.
    if rng.chance(25) {
        plan.refuel(50 + rng.below(400));
    }
    let ops = 20 + rng.below(120);
    let failed = run_ops(&mut store, &mut rng, &mut sent, &mut acked, ops).is_err();
    plan.refuel(u64::MAX);

    let process = !failed && rng.chance(15);
    PROCESS_CRASH.store(process, std::sync::atomic::Ordering::Relaxed);
    let (mut log, mut index, mut table, mut checkpoint) = store.into_parts();
    crash_dir(&mut log, &mut rng);
    crash_dir(&mut index, &mut rng);
    table.crash(&mut rng);
    let kind = crash_kind(&mut rng, checkpoint.pending_writes(), process);
    checkpoint.crash(kind);

    let mut store = open(
        Parts {
            log,
            index,
            table,
            checkpoint,
        },
        true,
    )
    .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e:?}"));
    let found = verify(&store, &sent, acked, process, seed);
    sent.truncate(found);

    // The store goes on: new messages get the next queue offsets, and a clean close and
    // reopen keeps everything.
    let mut acked = found;
    run_ops(&mut store, &mut rng, &mut sent, &mut acked, 30)
        .unwrap_or_else(|e| panic!("seed {seed}: after recovery: {e:?}"));
    let (log, index, table, checkpoint) = store.close(&mut []).unwrap();
    let mut table = table;
    for (k, slot) in table.live.drain() {
        table.closed.push((k, slot.queue.into_dir()));
    }
    let store = open(
        Parts {
            log,
            index,
            table,
            checkpoint,
        },
        false,
    )
    .unwrap();
    let found = verify(&store, &sent, sent.len(), true, seed);
    assert_eq!(
        found,
        sent.len(),
        "seed {seed}: clean close keeps everything"
    );
}

#[test]
fn recovery_after_random_crashes_keeps_every_acknowledged_message() {
    if let Ok(seed) = std::env::var("TERN_SIM_SEED") {
        let seed = seed.parse().expect("TERN_SIM_SEED is a number");
        in_big_stack(move || run_case(seed)).expect("replayed case failed");
        return;
    }
    let cases: u64 = std::env::var("TERN_SIM_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(2000);
    let base = std::env::var("TERN_SIM_BASE")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0xC0FFEE);
    for i in 0..cases {
        let seed = base + i;
        if in_big_stack(move || run_case(seed)).is_err() {
            panic!("crash simulation failed; replay with TERN_SIM_SEED={seed}");
        }
    }
}

/// The RAM directories are fixed-capacity tables held by value: give them room.
fn in_big_stack(f: impl FnOnce() + Send + 'static) -> std::thread::Result<()> {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
}
