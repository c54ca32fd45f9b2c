//! The Rust peer: rocketmq-rust 1.0 (crates `rocketmq-namesrv` and `rocketmq-broker`,
//! binaries `rocketmq-namesrv-rust` and `rocketmq-broker-rust`), driven by the same Tern
//! client as Tern itself.
//!
//! Building it takes about a quarter of an hour on two cores, so it is installed only on
//! request (`--install-peers`), once, into a cache folder outside the repository
//! ([`peers_root`]), and used from there whenever it is present.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::proc::{Server, free_port, start_listening};

/// The version measured.
pub const VERSION: &str = "1.0.0";

/// `~/.cache/tern-bench/peers` (cargo install's `--root`).
pub fn peers_root() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".cache/tern-bench/peers")
}

fn bin(name: &str) -> PathBuf {
    peers_root().join("bin").join(name)
}

/// Whether both binaries are installed.
pub fn installed() -> bool {
    bin("rocketmq-namesrv-rust").is_file() && bin("rocketmq-broker-rust").is_file()
}

/// Installs both binaries with `cargo install`, at the lowest CPU priority.
pub fn install() -> Result<(), String> {
    if installed() {
        return Ok(());
    }
    let root = peers_root();
    eprintln!(
        "installing rocketmq-rust {VERSION} into {} (about 15 minutes on 2 cores)",
        root.display()
    );
    let status = Command::new("nice")
        .args(["-n", "19", "cargo", "install", "--locked", "--root"])
        .arg(&root)
        .arg(format!("rocketmq-namesrv@{VERSION}"))
        .arg(format!("rocketmq-broker@{VERSION}"))
        .status()
        .map_err(|e| format!("cargo install: {e}"))?;
    if status.success() && installed() {
        Ok(())
    } else {
        Err(format!("cargo install of rocketmq-rust failed ({status})"))
    }
}

/// A running name server and broker.
#[derive(Debug)]
pub struct RocketMq {
    /// The name server (killed on drop).
    pub namesrv: Server,
    /// The broker (killed on drop).
    pub broker: Server,
}

/// Starts a name server and a broker with their data under `dir`; `None` when the
/// binaries are not installed. The broker's start-up is spawn → accepting connections.
pub fn start(dir: &Path, sync_flush: bool) -> Result<Option<RocketMq>, String> {
    if !installed() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ns_port = free_port().map_err(|e| e.to_string())?;
    let ns_addr = format!("127.0.0.1:{ns_port}");
    let mut ns = Command::new(bin("rocketmq-namesrv-rust"));
    ns.args([
        "--listenPort",
        &ns_port.to_string(),
        "--bindAddress",
        "127.0.0.1",
    ])
    .arg("--rocketmqHome")
    .arg(dir)
    .env("ROCKETMQ_HOME", dir)
    .current_dir(dir);
    let namesrv = start_listening(
        "rocketmq-namesrv-rust",
        ns,
        &ns_addr,
        dir.join("namesrv.log"),
    )?;
    let port = free_port().map_err(|e| e.to_string())?;
    let conf = dir.join("broker.properties");
    // commitLogMicroBatchMaxWaitMicros=0: its append worker (rocketmq-store-local
    // 1.0.0, commit_log/append/sequencer.rs) waits up to 50 µs for a batch to fill, on
    // a tokio timer, which rounds deadlines up to the next millisecond: every append
    // that did not fill a batch of 32 waited ~1 ms, which made it flat at ~1.45k
    // msgs/s from 16 to 64 senders. With 0 it still batches what is queued but never
    // waits (the key is its own; it falls through to the store's config).
    let props = format!(
        "brokerClusterName=DefaultCluster\nbrokerName=bench-rmq\nbrokerId=0\n\
         brokerIP1=127.0.0.1\nlistenPort={port}\nnamesrvAddr={ns_addr}\n\
         storePathRootDir={}\nflushDiskType={}\ncommitLogMicroBatchMaxWaitMicros=0\n",
        dir.join("store").display(),
        if sync_flush {
            "SYNC_FLUSH"
        } else {
            "ASYNC_FLUSH"
        }
    );
    std::fs::write(&conf, props).map_err(|e| format!("{}: {e}", conf.display()))?;
    let mut b = Command::new(bin("rocketmq-broker-rust"));
    b.arg("-c")
        .arg(&conf)
        .args(["-n", &ns_addr])
        .env("ROCKETMQ_HOME", dir)
        .current_dir(dir);
    let addr = format!("127.0.0.1:{port}");
    let mut broker = start_listening("rocketmq-broker-rust", b, &addr, dir.join("broker.log"))?;
    broker.namesrv = Some(ns_addr);
    Ok(Some(RocketMq { namesrv, broker }))
}
