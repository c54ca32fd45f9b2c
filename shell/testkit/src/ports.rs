//! Free TCP ports on 127.0.0.1 for processes that must be told their address up front.

use std::net::TcpListener;

/// `n` distinct loopback ports free right now (bound together, then released). A port
/// from the kernel's ephemeral range: another bind(0) may take it before the process it
/// is meant for binds it, so for a process that must come back at the same address use
/// [`restartable_port`].
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// One loopback port free right now (bound, then released): also a port with nothing
/// listening on it.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// A free TCP port for a process that must come back at the same address after a
/// restart, so it cannot simply bind port 0.
///
/// Taken from below the kernel's ephemeral range: a port released there is never
/// handed out again by a `bind(0)` or an outgoing connection's source port, so the only
/// other takers are tests choosing the same way, and each test process starts its walk
/// at its own pid-derived offset. (A port from the ephemeral range raced: another test's
/// connection took it between our check and the broker's bind.) Ports come in blocks of
/// eight because a broker on port P also binds P - 2 (the VIP channel) and P + 1 (HA).
pub fn restartable_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const BLOCK: u32 = 8;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = ephemeral_low().clamp(12_000, 65_535);
    let base = 10_000_u32;
    let blocks = (low - base) / BLOCK;
    let start = std::process::id().wrapping_mul(7919) % blocks;
    let free = |p: u32| TcpListener::bind(("127.0.0.1", p as u16)).is_ok();
    // Bounded: a whole walk of the range finds nothing only if every block is taken.
    for _ in 0..blocks {
        let block = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % blocks;
        let port = base + block * BLOCK + 4;
        if free(port - 2) && free(port) && free(port + 1) {
            return port as u16;
        }
    }
    panic!("no free port below the ephemeral range ({low})");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}
