//! The harness of the C++ client interop tests (`interop_cpp.rs`, `interop_cpp_cluster.rs`):
//! starts `tern-broker` processes (standalone, or joined to another's name server) with
//! their logs in a scratch folder, runs `tests/interop/cpp_interop.py` (repo root) with
//! Apache's C++ client, streams its output and checks its verdict.
//!
//! Needs a venv with rocketmq (tern_testkit::python finds it; made by
//! `scripts/setup-python.sh`, which `./test.sh` runs). Without one each test prints a SKIP
//! line and passes, unless TERN_REQUIRE_INTEROP is set (test.sh sets it). On failure the
//! scratch folder (broker logs, data dirs, C++ client logs under home/logs/rocketmq-cpp)
//! is kept and its path printed.

#![allow(dead_code)]

use std::ffi::OsString;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tern_shell::sync::MutexExt;

use tern_testkit::Proc;
use tern_testkit::python::Reached;
pub use tern_testkit::python::{Script, parse_verdict, python_or_skip, repo_root};

/// The C++ client and the broker are heavy on 2 cores: run these tests one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.guard()
}

/// What every C++ interop test starts with: its turn ([`serial`]), the client's python
/// (`None` when the test should skip, see [`python_or_skip`]) and a [`Scratch`] folder
/// named `scratch`. Bind as `let Some((_serial, py, scratch)) = ...`: the folder goes
/// first and the turn last.
pub fn cpp_test(test: &str, scratch: &str) -> Option<(MutexGuard<'static, ()>, PathBuf, Scratch)> {
    let serial = serial();
    let py = python_or_skip(test)?;
    Some((serial, py, Scratch::new(scratch)))
}

fn script() -> PathBuf {
    repo_root().join("tests/interop/cpp_interop.py")
}

/// A scratch folder, removed when the test passes and kept (path printed) when it fails.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "tern-interop-{name}-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(dir.join("home")).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!(
                "kept scratch folder {} (broker*.log, data/, home/logs/rocketmq-cpp/)",
                self.0.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// A running `tern-broker --standalone`: embedded name server plus broker, its log in
/// the scratch folder.
pub struct Broker {
    proc: Proc,
    pub namesrv: String,
    pub addr: String,
    pub log: PathBuf,
}

impl Broker {
    /// `tern-broker --standalone` (embedded name server) on `data`.
    pub fn start(data: &Path, conf: Option<&Path>, log: PathBuf) -> Broker {
        Self::launch(data, conf, log, None)
    }

    /// `tern-broker --standalone` on the scratch folder's `data`, logging to `broker.log`,
    /// with `conf` (if any) written to its `broker.conf` first.
    pub fn start_in(scratch: &Scratch, conf: Option<&str>) -> Broker {
        let conf = conf.map(|text| {
            let path = scratch.path("broker.conf");
            fs::write(&path, text).unwrap();
            path
        });
        Self::start(
            &scratch.path("data"),
            conf.as_deref(),
            scratch.path("broker.log"),
        )
    }

    /// `tern-broker` registering with `namesrv`; `conf` must name its store.
    pub fn start_joined(namesrv: &str, conf: &Path, log: PathBuf) -> Broker {
        Self::launch(Path::new(""), Some(conf), log, Some(namesrv))
    }

    fn launch(data: &Path, conf: Option<&Path>, log: PathBuf, join: Option<&str>) -> Broker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-broker"));
        match join {
            None => cmd.arg("--standalone").arg("--data-dir").arg(data).args([
                "--listen",
                "127.0.0.1:0",
                "--namesrv-listen",
                "127.0.0.1:0",
            ]),
            Some(ns) => cmd.args(["-n", ns, "--listen", "127.0.0.1:0"]),
        };
        // Its gRPC endpoint (on with --standalone) on a free port, not 8081: tests run in
        // parallel. The given conf is kept, with that line added.
        let mut text = conf.map_or_else(String::new, |c| fs::read_to_string(c).unwrap());
        if !text.contains("grpcServerPort") {
            text.push_str("\ngrpcServerPort=0\n");
        }
        let merged = log.with_extension("conf");
        fs::write(&merged, text).unwrap();
        cmd.arg("-c").arg(&merged);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let mut proc = Proc::spawn_logging_to("tern-broker", &mut cmd, &log);
        let pid = proc.pid().unwrap_or(0);
        let (mut namesrv, mut addr) = (join.map(str::to_owned), None);
        for line in proc.wait_ready(Duration::from_secs(30)) {
            eprintln!("  broker[{pid}]| {line}");
            if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
                namesrv = Some(a.trim().to_string());
            } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
                addr = Some(a.trim().to_string());
            }
        }
        let (Some(namesrv), Some(addr)) = (namesrv, addr) else {
            panic!("tern-broker did not print both listening addresses");
        };
        eprintln!("tern-broker pid {pid}: name server {namesrv}, broker {addr}");
        Broker {
            proc,
            namesrv,
            addr,
            log,
        }
    }

    /// SIGTERM, then waits (30 s at most) and returns the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.proc.signal_and_wait("TERM", Duration::from_secs(30))
    }

    /// `kill -9`: a crash.
    pub fn crash(&mut self) {
        self.proc.kill9();
    }

    pub fn stop_cleanly(&mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "tern-broker exited with {status} after SIGTERM (want 0); log:\n{}",
            self.proc.log()
        );
    }
}

/// `tests/interop/cpp_interop.py` run on a [`Script`]: HOME in the scratch folder,
/// stderr streamed, stdout streamed and collected.
pub trait CppScript: Sized {
    /// Starts the script with `args`.
    fn start(py: &Path, scratch: &Scratch, args: &[&str]) -> Self;

    /// Reads everything up to EOF and waits for the exit (`limit` in all).
    fn finish(&mut self, limit: Duration) -> ExitStatus;

    /// Asserts exit 0 and a last line `N passed, 0 failed` with N > 0.
    fn assert_passed(&mut self, what: &str, limit: Duration);
}

impl CppScript for Script {
    fn start(py: &Path, scratch: &Scratch, args: &[&str]) -> Script {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        Script::spawn(py, &script(), &args, &scratch.path("home"), &[], false)
    }

    fn finish(&mut self, limit: Duration) -> ExitStatus {
        let end = Instant::now() + limit;
        if self.read_until(None, limit) != Reached::End {
            self.kill();
            panic!("interop script still running after {limit:?}: killed");
        }
        let left = end.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        self.wait_exit(left).unwrap_or_else(|| {
            self.kill();
            panic!("interop script closed stdout but did not exit");
        })
    }

    fn assert_passed(&mut self, what: &str, limit: Duration) {
        let status = self.finish(limit);
        let last = self.lines.last().cloned().unwrap_or_default();
        let failed: Vec<&String> = self
            .lines
            .iter()
            .filter(|l| l.starts_with("FAIL "))
            .collect();
        let verdict = parse_verdict(&last);
        assert!(
            status.success() && matches!(verdict, Some((p, 0)) if p > 0),
            "{what}: {status}, last line {last:?}; failed checks:\n{}",
            failed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        eprintln!("{what}: {last}");
    }
}

/// UPDATE_AND_CREATE_TOPIC (17) to the broker, as mqadmin updateTopic sends it (JSON
/// header, all-string extFields). Panics unless the broker answers SUCCESS.
pub fn create_topic(broker: &str, topic: &str, queues: u32) {
    let header = format!(
        concat!(
            r#"{{"code":17,"language":"JAVA","version":479,"opaque":7,"flag":0,"remark":"","#,
            r#""extFields":{{"topic":"{}","defaultTopic":"TBW102","readQueueNums":"{}","#,
            r#""writeQueueNums":"{}","perm":"6","topicFilterType":"SINGLE_TAG","#,
            r#""topicSysFlag":"0","order":"false"}},"serializeTypeCurrentRPC":"JSON"}}"#
        ),
        topic, queues, queues
    );
    let h = header.as_bytes();
    let mut frame = Vec::with_capacity(8 + h.len());
    frame.extend_from_slice(&(4 + h.len() as u32).to_be_bytes());
    frame.extend_from_slice(&(h.len() as u32).to_be_bytes());
    frame.extend_from_slice(h);
    let mut s = TcpStream::connect(broker).expect("connect to broker");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&frame).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .expect("UPDATE_AND_CREATE_TOPIC response");
    let mut rest = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut rest).unwrap();
    let hlen = (u32::from_be_bytes(rest[..4].try_into().unwrap()) & 0xFF_FFFF) as usize;
    let resp: serde_json::Value = serde_json::from_slice(&rest[4..4 + hlen])
        .expect("UPDATE_AND_CREATE_TOPIC response header is JSON");
    assert_eq!(
        resp["code"], 0,
        "UPDATE_AND_CREATE_TOPIC {topic} refused: {resp}"
    );
}

pub const SCRIPT_LIMIT: Duration = Duration::from_secs(240);

/// Runs the C++ client's scenarios through `namesrv` on topics named from `prefix`,
/// `args` choosing which and how, and fails the test (saying `what`) unless all passed.
pub fn assert_scenarios_pass(
    py: &Path,
    scratch: &Scratch,
    namesrv: &str,
    prefix: &str,
    args: &[&str],
    what: &str,
) {
    let mut all = vec!["--namesrv", namesrv, "--prefix", prefix];
    all.extend_from_slice(args);
    Script::start(py, scratch, &all).assert_passed(what, SCRIPT_LIMIT);
}

/// Sends with the C++ producer; once `kill_after` sends are acknowledged, calls `crash`
/// (if given) while the producer is still sending. Returns the acknowledged keys.
pub fn send_acked(
    py: &Path,
    scratch: &Scratch,
    namesrv: &str,
    topic: &str,
    count: u32,
    mut crash: Option<(usize, &mut dyn FnMut())>,
    extra: &[&str],
) -> Vec<String> {
    let count_s = count.to_string();
    let mut args = send_only_args(namesrv, topic, &count_s);
    args.extend_from_slice(extra);
    if crash.is_some() {
        args.push("--stop-on-error");
    }
    let mut run = Script::start(py, scratch, &args);
    let mut acked = Vec::new();
    let ack = |line: &str, acked: &mut Vec<String>| acked.extend(acked_key(line));
    match crash.as_mut() {
        Some((after, kill)) => {
            let end = Instant::now() + Duration::from_secs(120);
            while acked.len() < *after {
                let left = end.saturating_duration_since(Instant::now());
                let Some(line) = run.next_line(left) else {
                    panic!(
                        "producer stopped or stalled after {} acknowledged sends (wanted {after} \
                         before the crash)",
                        acked.len()
                    );
                };
                ack(&line, &mut acked);
            }
            eprintln!("kill -9 after {} acknowledged sends", acked.len());
            kill();
            // Whatever the producer printed before it noticed counts as acknowledged too.
            thread::sleep(Duration::from_millis(500));
            run.kill();
            while let Some(line) = run.next_line(Duration::from_secs(5)) {
                ack(&line, &mut acked);
            }
        }
        None => {
            let status = run.finish(SCRIPT_LIMIT);
            for line in run.lines.clone() {
                ack(&line, &mut acked);
            }
            assert!(
                status.success() && acked.len() == count as usize,
                "send-only to {topic}: exit {status}, {} of {count} acknowledged",
                acked.len()
            );
        }
    }
    acked
}

/// The script's arguments for the C++ producer sending `count` keys to `topic`.
fn send_only_args<'a>(namesrv: &'a str, topic: &'a str, count: &'a str) -> Vec<&'a str> {
    vec![
        "--namesrv",
        namesrv,
        "--send-only",
        "--topic",
        topic,
        "--count",
        count,
        "--prefix",
        "TernRestart",
    ]
}

/// The key of a send-only `ACK <key> <msgId> <offset>` line.
fn acked_key(line: &str) -> Option<String> {
    let rest = line.strip_prefix("ACK ")?;
    Some(
        rest.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// What a C++ producer did through a crash.
pub struct Through {
    /// Every key acknowledged, before and after the crash.
    pub acked: Vec<String>,
    /// From the crash to its first acknowledged send after it; `None`: none in the limit.
    pub resumed_after: Option<Duration>,
}

/// Sends `count` keys with the C++ producer, which pauses 50 ms after a failed send and
/// goes on with the next key (`--keep-going`); once `kill_after` are acknowledged calls
/// `crash`, then reads on until the producer is done or `limit` after the crash.
pub fn send_through_crash(
    py: &Path,
    scratch: &Scratch,
    (namesrv, topic): (&str, &str),
    (count, kill_after): (u32, usize),
    crash: &mut dyn FnMut(),
    limit: Duration,
) -> Through {
    let count_s = count.to_string();
    let mut args = send_only_args(namesrv, topic, &count_s);
    // RocketMQ's default send timeout: a send in flight at the crash waits it out.
    args.extend_from_slice(&[
        "--keep-going",
        "--deadline",
        "230",
        "--send-timeout-ms",
        "3000",
    ]);
    let mut run = Script::start(py, scratch, &args);
    let mut acked = Vec::new();
    let end = Instant::now() + Duration::from_secs(120);
    while acked.len() < kill_after {
        let left = end.saturating_duration_since(Instant::now());
        let line = run.next_line(left).unwrap_or_else(|| {
            panic!(
                "producer stopped or stalled after {} acknowledged sends (wanted {kill_after} \
                 before the crash)",
                acked.len()
            )
        });
        acked.extend(acked_key(&line));
    }
    eprintln!("crash after {} acknowledged sends", acked.len());
    crash();
    let crashed = Instant::now();
    let mut resumed_after = None;
    while let Some(line) = run.next_line(limit.saturating_sub(crashed.elapsed())) {
        if let Some(k) = acked_key(&line) {
            resumed_after.get_or_insert_with(|| crashed.elapsed());
            acked.push(k);
        }
    }
    run.kill();
    Through {
        acked,
        resumed_after,
    }
}

pub fn consume_acked(
    py: &Path,
    scratch: &Scratch,
    namesrv: &str,
    topic: &str,
    keys: &[String],
    extra: &[&str],
) {
    let file = scratch.path(&format!("{topic}.keys"));
    fs::write(&file, keys.join("\n") + "\n").unwrap();
    let mut args = tern_testkit::python::cpp_consume_only_args(
        namesrv,
        topic,
        file.to_str().unwrap(),
        "TernRestart",
    );
    args.extend_from_slice(extra);
    let mut run = Script::start(py, scratch, &args);
    run.assert_passed(
        &format!(
            "{} acknowledged messages of {topic} consumed after restart",
            keys.len()
        ),
        SCRIPT_LIMIT,
    );
}
