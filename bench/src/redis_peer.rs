//! The Debian peer: Redis streams (`redis-server` from Debian, driven by the `redis`
//! crate). A stream with append-only-file persistence is what a user would pick instead
//! of a RocketMQ broker for a simple durable queue on one machine.
//!
//! Durability is matched to the broker's flush policy: `appendfsync everysec` for
//! ASYNC_FLUSH (acknowledged before fsync, fsynced about every second) and `appendfsync
//! always` for SYNC_FLUSH (fsync before the reply; Redis groups the writes of one event
//! loop turn into one fsync, its group commit). RDB snapshots are off.
//!
//! Each sender is a thread with its own connection, sending `XADD bench * d <body>` and
//! waiting for the id: the same shape as a sync send.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::load::{LoadResult, stamped_body};
use crate::proc::{Server, free_port, start_listening, which};
use crate::table::{histogram, record};

/// Starts `redis-server` with its files in `dir`; `None` when it is not installed.
pub fn start(dir: &Path, fsync_always: bool) -> Result<Option<Server>, String> {
    let Some(bin) = which("redis-server") else {
        return Ok(None);
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let port = free_port().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "yes", "--daemonize", "no"])
        .args(["--protected-mode", "no", "--appendfsync"])
        .arg(if fsync_always { "always" } else { "everysec" });
    let addr = format!("127.0.0.1:{port}");
    start_listening("redis-server", cmd, &addr, dir.join("redis.log")).map(Some)
}

/// `producers` threads sending XADD of `body` bytes for `warmup` + `duration`.
pub fn load(
    addr: &str,
    producers: u32,
    body: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LoadResult, String> {
    let client = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    let mut conns = Vec::new();
    for _ in 0..producers {
        conns.push(client.get_connection().map_err(|e| e.to_string())?);
    }
    let errors = AtomicU64::new(0);
    let t0 = Instant::now() + warmup;
    let end = t0 + duration;
    let results: Vec<_> = thread::scope(|s| {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut con| {
                let errors = &errors;
                s.spawn(move || {
                    let mut hist = histogram();
                    let mut msgs = 0u64;
                    loop {
                        let start = Instant::now();
                        if start >= end {
                            break;
                        }
                        let r: redis::RedisResult<String> = redis::cmd("XADD")
                            .arg("bench")
                            .arg("*")
                            .arg("d")
                            .arg(stamped_body(body))
                            .query(&mut con);
                        let done = Instant::now();
                        if r.is_err() {
                            errors.fetch_add(1, Ordering::Relaxed);
                        } else if start >= t0 && done <= end {
                            record(&mut hist, (done - start).as_nanos() as u64);
                            msgs += 1;
                        }
                    }
                    (msgs, hist)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut hist = histogram();
    let mut msgs = 0;
    for (n, h) in results {
        msgs += n;
        let _ = hist.add(&h);
    }
    // Keep memory flat between runs: the stream is not read.
    if let Ok(mut con) = client.get_connection() {
        let _: redis::RedisResult<i64> = redis::cmd("DEL").arg("bench").query(&mut con);
    }
    Ok(LoadResult {
        msgs,
        secs: duration.as_secs_f64(),
        hist,
        errors: errors.load(Ordering::Relaxed),
    })
}
