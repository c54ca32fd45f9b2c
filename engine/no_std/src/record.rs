//! The stored message record (wire-protocol.md §4.1): encoding into a caller's buffer, and a
//! zero-copy view that validates before it exposes anything.
//!
//! Pull, query and view-by-id responses are these bytes as stored, so this module is the
//! one decoder of messages in Tern: the broker, the client and the gateway all use it.

use zerocopy::byteorder::big_endian::{I32, I64, U32};
use zerocopy::{FromBytes, IntoBytes};

use crate::hash::body_crc;
use crate::layout::{HostV4, HostV6, MAGIC_V1, MAGIC_V2, RecordHead, RecordMid};
use crate::properties::MAX_PROPERTIES_LEN;

/// sysFlag bit: the body is compressed.
pub const SYSFLAG_COMPRESSED: i32 = 0x1;
/// sysFlag bit: the topic carries multiple tags.
pub const SYSFLAG_MULTI_TAGS: i32 = 0x2;
/// sysFlag mask of the transaction type.
pub const SYSFLAG_TRANSACTION_MASK: i32 = 0xC;
/// Transaction type: a half message.
pub const SYSFLAG_TRANSACTION_PREPARED: i32 = 0x4;
/// Transaction type: a committed message.
pub const SYSFLAG_TRANSACTION_COMMIT: i32 = 0x8;
/// Transaction type: a rollback marker.
pub const SYSFLAG_TRANSACTION_ROLLBACK: i32 = 0xC;
/// sysFlag bit: the born host is IPv6.
pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
/// sysFlag bit: the store host is IPv6.
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;

/// Topics longer than this use the v2 layout (2-byte topic length), as RocketMQ does.
pub const V1_MAX_TOPIC_LEN: usize = 127;
/// Longest topic any record can hold.
pub const MAX_TOPIC_LEN: usize = u16::MAX as usize;
/// How many pieces [`MessageIn::with_pieces`] hands a record over in.
pub const RECORD_PIECES: usize = 6;
/// Size of a record with empty body, topic and properties and IPv4 hosts (v1).
pub const MIN_RECORD_SIZE: usize = 48 + 8 + 8 + 8 + 16 + 1 + 2;

/// A host and port as stored in a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Host {
    /// IPv4 address and port.
    V4 {
        /// Address bytes.
        ip: [u8; 4],
        /// Port.
        port: u32,
    },
    /// IPv6 address and port.
    V6 {
        /// Address bytes.
        ip: [u8; 16],
        /// Port.
        port: u32,
    },
}

impl Host {
    /// Bytes the host takes in a record.
    pub const fn stored_len(&self) -> usize {
        match self {
            Host::V4 { .. } => 8,
            Host::V6 { .. } => 20,
        }
    }

    fn write(&self, out: &mut [u8]) {
        match *self {
            Host::V4 { ip, port } => {
                let h = HostV4 {
                    ip,
                    port: I32::new(port as i32),
                };
                out.copy_from_slice(h.as_bytes());
            }
            Host::V6 { ip, port } => {
                let h = HostV6 {
                    ip,
                    port: I32::new(port as i32),
                };
                out.copy_from_slice(h.as_bytes());
            }
        }
    }
}

/// Why bytes are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RecordError {
    /// Fewer bytes than the record head or its declared size.
    Truncated,
    /// The magic is neither v1 nor v2.
    BadMagic(u32),
    /// The declared total size disagrees with the sizes of the parts.
    BadSize(i32),
    /// The body does not match its CRC.
    BadCrc {
        /// CRC stored in the record.
        stored: i32,
        /// CRC of the body as read.
        computed: i32,
    },
    /// Topic longer than the layout allows.
    TopicTooLong,
    /// Properties longer than 32767 bytes.
    PropertiesTooLong,
    /// Body longer than a record can declare.
    BodyTooLong,
    /// The output buffer is too small for the record.
    BufferTooSmall,
}

/// Written for the client that sent the message (the broker's remark), not for a log.
impl core::fmt::Display for RecordError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Truncated => f.write_str("the record is shorter than its declared size"),
            Self::BadMagic(m) => write!(f, "the record magic {m:#x} is neither v1 nor v2"),
            Self::BadSize(n) => write!(f, "the record's size {n} disagrees with its parts"),
            Self::BadCrc { stored, computed } => write!(
                f,
                "the body does not match its CRC (stored {stored}, computed {computed})"
            ),
            Self::TopicTooLong => f.write_str("the topic is too long for the record layout"),
            Self::PropertiesTooLong => f.write_str("the properties are longer than 32767 bytes"),
            Self::BodyTooLong => f.write_str("the body is longer than a record can declare"),
            Self::BufferTooSmall => f.write_str("the record does not fit its buffer"),
        }
    }
}

impl core::error::Error for RecordError {}

/// What a producer supplies for one message; the store adds offsets and its timestamp.
#[derive(Clone, Copy, Debug)]
pub struct MessageIn<'a> {
    /// Topic name.
    pub topic: &'a str,
    /// Queue of the topic.
    pub queue_id: i32,
    /// User flag.
    pub flag: i32,
    /// sysFlag from the producer; host-family bits are set by the encoder.
    pub sys_flag: i32,
    /// When the producer made the message.
    pub born_timestamp: i64,
    /// The producer's address.
    pub born_host: Host,
    /// The storing broker's address.
    pub store_host: Host,
    /// Times the message was sent back for retry.
    pub reconsume_times: i32,
    /// Half message offset for committed transaction messages, else 0.
    pub prepared_transaction_offset: i64,
    /// Body, stored as given (possibly compressed).
    pub body: &'a [u8],
    /// Properties string (see [`crate::properties`]).
    pub properties: &'a [u8],
}

/// What the store assigns when it appends a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreStamp {
    /// Position in the consume queue.
    pub queue_offset: i64,
    /// Position in the commit log.
    pub physical_offset: i64,
    /// Store time, ms since the epoch.
    pub store_timestamp: i64,
}

impl<'a> MessageIn<'a> {
    /// The message stored in `view`, to be stored again under `topic`/`queue_id` with
    /// `properties`: a delayed message reaching its real topic, a committed half message,
    /// a half message renewed for a check-back. Everything else stays as stored.
    pub fn restored(
        view: &RecordView<'a>,
        topic: &'a str,
        queue_id: i32,
        properties: &'a [u8],
    ) -> Self {
        MessageIn {
            topic,
            queue_id,
            flag: view.flag(),
            sys_flag: view.sys_flag(),
            born_timestamp: view.born_timestamp(),
            born_host: view.born_host(),
            store_host: view.store_host(),
            reconsume_times: view.reconsume_times(),
            prepared_transaction_offset: view.prepared_transaction_offset(),
            body: view.body(),
            properties,
        }
    }
}

impl MessageIn<'_> {
    /// Bytes the record takes, or why it cannot be stored.
    pub fn encoded_len(&self) -> Result<usize, RecordError> {
        if self.topic.len() > MAX_TOPIC_LEN {
            return Err(RecordError::TopicTooLong);
        }
        if self.properties.len() > MAX_PROPERTIES_LEN {
            return Err(RecordError::PropertiesTooLong);
        }
        let len = self.len_unchecked();
        if len > i32::MAX as usize {
            return Err(RecordError::BodyTooLong);
        }
        Ok(len)
    }

    /// Whether the topic needs the v2 layout (a 2-byte topic length), as RocketMQ decides.
    fn is_v2(&self) -> bool {
        self.topic.len() > V1_MAX_TOPIC_LEN
    }

    /// Bytes the record takes, its parts in layout order, without the limits
    /// [`MessageIn::encoded_len`] checks first.
    fn len_unchecked(&self) -> usize {
        48 + self.born_host.stored_len()
            + 8
            + self.store_host.stored_len()
            + 16
            + self.body.len()
            + if self.is_v2() { 2 } else { 1 }
            + self.topic.len()
            + 2
            + self.properties.len()
    }

    /// Encodes the record into the front of `out`, returning its length.
    pub fn encode(&self, stamp: StoreStamp, out: &mut [u8]) -> Result<usize, RecordError> {
        self.encode_with_crc(stamp, body_crc(self.body), out)
    }

    /// Like [`MessageIn::encode`] with the body CRC already known (a batch computes it
    /// while splitting, and an encode under a lock should not hash).
    pub fn encode_with_crc(
        &self,
        stamp: StoreStamp,
        crc: i32,
        out: &mut [u8],
    ) -> Result<usize, RecordError> {
        let len = self.encoded_len()?;
        let out = out.get_mut(..len).ok_or(RecordError::BufferTooSmall)?;
        let mut at = 0;
        self.encode_pieces(stamp, crc, &mut |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
            Ok::<(), RecordError>(())
        })?;
        debug_assert_eq!(at, len);
        Ok(len)
    }

    /// Streams the record to `sink` in order, piece by piece, so media that are not
    /// memory can be written without a record-sized buffer. Call
    /// [`MessageIn::encoded_len`] first: this does not check limits again.
    pub fn encode_pieces<X>(
        &self,
        stamp: StoreStamp,
        crc: i32,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), X>,
    ) -> Result<(), X> {
        self.with_pieces(stamp, crc, &mut |pieces| {
            for piece in pieces {
                sink(piece)?;
            }
            Ok(())
        })
    }

    /// Calls `f` with the record as its [`RECORD_PIECES`] pieces, in order: the fixed
    /// fields up to the body (assembled on the stack), the body, the topic's length and
    /// the topic, the properties' length and the properties. For a writer that hands
    /// them to the media at once (one `pwritev`). Call [`MessageIn::encoded_len`] first:
    /// this does not check limits again.
    pub fn with_pieces<R>(
        &self,
        stamp: StoreStamp,
        crc: i32,
        f: &mut dyn FnMut(&[&[u8]; RECORD_PIECES]) -> R,
    ) -> R {
        let v2 = self.is_v2();
        let len = self.len_unchecked();
        let mut sys_flag = self.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
        if matches!(self.born_host, Host::V6 { .. }) {
            sys_flag |= SYSFLAG_BORNHOST_V6;
        }
        if matches!(self.store_host, Host::V6 { .. }) {
            sys_flag |= SYSFLAG_STOREHOST_V6;
        }
        let head = RecordHead {
            total_size: I32::new(len as i32),
            magic: U32::new(if v2 { MAGIC_V2 } else { MAGIC_V1 }),
            body_crc: I32::new(crc),
            queue_id: I32::new(self.queue_id),
            flag: I32::new(self.flag),
            queue_offset: I64::new(stamp.queue_offset),
            physical_offset: I64::new(stamp.physical_offset),
            sys_flag: I32::new(sys_flag),
            born_timestamp: I64::new(self.born_timestamp),
        };
        // Everything up to the body is small: assemble it on the stack, one write.
        let mut fixed = [0u8; 48 + 20 + 8 + 20 + 16];
        let mut n = 0;
        let mut put = |bytes: &[u8]| {
            fixed[n..n + bytes.len()].copy_from_slice(bytes);
            n += bytes.len();
        };
        put(head.as_bytes());
        let mut host = [0u8; 20];
        let hl = self.born_host.stored_len();
        self.born_host.write(&mut host[..hl]);
        put(&host[..hl]);
        put(&stamp.store_timestamp.to_be_bytes());
        let hl = self.store_host.stored_len();
        self.store_host.write(&mut host[..hl]);
        put(&host[..hl]);
        let mid = RecordMid {
            reconsume_times: I32::new(self.reconsume_times),
            prepared_transaction_offset: I64::new(self.prepared_transaction_offset),
            body_len: I32::new(self.body.len() as i32),
        };
        put(mid.as_bytes());
        // V2 stores the topic's length in two bytes, V1 in one (its topics are at most
        // 127 bytes): the low byte of the two.
        let topic_len = (self.topic.len() as u16).to_be_bytes();
        let topic_len = if v2 { &topic_len[..] } else { &topic_len[1..] };
        let props_len = (self.properties.len() as u16).to_be_bytes();
        f(&[
            &fixed[..n],
            self.body,
            topic_len,
            self.topic.as_bytes(),
            &props_len,
            self.properties,
        ])
    }
}

/// A validated record over stored bytes. Nothing is copied; accessors read in place.
#[derive(Clone, Copy, Debug)]
pub struct RecordView<'a> {
    bytes: &'a [u8],
    head: &'a RecordHead,
    born_host_len: usize,
    store_host_len: usize,
    body_at: usize,
    body_len: usize,
    topic_at: usize,
    topic_len: usize,
    props_at: usize,
    props_len: usize,
}

fn read_u16(bytes: &[u8], at: usize) -> Result<usize, RecordError> {
    let b = bytes.get(at..at + 2).ok_or(RecordError::Truncated)?;
    Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
}

/// Bytes a host takes in a record whose sysFlag has `v6_bit` set or clear: what
/// [`Host::stored_len`] says of the host the flag describes.
fn host_len(sys_flag: i32, v6_bit: i32) -> usize {
    if sys_flag & v6_bit != 0 { 20 } else { 8 }
}

/// Accessors of the fields of the record's fixed head: each reads its big-endian field in
/// place, under the field's own name, so the head's layout is declared once (`layout.rs`).
macro_rules! head_fields {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> $ty {
                self.head.$name.get()
            }
        )*
    };
}

impl<'a> RecordView<'a> {
    /// Validates the record at the start of `bytes`: magic, and every part's size against
    /// the declared total. The body CRC is checked by [`RecordView::verify_crc`] only, so
    /// hot paths can skip it where the bytes were verified before.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RecordError> {
        let (head, _) = RecordHead::ref_from_prefix(bytes).map_err(|_| RecordError::Truncated)?;
        let magic = head.magic.get();
        let v2 = match magic {
            MAGIC_V1 => false,
            MAGIC_V2 => true,
            other => return Err(RecordError::BadMagic(other)),
        };
        let total = head.total_size.get();
        if total < MIN_RECORD_SIZE as i32 {
            return Err(RecordError::BadSize(total));
        }
        let bytes = bytes.get(..total as usize).ok_or(RecordError::Truncated)?;
        let sys_flag = head.sys_flag.get();
        let born_host_len = host_len(sys_flag, SYSFLAG_BORNHOST_V6);
        let store_host_len = host_len(sys_flag, SYSFLAG_STOREHOST_V6);
        let mid_at = 48 + born_host_len + 8 + store_host_len;
        let (mid, _) =
            RecordMid::ref_from_prefix(bytes.get(mid_at..).ok_or(RecordError::Truncated)?)
                .map_err(|_| RecordError::Truncated)?;
        let body_len = mid.body_len.get();
        if body_len < 0 {
            return Err(RecordError::BadSize(total));
        }
        let body_at = mid_at + 16;
        let body_len = body_len as usize;
        let topic_len_at = body_at
            .checked_add(body_len)
            .ok_or(RecordError::BadSize(total))?;
        let (topic_at, topic_len) = if v2 {
            (topic_len_at + 2, read_u16(bytes, topic_len_at)?)
        } else {
            let len = *bytes.get(topic_len_at).ok_or(RecordError::BadSize(total))?;
            (topic_len_at + 1, len as usize)
        };
        let props_len_at = topic_at + topic_len;
        let props_len = read_u16(bytes, props_len_at).map_err(|_| RecordError::BadSize(total))?;
        let props_at = props_len_at + 2;
        if props_at + props_len != total as usize {
            return Err(RecordError::BadSize(total));
        }
        Ok(Self {
            bytes,
            head,
            born_host_len,
            store_host_len,
            body_at,
            body_len,
            topic_at,
            topic_len,
            props_at,
            props_len,
        })
    }

    /// Checks the body against the stored CRC.
    pub fn verify_crc(&self) -> Result<(), RecordError> {
        let stored = self.head.body_crc.get();
        let computed = body_crc(self.body());
        if stored == computed {
            Ok(())
        } else {
            Err(RecordError::BadCrc { stored, computed })
        }
    }

    /// The record's bytes, exactly as stored.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Whole record length.
    pub fn total_size(&self) -> u32 {
        self.bytes.len() as u32
    }
    head_fields! {
        /// The stored magic (v1 or v2).
        magic: u32;
        /// Stored body CRC.
        body_crc: i32;
        /// Queue id.
        queue_id: i32;
        /// User flag.
        flag: i32;
        /// Consume-queue position.
        queue_offset: i64;
        /// Commit-log position.
        physical_offset: i64;
        /// sysFlag bits.
        sys_flag: i32;
        /// When the producer made it.
        born_timestamp: i64;
    }
    /// The producer's address.
    pub fn born_host(&self) -> Host {
        self.host_at(48, self.born_host_len)
    }
    /// When it was stored.
    pub fn store_timestamp(&self) -> i64 {
        let at = 48 + self.born_host_len;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes[at..at + 8]);
        i64::from_be_bytes(b)
    }
    /// The storing broker's address.
    pub fn store_host(&self) -> Host {
        self.host_at(48 + self.born_host_len + 8, self.store_host_len)
    }
    fn mid(&self) -> &'a RecordMid {
        let at = 48 + self.born_host_len + 8 + self.store_host_len;
        // Bounds were checked in `parse`.
        RecordMid::ref_from_prefix(&self.bytes[at..])
            .map(|(m, _)| m)
            .unwrap_or_else(|_| unreachable!())
    }
    /// Times sent back for retry.
    pub fn reconsume_times(&self) -> i32 {
        self.mid().reconsume_times.get()
    }
    /// Half-message offset of a committed transaction message.
    pub fn prepared_transaction_offset(&self) -> i64 {
        self.mid().prepared_transaction_offset.get()
    }
    /// The body as stored.
    pub fn body(&self) -> &'a [u8] {
        &self.bytes[self.body_at..self.body_at + self.body_len]
    }
    /// Topic bytes (UTF-8 as written by the broker).
    pub fn topic(&self) -> &'a [u8] {
        &self.bytes[self.topic_at..self.topic_at + self.topic_len]
    }
    /// Topic as text, if it is UTF-8.
    pub fn topic_str(&self) -> Option<&'a str> {
        core::str::from_utf8(self.topic()).ok()
    }
    /// Properties string bytes.
    pub fn properties(&self) -> &'a [u8] {
        &self.bytes[self.props_at..self.props_at + self.props_len]
    }

    fn host_at(&self, at: usize, len: usize) -> Host {
        if len == 20 {
            let (h, _) =
                HostV6::ref_from_prefix(&self.bytes[at..]).unwrap_or_else(|_| unreachable!());
            Host::V6 {
                ip: h.ip,
                port: h.port.get() as u32,
            }
        } else {
            let (h, _) =
                HostV4::ref_from_prefix(&self.bytes[at..]).unwrap_or_else(|_| unreachable!());
            Host::V4 {
                ip: h.ip,
                port: h.port.get() as u32,
            }
        }
    }
}

#[cfg(test)]
mod tests;
