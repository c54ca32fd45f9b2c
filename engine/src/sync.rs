//! Syncing a file's data, with an optional injected failure for process tests.
//!
//! Every data sync the broker makes outside the engine (group commit, checkpoint) goes
//! through [`fdatasync`], so a test can make one fail the way a disk's write-back error
//! does and check that nothing it covered is ever called durable. The variable
//! `TERN_INJECT_FLUSH_FAILURE=N` makes the N-th call (counting from 1) of this process
//! fail once with EIO without syncing; every other call syncs. Unset, it costs one
//! relaxed load.

use std::fs::File;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the call to fail.
pub const INJECT_FLUSH_FAILURE: &str = "TERN_INJECT_FLUSH_FAILURE";

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
    let at = fail_at();
    if at != 0 && CALLS.fetch_add(1, Ordering::Relaxed) + 1 == at {
        log::warn!("{INJECT_FLUSH_FAILURE}={at}: failing this fdatasync with EIO");
        return Err(rustix::io::Errno::IO);
    }
    rustix::fs::fdatasync(file)
}
