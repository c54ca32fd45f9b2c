//! Body compression (§4.7): zlib (RFC 1950, what `java.util.zip.Deflater` writes), level 5,
//! for single bodies of 4 KiB or more. Inflation is bounded: a small compressed body must
//! not become gigabytes in memory.

use std::io::{Read, Write};

/// Java's `compressMsgBodyOverHowmuch`: bodies at least this long are compressed.
pub const COMPRESS_OVER_BYTES: usize = 4096;
/// Largest body inflation may produce (the broker's max message size is 4 MiB; allow room).
pub const MAX_INFLATED_BYTES: usize = 64 * 1024 * 1024;

/// Compresses `body` with zlib level 5 if it is at least [`COMPRESS_OVER_BYTES`] long.
/// Returns `None` when the body should be sent as is.
pub fn compress_body(body: &[u8]) -> Option<Vec<u8>> {
    if body.len() < COMPRESS_OVER_BYTES {
        return None;
    }
    let mut enc = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(body.len() / 2),
        flate2::Compression::new(5),
    );
    enc.write_all(body).ok()?;
    enc.finish().ok()
}

/// Inflates a zlib body, failing if it is malformed or larger than `max_bytes`.
pub fn inflate_body(compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, &'static str> {
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(compressed)
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| "body is not valid zlib")?;
    if out.len() > max_bytes {
        return Err("inflated body too large");
    }
    Ok(out)
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
    }
}
