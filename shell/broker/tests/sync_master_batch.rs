//! A SYNC_MASTER's send, batch or single, waits for its slave; the requests behind it
//! on the same connection must not (sends are handled in the connection's read loop only
//! when their answer waits on nothing). Real processes: a SYNC_MASTER (standalone, ASYNC_FLUSH) and a
//! slave that is frozen (SIGSTOP) once it has acknowledged, so the next batch waits
//! the whole `syncFlushTimeout`.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use tern_shell::runtime::{sleep, spawn};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

const TOPIC: &str = "SyncBatch";

/// How long the master waits for its slave before answering FLUSH_SLAVE_TIMEOUT.
const SYNC_TIMEOUT: Duration = Duration::from_secs(3);

fn master(dir: &Path) -> BrokerProc {
    let conf = write_conf(
        dir,
        &format!(
            "brokerRole=SYNC_MASTER\nflushDiskType=ASYNC_FLUSH\nhaListenPort=0\nsyncFlushTimeout={}\n",
            SYNC_TIMEOUT.as_millis()
        ),
    );
    BrokerProc::standalone(dir, &conf)
}

fn slave(dir: &Path, namesrv: &str) -> BrokerProc {
    BrokerProc::slave(dir, namesrv, "")
}

/// Waits until every thread of `pid` is stopped: SIGSTOP is delivered asynchronously,
/// and a slave still running for a moment would acknowledge the next batch.
fn wait_stopped(pid: u32) {
    let all_stopped = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                // The state follows the parenthesised command name.
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
            })
        })
    };
    assert!(
        tern_testkit::poll_until(Duration::from_secs(10), all_stopped),
        "slave {pid} did not stop"
    );
}

fn batch(n: usize) -> RemotingCommand {
    let ms: Vec<_> = (0..n)
        .map(|i| msg(TOPIC, format!("m{i}").as_bytes(), &[]))
        .collect();
    send_batch(&ms, 0)
}

#[test]
fn a_send_waiting_for_a_frozen_slave_holds_up_no_request_behind_it() {
    let (md, sd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let m = master(md.path());
    let s = slave(sd.path(), &m.namesrv.clone().unwrap());
    run(async {
        let c = Client::connect(&m.addr).await;
        create_topic(&c, TOPIC, 1).await;
        tern_testkit::wait_until(
            "the slave never acknowledged",
            Duration::from_secs(20),
            async || c.call(batch(2)).await.response_code() == ResponseCode::Success,
        )
        .await;

        s.pause();
        wait_stopped(s.pid());
        for (what, req) in [
            ("batch", batch(4)),
            ("single send", send_v2(&msg(TOPIC, b"one", &[]), 0)),
        ] {
            waits_alone(&c, what, req).await;
        }
        s.resume();
    });
    drop(s);
    drop(m);
}

/// Sends `req` (a send the frozen slave will not acknowledge) and, while it waits, asks
/// for the runtime info on the same connection: answered at once, the send after
/// `syncFlushTimeout`.
async fn waits_alone(c: &Client, what: &str, req: RemotingCommand) {
    {
        let started = Instant::now();
        let waiting = {
            let c = c.clone();
            spawn(async move { (c.call(req).await, Instant::now()) })
        };
        // Let the batch reach the broker first, then ask on the same connection.
        sleep(Duration::from_millis(200)).await;
        let asked = Instant::now();
        let info = c
            .call(RemotingCommand::request_code(
                RequestCode::GetBrokerRuntimeInfo,
            ))
            .await;
        let answered = Instant::now();
        expect_code(&info, ResponseCode::Success);
        let (sent, send_answered) = waiting.await;
        assert_eq!(
            sent.response_code(),
            ResponseCode::FlushSlaveTimeout,
            "the {what} waited for the frozen slave: {:?}",
            sent.remark
        );
        assert!(
            send_answered.duration_since(started) >= SYNC_TIMEOUT - Duration::from_millis(200),
            "the {what} was answered after {:?}",
            send_answered.duration_since(started)
        );
        assert!(
            answered.duration_since(asked) < Duration::from_secs(1),
            "the request behind the {what} waited {:?}",
            answered.duration_since(asked)
        );
        assert!(answered < send_answered);
    }
}
