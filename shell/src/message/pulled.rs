//! Decoding PULL / QUERY_MESSAGE / VIEW_MESSAGE_BY_ID bodies: stored records back to back
//! (§4.6), each parsed by the engine's `RecordView` (the one record decoder in Tern).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tern_engine::record::{Host, RecordError, RecordView};

use super::{Compression, MAX_INFLATED_BYTES, offset_msg_id};
use super::{property, string_to_properties};

/// Most records one body may hold; a bound on peer-driven work.
pub const MAX_RECORDS_PER_BODY: usize = 65_536;

/// Why a pulled body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PulledError {
    /// A record failed the engine's validation.
    Record(RecordError),
    /// A compressed body could not be inflated.
    Inflate(&'static str),
    /// The body's sysFlag names a compression type no RocketMQ version defines.
    UnsupportedCompression(i32),
    /// More records than [`MAX_RECORDS_PER_BODY`].
    TooManyRecords,
}

impl std::fmt::Display for PulledError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Record(e) => write!(f, "bad record: {e:?}"),
            Self::Inflate(e) => write!(f, "cannot inflate body: {e}"),
            Self::UnsupportedCompression(t) => write!(f, "unsupported compression type {t:#x}"),
            Self::TooManyRecords => write!(f, "too many records in one body"),
        }
    }
}

impl std::error::Error for PulledError {}

/// A stored message as a consumer sees it (Java's `MessageExt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageExt {
    /// Topic.
    pub topic: String,
    /// Queue.
    pub queue_id: i32,
    /// User flag.
    pub flag: i32,
    /// Consume-queue offset.
    pub queue_offset: i64,
    /// Commit-log offset.
    pub commit_log_offset: i64,
    /// sysFlag as stored (the compressed bit stays set; `body` is already inflated).
    pub sys_flag: i32,
    /// Producer's timestamp.
    pub born_timestamp: i64,
    /// Producer's address.
    pub born_host: SocketAddr,
    /// Broker's store timestamp.
    pub store_timestamp: i64,
    /// Broker's address.
    pub store_host: SocketAddr,
    /// Retry count.
    pub reconsume_times: i32,
    /// Half-message offset of a committed transaction message.
    pub prepared_transaction_offset: i64,
    /// Stored body CRC.
    pub body_crc: i32,
    /// Record size in the commit log.
    pub store_size: u32,
    /// Body, inflated if it was compressed.
    pub body: Vec<u8>,
    /// Properties.
    pub properties: BTreeMap<String, String>,
    /// Offset msgId (§5.1).
    pub offset_msg_id: String,
}

impl MessageExt {
    /// Java's `getMsgId()`: the UNIQ_KEY when present, else the offset msgId.
    pub fn msg_id(&self) -> &str {
        self.properties
            .get(property::UNIQ_KEY)
            .map(String::as_str)
            .unwrap_or(&self.offset_msg_id)
    }

    /// The TAGS property.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(property::TAGS).map(String::as_str)
    }

    /// Builds the owned form from a validated record view, its body decompressed.
    pub fn from_view(view: &RecordView<'_>) -> Result<Self, PulledError> {
        Ok(Self::stored(view, pulled_body(view)?.into_owned()))
    }

    /// The owned form with `body` (the record's, inflated or as stored): the body is
    /// the bulk of a record, so it is copied once, by the caller.
    fn stored(view: &RecordView<'_>, body: Vec<u8>) -> Self {
        let store_host = socket_addr(view.store_host());
        Self {
            topic: String::from_utf8_lossy(view.topic()).into_owned(),
            queue_id: view.queue_id(),
            flag: view.flag(),
            queue_offset: view.queue_offset(),
            commit_log_offset: view.physical_offset(),
            sys_flag: view.sys_flag(),
            born_timestamp: view.born_timestamp(),
            born_host: socket_addr(view.born_host()),
            store_timestamp: view.store_timestamp(),
            store_host,
            reconsume_times: view.reconsume_times(),
            prepared_transaction_offset: view.prepared_transaction_offset(),
            body_crc: view.body_crc(),
            store_size: view.total_size(),
            body,
            properties: string_to_properties(view.properties()),
            offset_msg_id: offset_msg_id(store_host, view.physical_offset()),
        }
    }
}

/// The body of a record as the producer sent it: decompressed as its sysFlag says, or
/// the stored bytes themselves (not copied) when it was not compressed.
pub fn pulled_body<'a>(view: &RecordView<'a>) -> Result<Cow<'a, [u8]>, PulledError> {
    match Compression::of_sys_flag(view.sys_flag()) {
        Ok(None) => Ok(Cow::Borrowed(view.body())),
        Ok(Some(kind)) => kind
            .decompress(view.body(), MAX_INFLATED_BYTES)
            .map(Cow::Owned)
            .map_err(PulledError::Inflate),
        Err(bits) => Err(PulledError::UnsupportedCompression(bits)),
    }
}

/// A whole, valid record whose body could not be decompressed: where it is and what it
/// is are known, so the consumer can set it aside (a DLQ, an error to the application)
/// and go on with the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The message with its body as stored.
    pub message: MessageExt,
    /// Why the body could not be read.
    pub error: PulledError,
}

/// Converts the engine's host to a socket address (port truncated to 16 bits as Java does).
pub fn socket_addr(host: Host) -> SocketAddr {
    match host {
        Host::V4 { ip, port } => SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port as u16),
        Host::V6 { ip, port } => SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port as u16),
    }
}

/// Decodes every record of a pull/query/view body. `verify_crc` re-checks body CRCs (Java
/// clients do not; useful in tests and tools). A body that cannot be decompressed fails
/// the whole; consumers use [`decode_pulled_each`].
pub fn decode_pulled(body: &[u8], verify_crc: bool) -> Result<Vec<MessageExt>, PulledError> {
    decode_pulled_each(body, verify_crc)?
        .into_iter()
        .map(|r| r.map_err(|u| u.error))
        .collect()
}

/// Decodes every record of a pull/query/view body, each on its own: a record whose body
/// cannot be decompressed is an [`Undecodable`] in its place. Only a record that is not
/// whole (so the ones after it cannot be found) fails the body.
pub fn decode_pulled_each(
    body: &[u8],
    verify_crc: bool,
) -> Result<Vec<Result<MessageExt, Undecodable>>, PulledError> {
    let mut out = Vec::new();
    for view in pulled_records(body, verify_crc) {
        let view = view?;
        out.push(match pulled_body(&view) {
            Ok(body) => Ok(MessageExt::stored(&view, body.into_owned())),
            Err(error) => Err(Undecodable {
                message: MessageExt::stored(&view, view.body().to_vec()),
                error,
            }),
        });
    }
    Ok(out)
}

/// The records of a pull/query/view body read in place, for a consumer that needs no
/// owned copy ([`MessageExt`] allocates a string per property): each validated (and its
/// body CRC checked if `verify_crc`), bodies as stored ([`pulled_body`] inflates them).
/// A record that fails (not whole, a bad CRC, one past [`MAX_RECORDS_PER_BODY`]) is the
/// last item: its error.
pub fn pulled_records(body: &[u8], verify_crc: bool) -> PulledRecords<'_> {
    PulledRecords {
        rest: body,
        verify_crc,
        count: 0,
    }
}

/// The iterator of [`pulled_records`].
#[derive(Debug, Clone)]
pub struct PulledRecords<'a> {
    /// What is left of the body; emptied after an error.
    rest: &'a [u8],
    verify_crc: bool,
    /// Records yielded, held to [`MAX_RECORDS_PER_BODY`].
    count: usize,
}

impl<'a> PulledRecords<'a> {
    fn next_record(&mut self) -> Result<RecordView<'a>, PulledError> {
        if self.count >= MAX_RECORDS_PER_BODY {
            return Err(PulledError::TooManyRecords);
        }
        let view = RecordView::parse(self.rest).map_err(PulledError::Record)?;
        if self.verify_crc {
            view.verify_crc().map_err(PulledError::Record)?;
        }
        self.count += 1;
        self.rest = self
            .rest
            .get(view.total_size() as usize..)
            .unwrap_or_default();
        Ok(view)
    }
}

impl<'a> Iterator for PulledRecords<'a> {
    type Item = Result<RecordView<'a>, PulledError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let next = self.next_record();
        if next.is_err() {
            self.rest = &[];
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Compression, SYSFLAG_COMPRESSED, compress_body, property};
    use tern_engine::record::{MessageIn, StoreStamp};
    use tern_engine::testkit;

    fn record(body: &[u8], sys_flag: i32, offset: i64) -> Vec<u8> {
        let props = format!(
            "{}\u{1}TagA\u{2}{}\u{1}ABC\u{2}",
            property::TAGS,
            property::UNIQ_KEY
        );
        let m = MessageIn {
            sys_flag,
            ..testkit::message("T", 1, body, props.as_bytes())
        };
        let mut out = vec![0u8; m.encoded_len().unwrap()];
        let stamp = StoreStamp {
            queue_offset: 3,
            physical_offset: offset,
            store_timestamp: 9,
        };
        m.encode(stamp, &mut out).unwrap();
        out
    }

    #[test]
    fn back_to_back_records_decode_in_order() {
        let mut body = record(b"first", 0, 0);
        let first_len = body.len() as i64;
        body.extend(record(b"second", 0, first_len));
        let msgs = decode_pulled(&body, true).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].body, b"first");
        assert_eq!(msgs[1].commit_log_offset, first_len);
        assert_eq!(msgs[1].msg_id(), "ABC");
        assert_eq!(msgs[0].tags(), Some("TagA"));
        assert_eq!(msgs[0].store_host.port(), 10911);
    }

    #[test]
    fn records_read_in_place_match_the_owned_decode_and_stop_at_a_broken_one() {
        let plain = vec![b'y'; 5000];
        let mut body = record(b"first", 0, 0);
        let second_at = body.len() as i64;
        body.extend(record(
            &compress_body(&plain).unwrap(),
            SYSFLAG_COMPRESSED,
            second_at,
        ));
        let owned = decode_pulled(&body, true).unwrap();
        let views: Vec<_> = pulled_records(&body, true).map(Result::unwrap).collect();
        assert_eq!(views.len(), 2);
        for (v, m) in views.iter().zip(&owned) {
            assert_eq!(MessageExt::from_view(v).unwrap(), *m);
            assert_eq!(*pulled_body(v).unwrap(), m.body[..]);
        }
        assert!(matches!(
            pulled_body(&views[0]).unwrap(),
            Cow::Borrowed(b"first")
        ));
        assert_eq!(views[1].physical_offset(), second_at);

        // A cut record: the first still reads, the second is an error, then nothing.
        let cut = &body[..body.len() - 1];
        let mut it = pulled_records(cut, false);
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    #[test]
    fn compressed_bodies_are_inflated() {
        let plain = vec![b'x'; 5000];
        let c = compress_body(&plain).unwrap();
        let msgs = decode_pulled(&record(&c, SYSFLAG_COMPRESSED, 0), true).unwrap();
        assert_eq!(msgs[0].body, plain);
    }

    #[test]
    fn truncated_body_is_an_error() {
        let body = record(b"x", 0, 0);
        assert!(decode_pulled(&body[..body.len() - 1], false).is_err());
    }

    #[test]
    fn lz4_and_zstd_bodies_are_decompressed() {
        let plain: Vec<u8> = (0..6000u32).map(|i| (i % 11) as u8).collect();
        for kind in [Compression::Lz4, Compression::Zstd, Compression::Zlib] {
            let c = kind.compress(&plain, 5).unwrap();
            let msgs = decode_pulled(&record(&c, kind.sys_flag(), 0), true).unwrap();
            assert_eq!(msgs[0].body, plain, "{kind:?}");
            assert_eq!(msgs[0].sys_flag, kind.sys_flag());
        }
    }

    #[test]
    fn an_undecodable_body_is_an_error_for_that_record_only() {
        let good = record(b"fine", 0, 0);
        let mut body = good.clone();
        // An LZ4 flag on bytes that are no LZ4 frame, then a type no version defines.
        body.extend(record(
            b"not lz4",
            SYSFLAG_COMPRESSED | 0x100,
            good.len() as i64,
        ));
        let third_at = body.len() as i64;
        body.extend(record(b"??", SYSFLAG_COMPRESSED | 0x500, third_at));
        body.extend(record(b"after", 0, body.len() as i64));
        let each = decode_pulled_each(&body, true).unwrap();
        assert_eq!(each.len(), 4);
        assert_eq!(each[0].as_ref().unwrap().body, b"fine");
        let bad = each[1].as_ref().unwrap_err();
        assert_eq!(bad.message.body, b"not lz4", "kept as stored");
        assert_eq!(bad.message.commit_log_offset, good.len() as i64);
        assert!(matches!(bad.error, PulledError::Inflate(_)));
        let unknown = each[2].as_ref().unwrap_err();
        assert_eq!(unknown.error, PulledError::UnsupportedCompression(0x500));
        assert_eq!(each[3].as_ref().unwrap().body, b"after");
        assert!(
            decode_pulled(&body, true).is_err(),
            "the strict form fails the body"
        );
    }
}
