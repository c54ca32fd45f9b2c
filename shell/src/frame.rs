//! The remoting frame: `length | headerMark | header | body` and the command it carries.
//!
//! `length` counts everything after itself; the high byte of `headerMark` is the serialize
//! type and the low 24 bits the header length (wire-protocol.md §1.2). Every length read
//! from the peer is checked against [`FrameLimits`] before anything is allocated for it.

use std::fmt;

use crate::code::{LanguageCode, RequestCode, ResponseCode, version};
use crate::ext_fields::CompactString;
use crate::headers::{FromExtFields, HeaderError, ToExtFields};
use crate::serialize;

pub use crate::ext_fields::ExtFields;

/// Flag bit 0: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// Flag bit 1: the sender expects no answer (not even an error).
pub const FLAG_ONEWAY: i32 = 0x2;

/// How the header is encoded; the high byte of `headerMark`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// fastjson text; the only form the C++ client reads.
    #[default]
    Json,
    /// RocketMQ's compact binary header (§1.4).
    RocketMq,
}

impl SerializeType {
    /// The type byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            Self::Json => 0,
            Self::RocketMq => 1,
        }
    }

    /// Parses the type byte; anything but 0/1 is a protocol error.
    pub fn from_byte(b: u8) -> Result<Self, FrameError> {
        match b {
            0 => Ok(Self::Json),
            1 => Ok(Self::RocketMq),
            other => Err(FrameError::UnknownSerializeType(other)),
        }
    }
}

/// Size bounds applied to peer input before allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Whole frame including the 4-byte length prefix (Java's `frameMaxLength`).
    pub max_frame_bytes: u32,
    /// Header bytes (JSON text or binary header).
    pub max_header_bytes: u32,
    /// Body bytes.
    pub max_body_bytes: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 16 * 1024 * 1024,
            max_header_bytes: 1024 * 1024,
            max_body_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Why a frame could not be decoded or encoded. A decode error closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A length field exceeds its limit.
    TooLarge {
        /// Which part: "frame", "header", "body".
        what: &'static str,
        /// The length the peer claimed (or we would write).
        len: u64,
        /// The limit in force.
        max: u64,
    },
    /// A length is inconsistent with the bytes it describes.
    BadLength(&'static str),
    /// The serialize-type byte is neither JSON nor ROCKETMQ.
    UnknownSerializeType(u8),
    /// The JSON header is not valid or lacks a required member.
    BadJsonHeader(String),
    /// The binary header is malformed.
    BadBinaryHeader(&'static str),
    /// A value cannot be represented in the chosen encoding (e.g. code > i16 in ROCKETMQ).
    Unrepresentable(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { what, len, max } => write!(f, "{what} too large: {len} > {max}"),
            Self::BadLength(what) => write!(f, "bad length: {what}"),
            Self::UnknownSerializeType(b) => write!(f, "unknown serialize type {b}"),
            Self::BadJsonHeader(e) => write!(f, "bad JSON header: {e}"),
            Self::BadBinaryHeader(e) => write!(f, "bad ROCKETMQ header: {e}"),
            Self::Unrepresentable(e) => write!(f, "cannot encode: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// One remoting command, request or response, as it travels in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotingCommand {
    /// Request code for requests, response code for responses (raw so unknown codes survive).
    pub code: i32,
    /// Sender's language; we send JAVA so every client accepts it (pitfall §7.9).
    pub language: LanguageCode,
    /// Sender's `MQVersion` ordinal; decides route-data key quoting etc.
    pub version: i32,
    /// Request id; a response carries its request's value.
    pub opaque: i32,
    /// Bit 0 response, bit 1 oneway.
    pub flag: i32,
    /// Error text; `None` is omitted on the wire.
    pub remark: Option<String>,
    /// The custom header, string → string.
    pub ext_fields: ExtFields,
    /// Opaque payload (JSON body, message body, stored records...).
    pub body: Vec<u8>,
    /// Header encoding; a response uses its request's (the C++ client reads JSON only).
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// A request with `code` and the fields of `header`. The connection assigns `opaque`.
    pub fn request(code: RequestCode, header: &impl ToExtFields) -> Self {
        let mut cmd = Self::request_code(code);
        header.to_ext_fields(&mut cmd.ext_fields);
        cmd
    }

    /// A request without header fields (e.g. HEART_BEAT, GET_BROKER_CLUSTER_INFO).
    pub fn request_code(code: RequestCode) -> Self {
        Self {
            code: code.raw(),
            language: LanguageCode::Java,
            version: version::CURRENT,
            opaque: 0,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Vec::new(),
            serialize_type: SerializeType::Json,
        }
    }

    /// The response skeleton for `req`: same opaque and header encoding, response flag set.
    pub fn response_to(req: &RemotingCommand, code: ResponseCode) -> Self {
        Self {
            code: code.raw(),
            language: LanguageCode::Java,
            version: version::CURRENT,
            opaque: req.opaque,
            flag: FLAG_RESPONSE,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Vec::new(),
            serialize_type: req.serialize_type,
        }
    }

    /// An error response with a remark, the way Java reports failures.
    pub fn error_response(
        req: &RemotingCommand,
        code: ResponseCode,
        remark: impl Into<String>,
    ) -> Self {
        Self::response_to(req, code).with_remark(remark)
    }

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the remark.
    pub fn with_remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = Some(remark.into());
        self
    }

    /// Adds the fields of a typed header to extFields.
    pub fn with_header(mut self, header: &impl ToExtFields) -> Self {
        header.to_ext_fields(&mut self.ext_fields);
        self
    }

    /// Sets one extFields entry.
    pub fn with_ext(
        mut self,
        key: impl Into<CompactString>,
        value: impl Into<CompactString>,
    ) -> Self {
        self.ext_fields.insert(key, value);
        self
    }

    /// Marks the request oneway: the peer will not answer.
    pub fn oneway(mut self) -> Self {
        self.flag |= FLAG_ONEWAY;
        self
    }

    /// True for responses (flag bit 0).
    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    /// True for oneway requests (flag bit 1): never answer these.
    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// The code read as a request code.
    pub fn request_code_enum(&self) -> RequestCode {
        RequestCode::from_raw(self.code)
    }

    /// The code read as a response code.
    pub fn response_code(&self) -> ResponseCode {
        ResponseCode::from_raw(self.code)
    }

    /// Decodes extFields into a typed header.
    pub fn decode_header<H: FromExtFields>(&self) -> Result<H, HeaderError> {
        H::from_ext_fields(&self.ext_fields)
    }

    /// Encodes the whole frame, including the 4-byte length prefix.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let mut out = self.encode_head(self.body.len())?;
        out.extend_from_slice(&self.body);
        Ok(out)
    }

    /// Encodes the frame up to its body: length prefix, header mark and header, with
    /// room reserved for `reserve` more bytes. A writer can send a large body straight
    /// from where it lies instead of copying it behind the header.
    pub fn encode_head(&self, reserve: usize) -> Result<Vec<u8>, FrameError> {
        let mut out = Vec::new();
        self.append_head_reserving(&mut out, reserve)?;
        Ok(out)
    }

    /// Appends the frame up to its body to `out` (the body is for the caller to put
    /// behind it): the header is encoded in place, and several frames can share one
    /// buffer. On an error `out` is left as it was.
    pub fn append_head(&self, out: &mut Vec<u8>) -> Result<(), FrameError> {
        self.append_head_reserving(out, 0)
    }

    /// [`Self::append_head`], reserving room for `room` more bytes behind the head along
    /// with the head's own (one allocation for a frame whose body is copied behind it).
    fn append_head_reserving(&self, out: &mut Vec<u8>, room: usize) -> Result<(), FrameError> {
        let start = out.len();
        let written = self.write_head(out, start, room);
        if written.is_err() {
            out.truncate(start);
        }
        written
    }

    /// [`Self::append_head_reserving`]'s work, the frame starting at `start` of `out`; on
    /// an error the caller takes back what was written.
    fn write_head(&self, out: &mut Vec<u8>, start: usize, room: usize) -> Result<(), FrameError> {
        let header = match self.serialize_type {
            SerializeType::Json => serialize::json_header_size_hint(self),
            SerializeType::RocketMq => 0,
        };
        out.reserve(8 + header + room);
        // The length prefix and the header mark, filled in once the header's length is known.
        out.extend_from_slice(&[0; 8]);
        match self.serialize_type {
            SerializeType::Json => serialize::append_json_header(self, out),
            SerializeType::RocketMq => {
                out.extend_from_slice(&serialize::encode_binary_header(self)?)
            }
        }
        let (length, mark_len) = frame_lengths(out.len() - start - 8, self.body.len())?;
        let mark = (u32::from(self.serialize_type.byte()) << 24) | mark_len;
        out[start..start + 4].copy_from_slice(&length.to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&mark.to_be_bytes());
        Ok(())
    }

    /// Decodes one frame from the front of `buf` (length prefix included).
    /// `Ok(None)` means more bytes are needed; otherwise returns the command and the bytes used.
    pub fn decode(buf: &[u8], limits: &FrameLimits) -> Result<Option<(Self, usize)>, FrameError> {
        let Some(prefix) = buf.get(..4) else {
            return Ok(None);
        };
        let length = check_frame_length(be_u32(prefix), limits)?;
        let Some(payload) = buf.get(4..4 + length as usize) else {
            return Ok(None);
        };
        let cmd = Self::decode_payload(payload, limits)?;
        Ok(Some((cmd, 4 + length as usize)))
    }

    /// Decodes the bytes after the length prefix (exactly `length` of them).
    pub fn decode_payload(payload: &[u8], limits: &FrameLimits) -> Result<Self, FrameError> {
        let (mut cmd, body_at) = Self::decode_head(payload, limits)?;
        cmd.body = payload.get(body_at..).unwrap_or(&[]).to_vec();
        Ok(cmd)
    }

    /// Decodes a frame read in its parts: the header mark, the header, and the body,
    /// which becomes the command's own. The reader asks [`body_offset`] how long the
    /// header is, so no part is copied out of another.
    pub fn decode_parts(
        mark: u32,
        header: &[u8],
        body: Vec<u8>,
        limits: &FrameLimits,
    ) -> Result<Self, FrameError> {
        if body_offset(mark, 4 + header.len() + body.len(), limits)? != 4 + header.len() {
            return Err(FrameError::BadLength("header length differs from its mark"));
        }
        let mut cmd = Self::decode_header_bytes(mark, header)?;
        cmd.body = body;
        Ok(cmd)
    }

    /// Decodes the header mark and header; returns the command without its body and
    /// where the body starts.
    fn decode_head(payload: &[u8], limits: &FrameLimits) -> Result<(Self, usize), FrameError> {
        let mark = payload
            .get(..4)
            .map(be_u32)
            .ok_or(FrameError::BadLength("frame shorter than its header mark"))?;
        let body_at = body_offset(mark, payload.len(), limits)?;
        Ok((
            Self::decode_header_bytes(mark, &payload[4..body_at])?,
            body_at,
        ))
    }

    /// The command a header decodes to, serialized as `mark` says; `mark` was checked
    /// by [`body_offset`].
    fn decode_header_bytes(mark: u32, header: &[u8]) -> Result<Self, FrameError> {
        let serialize_type = SerializeType::from_byte((mark >> 24) as u8)?;
        let mut cmd = match serialize_type {
            SerializeType::Json => serialize::decode_json_header(header)?,
            SerializeType::RocketMq => serialize::decode_binary_header(header)?,
        };
        cmd.serialize_type = serialize_type;
        Ok(cmd)
    }
}

/// The length prefix of a frame with a header of `header_len` bytes and a body of
/// `body_len`, and the header length its mark carries (24 bits), when both fit.
fn frame_lengths(header_len: usize, body_len: usize) -> Result<(u32, u32), FrameError> {
    if header_len > 0x00FF_FFFF {
        return Err(FrameError::TooLarge {
            what: "header",
            len: header_len as u64,
            max: 0x00FF_FFFF,
        });
    }
    let length = 4u64 + header_len as u64 + body_len as u64;
    let length = u32::try_from(length)
        .ok()
        .filter(|l| *l <= i32::MAX as u32)
        .ok_or(FrameError::Unrepresentable("frame longer than 2 GiB"))?;
    Ok((length, header_len as u32))
}

/// Where the body starts in a frame of `length` bytes after its length prefix, from its
/// header `mark`: checks the serialization, and the header and the body against the
/// frame and `limits`, so a reader knows both fit before it reads either.
pub fn body_offset(mark: u32, length: usize, limits: &FrameLimits) -> Result<usize, FrameError> {
    SerializeType::from_byte((mark >> 24) as u8)?;
    let header_len = mark & 0x00FF_FFFF;
    if header_len > limits.max_header_bytes {
        return Err(FrameError::TooLarge {
            what: "header",
            len: u64::from(header_len),
            max: u64::from(limits.max_header_bytes),
        });
    }
    let body_at = 4 + header_len as usize;
    let Some(body_len) = length.checked_sub(body_at) else {
        return Err(FrameError::BadLength("header longer than frame"));
    };
    if body_len as u64 > u64::from(limits.max_body_bytes) {
        return Err(FrameError::TooLarge {
            what: "body",
            len: body_len as u64,
            max: u64::from(limits.max_body_bytes),
        });
    }
    Ok(body_at)
}

/// Checks a length prefix against the frame limit (Java compares prefix + 4) and returns it.
pub fn check_frame_length(length: u32, limits: &FrameLimits) -> Result<u32, FrameError> {
    if u64::from(length) + 4 > u64::from(limits.max_frame_bytes) {
        return Err(FrameError::TooLarge {
            what: "frame",
            len: u64::from(length) + 4,
            max: u64::from(limits.max_frame_bytes),
        });
    }
    if length < 4 {
        return Err(FrameError::BadLength("frame shorter than its header mark"));
    }
    Ok(length)
}

/// Reads a big-endian u32 from a slice the caller has sized to 4 bytes.
fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RemotingCommand {
        RemotingCommand::request_code(RequestCode::PullMessage)
            .with_ext("topic", "t")
            .with_ext("queueId", "3")
            .with_body(b"hello".to_vec())
    }

    #[test]
    fn json_frame_round_trips() {
        let cmd = sample().with_remark("r");
        let bytes = cmd.encode().unwrap();
        let (back, used) = RemotingCommand::decode(&bytes, &FrameLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(back, cmd);
    }

    #[test]
    fn binary_frame_round_trips() {
        let mut cmd = sample();
        cmd.serialize_type = SerializeType::RocketMq;
        let bytes = cmd.encode().unwrap();
        assert_eq!(bytes[4], 1, "type byte is the high byte of headerMark");
        let (back, _) = RemotingCommand::decode(&bytes, &FrameLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(back, cmd);
    }

    #[test]
    fn partial_frame_asks_for_more_bytes() {
        let bytes = sample().encode().unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(
                RemotingCommand::decode(&bytes[..cut], &FrameLimits::default()),
                Ok(None)
            );
        }
    }

    #[test]
    fn oversized_frame_is_rejected_before_reading_it() {
        let bytes = (16u32 * 1024 * 1024).to_be_bytes();
        let err = RemotingCommand::decode(&bytes, &FrameLimits::default()).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { what: "frame", .. }));
    }

    #[test]
    fn header_longer_than_frame_is_an_error() {
        let mut bytes = vec![0, 0, 0, 8, 0, 0, 0, 100];
        bytes.extend_from_slice(b"{}{}");
        let err = RemotingCommand::decode(&bytes, &FrameLimits::default()).unwrap_err();
        assert_eq!(err, FrameError::BadLength("header longer than frame"));
    }

    #[test]
    fn response_copies_opaque_and_encoding() {
        let mut req = sample();
        req.opaque = 77;
        req.serialize_type = SerializeType::RocketMq;
        let resp = RemotingCommand::response_to(&req, ResponseCode::Success);
        assert_eq!(resp.opaque, 77);
        assert!(resp.is_response());
        assert_eq!(resp.serialize_type, SerializeType::RocketMq);
    }
}
