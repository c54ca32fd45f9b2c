//! The ROCKETMQ binary header (§1.4).

use crate::code::LanguageCode;
use crate::frame::{ExtFields, FrameError, RemotingCommand, SerializeType};

/// Size of the binary header's fixed part: code 2, language 1, version 2, opaque 4, flag 4,
/// remark length 4, ext length 4.
const BINARY_FIXED_BYTES: usize = 21;

/// Writes the ROCKETMQ binary header.
pub fn encode_binary_header(cmd: &RemotingCommand) -> Result<Vec<u8>, FrameError> {
    let code = i16::try_from(cmd.code)
        .map_err(|_| FrameError::Unrepresentable("code does not fit in 16 bits"))?;
    let version = i16::try_from(cmd.version)
        .map_err(|_| FrameError::Unrepresentable("version does not fit in 16 bits"))?;
    let mut ext = Vec::new();
    for (k, v) in &cmd.ext_fields {
        let kl = u16::try_from(k.len())
            .map_err(|_| FrameError::Unrepresentable("extFields key longer than 64 KiB"))?;
        let vl = i32::try_from(v.len())
            .map_err(|_| FrameError::Unrepresentable("extFields value too long"))?;
        ext.extend_from_slice(&kl.to_be_bytes());
        ext.extend_from_slice(k.as_bytes());
        ext.extend_from_slice(&vl.to_be_bytes());
        ext.extend_from_slice(v.as_bytes());
    }
    let remark = cmd.remark.as_deref().unwrap_or("").as_bytes();
    let remark_len =
        i32::try_from(remark.len()).map_err(|_| FrameError::Unrepresentable("remark too long"))?;
    let ext_len =
        i32::try_from(ext.len()).map_err(|_| FrameError::Unrepresentable("extFields too long"))?;
    let mut out = Vec::with_capacity(BINARY_FIXED_BYTES + remark.len() + ext.len());
    out.extend_from_slice(&code.to_be_bytes());
    out.push(cmd.language.raw());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&cmd.opaque.to_be_bytes());
    out.extend_from_slice(&cmd.flag.to_be_bytes());
    out.extend_from_slice(&remark_len.to_be_bytes());
    out.extend_from_slice(remark);
    out.extend_from_slice(&ext_len.to_be_bytes());
    out.extend_from_slice(&ext);
    Ok(out)
}

/// A bounds-checked reader over peer bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if n > self.buf.len() {
            return Err(FrameError::BadBinaryHeader("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FrameError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn len_i32(&mut self) -> Result<usize, FrameError> {
        let n = i32::from_be_bytes(self.array()?);
        usize::try_from(n).map_err(|_| FrameError::BadBinaryHeader("negative length"))
    }

    fn utf8(&mut self, n: usize) -> Result<&'a str, FrameError> {
        let bytes = self.take(n)?;
        std::str::from_utf8(bytes).map_err(|_| FrameError::BadBinaryHeader("string is not UTF-8"))
    }
}

/// Parses a ROCKETMQ binary header. Zero-length strings decode as absent, like Java's null.
pub fn decode_binary_header(header: &[u8]) -> Result<RemotingCommand, FrameError> {
    let mut r = Reader { buf: header };
    let code = i16::from_be_bytes(r.array()?);
    let language = r.array::<1>()?[0];
    let version = i16::from_be_bytes(r.array()?);
    let opaque = i32::from_be_bytes(r.array()?);
    let flag = i32::from_be_bytes(r.array()?);
    let remark_len = r.len_i32()?;
    let remark = if remark_len == 0 {
        None
    } else {
        Some(r.utf8(remark_len)?.to_owned())
    };
    let ext_len = r.len_i32()?;
    let mut ext = Reader {
        buf: r.take(ext_len)?,
    };
    let mut read = Vec::new();
    while !ext.buf.is_empty() {
        let kl = usize::from(u16::from_be_bytes(ext.array()?));
        let key = ext.utf8(kl)?;
        let vl = ext.len_i32()?;
        let value = ext.utf8(vl)?;
        if !key.is_empty() && !value.is_empty() {
            read.push((key.into(), Some(value.into())));
        }
    }
    let ext_fields = ExtFields::from_wire(read);
    Ok(RemotingCommand {
        code: i32::from(code),
        language: LanguageCode::from_raw(language),
        version: i32::from(version),
        opaque,
        flag,
        remark,
        ext_fields,
        body: Vec::new(),
        serialize_type: SerializeType::RocketMq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;

    #[test]
    fn binary_header_rejects_truncation_and_negative_lengths() {
        let cmd = RemotingCommand::request_code(RequestCode::HeartBeat).with_ext("k", "v");
        let bytes = encode_binary_header(&cmd).unwrap();
        for cut in 0..bytes.len() {
            assert!(decode_binary_header(&bytes[..cut]).is_err());
        }
        let mut neg = bytes.clone();
        neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            decode_binary_header(&neg).unwrap_err(),
            FrameError::BadBinaryHeader("negative length")
        );
    }

    #[test]
    fn binary_header_cannot_carry_codes_beyond_i16() {
        let cmd = RemotingCommand::request_code(RequestCode::Other(40000));
        assert!(encode_binary_header(&cmd).is_err());
    }
}
