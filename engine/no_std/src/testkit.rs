//! What the engine's tests, the fuzz targets and the firmware image share (the `testkit`
//! feature; the engine's own unit tests always have it): a sample message to store, a
//! store wholly in memory with the parts it is opened from ([`RamParts`]), and a timer
//! wholly in memory ([`timer_parts`], [`SMALL_TIMER`]).

use crate::error::Error;
use crate::faulty::{Crash, FaultPlan, FaultyMedia};
use crate::ram::{RamDir, RamError, RamQueues};
use crate::record::{Host, MessageIn, V1_MAX_TOPIC_LEN};
use crate::store::{Engine, StoreConfig};
use crate::timer::checkpoint::FILE_SIZE as TIMER_CHECKPOINT_SIZE;
use crate::timer::log::{BLANK_SIZE, UNIT_SIZE};
use crate::timer::wheel::SLOT_SIZE;
use crate::timer::{Timer, TimerConfig};

/// When every sample message was born (2023-11-14, a fixed clock).
pub const BORN_TIMESTAMP: i64 = 1_700_000_000_000;
/// Where every sample message comes from: a client on this machine.
pub const BORN_HOST: Host = Host::V4 {
    ip: [127, 0, 0, 1],
    port: 50_000,
};
/// Who stores every sample message: a broker on this machine, on RocketMQ's port.
pub const STORE_HOST: Host = Host::V4 {
    ip: [127, 0, 0, 1],
    port: 10_911,
};

/// A plain message to `topic`/`queue_id`: no flags, born at [`BORN_TIMESTAMP`] on
/// [`BORN_HOST`], stored by [`STORE_HOST`], never reconsumed, not transactional. A test
/// that needs another field says so with `MessageIn { field, ..message(…) }`.
pub fn message<'a>(
    topic: &'a str,
    queue_id: i32,
    body: &'a [u8],
    properties: &'a [u8],
) -> MessageIn<'a> {
    MessageIn {
        topic,
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: BORN_TIMESTAMP,
        born_host: BORN_HOST,
        store_host: STORE_HOST,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        properties,
    }
}

/// A store wholly in memory, as the engine's tests and the recovery fuzz target run it:
/// log and index directories of up to `SEGS` segments each, a fixed table of up to
/// `QUEUES` queues of up to `QUEUE_SEGS` files each (topic names up to `TOPIC` bytes), and
/// the checkpoint page, all on fault-injecting media.
pub type RamEngine<
    'a,
    const SEGS: usize,
    const QUEUE_SEGS: usize,
    const QUEUES: usize,
    const TOPIC: usize = V1_MAX_TOPIC_LEN,
> = Engine<
    RamDir<'a, SEGS>,
    RamDir<'a, SEGS>,
    RamQueues<RamDir<'a, QUEUE_SEGS>, QUEUES, TOPIC>,
    FaultyMedia<'a>,
>;

/// What a [`RamEngine`] is opened from and gives back between runs (`Engine::open` takes
/// them, `Engine::into_parts` and `Engine::close` return them): named, so that a test can
/// cut power under them or rot their bits between a stop and the next open.
#[derive(Debug)]
pub struct RamParts<
    'a,
    const SEGS: usize,
    const QUEUE_SEGS: usize,
    const QUEUES: usize,
    const TOPIC: usize = V1_MAX_TOPIC_LEN,
> {
    /// The commit log's segments.
    pub log: RamDir<'a, SEGS>,
    /// The index files.
    pub index: RamDir<'a, SEGS>,
    /// The consume queues; parked whenever no store holds them.
    pub table: RamQueues<RamDir<'a, QUEUE_SEGS>, QUEUES, TOPIC>,
    /// The checkpoint page.
    pub checkpoint: FaultyMedia<'a>,
}

impl<'a, const SEGS: usize, const QUEUE_SEGS: usize, const QUEUES: usize, const TOPIC: usize>
    RamParts<'a, SEGS, QUEUE_SEGS, QUEUES, TOPIC>
{
    /// Empty directories and a zeroed checkpoint page of `checkpoint_len` bytes over the
    /// caller's buffers (each twice its media: current and durable image), all drawing on
    /// `plan`: `log` and `index` one buffer per segment, `queues` `QUEUE_SEGS` per queue
    /// (as [`RamQueues::with_buffers`] takes them).
    pub fn with_buffers<B: AsMut<[u8]> + ?Sized + 'a>(
        plan: &'a FaultPlan,
        log: impl IntoIterator<Item = &'a mut B>,
        index: impl IntoIterator<Item = &'a mut B>,
        queues: impl IntoIterator<Item = &'a mut B>,
        checkpoint: &'a mut [u8],
        checkpoint_len: usize,
    ) -> Result<Self, RamError> {
        Ok(Self {
            log: RamDir::with_buffers(plan, log)?,
            index: RamDir::with_buffers(plan, index)?,
            table: RamQueues::with_buffers(plan, queues)?,
            checkpoint: FaultyMedia::new(checkpoint, checkpoint_len, plan)?,
        })
    }

    /// Opens (recovers, when `crashed`) a store over these parts, without the report.
    /// The media are memory, so records are read in place and no scratch is needed.
    pub fn open(
        self,
        config: StoreConfig,
        crashed: bool,
    ) -> Result<RamEngine<'a, SEGS, QUEUE_SEGS, QUEUES, TOPIC>, Error<RamError>> {
        let (store, _) = Engine::open(
            config,
            self.log,
            self.index,
            self.table,
            self.checkpoint,
            crashed,
            &mut [],
        )?;
        Ok(store)
    }

    /// What a stopped store gives back, flushing nothing (as a crash would); its queues
    /// parked so that the next open finds them.
    pub fn from_store(store: RamEngine<'a, SEGS, QUEUE_SEGS, QUEUES, TOPIC>) -> Self {
        Self::parked(store.into_parts())
    }

    /// What a store closed cleanly gives back; its queues parked.
    pub fn from_closed(
        store: RamEngine<'a, SEGS, QUEUE_SEGS, QUEUES, TOPIC>,
    ) -> Result<Self, Error<RamError>> {
        Ok(Self::parked(store.close(&mut [])?))
    }

    #[allow(clippy::type_complexity)]
    fn parked(
        (log, index, mut table, checkpoint): (
            RamDir<'a, SEGS>,
            RamDir<'a, SEGS>,
            RamQueues<RamDir<'a, QUEUE_SEGS>, QUEUES, TOPIC>,
            FaultyMedia<'a>,
        ),
    ) -> Self {
        table.park();
        Self {
            log,
            index,
            table,
            checkpoint,
        }
    }

    /// Visits every media, always in one order: the log's segments, the index files, each
    /// parked queue's files (in table order), the checkpoint. A test that draws each
    /// media's crash from a seed or an input then replays the same way.
    pub fn for_each_media(&mut self, mut f: impl FnMut(&mut FaultyMedia<'a>)) {
        for (_, m) in self.log.segments_mut() {
            f(m);
        }
        for (_, m) in self.index.segments_mut() {
            f(m);
        }
        for d in self.table.parked_mut() {
            for (_, m) in d.segments_mut() {
                f(m);
            }
        }
        f(&mut self.checkpoint);
    }

    /// Cuts power (or kills the process) under every media the same way.
    pub fn crash(&mut self, kind: Crash) {
        self.for_each_media(|m| m.crash(kind));
    }
}

/// A timer wholly in memory: the wheel, a timer log of up to `SEGS` segments and the timer
/// checkpoint page, all on fault-injecting media.
pub type RamTimer<'a, const SEGS: usize> =
    Timer<FaultyMedia<'a>, RamDir<'a, SEGS>, FaultyMedia<'a>>;

/// What a [`RamTimer`] is opened from (`Timer::open`'s first three arguments) and gives
/// back (`Timer::into_parts`): wheel, timer log, checkpoint.
pub type RamTimerParts<'a, const SEGS: usize> =
    (FaultyMedia<'a>, RamDir<'a, SEGS>, FaultyMedia<'a>);

/// A timer small enough to fill and wrap in a test: 128 one-second slots, a 10 s roll
/// window, timer-log segments of eight units (and the blank that ends a segment).
pub const SMALL_TIMER: TimerConfig = TimerConfig {
    slots: 128,
    precision_ms: 1_000,
    roll_window_ms: 10_000,
    log_segment_size: 8 * UNIT_SIZE + BLANK_SIZE,
};

/// An empty wheel of `slots` slots, timer log and timer checkpoint page over the caller's
/// buffers, each twice its media (current and durable image), all drawing on `plan`:
/// `wheel` `2 × slots ×` [`SLOT_SIZE`] bytes, `checkpoint` twice the checkpoint's
/// [`FILE_SIZE`](TIMER_CHECKPOINT_SIZE), `log` one buffer per segment.
pub fn timer_parts<'a, const SEGS: usize, B: AsMut<[u8]> + ?Sized + 'a>(
    plan: &'a FaultPlan,
    slots: u32,
    wheel: &'a mut [u8],
    log: impl IntoIterator<Item = &'a mut B>,
    checkpoint: &'a mut [u8],
) -> Result<RamTimerParts<'a, SEGS>, RamError> {
    let wheel_len = slots as usize * SLOT_SIZE as usize;
    Ok((
        FaultyMedia::new(wheel, wheel_len, plan)?,
        RamDir::with_buffers(plan, log)?,
        FaultyMedia::new(checkpoint, TIMER_CHECKPOINT_SIZE as usize, plan)?,
    ))
}
