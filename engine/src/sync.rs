//! Syncing a file's data, with an optional injected failure for process tests.
//!
//! Every data sync the broker makes outside the engine (group commit, checkpoint) goes
//! through [`fdatasync`], so a test can make one fail the way a disk's write-back error
//! does and check that nothing it covered is ever called durable. The variable
//! `TERN_INJECT_FLUSH_FAILURE=N` makes the N-th call (counting from 1) of this process
//! fail once with EIO without syncing; every other call syncs.
//! `TERN_INJECT_FLUSH_STALL=N:MS` makes the N-th and every later call sleep MS
//! milliseconds before it syncs (a disk that has become very slow). Unset, each costs one load.

use std::fs::File;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the call to fail.
pub const INJECT_FLUSH_FAILURE: &str = "TERN_INJECT_FLUSH_FAILURE";

/// The environment variable naming the call to stall and for how long (`N:MS`).
pub const INJECT_FLUSH_STALL: &str = "TERN_INJECT_FLUSH_STALL";

fn stall_at() -> (u64, u64) {
    static AT: OnceLock<(u64, u64)> = OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var(INJECT_FLUSH_STALL)
            .ok()
            .and_then(|v| {
                let (n, ms) = v.trim().split_once(':')?;
                Some((n.parse().ok()?, ms.parse().ok()?))
            })
            .unwrap_or((0, 0))
    })
}

fn fail_at() -> u64 {
    static AT: OnceLock<u64> = OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var(INJECT_FLUSH_FAILURE)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// `fdatasync(file)`, or the injected failure.
pub fn fdatasync(file: &File) -> Result<(), rustix::io::Errno> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let (at, (stall, stall_ms)) = (fail_at(), stall_at());
    if at == 0 && stall == 0 {
        return rustix::fs::fdatasync(file);
    }
    let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    if stall != 0 && call >= stall {
        log::warn!("{INJECT_FLUSH_STALL}={stall}:{stall_ms}: stalling this fdatasync");
        std::thread::sleep(std::time::Duration::from_millis(stall_ms));
    }
    if call == at {
        log::warn!("{INJECT_FLUSH_FAILURE}={at}: failing this fdatasync with EIO");
        return Err(rustix::io::Errno::IO);
    }
    rustix::fs::fdatasync(file)
}
