//! Any stored state: recovery returns a store or an error, never panics, hangs or grows
//! without bound, and a store it returns holds only verified records where it scanned.
//!
//! The input drives one of two builders over RAM fault-injecting media, small geometry:
//! - **raw**: the bytes become commit-log segments (a mix of raw bytes, well-formed
//!   records, blank tails and flipped bits), and optionally a consume-queue file, an index
//!   file and a checkpoint, each well-formed, raw, or in between;
//! - **history**: a real store runs operations the bytes choose (puts, batches, flushes,
//!   dispatches, checkpoints, retention), then is closed or loses power in a way the bytes
//!   choose (torn writes included), then bits rot where the bytes say.
//!
//! Each state is opened as after a crash and as after a clean shutdown. When open
//! succeeds, the log is walked from its start to its end. From the segment where recovery
//! scanned (the one holding the checkpoint's offset, or the log's start without a
//! checkpoint) every record must parse, pass its CRC and sit at its own offset. Before it,
//! and everywhere after a clean shutdown, recovery trusts the checkpoint by design, so the
//! walk there only has to terminate. Then the store must go on: dispatch, queue and index
//! reads, a put, a clean close, and a reopen that finds the same verified log.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use tern_engine::Error;
use tern_engine::checkpoint::Checkpoint;
use tern_engine::commitlog::Slot;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::hash::index_key_hash;
use tern_engine::index::{IndexConfig, file_stamp};
use tern_engine::layout::MAGIC_BLANK;
use tern_engine::media::{Directory, Media};
use tern_engine::properties::{self, key};
use tern_engine::ram::{RamDir, RamError};
use tern_engine::record::{Host, MessageIn, StoreStamp};
use tern_engine::store::{QueueSlot, QueueTable, Store, StoreConfig};

const LOG_SEG: u64 = 512;
const CQ_ENTRIES: u64 = 8;
const CQ_FILE: u64 = CQ_ENTRIES * 20;
const INDEX: IndexConfig = IndexConfig {
    slots: 4,
    entries: 8,
};
const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: LOG_SEG,
    queue_entries_per_file: CQ_ENTRIES,
    index: INDEX,
    ..StoreConfig::SERVER
};
/// Segments per directory (the RAM directory's fixed capacity).
const SEGS: usize = 8;
const LOG_BUFS: usize = SEGS;
const INDEX_BUFS: usize = 4;
const QUEUE_BUFS: usize = 24;
const BUFS_PER_QUEUE: usize = 4;
const CHECKPOINT_LEN: usize = 4096;
/// Operations one input may ask for, in either builder.
const MAX_OPS: usize = 64;
const BASE_TS: i64 = 1_700_000_000_000;

type Dir<'a> = RamDir<'a, SEGS>;
type TestStore<'a> = Store<Dir<'a>, Dir<'a>, Table<'a>, FaultyMedia<'a>>;

fuzz_target!(|data: &[u8]| {
    run(data, true);
    run(data, false);
});

/// Reads the input front to back; past its end every read is zero.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        u64::from_be_bytes(b)
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Every buffer one run uses, allocated up front: the engine itself allocates nothing.
struct Arena {
    log: Vec<Vec<u8>>,
    index: Vec<Vec<u8>>,
    queues: Vec<Vec<u8>>,
    checkpoint: Vec<u8>,
}

impl Arena {
    fn new() -> Self {
        Self {
            log: vec![vec![0; 2 * LOG_SEG as usize]; LOG_BUFS],
            index: vec![vec![0; 2 * INDEX.file_size() as usize]; INDEX_BUFS],
            queues: vec![vec![0; 2 * CQ_FILE as usize]; QUEUE_BUFS],
            checkpoint: vec![0; 2 * CHECKPOINT_LEN],
        }
    }
}

struct Parts<'a> {
    log: Dir<'a>,
    index: Dir<'a>,
    table: Table<'a>,
    checkpoint: FaultyMedia<'a>,
}

fn parts<'a>(arena: &'a mut Arena, plan: &'a FaultPlan) -> Parts<'a> {
    let mut log = RamDir::new(plan);
    for b in arena.log.iter_mut() {
        log.give(b).unwrap();
    }
    let mut index = RamDir::new(plan);
    for b in arena.index.iter_mut() {
        index.give(b).unwrap();
    }
    let table = Table {
        plan,
        pool: arena.queues.iter_mut().map(|b| b.as_mut_slice()).collect(),
        live: HashMap::new(),
        closed: Vec::new(),
    };
    let checkpoint = FaultyMedia::new(&mut arena.checkpoint, CHECKPOINT_LEN, plan).unwrap();
    Parts {
        log,
        index,
        table,
        checkpoint,
    }
}

/// The caller's queue table, as a broker keeps it (on the heap, bounded by the pool).
struct Table<'a> {
    plan: &'a FaultPlan,
    pool: Vec<&'a mut [u8]>,
    live: HashMap<(String, i32), QueueSlot<Dir<'a>>>,
    closed: Vec<((String, i32), Dir<'a>)>,
}

impl Table<'_> {
    fn close_all(&mut self) {
        for (k, slot) in self.live.drain() {
            self.closed.push((k, slot.queue.into_dir()));
        }
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
        if self.pool.len() < BUFS_PER_QUEUE {
            return Err(Error::TableFull);
        }
        let mut d = RamDir::new(self.plan);
        for _ in 0..BUFS_PER_QUEUE {
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

/// A message the input describes.
struct Msg {
    topic: String,
    queue_id: i32,
    sys_flag: i32,
    v6: bool,
    body: Vec<u8>,
    props: Vec<u8>,
}

impl Msg {
    fn from_input(inp: &mut Input<'_>, n: usize) -> Self {
        let t = inp.byte();
        let topic = match t % 4 {
            0 | 1 => ["T", "U"][(t % 2) as usize].to_string(),
            // Longer than v1 allows: a v2 record.
            2 => "V".repeat(130),
            _ => {
                let len = inp.byte() as usize % 8;
                String::from_utf8_lossy(inp.bytes(len)).into_owned()
            }
        };
        let queue_id = i32::from((t >> 2) % 3);
        // Transaction bits decide whether a record goes to its queue and the index.
        let sys_flag = if t & 0x20 != 0 {
            i32::from(inp.byte())
        } else {
            0
        };
        let body_len = inp.byte() as usize % 160;
        let body = inp.bytes(body_len).to_vec();
        let p = inp.byte();
        let mut props = vec![0u8; 96];
        let mut len = 0;
        if p & 1 != 0 {
            let keys = format!("k{} k{}", p >> 4, n % 5);
            properties::append(&mut props, &mut len, key::KEYS, &keys).unwrap();
        }
        if p & 2 != 0 {
            properties::append(&mut props, &mut len, key::UNIQ_KEY, &format!("U{n}")).unwrap();
        }
        if p & 4 != 0 {
            properties::append(&mut props, &mut len, key::TAGS, "A").unwrap();
        }
        props.truncate(len);
        if p & 8 != 0 {
            let raw = inp.byte() as usize % 24;
            props.extend_from_slice(inp.bytes(raw));
        }
        Self {
            topic,
            queue_id,
            sys_flag,
            v6: t & 0x80 != 0,
            body,
            props,
        }
    }

    fn message(&self) -> MessageIn<'_> {
        MessageIn {
            topic: &self.topic,
            queue_id: self.queue_id,
            flag: 0,
            sys_flag: self.sys_flag,
            born_timestamp: BASE_TS,
            born_host: if self.v6 {
                Host::V6 {
                    ip: [1; 16],
                    port: 40000,
                }
            } else {
                Host::V4 {
                    ip: [127, 0, 0, 1],
                    port: 40000,
                }
            },
            store_host: Host::V4 {
                ip: [127, 0, 0, 1],
                port: 10911,
            },
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: &self.body,
            properties: &self.props,
        }
    }
}

fn run(data: &[u8], crashed: bool) {
    let plan = FaultPlan::none();
    let mut arena = Arena::new();
    let mut inp = Input(data);
    let p = parts(&mut arena, &plan);
    let p = if inp.byte() & 1 == 0 {
        build_raw(&mut inp, p)
    } else {
        build_history(&mut inp, p)
    };
    if let Some(p) = p {
        check(p, crashed);
    }
}

/// Where a well-formed record was put by [`build_raw`].
struct Placed {
    offset: u64,
    size: u32,
    topic: String,
    keys: Option<String>,
}

/// The raw builder: segments, queue, index and checkpoint written byte by byte.
fn build_raw<'a>(inp: &mut Input<'_>, mut p: Parts<'a>) -> Option<Parts<'a>> {
    let flags = inp.byte();
    let segs = 1 + u64::from(flags & 3);
    let first = u64::from((flags >> 2) & 3) * LOG_SEG;
    let end = first + segs * LOG_SEG;
    let mut image = vec![0u8; (segs * LOG_SEG) as usize];
    let mut placed: Vec<Placed> = Vec::new();
    let mut queue_offsets: HashMap<(String, i32), i64> = HashMap::new();
    let mut pos = first;
    for n in 0..MAX_OPS {
        if inp.is_empty() || pos >= end {
            break;
        }
        let at = (pos - first) as usize;
        let seg_end = pos - pos % LOG_SEG + LOG_SEG;
        match inp.byte() % 6 {
            0 => {
                let len = inp.byte() as usize;
                let raw = inp.bytes(len.min(image.len() - at));
                image[at..at + raw.len()].copy_from_slice(raw);
                pos += raw.len() as u64;
            }
            1 | 2 => {
                let m = Msg::from_input(inp, n);
                let how = inp.byte();
                let msg = m.message();
                let Ok(len) = msg.encoded_len() else { continue };
                let mut pos_now = pos;
                if pos_now + len as u64 + 8 > seg_end {
                    // Does not fit: a blank tail, as the writer would leave.
                    let at = (pos_now - first) as usize;
                    if seg_end - pos_now >= 8 {
                        image[at..at + 4]
                            .copy_from_slice(&((seg_end - pos_now) as i32).to_be_bytes());
                        image[at + 4..at + 8].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
                    }
                    pos_now = seg_end;
                    if pos_now + len as u64 + 8 > end.min(seg_end + LOG_SEG) {
                        pos = pos_now;
                        continue;
                    }
                }
                let q = queue_offsets
                    .entry((m.topic.clone(), m.queue_id))
                    .or_default();
                let stamp = StoreStamp {
                    queue_offset: if how & 1 == 0 {
                        *q
                    } else {
                        i64::from(inp.byte())
                    },
                    physical_offset: if how & 2 == 0 {
                        pos_now as i64
                    } else {
                        inp.u64() as i64
                    },
                    store_timestamp: if how & 4 == 0 {
                        BASE_TS + n as i64
                    } else {
                        inp.u64() as i64
                    },
                };
                *q += 1;
                let at = (pos_now - first) as usize;
                let out = &mut image[at..at + len];
                if how & 8 == 0 {
                    msg.encode(stamp, out).unwrap();
                } else {
                    msg.encode_with_crc(stamp, i32::from(inp.byte()), out)
                        .unwrap();
                }
                placed.push(Placed {
                    offset: pos_now,
                    size: len as u32,
                    topic: m.topic.clone(),
                    keys: properties::get(&m.props, key::KEYS).map(str::to_string),
                });
                pos = pos_now + len as u64;
            }
            3 => {
                // A blank tail, sometimes with a wrong size.
                let size = if inp.byte() & 1 == 0 {
                    (seg_end - pos) as i32
                } else {
                    i32::from(inp.u16())
                };
                if seg_end - pos >= 8 {
                    image[at..at + 4].copy_from_slice(&size.to_be_bytes());
                    image[at + 4..at + 8].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
                }
                pos = seg_end;
            }
            4 => pos += u64::from(inp.byte()),
            _ => {
                let i = inp.u16() as usize % image.len();
                image[i] ^= 1 << (inp.byte() % 8);
            }
        }
    }
    // Segments: normally contiguous and of the configured size; the input may ask for a
    // gap or a short segment, which open must refuse, not trip over.
    let shape = inp.byte();
    for k in 0..segs {
        if shape & 0x0F == 1 && k == 1 && segs > 2 {
            continue;
        }
        let len = if shape & 0x0F == 2 && k + 1 == segs {
            LOG_SEG / 2
        } else {
            LOG_SEG
        };
        let base = first + k * LOG_SEG;
        p.log.create(base, len).ok()?;
        let from = (k * LOG_SEG) as usize;
        p.log
            .media_mut(base)?
            .write_at(0, &image[from..from + len as usize])
            .ok()?;
    }

    let what = inp.byte();
    if what & 1 != 0 {
        build_queue(inp, &mut p, &placed)?;
    }
    if what & 2 != 0 {
        build_index(inp, &mut p, &placed)?;
    }
    match (what >> 2) % 4 {
        0 => {}
        1 => {
            let raw = inp.bytes(68);
            p.checkpoint.write_at(0, raw).ok()?;
        }
        _ => {
            let pick = |inp: &mut Input<'_>| match inp.byte() % 5 {
                0 => 0,
                1 => pos,
                2 => end,
                3 => placed
                    .get(inp.byte() as usize % placed.len().max(1))
                    .map_or(first, |r| r.offset),
                _ => inp.u64(),
            };
            let c = Checkpoint {
                physic_timestamp: BASE_TS,
                logics_timestamp: BASE_TS,
                index_timestamp: BASE_TS,
                flushed_offset: pick(inp),
                dispatched_offset: pick(inp),
                clean_end: if inp.byte() & 1 == 0 {
                    None
                } else {
                    Some(pick(inp))
                },
            };
            p.checkpoint.write_at(0, &c.encode()).ok()?;
        }
    }
    Some(p)
}

/// One consume queue, ("T", 0): entries pointing at placed records, raw, or fillers.
fn build_queue(inp: &mut Input<'_>, p: &mut Parts<'_>, placed: &[Placed]) -> Option<()> {
    let mut dir = p.table.create_dir("T", 0).ok()?;
    let files = 1 + u64::from(inp.byte() % 2);
    let first = u64::from(inp.byte() % 3) * CQ_FILE;
    let mut image = vec![0u8; (files * CQ_FILE) as usize];
    let mut next = 0usize;
    for i in 0..(files * CQ_ENTRIES) as usize {
        let e = &mut image[i * 20..i * 20 + 20];
        match inp.byte() % 5 {
            0 | 1 => {
                let Some(r) = placed.get(next) else { break };
                next += 1 + usize::from(inp.byte() % 2);
                e[..8].copy_from_slice(&r.offset.to_be_bytes());
                e[8..12].copy_from_slice(&r.size.to_be_bytes());
            }
            2 => e.copy_from_slice(&{
                let mut b = [0u8; 20];
                let raw = inp.bytes(20);
                b[..raw.len()].copy_from_slice(raw);
                b
            }),
            3 => e[8..12].copy_from_slice(&i32::MAX.to_be_bytes()),
            _ => break,
        }
    }
    for k in 0..files {
        let base = first + k * CQ_FILE;
        dir.create(base, CQ_FILE).ok()?;
        let from = (k * CQ_FILE) as usize;
        dir.media_mut(base)?
            .write_at(0, &image[from..from + CQ_FILE as usize])
            .ok()?;
    }
    p.table.closed.push((("T".to_string(), 0), dir));
    Some(())
}

/// Index files: the newest well-formed over placed records' keys, then patched with raw
/// bytes; sometimes an older raw file before it.
fn build_index(inp: &mut Input<'_>, p: &mut Parts<'_>, placed: &[Placed]) -> Option<()> {
    let size = INDEX.file_size() as usize;
    let slots_at = 40;
    let entries_at = slots_at + INDEX.slots as usize * 4;
    let base = file_stamp(BASE_TS);
    if inp.byte() & 1 != 0 {
        let mut old = vec![0u8; size];
        let raw = inp.bytes(size);
        old[..raw.len()].copy_from_slice(raw);
        p.index.create(base - 1, size as u64).ok()?;
        p.index.media_mut(base - 1)?.write_at(0, &old).ok()?;
    }
    let mut f = vec![0u8; size];
    let mut count = 1u32;
    let (mut begin, mut last) = (-1i64, -1i64);
    for r in placed {
        let Some(keys) = &r.keys else { continue };
        for k in keys.split(' ') {
            if count >= INDEX.entries {
                break;
            }
            let hash = index_key_hash(&[&r.topic, "#", k]);
            let slot = slots_at + (hash as u32 % INDEX.slots) as usize * 4;
            let prev = u32::from_be_bytes(f[slot..slot + 4].try_into().unwrap());
            let e = entries_at + count as usize * 20;
            f[e..e + 4].copy_from_slice(&hash.to_be_bytes());
            f[e + 4..e + 12].copy_from_slice(&(r.offset as i64).to_be_bytes());
            f[e + 12..e + 16].copy_from_slice(&i32::from(inp.byte() % 4).to_be_bytes());
            f[e + 16..e + 20].copy_from_slice(&prev.to_be_bytes());
            f[slot..slot + 4].copy_from_slice(&count.to_be_bytes());
            if begin < 0 {
                begin = r.offset as i64;
            }
            last = r.offset as i64;
            count += 1;
        }
    }
    f[0..8].copy_from_slice(&BASE_TS.to_be_bytes());
    f[8..16].copy_from_slice(&BASE_TS.to_be_bytes());
    f[16..24].copy_from_slice(&begin.max(0).to_be_bytes());
    f[24..32].copy_from_slice(&last.to_be_bytes());
    f[32..36].copy_from_slice(&(count as i32 - 1).to_be_bytes());
    f[36..40].copy_from_slice(&(count as i32).to_be_bytes());
    for _ in 0..inp.byte() % 4 {
        let at = inp.u16() as usize % size;
        let len = (inp.byte() as usize % 24).min(size - at);
        let raw = inp.bytes(len);
        f[at..at + raw.len()].copy_from_slice(raw);
    }
    p.index.create(base, size as u64).ok()?;
    p.index.media_mut(base)?.write_at(0, &f).ok()?;
    Some(())
}

/// The history builder: a real store, real operations, then a clean close or a crash,
/// then rot.
fn build_history<'a>(inp: &mut Input<'_>, p: Parts<'a>) -> Option<Parts<'a>> {
    let mut store = open(p, false).ok()?;
    let mut ts = BASE_TS;
    for n in 0..MAX_OPS {
        if inp.is_empty() {
            break;
        }
        ts += i64::from(inp.byte());
        let r = match inp.byte() % 10 {
            0..=3 => {
                let m = Msg::from_input(inp, n);
                store.put(&m.message(), ts).map(drop)
            }
            4 => {
                let mut batch: Vec<Msg> = (0..1 + inp.byte() % 3)
                    .map(|i| Msg::from_input(inp, n + i as usize))
                    .collect();
                let (topic, queue_id) = (batch[0].topic.clone(), batch[0].queue_id);
                for m in batch.iter_mut().skip(1) {
                    m.topic.clone_from(&topic);
                    m.queue_id = queue_id;
                }
                let msgs: Vec<MessageIn<'_>> = batch.iter().map(Msg::message).collect();
                store.put_batch(&msgs, ts, &mut |_| {})
            }
            5 => store.flush_log().map(drop),
            6 => store.dispatch(&mut [], &mut |_| {}).map(drop),
            7 => store
                .dispatch(&mut [], &mut |_| {})
                .and_then(|_| store.checkpoint()),
            8 => store
                .delete_before(u64::from(inp.byte()) * LOG_SEG / 2)
                .map(drop),
            _ => store.flush_log().map(drop),
        };
        if r.is_err() {
            break;
        }
    }
    let how = inp.byte();
    let (mut log, mut index, mut table, mut checkpoint) = if how & 1 == 0 {
        store.close(&mut []).ok()?
    } else {
        let (mut log, mut index, mut table, mut checkpoint) = store.into_parts();
        table.close_all();
        for (_, m) in log.segments_mut() {
            m.crash(crash_kind(inp, m.pending_writes()));
        }
        for (_, m) in index.segments_mut() {
            m.crash(crash_kind(inp, m.pending_writes()));
        }
        for (_, d) in table.closed.iter_mut() {
            for (_, m) in d.segments_mut() {
                m.crash(crash_kind(inp, m.pending_writes()));
            }
        }
        let kind = crash_kind(inp, checkpoint.pending_writes());
        checkpoint.crash(kind);
        (log, index, table, checkpoint)
    };
    table.close_all();
    // Rot: bits flipped in durable bytes.
    for _ in 0..inp.byte() % 4 {
        let (which, nth, at, bit) = (inp.byte(), inp.byte() as usize, inp.u16(), inp.byte());
        let media: Option<&mut FaultyMedia<'_>> = match which % 4 {
            0 => log.segments_mut().nth(nth % SEGS).map(|(_, m)| m),
            1 => index.segments_mut().nth(nth % SEGS).map(|(_, m)| m),
            2 => {
                let n = table.closed.len().max(1);
                table
                    .closed
                    .get_mut(nth % n)
                    .and_then(|(_, d)| d.segments_mut().nth(nth / n % SEGS).map(|(_, m)| m))
            }
            _ => Some(&mut checkpoint),
        };
        if let Some(m) = media {
            let len = m.len().max(1);
            m.flip_bit(u64::from(at) % len, bit);
        }
    }
    Some(Parts {
        log,
        index,
        table,
        checkpoint,
    })
}

fn crash_kind(inp: &mut Input<'_>, pending: usize) -> Crash {
    match inp.byte() % 4 {
        0 => Crash::Process,
        1 => Crash::DropUnflushed,
        _ => Crash::Torn {
            keep: inp.byte() as usize % (pending + 1),
            tear_at: inp.u16() as usize % 600,
        },
    }
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

fn check(p: Parts<'_>, crashed: bool) {
    // Where recovery will scan from, as the store decides it: after a clean shutdown it
    // trusts the log; after a crash it verifies from the segment holding the
    // checkpoint's offset (or from the start without a checkpoint).
    let ckpt = Checkpoint::read(&p.checkpoint).ok().flatten();
    let trusted = !crashed && ckpt.is_some_and(|c| c.clean_end.is_some());
    let scan_from = ckpt.map_or(0, |c| c.dispatched_offset.min(c.flushed_offset));
    let Ok(mut store) = open(p, crashed) else {
        return;
    };
    let verified_from = match store.log().segment_span() {
        _ if trusted => u64::MAX,
        Some((first, last)) => {
            let from = scan_from.clamp(first, last);
            from - from % LOG_SEG
        }
        None => 0,
    };
    walk(&store, verified_from);
    // Recovery dispatched everything; a dispatch now has nothing to do.
    assert_eq!(store.dispatch(&mut [], &mut |_| {}).ok(), Some(0));
    read_around(&store);

    // The store goes on: a put, a clean close, a reopen that finds the same log.
    let m = Msg {
        topic: "T".into(),
        queue_id: 0,
        sys_flag: 0,
        v6: false,
        body: b"after".to_vec(),
        props: b"KEYS\x01k1\x02".to_vec(),
    };
    let _ = store.put(&m.message(), BASE_TS + 10_000);
    let _ = store.dispatch(&mut [], &mut |_| {});
    let Ok((log, index, mut table, checkpoint)) = store.close(&mut []) else {
        return;
    };
    table.close_all();
    let parts = Parts {
        log,
        index,
        table,
        checkpoint,
    };
    let Ok(store) = open(parts, false) else {
        return;
    };
    walk(&store, verified_from);
    read_around(&store);
}

/// Walks the log from its start to its end. From `verified_from` on, every record must
/// be whole, CRC-checked and at its own offset, and the walk must end exactly at the end.
fn walk(store: &TestStore<'_>, verified_from: u64) {
    let log = store.log();
    let (min, max) = (log.min_offset(), log.max_offset());
    assert!(min <= max);
    // The trusted part: it need only terminate.
    let mut pos = min;
    while pos < max.min(verified_from) {
        match log.slot_at(pos) {
            Ok(Slot::Record(size)) => {
                let _ = log.with_record(pos, size, &mut [], |v| {
                    if let Ok(v) = v {
                        let _ = v.verify_crc();
                    }
                    Ok(())
                });
                pos += u64::from(size);
            }
            Ok(Slot::Skip(next)) => {
                assert!(next > pos, "skip goes forward");
                pos = next;
            }
            Ok(Slot::End) | Err(_) => break,
        }
    }
    // The verified part.
    let mut pos = verified_from.max(min);
    while pos < max {
        match log.slot_at(pos) {
            Ok(Slot::Record(size)) => {
                log.with_record(pos, size, &mut [], |v| {
                    let v = v.unwrap_or_else(|e| panic!("record at {pos} does not parse: {e:?}"));
                    v.verify_crc()
                        .unwrap_or_else(|e| panic!("record at {pos} fails its CRC: {e:?}"));
                    assert_eq!(v.physical_offset(), pos as i64, "record at {pos} moved");
                    Ok(())
                })
                .unwrap();
                pos += u64::from(size);
            }
            Ok(Slot::Skip(next)) => {
                assert!(next > pos, "skip goes forward");
                pos = next;
            }
            Ok(Slot::End) => panic!("log ends at {pos} before its end {max}"),
            Err(e) => panic!("slot at {pos} in the verified log: {e:?}"),
        }
    }
    if verified_from <= max {
        assert_eq!(
            pos,
            max.max(verified_from.max(min)),
            "walk ends at the log's end"
        );
    }
}

/// What a broker does next with a recovered store: read queues, look up by time and key.
/// Errors are fine; panics are not.
fn read_around(store: &TestStore<'_>) {
    for (t, q) in [("T", 0), ("T", 1), ("U", 0)] {
        let Some(cq) = store.queue(t, q) else {
            continue;
        };
        assert!(cq.min_offset() <= cq.max_offset());
        let mut seen = 0u64;
        let _ = cq.scan(0, 64, None, &mut |_, e| {
            seen += 1;
            let _ = store.log().slot_at(e.physical_offset);
            true
        });
        assert!(seen <= 64);
        let _ = cq.get(cq.max_offset().saturating_sub(1));
        let _ = cq.offset_at_time(store.log(), BASE_TS + 5);
    }
    for k in ["k0", "k1", "U0"] {
        let mut n = 0;
        let _ = store
            .index()
            .query("T", k, 64, 0, i64::MAX, &mut |_| n += 1);
        assert!(n <= 64);
    }
}
