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

use libfuzzer_sys::fuzz_target;
use tern_engine::checkpoint::Checkpoint;
use tern_engine::commitlog::Slot;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::hash::index_key_hash;
use tern_engine::index::{IndexConfig, file_stamp};
use tern_engine::layout::MAGIC_BLANK;
use tern_engine::media::{Directory, Media};
use tern_engine::properties::{self, key};
use tern_engine::record::{Host, MessageIn, StoreStamp};
use tern_engine::store::{QueueTable, StoreConfig};
use tern_engine::testkit::{self, RamParts, RamEngine};

#[path = "recovery/build.rs"]
mod build;
use build::{build_history, build_raw};

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
const QUEUES: usize = QUEUE_BUFS / BUFS_PER_QUEUE;
/// Longest topic a queue gets: `Msg::from_input`'s v2 topic.
const TOPIC_BYTES: usize = 130;
const CHECKPOINT_LEN: usize = 4096;
/// Operations one input may ask for, in either builder.
const MAX_OPS: usize = 64;
const BASE_TS: i64 = 1_700_000_000_000;

/// The store over memory, with the caller's queue table the engine's fixed one, as a
/// device keeps it, each queue's directory over `BUFS_PER_QUEUE` buffers.
type TestEngine<'a> = RamEngine<'a, SEGS, BUFS_PER_QUEUE, QUEUES, TOPIC_BYTES>;
/// What it is opened from and gives back.
type Parts<'a> = RamParts<'a, SEGS, BUFS_PER_QUEUE, QUEUES, TOPIC_BYTES>;

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
        let m = testkit::message(&self.topic, self.queue_id, &self.body, &self.props);
        MessageIn {
            sys_flag: self.sys_flag,
            born_host: if self.v6 {
                Host::V6 {
                    ip: [1; 16],
                    port: 40000,
                }
            } else {
                m.born_host
            },
            ..m
        }
    }
}

fn run(data: &[u8], crashed: bool) {
    let plan = FaultPlan::none();
    let mut arena = Arena::new();
    let mut inp = Input(data);
    let p = Parts::with_buffers(
        &plan,
        &mut arena.log,
        &mut arena.index,
        &mut arena.queues,
        &mut arena.checkpoint,
        CHECKPOINT_LEN,
    )
    .unwrap();
    let p = if inp.byte() & 1 == 0 {
        build_raw(&mut inp, p)
    } else {
        build_history(&mut inp, p)
    };
    if let Some(p) = p {
        check(p, crashed);
    }
}

fn check(p: Parts<'_>, crashed: bool) {
    // Where recovery will scan from, as the store decides it: after a clean shutdown it
    // trusts the log; after a crash it verifies from the segment holding the
    // checkpoint's offset (or from the start without a checkpoint).
    let ckpt = Checkpoint::read(&p.checkpoint).ok().flatten();
    let trusted = !crashed && ckpt.is_some_and(|c| c.clean_end.is_some());
    let scan_from = ckpt.map_or(0, |c| c.dispatched_offset.min(c.flushed_offset));
    let Ok(mut store) = p.open(CONFIG, crashed) else {
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
    let Ok(parts) = Parts::from_closed(store) else {
        return;
    };
    let Ok(store) = parts.open(CONFIG, false) else {
        return;
    };
    walk(&store, verified_from);
    read_around(&store);
}

/// Walks the log from its start to its end. From `verified_from` on, every record must
/// be whole, CRC-checked and at its own offset, and the walk must end exactly at the end.
fn walk(store: &TestEngine<'_>, verified_from: u64) {
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
fn read_around(store: &TestEngine<'_>) {
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
