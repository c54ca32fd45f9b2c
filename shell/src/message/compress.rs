//! Body compression (§4.7). RocketMQ 4.x knows only zlib (RFC 1950, what
//! `java.util.zip.Deflater` writes); 5.x adds LZ4 (the LZ4 frame format, as lz4-java's
//! `LZ4FrameOutputStream` writes) and ZSTD (a zstd frame), named by sysFlag bits 8-10
//! beside the compressed bit. Single bodies of 4 KiB or more are compressed. Inflation is
//! bounded: a small compressed body must not become gigabytes in memory.

use std::io::{Read, Write};

use super::SYSFLAG_COMPRESSED;

/// Java's `compressMsgBodyOverHowmuch`: bodies at least this long are compressed.
pub const COMPRESS_OVER_BYTES: usize = 4096;
/// Largest body inflation may produce (the broker's max message size is 4 MiB; allow room).
pub const MAX_INFLATED_BYTES: usize = 64 * 1024 * 1024;
/// RocketMQ's `compressLevel` default (`rocketmq.message.compressLevel`).
pub const DEFAULT_COMPRESS_LEVEL: i32 = 5;

/// sysFlag mask of the 5.x compression type (`COMPRESSION_TYPE_COMPARATOR`).
pub const SYSFLAG_COMPRESSION_TYPE_MASK: i32 = 0x7 << 8;
/// 5.x compression type LZ4.
pub const SYSFLAG_COMPRESSION_LZ4: i32 = 0x1 << 8;
/// 5.x compression type ZSTD.
pub const SYSFLAG_COMPRESSION_ZSTD: i32 = 0x2 << 8;
/// 5.x compression type zlib (a compressed body without type bits is zlib too).
pub const SYSFLAG_COMPRESSION_ZLIB: i32 = 0x3 << 8;

/// A body compression algorithm, as RocketMQ 5's `CompressionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// zlib (the default, and the only one 4.x clients read).
    #[default]
    Zlib,
    /// LZ4 frames.
    Lz4,
    /// Zstandard frames.
    Zstd,
}

impl Compression {
    /// The algorithm a stored sysFlag names: `Ok(None)` for a body not compressed,
    /// `Err(bits)` for type bits no RocketMQ version defines.
    pub fn of_sys_flag(sys_flag: i32) -> Result<Option<Compression>, i32> {
        if sys_flag & SYSFLAG_COMPRESSED == 0 {
            return Ok(None);
        }
        match sys_flag & SYSFLAG_COMPRESSION_TYPE_MASK {
            // Compressed without type bits: 4.x, zlib.
            0 | SYSFLAG_COMPRESSION_ZLIB => Ok(Some(Compression::Zlib)),
            SYSFLAG_COMPRESSION_LZ4 => Ok(Some(Compression::Lz4)),
            SYSFLAG_COMPRESSION_ZSTD => Ok(Some(Compression::Zstd)),
            other => Err(other),
        }
    }

    /// The sysFlag bits a producer sets for a body compressed this way. zlib keeps the
    /// 4.x form (no type bits), which every consumer reads.
    pub fn sys_flag(self) -> i32 {
        match self {
            Compression::Zlib => SYSFLAG_COMPRESSED,
            Compression::Lz4 => SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_LZ4,
            Compression::Zstd => SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZSTD,
        }
    }

    /// RocketMQ's name (`ZLIB`, `LZ4`, `ZSTD`), as its `compressType` setting spells it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Zlib => "ZLIB",
            Compression::Lz4 => "LZ4",
            Compression::Zstd => "ZSTD",
        }
    }

    /// Parses RocketMQ's name, any case.
    pub fn from_name(s: &str) -> Option<Compression> {
        [Compression::Zlib, Compression::Lz4, Compression::Zstd]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Compresses `body` at `level` (zlib 0-9 and zstd 1-22 use it, LZ4 ignores it as
    /// RocketMQ's does); `None` if the encoder failed.
    pub fn compress(self, body: &[u8], level: i32) -> Option<Vec<u8>> {
        let out = Vec::with_capacity(body.len() / 2);
        match self {
            Compression::Zlib => {
                let level = flate2::Compression::new(level.clamp(0, 9) as u32);
                let mut enc = flate2::write::ZlibEncoder::new(out, level);
                enc.write_all(body).ok()?;
                enc.finish().ok()
            }
            Compression::Lz4 => {
                let mut enc = lz4_flex::frame::FrameEncoder::new(out);
                enc.write_all(body).ok()?;
                enc.finish().ok()
            }
            Compression::Zstd => zstd::stream::encode_all(body, level.clamp(1, 22)).ok(),
        }
    }

    /// Decompresses `compressed`, failing if it is malformed or larger than `max_bytes`.
    pub fn decompress(self, compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, &'static str> {
        let limit = max_bytes as u64 + 1;
        let mut out = Vec::new();
        let read = match self {
            Compression::Zlib => flate2::read::ZlibDecoder::new(compressed)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|_| "body is not valid zlib"),
            // The decoder takes a frame cut short at a block boundary, or an empty input,
            // for a whole one: the framing is checked first.
            Compression::Lz4 if !lz4_frames_are_whole(compressed) => {
                Err("body is not a valid LZ4 frame")
            }
            Compression::Lz4 => lz4_flex::frame::FrameDecoder::new(compressed)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|_| "body is not a valid LZ4 frame"),
            Compression::Zstd => zstd::stream::read::Decoder::new(compressed)
                .map_err(|_| "body is not a valid zstd frame")?
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|_| "body is not a valid zstd frame"),
        };
        read?;
        if out.len() > max_bytes {
            return Err("inflated body too large");
        }
        Ok(out)
    }
}

/// Whether `b` is one or more whole LZ4 frames (magic, descriptor, blocks, end mark,
/// checksums as the descriptor's flags say) and nothing else. Block contents are left to
/// the decoder.
fn lz4_frames_are_whole(mut b: &[u8]) -> bool {
    const MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    fn frame(b: &mut &[u8]) -> Option<()> {
        (take(b, 4)? == MAGIC).then_some(())?;
        let flg = take(b, 2)?[0];
        let (block_sum, content_size, content_sum, dict) = (
            flg & 0x10 != 0,
            flg & 0x08 != 0,
            flg & 0x04 != 0,
            flg & 0x01 != 0,
        );
        take(b, 8 * usize::from(content_size) + 4 * usize::from(dict) + 1)?;
        // Each block is at least 4 bytes, so the input bounds the loop.
        loop {
            let size = u32::from_le_bytes(take(b, 4)?.try_into().ok()?);
            if size == 0 {
                break;
            }
            let len = (size & 0x7fff_ffff) as usize + 4 * usize::from(block_sum);
            take(b, len)?;
        }
        take(b, 4 * usize::from(content_sum))?;
        Some(())
    }
    if b.is_empty() {
        return false;
    }
    while !b.is_empty() {
        if frame(&mut b).is_none() {
            return false;
        }
    }
    true
}

/// Compresses `body` with zlib level 5 if it is at least [`COMPRESS_OVER_BYTES`] long.
/// Returns `None` when the body should be sent as is.
pub fn compress_body(body: &[u8]) -> Option<Vec<u8>> {
    if body.len() < COMPRESS_OVER_BYTES {
        return None;
    }
    Compression::Zlib.compress(body, DEFAULT_COMPRESS_LEVEL)
}

/// Inflates a zlib body, failing if it is malformed or larger than `max_bytes`.
pub fn inflate_body(compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, &'static str> {
    Compression::Zlib.decompress(compressed, max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_stay_uncompressed() {
        assert_eq!(compress_body(&[1u8; 4095]), None);
    }

    #[test]
    fn large_bodies_compress_to_zlib_and_inflate_back() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let c = compress_body(&body).unwrap();
        assert_eq!(c[0], 0x78, "zlib header");
        assert!(c.len() < body.len());
        assert_eq!(inflate_body(&c, MAX_INFLATED_BYTES).unwrap(), body);
    }

    #[test]
    fn inflation_is_bounded() {
        let c = compress_body(&vec![0u8; 100_000]).unwrap();
        assert_eq!(inflate_body(&c, 1000), Err("inflated body too large"));
        assert!(inflate_body(b"junk", 1000).is_err());
        for kind in [Compression::Lz4, Compression::Zstd] {
            let c = kind.compress(&vec![0u8; 100_000], 3).unwrap();
            assert_eq!(kind.decompress(&c, 1000), Err("inflated body too large"));
            assert!(kind.decompress(b"junk", 1000).is_err(), "{kind:?}");
            // Cut anywhere, even at a block boundary or before the end mark: an error,
            // never a shorter body.
            for cut in 0..c.len() {
                assert!(
                    kind.decompress(&c[..cut], 1 << 20).is_err(),
                    "{kind:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn lz4_and_zstd_write_their_standard_frames_and_read_them_back() {
        let body: Vec<u8> = (0..10_000u32).map(|i| (i % 13) as u8).collect();
        let lz4 = Compression::Lz4.compress(&body, 5).unwrap();
        // The LZ4 frame magic 0x184D2204, little-endian (what lz4-java's frame stream and
        // the `lz4` tool write).
        assert_eq!(lz4[..4], [0x04, 0x22, 0x4d, 0x18]);
        let zstd = Compression::Zstd.compress(&body, 5).unwrap();
        assert_eq!(zstd[..4], [0x28, 0xb5, 0x2f, 0xfd], "zstd frame magic");
        for (kind, c) in [(Compression::Lz4, lz4), (Compression::Zstd, zstd)] {
            assert!(c.len() < body.len());
            assert_eq!(kind.decompress(&c, MAX_INFLATED_BYTES).unwrap(), body);
        }
    }

    #[test]
    fn sys_flag_bits_are_rocketmq_5s() {
        assert_eq!(Compression::of_sys_flag(0), Ok(None));
        assert_eq!(Compression::of_sys_flag(0x1), Ok(Some(Compression::Zlib)));
        assert_eq!(Compression::of_sys_flag(0x301), Ok(Some(Compression::Zlib)));
        assert_eq!(Compression::of_sys_flag(0x101), Ok(Some(Compression::Lz4)));
        assert_eq!(Compression::of_sys_flag(0x201), Ok(Some(Compression::Zstd)));
        assert_eq!(Compression::of_sys_flag(0x401), Err(0x400));
        // Type bits without the compressed bit: not compressed (RocketMQ checks the bit).
        assert_eq!(Compression::of_sys_flag(0x100), Ok(None));
        for c in [Compression::Zlib, Compression::Lz4, Compression::Zstd] {
            assert_eq!(Compression::of_sys_flag(c.sys_flag()), Ok(Some(c)));
            assert_eq!(Compression::from_name(&c.name().to_lowercase()), Some(c));
        }
        assert_eq!(Compression::from_name("snappy"), None);
    }
}
