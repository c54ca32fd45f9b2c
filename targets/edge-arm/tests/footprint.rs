//! What the gateway costs a device: the executor its tasks run on (a smol thread or two,
//! not the servers' worker per core) and its resident memory at rest.

use crate::common;

use std::time::Duration;

use common::{Central, Edge};
use tern_client::{Message, SendStatus};
use tern_testkit::{poll_until, wait_until};

/// The goal for an idle gateway (issue 11): resident set under 8 MiB.
const IDLE_RSS_LIMIT_KIB: u64 = 8 * 1024;

/// The names of a process's threads, as the kernel reports them (15 bytes at most).
fn threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_owned())
        .collect()
}

/// A `kB` field of `/proc/<pid>/status` (VmRSS, VmHWM).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Resident KiB of a process's mappings whose file path contains `part`.
fn mapped_rss_kib(pid: u32, part: &str) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut total = 0;
    let mut counting = false;
    for l in smaps.lines() {
        let mut words = l.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Rss:"), Some(kib)) if counting => total += kib.parse::<u64>().unwrap_or(0),
            // A mapping's header line: an address range first.
            (Some(range), _) if range.contains('-') && !range.ends_with(':') => {
                counting = l.contains(part);
            }
            _ => {}
        }
    }
    total
}

fn under_qemu() -> bool {
    std::env::var("TERN_EDGE_RUNNER").is_ok_and(|r| !r.trim().is_empty())
}

/// A gateway that has taken and forwarded a few messages, then rests.
fn rested_gateway(dir: &std::path::Path, central: &Central, threads_conf: &str) -> Edge {
    rested_after(dir, central, threads_conf, 20, 16)
}

/// A gateway that has taken `n` messages of `body` bytes, forwarded them, then rests.
fn rested_after(
    dir: &std::path::Path,
    central: &Central,
    conf: &str,
    n: usize,
    body: usize,
) -> Edge {
    let edge = Edge::start(dir, &central.namesrv, conf);
    tern_client::block_on(async {
        let p = edge.producer("footprint");
        for i in 0..n {
            let mut b = format!("reading {i} ").into_bytes();
            b.resize(body.max(b.len()), b'.');
            let r = p.send(Message::new("Footprint", b)).await.unwrap();
            assert_eq!(r.status, SendStatus::SendOk);
        }
        p.shutdown().await;
        wait_until("forwarded", Duration::from_secs(60), async || {
            central.messages("Footprint").await.0.len() == n
        })
        .await;
    });
    edge
}

#[test]
fn the_gateway_runs_its_tasks_on_smol_threads_and_never_starts_async_std() {
    let central = Central::started();
    let dir = tempfile::tempdir().unwrap();
    let mut edge = rested_gateway(dir.path(), &central, "edgeExecutorThreads=2\n");
    // A new thread carries its creator's name until it names itself (a blocking-pool
    // thread spawned by an executor thread is briefly `tern-smol-0`): read until the
    // count settles. A thread of another executor (the servers' `tern-worker-N`, or
    // async-std's) fails at once.
    let (mut smol, mut names) = (0, Vec::new());
    let settled = tern_testkit::poll_until(Duration::from_secs(5), || {
        names = threads(edge.pid().unwrap());
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("async-std") || n.starts_with("tern-worker-")),
            "another executor runs in the gateway: {names:?}"
        );
        smol = names.iter().filter(|n| n.starts_with("tern-smol-")).count();
        smol == 2
    });
    assert!(
        settled,
        "edgeExecutorThreads=2, {smol} executor threads: {names:?}"
    );
    edge.stop();
}

#[test]
fn an_idle_gateway_stays_under_8_mib_resident() {
    let central = Central::started();
    let dir = tempfile::tempdir().unwrap();
    let mut edge = rested_gateway(dir.path(), &central, "");
    // At rest: the forwarder caught up, the producer gone, a flush or two since.
    std::thread::sleep(Duration::from_secs(2));
    let pid = edge.pid().unwrap();
    let rss = status_kib(pid, "VmRSS");
    if under_qemu() {
        // qemu-user's VmRSS is qemu's own (its translator and code cache, several MiB)
        // plus the guest's: no bound on the gateway alone can be read from it.
        eprintln!("idle VmRSS under qemu-user (qemu included): {rss} kB");
    } else if std::env::var_os("TERN_EDGE_BIN").is_none() {
        // The workspace's release build (debug info, four codegen units) is not what a
        // device runs: most of its resident set is text pages of a binary twice the
        // device build's size. The goal is the device build's (`--profile edge`), which
        // test.sh runs natively with TERN_EDGE_BIN.
        eprintln!("idle VmRSS of the release build (not the device build): {rss} kB");
    } else {
        assert!(
            rss < IDLE_RSS_LIMIT_KIB,
            "idle VmRSS {rss} kB is over {IDLE_RSS_LIMIT_KIB} kB"
        );
    }
    edge.stop();
}

#[test]
fn the_logs_pages_behind_the_flush_leave_the_resident_set() {
    let central = Central::started();
    let dir = tempfile::tempdir().unwrap();
    // ~700 KB of records: inside the first 1 MiB segment (the tests' geometry), which
    // the writer touched page by page and which is not deleted (it is the active one).
    let mut edge = rested_after(dir.path(), &central, "", 600, 1000);
    // Under qemu-user too: qemu maps the guest's files with the host's mmap and passes
    // MADV_DONTNEED on, so the same smaps lines tell. SYNC_FLUSH rounds release in
    // 256 KiB chunks; the rest goes at the group-commit thread's first quiet round, which
    // a loaded machine running the gateway under qemu may reach seconds after the sends:
    // looked for until then, not after a fixed sleep.
    let pid = edge.pid().unwrap();
    let mut kib = 0;
    let released = poll_until(Duration::from_secs(20), || {
        kib = mapped_rss_kib(pid, "/commitlog/");
        kib <= 64
    });
    // Without the release, ~680 kB: every page written stays mapped.
    assert!(
        released,
        "{kib} kB of the commit log still resident after 20 s"
    );
    edge.stop();
}
