//! Tern's engine on a Cortex-M4F, under QEMU (`mps2-an386`): the firmware path, proven.
//!
//! The same `tern-engine` a broker runs over mapped files runs here over static RAM
//! buffers, with no heap and no `std`. The program:
//!
//! 1. opens an empty store (4 KiB log segments, 64-entry queue files, small index files);
//! 2. puts 300 messages over three topics and four queues (some keyed, telemetry in
//!    batches), taking a checkpoint after 120, flushing the log after 200 and
//!    dispatching (not checkpointing) after 260;
//! 3. cuts the power: every write not flushed is dropped, except that the log segment
//!    being written back when the power went keeps half its pending writes and a torn
//!    next one ([`tern_engine::faulty::Crash`]), as `engine/no_std/tests/crash_sim.rs` does;
//! 4. reopens the store from the same buffers (recovery) and checks what recovery
//!    promises: every flushed message is there, intact and in order, nothing that was
//!    not acknowledged is, queue offsets run 0, 1, 2, … and the index finds every message
//!    by its keys and none of the lost ones;
//! 5. puts 60 more, closes cleanly, reopens (no scan this time) and checks everything
//!    again;
//! 6. prints `tern-firmware: ok …` and exits QEMU with status 0. Any failed check prints
//!    `tern-firmware: FAIL <what>` and exits with status 1.
//!
//! Run it with `scripts/firmware.sh`.
#![no_std]
#![no_main]

mod check;
mod report;
mod workload;

use core::mem::size_of;

use cortex_m_rt::entry;
use cortex_m_semihosting::debug;
use static_cell::{ConstStaticCell, StaticCell};
use tern_engine::checkpoint::Checkpoint;
use tern_engine::faulty::{Crash, FaultPlan, FaultyMedia};
use tern_engine::index::{self, IndexConfig};
use tern_engine::layout::CHECKPOINT_FILE_SIZE;
use tern_engine::ram::{RamDir, RamQueues};
use tern_engine::store::{OpenReport, Engine, StoreConfig};

use crate::report::{ensure, must, say};
use crate::workload::Model;

/// Bytes per commit-log segment: a flash sector's worth, not RocketMQ's 1 GiB.
const LOG_SEGMENT_BYTES: usize = 4096;
/// Log segments the device holds (96 KiB of log; the run writes about 60).
const LOG_SEGMENTS: usize = 24;
/// Entries per consume-queue file.
const QUEUE_ENTRIES_PER_FILE: usize = 64;
const QUEUE_FILE_BYTES: usize = QUEUE_ENTRIES_PER_FILE * 20;
/// Index geometry: 64 hash slots and 256 entries per file (about 170 messages' keys).
const INDEX_SLOTS: u32 = 64;
const INDEX_ENTRIES: u32 = 256;
/// `IndexConfig::file_size` is not a `const fn`, so the buffer size is worked out here
/// from the engine's public layout constants and compared with it at start-up.
const INDEX_FILE_BYTES: usize = index::HEADER_SIZE as usize
    + INDEX_SLOTS as usize * index::SLOT_SIZE as usize
    + INDEX_ENTRIES as usize * index::ENTRY_SIZE as usize;
/// Index files the device holds; the run fills three.
const INDEX_FILES: usize = 5;
/// Most queues the device holds; a put to one more fails with `TableFull`.
const MAX_QUEUES: usize = 4;
/// Files (segments) per queue.
const FILES_PER_QUEUE: usize = 4;
/// Longest topic name the queue table stores.
const MAX_TOPIC_BYTES: usize = 32;
const CHECKPOINT_BYTES: usize = CHECKPOINT_FILE_SIZE as usize;

const CONFIG: StoreConfig = StoreConfig {
    log_segment_size: LOG_SEGMENT_BYTES as u64,
    queue_entries_per_file: QUEUE_ENTRIES_PER_FILE as u64,
    index: IndexConfig {
        slots: INDEX_SLOTS,
        entries: INDEX_ENTRIES,
    },
    ..StoreConfig::SERVER
};

/// Messages put before the power cut, and the points where the durable state moves.
const PUTS_BEFORE_CUT: usize = 300;
/// Dispatch and checkpoint here: recovery starts its scan from this point.
const CHECKPOINT_AT: usize = 120;
/// Flush the log here: the messages recovery must keep.
const FLUSH_AT: usize = 200;
/// Dispatch (no checkpoint) here: queue and index entries past the checkpoint, which
/// recovery must not trust and rebuilds from the log.
const DISPATCH_AT: usize = 260;
/// Messages put after recovery, before the clean close.
const PUTS_AFTER_RECOVERY: usize = 60;
/// Bytes of the torn write that reach the media: mid-head, so size and half the magic land.
const TEAR_AT_BYTE: usize = 6;

type LogDir<'a> = RamDir<'a, LOG_SEGMENTS>;
type IndexDir<'a> = RamDir<'a, INDEX_FILES>;
/// The directory of one queue's files.
type QueueDir<'a> = RamDir<'a, FILES_PER_QUEUE>;
/// The consume-queue table of a device: a fixed number of queues, each over a directory
/// made in advance in a static, with no heap.
type Queues<'a> = RamQueues<&'a mut QueueDir<'a>, MAX_QUEUES, MAX_TOPIC_BYTES>;
/// The store as the device runs it: every structure over fault-injecting RAM media, held
/// borrowed from the statics that own them (the engine takes `&mut` storage as storage).
pub type FwEngine<'a> =
    Engine<&'a mut LogDir<'a>, &'a mut IndexDir<'a>, Queues<'a>, &'a mut FaultyMedia<'a>>;

/// Every byte the store's media hold. Each segment's buffer is twice its size: the fault
/// model keeps what reads see and what is durable side by side.
struct MediaBuffers {
    log: [[u8; 2 * LOG_SEGMENT_BYTES]; LOG_SEGMENTS],
    index: [[u8; 2 * INDEX_FILE_BYTES]; INDEX_FILES],
    queues: [[u8; 2 * QUEUE_FILE_BYTES]; MAX_QUEUES * FILES_PER_QUEUE],
    checkpoint: [u8; 2 * CHECKPOINT_BYTES],
}

/// Zero-initialised, so it lives in .bss and costs no flash; taken once, without `unsafe`.
static MEDIA: ConstStaticCell<MediaBuffers> = ConstStaticCell::new(MediaBuffers {
    log: [[0; 2 * LOG_SEGMENT_BYTES]; LOG_SEGMENTS],
    index: [[0; 2 * INDEX_FILE_BYTES]; INDEX_FILES],
    queues: [[0; 2 * QUEUE_FILE_BYTES]; MAX_QUEUES * FILES_PER_QUEUE],
    checkpoint: [0; 2 * CHECKPOINT_BYTES],
});
static MODEL: ConstStaticCell<Model> = ConstStaticCell::new(Model::new());
/// No faults beyond the power cut: every operation succeeds until then.
static PLAN: ConstStaticCell<FaultPlan> = ConstStaticCell::new(FaultPlan::none());

/// The directories and media over [`MediaBuffers`]: the device's storage, made once.
/// The fault model keeps a table of pending writes per segment (about 1 KiB each), so
/// together they are tens of KiB; they stay put in statics and the store only borrows
/// them. The directories are made empty in their statics and given buffers there, never
/// built on the stack and copied in.
static LOG_DIR: StaticCell<LogDir<'static>> = StaticCell::new();
static INDEX_DIR: StaticCell<IndexDir<'static>> = StaticCell::new();
static QUEUE_DIRS: [StaticCell<QueueDir<'static>>; MAX_QUEUES] =
    [const { StaticCell::new() }; MAX_QUEUES];
static CHECKPOINT: StaticCell<FaultyMedia<'static>> = StaticCell::new();

/// Bytes of the statics above.
const DIRECTORY_BYTES: usize = size_of::<LogDir<'static>>()
    + size_of::<IndexDir<'static>>()
    + MAX_QUEUES * size_of::<QueueDir<'static>>()
    + size_of::<FaultyMedia<'static>>();

/// The store's parts between runs: what `Engine::open` takes and `into_parts` gives back.
struct Parts<'a> {
    log: &'a mut LogDir<'a>,
    index: &'a mut IndexDir<'a>,
    queues: Queues<'a>,
    checkpoint: &'a mut FaultyMedia<'a>,
}

impl Parts<'static> {
    /// Makes the storage over `media` (once: the statics can be taken only once) and
    /// hands out its parts.
    fn new(media: &'static mut MediaBuffers, plan: &'static FaultPlan) -> Self {
        let log = LOG_DIR.init_with(|| RamDir::new(plan));
        for b in media.log.iter_mut() {
            must!(log.give(b), "log buffer");
        }
        let index = INDEX_DIR.init_with(|| RamDir::new(plan));
        for b in media.index.iter_mut() {
            must!(index.give(b), "index buffer");
        }
        let mut queue_buffers = media.queues.iter_mut();
        let queues = QUEUE_DIRS.iter().map(|cell| {
            let dir = cell.init_with(|| RamDir::new(plan));
            for b in queue_buffers.by_ref().take(FILES_PER_QUEUE) {
                must!(dir.give(b), "queue buffer");
            }
            dir
        });
        let queues = must!(Queues::new(queues), "queue table");
        let checkpoint = must!(
            FaultyMedia::new(&mut media.checkpoint, CHECKPOINT_BYTES, plan),
            "checkpoint buffer"
        );
        Parts {
            log,
            index,
            queues,
            checkpoint: CHECKPOINT.init(checkpoint),
        }
    }
}

impl<'a> Parts<'a> {
    fn of(store: FwEngine<'a>) -> Self {
        let (log, index, queues, checkpoint) = store.into_parts();
        Parts {
            log,
            index,
            queues,
            checkpoint,
        }
    }

    fn open(mut self, crashed: bool) -> (FwEngine<'a>, OpenReport) {
        // Queues a previous store held come back as directories for `open_existing`.
        self.queues.park();
        must!(
            Engine::open(
                CONFIG,
                self.log,
                self.index,
                self.queues,
                self.checkpoint,
                crashed,
                // The media are memory: records are read in place, no scratch needed.
                &mut [],
            ),
            "open (crashed: {crashed})"
        )
    }

    /// Cuts the power: what each media loses is what the media promises allow
    /// (`tern_engine` crate docs). Returns the writes dropped or torn, for the report.
    fn power_cut(&mut self, log_flushed: u64) -> usize {
        let mut pending = 0;
        for (base, media) in self.log.segments_mut() {
            let n = media.pending_writes();
            pending += n;
            // The segment holding the flushed offset has durable records and then pending
            // ones: the power going mid-write-back there leaves whole records and a torn
            // one right after durable data, the hardest place for the scan to cut.
            let writing_back = (base..base + LOG_SEGMENT_BYTES as u64).contains(&log_flushed);
            media.crash(if writing_back && n > 1 {
                Crash::Torn {
                    keep: n / 2,
                    tear_at: TEAR_AT_BYTE,
                }
            } else {
                Crash::DropUnflushed
            });
        }
        self.queues.park();
        let queue_files = self.queues.parked_mut().flat_map(|d| d.segments_mut());
        for (_, media) in self.index.segments_mut().chain(queue_files) {
            pending += media.pending_writes();
            media.crash(Crash::DropUnflushed);
        }
        pending += self.checkpoint.pending_writes();
        self.checkpoint.crash(Crash::DropUnflushed);
        pending
    }
}

/// Bytes of stack used so far: cortex-m-rt painted the stack at reset
/// (`paint-stack`); the deepest word no longer holding the paint is the high-water mark.
fn stack_peak_bytes() -> usize {
    unsafe extern "C" {
        static _stack_end: u32;
        static _stack_start: u32;
    }
    // Taking a symbol's address reads nothing: no `unsafe` needed.
    let (end, start) = (
        &raw const _stack_end as usize,
        &raw const _stack_start as usize,
    );
    let mut at = end;
    while at < start {
        // SAFETY: [_stack_end, _stack_start) is RAM the linker script reserves for the
        // stack, word-aligned (link.x asserts it); a volatile read of it has no effect
        // on the program and races nothing (one core, no interrupts enabled).
        let word = unsafe { core::ptr::read_volatile(at as *const u32) };
        if word != cortex_m_rt::STACK_PAINT_VALUE {
            break;
        }
        at += 4;
    }
    start - at
}

/// What the puts before the power cut left durable.
#[derive(Clone, Copy, Debug)]
struct BeforeCut {
    /// Messages put (all acknowledged).
    puts: usize,
    /// Messages below the last log flush: recovery must keep every one.
    flushed: usize,
    /// The log offset flushed to.
    flushed_offset: u64,
}

// The phases below run one after another, each in its own stack frame
// (`inline(never)`): inlined into `main`, every by-value store and its parts would keep a
// slot of their own in one frame, and the stack peak would measure that, not the engine.

/// Phases 1 and 2: a fresh store, puts, and the durable point moving as a device's flush
/// timer would move it. Returns the store's parts as they are when the power goes.
#[inline(never)]
fn fill<'a>(parts: Parts<'a>, model: &mut Model) -> (Parts<'a>, BeforeCut) {
    let (mut store, opened) = parts.open(false);
    ensure!(
        opened.checkpoint_lost && opened.log.end == 0,
        "a fresh store opened as {opened:?}"
    );
    workload::put(&mut store, model, CHECKPOINT_AT);
    must!(store.dispatch(&mut [], &mut |_| {}), "dispatch");
    must!(store.checkpoint(), "checkpoint");
    workload::put(&mut store, model, FLUSH_AT - CHECKPOINT_AT);
    let flushed_offset = must!(store.flush_log(), "flush");
    let flushed = model.sent.len();
    ensure!(
        model.sent.iter().all(|s| s.offset < flushed_offset),
        "the flush at {flushed_offset} does not cover the first {flushed} messages"
    );
    workload::put(&mut store, model, DISPATCH_AT - FLUSH_AT);
    must!(store.dispatch(&mut [], &mut |_| {}), "dispatch");
    workload::put(&mut store, model, PUTS_BEFORE_CUT - DISPATCH_AT);
    let puts = model.sent.len();
    say!(
        "put {puts} messages ({} log bytes); flushed {flushed} (to offset {flushed_offset})",
        store.log().max_offset()
    );
    // No close: the store is simply gone, as at a power cut.
    let before = BeforeCut {
        puts,
        flushed,
        flushed_offset,
    };
    (Parts::of(store), before)
}

/// Phases 3 and 4: the power cut, then recovery from the same buffers, checked against
/// the model, which is cut back to what survived. Returns the recovered store.
#[inline(never)]
fn cut_and_recover<'a>(
    mut parts: Parts<'a>,
    model: &mut Model,
    before: BeforeCut,
) -> (FwEngine<'a>, check::Verified) {
    let pending = parts.power_cut(before.flushed_offset);
    ensure!(
        Checkpoint::read(&parts.checkpoint).is_ok_and(|c| c.is_some()),
        "the checkpoint did not survive the power cut"
    );
    let (store, recovery) = parts.open(true);
    let recovered = check::verify(&store, &model.sent, before.flushed);
    let lost = check::verify_lost(&store, &model.sent[recovered.records..]);
    say!(
        "power cut: {pending} unflushed writes dropped or torn; recovery scanned {} records, cut a tail: {}, re-dispatched {}",
        recovery.log.records_verified,
        recovery.log.cut,
        recovery.redispatched
    );
    say!(
        "recovered {} of {} ({lost} lost, none findable); {} queues contiguous; {} index lookups found their message",
        recovered.records,
        before.puts,
        recovered.queues,
        recovered.index_hits
    );
    ensure!(
        recovered.records < before.puts,
        "the power cut lost nothing: the run proves less than it claims"
    );
    model.sent.truncate(recovered.records);
    (store, recovered)
}

/// Phase 5: the recovered store goes on (new messages continue every queue's offsets),
/// closes cleanly, and reopens trusting the clean end instead of scanning.
#[inline(never)]
fn go_on_and_reopen(mut store: FwEngine<'_>, model: &mut Model) -> check::Verified {
    workload::put(&mut store, model, PUTS_AFTER_RECOVERY);
    let (log, index, queues, checkpoint) = must!(store.close(&mut []), "close");
    let parts = Parts {
        log,
        index,
        queues,
        checkpoint,
    };
    let (store, reopened) = parts.open(false);
    ensure!(
        !reopened.crashed && reopened.log.records_verified == 0 && reopened.redispatched == 0,
        "a clean reopen scanned or re-dispatched: {reopened:?}"
    );
    let all = model.sent.len();
    let after = check::verify(&store, &model.sent, all);
    ensure!(
        after.records == all,
        "clean reopen holds {} of {all} messages",
        after.records
    );
    after
}

#[entry]
fn main() -> ! {
    say!(
        "tern-engine on a Cortex-M4F (qemu mps2-an386): log {} B x {}, queue files {} entries, index {} slots x {} entries x {}",
        LOG_SEGMENT_BYTES,
        LOG_SEGMENTS,
        QUEUE_ENTRIES_PER_FILE,
        INDEX_SLOTS,
        INDEX_ENTRIES,
        INDEX_FILES
    );
    ensure!(
        CONFIG.index.file_size() == INDEX_FILE_BYTES as u64,
        "index file is {} bytes, buffers were sized for {INDEX_FILE_BYTES}",
        CONFIG.index.file_size()
    );
    let media = MEDIA.take();
    let model = MODEL.take();
    let plan: &'static FaultPlan = PLAN.take();

    let (parts, before) = fill(Parts::new(media, plan), model);
    let (store, recovered) = cut_and_recover(parts, model, before);
    let after = go_on_and_reopen(store, model);

    say!(
        "memory: media buffers {} KiB (each twice its media: the fault model keeps two images), directories {} B, store struct {} B, model {} B, stack peak {} B",
        size_of::<MediaBuffers>() / 1024,
        DIRECTORY_BYTES,
        size_of::<FwEngine<'_>>(),
        size_of::<Model>(),
        stack_peak_bytes()
    );
    say!(
        "ok puts={} flushed={} recovered={} queues={} index_hits={} after_reopen={}",
        before.puts,
        before.flushed,
        recovered.records,
        after.queues,
        after.index_hits,
        after.records
    );
    report::exit(debug::EXIT_SUCCESS)
}
