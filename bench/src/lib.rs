//! Tern's benchmark harness: named scenarios, each measured beside a baseline in the same
//! run, printed as a markdown table and saved as CSV under `bench/results/`.
//!
//! Why beside a baseline: absolute numbers move with the machine, the disk and whatever
//! else runs on it; the ratio to the simplest thing that does the same job (a raw
//! `write()` of the same bytes) is what a change to the engine can be judged by. Each
//! scenario runs its case and its baseline interleaved, A/B, for a few rounds, so drift
//! during the run hits both.
//!
//! Scenarios:
//! - `engine` ([`engine`]): the storage engine's append rate, unflushed and with group
//!   commit, against raw `write()` and `write()` + `fdatasync`.
//! - `produce`, `e2e`, `backlog` ([`suite`]): a real `tern-broker` process driven by the
//!   Tern client, beside the peers measured in the same run (rocketmq-rust when installed
//!   with `--install-peers`, Redis streams and NATS JetStream when Debian's `redis-server`
//!   and `nats-server` are installed) and raw sequential `write()`; rows in [`table`],
//!   goals in [`goals`], plots in [`plot`].
//! - `stalls` ([`stalls`]): does one request wait on another's disk work? Sync senders
//!   on a quiet broker, then beside key queries, SQL92 consumers and a cold catch-up.
//! - `edge` ([`edge`]): sends through a `tern-edge` gateway to a central broker, beside
//!   the same sends straight to the central broker: rate through and delay to the
//!   central consumer, natively or with the gateway under qemu-user.
//! - `timer` ([`timer`]): timer messages' lateness beside plain messages' delivery in
//!   the same run; a wheel of pending timers: RSS, disk and start-up times.
//! - `tls` ([`tls`]): sync sends in plaintext and over TLS to one permissive broker,
//!   alternated in the same run.

pub mod consume;
pub mod edge;
pub mod engine;
pub mod goals;
pub mod grpc;
pub mod load;
pub mod nats_peer;
pub mod plot;
pub mod proc;
pub mod redis_peer;
pub mod report;
pub mod rocketmq_peer;
pub mod stalls;
pub mod suite;
pub mod table;
pub mod timer;
pub mod tls;

use std::path::{Path, PathBuf};

/// Where a run keeps its data when `--dir` is not given: beside the binary in the
/// target dir (`target/tern-bench-data`), which is on the disk the project builds on and
/// is already ignored by git; the system temp dir when the binary is not in a target dir.
pub fn default_data_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let target = exe
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .filter(|p| p.join("CACHEDIR.TAG").exists());
    match target {
        Some(t) => t.join("tern-bench-data"),
        None => std::env::temp_dir().join("tern-bench-data"),
    }
}

/// Folder the CSV and SVG files go to: `bench/results/` of this crate (git-ignored).
pub fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("results")
}
