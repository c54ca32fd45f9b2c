//! Message ids: the broker's offset msgId (§5.1) and the client's UNIQ_KEY (§5.2).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a msgId could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageIdError {
    /// Not 32 or 56 characters.
    BadLength(usize),
    /// Not hexadecimal.
    NotHex,
}

impl std::fmt::Display for MessageIdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadLength(n) => write!(f, "message id has {n} characters, expected 32 or 56"),
            Self::NotHex => write!(f, "message id is not hexadecimal"),
        }
    }
}

impl std::error::Error for MessageIdError {}

/// A decoded offset msgId: where the message is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetMessageId {
    /// Storing broker's `ip:port` (clients dial it for VIEW_MESSAGE_BY_ID).
    pub store_host: SocketAddr,
    /// Commit-log offset of the record.
    pub commit_log_offset: i64,
}

/// The offset msgId of a record stored at `commit_log_offset` by `store_host`:
/// ip (4|16) + port (4) + offset (8) as uppercase hex.
pub fn offset_msg_id(store_host: SocketAddr, commit_log_offset: i64) -> String {
    let mut bytes = Vec::with_capacity(28);
    match store_host.ip() {
        IpAddr::V4(ip) => bytes.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => bytes.extend_from_slice(&ip.octets()),
    }
    bytes.extend_from_slice(&u32::from(store_host.port()).to_be_bytes());
    bytes.extend_from_slice(&commit_log_offset.to_be_bytes());
    hex_upper(&bytes)
}

/// Decodes an offset msgId (32 hex chars ⇒ IPv4, 56 ⇒ IPv6).
pub fn decode_offset_msg_id(id: &str) -> Result<OffsetMessageId, MessageIdError> {
    let bytes = unhex(id)?;
    let ip_len = match bytes.len() {
        16 => 4,
        28 => 16,
        _ => return Err(MessageIdError::BadLength(id.len())),
    };
    let ip = match ip_len {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        _ => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&bytes[..16]);
            IpAddr::V6(Ipv6Addr::from(a))
        }
    };
    let port = u32::from_be_bytes([
        bytes[ip_len],
        bytes[ip_len + 1],
        bytes[ip_len + 2],
        bytes[ip_len + 3],
    ]);
    let mut off = [0u8; 8];
    off.copy_from_slice(&bytes[ip_len + 4..ip_len + 12]);
    Ok(OffsetMessageId {
        // Java writes the port as an int; only the low 16 bits can be a real port.
        store_host: SocketAddr::new(ip, port as u16),
        commit_log_offset: i64::from_be_bytes(off),
    })
}

/// Upper-case hex of `bytes`. Every message id passes through here (a batch answer joins
/// 32 of them), so it is a table lookup rather than `fmt`.
fn hex_upper(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex_upper(&mut s, bytes);
    s
}

/// Appends `bytes` to `out` as uppercase hex.
fn push_hex_upper(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, MessageIdError> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return Err(MessageIdError::BadLength(s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(MessageIdError::NotHex)
        })
        .collect()
}

/// Generates UNIQ_KEY ids like `MessageClientIDSetter`: ip + pid + "class-loader hash" +
/// ms since the start of the month + counter, as uppercase hex.
///
/// Java uses local time for the month start; we use UTC (no time-zone database here). The
/// id only has to be unique, and the time part is only a hint for admin tools.
#[derive(Debug)]
pub struct UniqIdGenerator {
    prefix: String,
    counter: AtomicU16,
}

impl UniqIdGenerator {
    /// A generator for a client at `ip`; `instance_hash` stands in for Java's class-loader hash.
    pub fn new(ip: IpAddr, instance_hash: i32) -> Self {
        let mut fixed = Vec::with_capacity(22);
        match ip {
            IpAddr::V4(ip) => fixed.extend_from_slice(&ip.octets()),
            IpAddr::V6(ip) => fixed.extend_from_slice(&ip.octets()),
        }
        fixed.extend_from_slice(&(std::process::id() as u16).to_be_bytes());
        fixed.extend_from_slice(&instance_hash.to_be_bytes());
        Self {
            prefix: hex_upper(&fixed),
            counter: AtomicU16::new(0),
        }
    }

    /// The next id.
    pub fn next_id(&self) -> String {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let since_month = (now_ms - month_start_utc_ms(now_ms)) as i32;
        let counter = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut tail = [0u8; 6];
        tail[..4].copy_from_slice(&since_month.to_be_bytes());
        tail[4..].copy_from_slice(&counter.to_be_bytes());
        // Built in one string: one allocation a message, where `format!` took two.
        let mut id = String::with_capacity(self.prefix.len() + 2 * tail.len());
        id.push_str(&self.prefix);
        push_hex_upper(&mut id, &tail);
        id
    }
}

/// Start of the UTC month containing `ms`.
fn month_start_utc_ms(ms: i64) -> i64 {
    let days = ms.div_euclid(86_400_000);
    let (_, _, day_of_month) = crate::calendar::civil_from_days(days);
    (days - (day_of_month - 1)) * 86_400_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_msg_id_round_trips_v4_and_v6() {
        let v4: SocketAddr = "10.1.2.3:10911".parse().unwrap();
        let id = offset_msg_id(v4, 0x1234);
        assert_eq!(id, "0A01020300002A9F0000000000001234");
        let back = decode_offset_msg_id(&id).unwrap();
        assert_eq!((back.store_host, back.commit_log_offset), (v4, 0x1234));
        let v6: SocketAddr = "[::1]:10911".parse().unwrap();
        let id6 = offset_msg_id(v6, 9);
        assert_eq!(id6.len(), 56);
        assert_eq!(decode_offset_msg_id(&id6).unwrap().store_host, v6);
    }

    #[test]
    fn bad_msg_ids_are_errors() {
        assert!(decode_offset_msg_id("XYZ").is_err());
        assert!(decode_offset_msg_id(&"G".repeat(32)).is_err());
        assert!(decode_offset_msg_id("é".repeat(16).as_str()).is_err());
    }

    #[test]
    fn uniq_ids_are_32_hex_chars_and_distinct() {
        let g = UniqIdGenerator::new("127.0.0.1".parse().unwrap(), 42);
        let (a, b) = (g.next_id(), g.next_id());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.starts_with("7F000001"));
    }

    #[test]
    fn month_start_is_the_first_at_midnight() {
        // 2024-03-15T12:00:00Z -> 2024-03-01T00:00:00Z
        assert_eq!(month_start_utc_ms(1_710_504_000_000), 1_709_251_200_000);
    }
}
