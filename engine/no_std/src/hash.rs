//! The hashes RocketMQ computes in Java, reproduced bit for bit.

/// Java's `String.hashCode()`: `h = 31*h + c` over UTF-16 code units, wrapping at 32 bits.
///
/// Tag codes in consume queues and index keys must match what Java brokers and clients
/// compute, or filters and lookups silently miss.
pub fn java_string_hash(s: &str) -> i32 {
    java_hash_continue(0, s)
}

/// Continues a [`java_string_hash`] over `s`, so a key made of parts (`topic#key`) hashes
/// without being concatenated.
pub fn java_hash_continue(mut h: i32, s: &str) -> i32 {
    for unit in s.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    h
}

/// The index's key hash: `abs(hashCode)`, with `i32::MIN` mapped to 0 as RocketMQ does.
pub fn index_key_hash(parts: &[&str]) -> i32 {
    let h = parts.iter().fold(0, |h, p| java_hash_continue(h, p));
    if h == i32::MIN { 0 } else { h.abs() }
}

/// CRC32 (IEEE) masked to 31 bits: RocketMQ's `UtilAll.crc32`, used for record bodies and
/// for the name server's `bodyCrc32`.
pub fn body_crc(bytes: &[u8]) -> i32 {
    (crc32fast::hash(bytes) & 0x7FFF_FFFF) as i32
}

/// The CRC32 (IEEE) a checkpoint page's layout ends with: over every byte before its last
/// four, which hold it big-endian. Both checkpoints (the store's and the timer's) use it.
pub fn page_crc(layout: &[u8]) -> u32 {
    crc32fast::hash(&layout[..layout.len() - 4])
}

/// A checkpoint layout's bytes with its last four set to its [`page_crc`].
pub fn sealed<const N: usize>(layout: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(layout);
    let crc = page_crc(&out);
    out[N - 4..].copy_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_known_values() {
        // Values from Java: "TagA".hashCode() == 2598919, "".hashCode() == 0.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        // Non-BMP: hashed as two UTF-16 surrogates.
        assert_eq!(java_string_hash("😀"), 1_772_899);
        // Overflow wraps.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn index_hash_is_abs_and_maps_min_to_zero() {
        assert_eq!(index_key_hash(&["polygenelubricants"]), 0);
        assert_eq!(
            index_key_hash(&["t", "#", "k"]),
            java_string_hash("t#k").abs()
        );
    }

    #[test]
    fn body_crc_is_masked() {
        assert_eq!(
            body_crc(b"123456789"),
            (0xCBF4_3926u32 & 0x7FFF_FFFF) as i32
        );
    }
}
