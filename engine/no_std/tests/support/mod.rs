//! A store over fault-injecting RAM media for the integration tests: the geometry, a
//! heap queue table as a broker keeps one, a message generator, and the buffers it all
//! borrows. Each test file uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use tern_engine::Error;
use tern_engine::faulty::{FaultPlan, FaultyMedia};
use tern_engine::index::IndexConfig;
use tern_engine::properties;
use tern_engine::ram::{RamDir, RamError};
use tern_engine::record::{Host, MessageIn};
use tern_engine::store::{QueueSlot, QueueTable, Store, StoreConfig};

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

pub type Dir<'a> = RamDir<'a, 128>;

/// Buffers of the arena, per structure. Six queues (three topics, two ids) take
/// `QUEUE_FILES` each.
pub const LOG_FILES: usize = 96;
pub const INDEX_FILES: usize = 64;
pub const QUEUE_FILES: usize = 24;
pub type TestStore<'a> = Store<Dir<'a>, Dir<'a>, Table<'a>, FaultyMedia<'a>>;

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

/// The caller-side queue table, on the heap as a broker's would be.
pub struct Table<'a> {
    pub plan: &'a FaultPlan,
    pub pool: Vec<&'a mut [u8]>,
    /// Ordered, so every run of a seed visits queues (flushes, crashes) in one order.
    pub live: BTreeMap<(String, i32), QueueSlot<Dir<'a>>>,
    pub closed: Vec<((String, i32), Dir<'a>)>,
}

impl<'a> Table<'a> {
    /// Closes every queue (the store stopped): their directories wait for the next open.
    pub fn close_all(&mut self) {
        for (k, slot) in std::mem::take(&mut self.live) {
            self.closed.push((k, slot.queue.into_dir()));
        }
        self.closed.sort_by(|a, b| a.0.cmp(&b.0));
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
        for _ in 0..QUEUE_FILES {
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
            let slot = open(d)?;
            self.live.insert(k, slot);
        }
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

pub fn message<'m>(s: &'m Sent) -> MessageIn<'m> {
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

/// The parts a store is opened from and given back as.
pub struct Parts<'a> {
    pub log: Dir<'a>,
    pub index: Dir<'a>,
    pub table: Table<'a>,
    pub checkpoint: FaultyMedia<'a>,
}

impl<'a> Parts<'a> {
    /// What a stopped store gives back; its queues closed.
    pub fn from_store(store: TestStore<'a>) -> Self {
        let (log, index, mut table, checkpoint) = store.into_parts();
        table.close_all();
        Parts {
            log,
            index,
            table,
            checkpoint,
        }
    }

    /// Cuts power to every media the same way.
    pub fn crash(&mut self, kind: tern_engine::faulty::Crash) {
        self.log.crash(kind);
        self.index.crash(kind);
        for (_, d) in self.table.closed.iter_mut() {
            d.crash(kind);
        }
        self.checkpoint.crash(kind);
    }
}

pub fn open<'a>(p: Parts<'a>, crashed: bool) -> Result<TestStore<'a>, Error<RamError>> {
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
            // Six queues of the three topics, and the timer topic's.
            queues: (0..7 * QUEUE_FILES)
                .map(|_| vec![0u8; 2 * (CQ_ENTRIES * 20) as usize])
                .collect(),
            checkpoint: vec![0u8; 2 * 4096],
        }
    }

    /// Empty directories and a zeroed checkpoint page over these buffers.
    pub fn parts<'a>(&'a mut self, plan: &'a FaultPlan) -> Parts<'a> {
        let mut log = RamDir::new(plan);
        for b in self.log.iter_mut() {
            log.give(b).unwrap();
        }
        let mut index = RamDir::new(plan);
        for b in self.index.iter_mut() {
            index.give(b).unwrap();
        }
        let table = Table {
            plan,
            pool: self.queues.iter_mut().map(|b| b.as_mut_slice()).collect(),
            live: BTreeMap::new(),
            closed: Vec::new(),
        };
        let checkpoint = FaultyMedia::new(&mut self.checkpoint, 4096, plan).unwrap();
        Parts {
            log,
            index,
            table,
            checkpoint,
        }
    }
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

/// Every record of the log, in order, as (offset, body); each one's CRC checked.
pub fn log_records(store: &TestStore<'_>) -> Vec<(u64, Vec<u8>)> {
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

/// Appends `s` and records where it went.
/// Each message's consume-queue entry points at its record.
pub fn assert_queued(store: &TestStore<'_>, sent: &[Sent]) {
    for s in sent {
        let q = store.queue(s.topic, s.queue_id).unwrap();
        assert_eq!(
            q.get(s.queue_offset).unwrap().unwrap().physical_offset,
            s.offset
        );
    }
}

pub fn put(store: &mut TestStore<'_>, s: &mut Sent, ts: i64) -> Result<(), Error<RamError>> {
    let stored = store.put(&message(s), ts)?;
    s.offset = stored.at.offset;
    s.queue_offset = stored.queue_offset;
    Ok(())
}
