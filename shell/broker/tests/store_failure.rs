//! The store when its disk work fails, on a real `tern-broker` process: a failed
//! fdatasync is never answered as durable (Linux reports a write-back error once, so a
//! retry would "succeed"), and a reput that cannot go on backs off instead of spinning.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tern_shell::ResponseCode;
use tern_shell::message::decode_pulled;

/// The fdatasync call the broker is told to fail (the first ones succeed, so some sends
/// are acknowledged before it).
const FAIL_AT: &str = "6";

#[test]
fn a_failed_fdatasync_is_never_answered_as_durable_and_restart_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "flushDiskType=SYNC_FLUSH\n");
    let args = BrokerProc::standalone_args(dir.path(), &conf);
    let mut b = BrokerProc::start_with_env(&args, &[("TERN_INJECT_FLUSH_FAILURE", FAIL_AT)]);
    let mut acked = Vec::new();
    let mut first_failure = None;
    b.with_client(async |c| {
        create_topic(c, "Fsync", 1).await;
        for i in 0..40 {
            let m = msg("Fsync", format!("m{i}").as_bytes(), &[]);
            let resp = c.call(send_v2(&m, 0)).await;
            match (resp.response_code(), first_failure) {
                (ResponseCode::Success, None) => acked.push(m),
                (ResponseCode::Success, Some(at)) => {
                    panic!("send {i} answered SUCCESS after the flush failed at send {at}")
                }
                (code, None) => {
                    assert_eq!(
                        code,
                        ResponseCode::SystemError,
                        "the sender waiting on the failed flush: {:?}",
                        resp.remark
                    );
                    let remark = resp.remark.unwrap_or_default();
                    assert!(remark.contains("may not be on disk"), "{remark}");
                    first_failure = Some(i);
                }
                (code, Some(_)) => {
                    assert_eq!(code, ResponseCode::ServiceNotAvailable, "{:?}", resp.remark);
                    let remark = resp.remark.unwrap_or_default();
                    assert!(remark.contains("restarted"), "{remark}");
                }
            }
        }
        let info = runtime_info(c).await;
        assert!(
            info.get("storeFailed")
                .is_some_and(|w| w.contains("os error 5")),
            "{info:?}"
        );
    });
    assert!(first_failure.is_some(), "the injected failure never showed");
    assert!(
        !acked.is_empty(),
        "nothing was acknowledged before the failure"
    );
    // Logged once, with the file and the errno (the stderr reader may trail the answers).
    let _ = b.wait_for_log(&["the store is failed"], Duration::from_secs(10));
    let log = b.stderr_text();
    assert_eq!(log.matches("the store is failed").count(), 1, "{log}");
    assert!(log.contains("commitlog/0000"), "{log}");
    // A failed store does not claim a clean close: a stop leaves it to recovery.
    b.kill9();
    let b = BrokerProc::standalone(dir.path(), &conf);
    b.with_client(async |c| {
        let got = pull_all(c, "Fsync", 0, 0).await;
        for (i, m) in acked.iter().enumerate() {
            assert_eq!(
                got[i].body, m.body,
                "acknowledged message {i} after restart"
            );
        }
        // The restarted store takes writes again.
        send_ok(c, send_v2(&msg("Fsync", b"after", &[]), 0)).await;
    });
}

/// Every fdatasync from this call on takes [`STALL_MS`] (a disk gone very slow).
const STALL_FROM: &str = "12";
const STALL_MS: u64 = 3_000;
const FLUSH_TIMEOUT_MS: u64 = 300;

#[test]
fn a_stalled_disk_answers_flush_disk_timeout_in_time_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(
        dir.path(),
        &format!("flushDiskType=SYNC_FLUSH\nsyncFlushTimeout={FLUSH_TIMEOUT_MS}\n"),
    );
    let args = BrokerProc::standalone_args(dir.path(), &conf);
    let stall = format!("{STALL_FROM}:{STALL_MS}");
    let b = BrokerProc::start_with_env(&args, &[("TERN_INJECT_FLUSH_STALL", &stall)]);
    b.with_client(async |c| {
        create_topic(c, "Stall", 1).await;
        let (mut acked, mut timed_out) = (0, 0);
        let mut i = 0;
        // Until three sends in a row timed out: by then the group-commit thread is in a
        // stalled fdatasync (checkpoint syncs count too, so the call number alone does
        // not say which send meets it).
        while timed_out < 3 {
            assert!(i < 400, "no FLUSH_DISK_TIMEOUT in {i} sends");
            let m = msg("Stall", format!("m{i}").as_bytes(), &[]);
            let started = Instant::now();
            let resp = c.call(send_v2(&m, 0)).await;
            let took = started.elapsed();
            match resp.response_code() {
                ResponseCode::Success => {
                    assert_eq!(timed_out, 0, "a send acked between timeouts");
                    acked += 1;
                }
                ResponseCode::FlushDiskTimeout => {
                    // Answered at the sender's deadline (plus the watchdog's period of a
                    // quarter of it, and slack for a busy machine), not when the disk came
                    // back.
                    assert!(
                        took >= Duration::from_millis(FLUSH_TIMEOUT_MS)
                            && took < Duration::from_millis(FLUSH_TIMEOUT_MS + 900),
                        "FLUSH_DISK_TIMEOUT after {took:?} (timeout {FLUSH_TIMEOUT_MS} ms, \
                         disk stalled {STALL_MS} ms)"
                    );
                    timed_out += 1;
                }
                code => panic!("send {i}: {code:?} {:?}", resp.remark),
            }
            i += 1;
        }
        assert!(acked > 0, "nothing was acknowledged before the stall");
        // FLUSH_DISK_TIMEOUT means stored, not yet on disk: every send is in the queue.
        let sent: Vec<Vec<u8>> = (0..i).map(|k| format!("m{k}").into_bytes()).collect();
        let mut bodies = Vec::new();
        // Dispatch may trail the last answer by a moment. Not asserted here: the
        // comparison below shows what was there, timed out or not.
        let _ = tern_testkit::poll_until_async(Duration::from_secs(10), async || {
            let got = pull_all(c, "Stall", 0, 0).await;
            bodies = got.into_iter().map(|m| m.body).collect();
            bodies.len() >= sent.len()
        })
        .await;
        assert_eq!(bodies, sent);
    });
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn a_reput_that_cannot_go_on_backs_off_and_sends_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "");
    // A folder where the queue's second file must go (the test geometry holds 300
    // entries a file): dispatching the topic's 301st record fails until it is removed,
    // a real file-system error in the reput path only (appends never make queue files).
    let blocker = dir
        .path()
        .join("data/store/consumequeue/Blocked/0/00000000000000006000");
    std::fs::create_dir_all(&blocker).unwrap();
    let b = BrokerProc::standalone(dir.path(), &conf);
    b.with_client(async |c| {
        create_topic(c, "Blocked", 1).await;
        create_topic(c, "Other", 1).await;
        for i in 0..300 {
            send_ok(
                c,
                send_v2(&msg("Blocked", format!("b{i}").as_bytes(), &[]), 0),
            )
            .await;
        }
        send_ok(c, send_v2(&msg("Blocked", b"stuck", &[]), 0)).await;
        tern_shell::runtime::sleep(Duration::from_millis(300)).await;
        let ticks_before = cpu_ticks(b.pid());
        let started = Instant::now();
        // Sends keep answering while reput retries.
        let mut sent = 0;
        while started.elapsed() < Duration::from_secs(3) {
            send_ok(c, send_v2(&msg("Other", b"still", &[]), 0)).await;
            sent += 1;
            tern_shell::runtime::sleep(Duration::from_millis(20)).await;
        }
        let ticks = cpu_ticks(b.pid()) - ticks_before;
        let secs = started.elapsed().as_secs_f64();
        // 100 ticks a second is one core busy; a spinning reput takes all of it.
        let tick_hz = 100.0;
        let busy = ticks as f64 / tick_hz / secs;
        assert!(
            busy < 0.3,
            "broker used {busy:.2} of a core while reput failed"
        );
        assert!(sent > 20, "only {sent} sends answered in 3 s");
        let errors: u64 = runtime_info(c).await["reputErrors"].parse().unwrap();
        assert!(
            (1..=40).contains(&errors),
            "reput errors in 3 s: {errors} (backing off, not spinning)"
        );
        let log = b.stderr_text();
        assert!(
            log.matches("reput failed").count() <= 12,
            "the failure is logged at each pause, not in a loop:\n{log}"
        );
        // The operator fixes the folder: reput goes on within the longest pause and the
        // stuck message and everything after it are served.
        std::fs::remove_dir(&blocker).unwrap();
        let mut got = Vec::new();
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(15), async || {
                let resp = c.call(pull_req("G", "Blocked", 0, 300, Some("*"))).await;
                if resp.response_code() != ResponseCode::Success {
                    return false;
                }
                got = decode_pulled(&resp.body, true).unwrap();
                true
            })
            .await,
            "reput did not resume:\n{}",
            b.stderr_text()
        );
        assert_eq!(got[0].body, b"stuck");
        let other = pull_all(c, "Other", 0, 0).await;
        assert_eq!(other.len(), sent);
    });
}
