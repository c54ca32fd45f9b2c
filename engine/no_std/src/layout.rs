//! Every on-media layout, declared once, big-endian, with its size checked at compile time.
//!
//! These are RocketMQ's formats (wire-protocol.md §4.1, §6.1–§6.3, §6.9): a store written by
//! Tern can be read by RocketMQ's tools and the other way round.

use zerocopy::byteorder::big_endian::{I32, I64, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Magic of a v1 record (1-byte topic length).
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// Magic of a v2 record (2-byte topic length), used when the topic is longer than 127 bytes.
pub const MAGIC_V2: u32 = 0xDAA3_20AB;
/// Magic of the blank record that fills the end of a commit-log segment.
pub const MAGIC_BLANK: u32 = 0xCBD4_3194;

/// The fixed head of a stored message record, up to and including the born timestamp.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RecordHead {
    /// Whole record length, this field included.
    pub total_size: I32,
    /// [`MAGIC_V1`] or [`MAGIC_V2`].
    pub magic: U32,
    /// CRC32 of the body, masked to 31 bits.
    pub body_crc: I32,
    /// Queue of the topic the record belongs to.
    pub queue_id: I32,
    /// The producer's flag, carried untouched.
    pub flag: I32,
    /// Position of the record in its consume queue.
    pub queue_offset: I64,
    /// Position of the record in the commit log; equals where it is stored.
    pub physical_offset: I64,
    /// Compression, transaction and host-family bits (wire-protocol.md §4.2).
    pub sys_flag: I32,
    /// When the producer made the message, ms since the epoch.
    pub born_timestamp: I64,
}
const _: () = assert!(core::mem::size_of::<RecordHead>() == 48);

/// An IPv4 host as stored in a record: address then port.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct HostV4 {
    /// Address bytes in network order.
    pub ip: [u8; 4],
    /// Port, stored as a Java int.
    pub port: I32,
}
const _: () = assert!(core::mem::size_of::<HostV4>() == 8);

/// An IPv6 host as stored in a record (sysFlag bit 0x10 or 0x20 set).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct HostV6 {
    /// Address bytes in network order.
    pub ip: [u8; 16],
    /// Port, stored as a Java int.
    pub port: I32,
}
const _: () = assert!(core::mem::size_of::<HostV6>() == 20);

/// The fixed part between the store host and the body.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RecordMid {
    /// How many times the message was sent back for retry.
    pub reconsume_times: I32,
    /// For a committed transaction message, the half message's commit-log offset.
    pub prepared_transaction_offset: I64,
    /// Length of the body that follows.
    pub body_len: I32,
}
const _: () = assert!(core::mem::size_of::<RecordMid>() == 16);

/// The record written where the next record does not fit in the segment: the reader skips
/// to the next segment. The bytes after it in the segment are garbage.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct BlankRecord {
    /// Bytes from this record to the end of the segment.
    pub total_size: I32,
    /// [`MAGIC_BLANK`].
    pub magic: U32,
}
const _: () = assert!(core::mem::size_of::<BlankRecord>() == 8);

/// One consume-queue entry: where a message of the queue sits in the commit log.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct CqEntry {
    /// Commit-log offset of the record.
    pub physical_offset: I64,
    /// Record size in bytes.
    pub size: I32,
    /// Java hash of the TAGS property (0 when none); for delay queues the delivery time.
    pub tag_code: I64,
}
const _: () = assert!(core::mem::size_of::<CqEntry>() == 20);

/// Size written into [`CqEntry::size`] of the filler entries that pad a queue's first file.
pub const CQ_FILLER_SIZE: i32 = i32::MAX;

/// Head of an index file.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct IndexHeader {
    /// Store time of the first indexed record, ms.
    pub begin_timestamp: I64,
    /// Store time of the last indexed record, ms.
    pub end_timestamp: I64,
    /// Commit-log offset of the first indexed record.
    pub begin_phy_offset: I64,
    /// Commit-log offset of the last indexed record.
    pub end_phy_offset: I64,
    /// Slots in use (RocketMQ counts slots ever filled).
    pub hash_slot_count: I32,
    /// Next entry number; starts at 1 (entry 0 is never used).
    pub index_count: I32,
}
const _: () = assert!(core::mem::size_of::<IndexHeader>() == 40);

/// One hash-index entry; entries of one slot are chained newest to oldest.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct IndexEntry {
    /// `abs(String.hashCode(key))`.
    pub key_hash: I32,
    /// Commit-log offset of the record.
    pub phy_offset: I64,
    /// Seconds between the header's begin timestamp and the record's store time.
    pub time_diff: I32,
    /// The entry that headed this slot before (0 = end of chain).
    pub prev_index: I32,
}
const _: () = assert!(core::mem::size_of::<IndexEntry>() == 20);

/// Magic that marks Tern's extension of the checkpoint.
pub const CHECKPOINT_MAGIC: u32 = 0x5445_524E; // "TERN"

/// The checkpoint file: RocketMQ's three timestamps and two 5.x offsets, then Tern's own
/// positions, sealed by a CRC so a torn checkpoint is detected rather than trusted.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct CheckpointLayout {
    /// Store time of the last flushed commit-log record (RocketMQ).
    pub physic_msg_timestamp: I64,
    /// Store time of the last flushed consume-queue entry (RocketMQ).
    pub logics_msg_timestamp: I64,
    /// Store time of the last flushed index entry (RocketMQ).
    pub index_msg_timestamp: I64,
    /// Flushed commit-log offset (RocketMQ 5.x `masterFlushedOffset`).
    pub master_flushed_offset: I64,
    /// Confirmed commit-log offset (RocketMQ 5.x).
    pub confirm_phy_offset: I64,
    /// [`CHECKPOINT_MAGIC`]: the fields below are present.
    pub tern_magic: U32,
    /// Layout version of the fields below.
    pub tern_version: U32,
    /// Commit-log offset up to which consume queues and index are flushed: recovery
    /// dispatches from here.
    pub dispatched_offset: I64,
    /// Commit-log end written at a clean shutdown; -1 while the store is open.
    pub clean_end_offset: I64,
    /// CRC32 of every byte before this field.
    pub crc: U32,
}
const _: () = assert!(core::mem::size_of::<CheckpointLayout>() == 68);

/// Bytes the checkpoint occupies on media (RocketMQ maps one page).
pub const CHECKPOINT_FILE_SIZE: u64 = 4096;

/// One slot of the timer wheel (RocketMQ's `Slot`): the timer-log units due in one
/// precision-wide span, as the ends of a list linked newest to oldest.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct TimerSlot {
    /// The slot's time in precision units (`timeMs / precisionMs`): a slot holding another
    /// turn of the ring reads as empty.
    pub time: I64,
    /// Timer-log offset of the oldest unit, −1 for none.
    pub first_pos: I64,
    /// Timer-log offset of the newest unit (the head of the list), −1 for none.
    pub last_pos: I64,
    /// Units added (a recall marker counts −1): congestion and metrics only.
    pub num: I32,
    /// RocketMQ writes 0 and never reads it; Tern writes the CRC32 of the 28 bytes
    /// before it, so a rotted slot is found.
    pub magic: U32,
}
const _: () = assert!(core::mem::size_of::<TimerSlot>() == 32);

/// Timer-log unit magic: a timer message.
pub const TIMER_UNIT_DEFAULT: i32 = 0x1;
/// Timer-log unit magic: a long delay to be put back into the timer for a later window.
pub const TIMER_UNIT_ROLL: i32 = 0x2;
/// Timer-log unit magic: a recall marker.
pub const TIMER_UNIT_DELETE: i32 = 0x4;

/// One unit of the timer log (RocketMQ's `TimerLog` unit): a timer message filed under a
/// slot, linked to the slot's previous newest unit.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct TimerUnit {
    /// Unit length: 52 (a blank filler at a file's end holds the bytes left instead).
    pub size: I32,
    /// Timer-log offset of the slot's previous newest unit, −1 for none.
    pub prev_pos: I64,
    /// [`TIMER_UNIT_DEFAULT`], [`TIMER_UNIT_ROLL`], [`TIMER_UNIT_DELETE`] bits.
    pub magic: I32,
    /// When it was filed, ms, floored to the precision.
    pub write_time: I64,
    /// The slot's time minus `write_time`, ms.
    pub delay: I32,
    /// Commit-log offset of the message's record.
    pub phy_offset: I64,
    /// Size of that record.
    pub phy_size: I32,
    /// Java `hashCode` of the real topic (RocketMQ's metrics).
    pub topic_hash: I32,
    /// Reserved by RocketMQ (0); Tern keeps the timer queue's offset of the entry here,
    /// so recovery knows how far the timer took its queue in without reading records.
    pub queue_offset: I64,
}
const _: () = assert!(core::mem::size_of::<TimerUnit>() == 52);

/// One copy of the timer checkpoint (`timercheck`): RocketMQ's 56 bytes, then Tern's
/// positions, sealed by a CRC. The file holds two copies, at 0 and
/// [`TIMER_CHECKPOINT_COPY_AT`]; the valid one with the higher `seq` is current, so a
/// write torn by a crash leaves the previous one.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct TimerCheckpointLayout {
    /// The slot time up to which delivery is done (RocketMQ `lastReadTimeMs`).
    pub last_read_time_ms: I64,
    /// Timer-log position below which it is durable (RocketMQ `lastTimerLogFlushPos`).
    pub last_timer_log_flush_pos: I64,
    /// Timer-queue offset below which every entry is filed (RocketMQ
    /// `lastTimerQueueOffset`).
    pub last_timer_queue_offset: I64,
    /// The master's filed offset, for a slave (RocketMQ `masterTimerQueueOffset`).
    pub master_timer_queue_offset: I64,
    /// RocketMQ's `dataVersion`: state version, timestamp, counter.
    pub data_version: [I64; 3],
    /// [`CHECKPOINT_MAGIC`]: the fields below are present.
    pub tern_magic: U32,
    /// Layout version of the fields below.
    pub tern_version: U32,
    /// Timer-log position below which every unit is linked in the flushed wheel.
    pub wheel_pos: I64,
    /// Next unit of the slot at `last_read_time_ms` to deliver, −1 for the slot's newest.
    pub resume_pos: I64,
    /// Write count: the higher valid copy is current.
    pub seq: I64,
    /// CRC32 of every byte before this field.
    pub crc: U32,
}
const _: () = assert!(core::mem::size_of::<TimerCheckpointLayout>() == 92);

/// Where the second copy of the timer checkpoint starts.
pub const TIMER_CHECKPOINT_COPY_AT: u64 = 128;
