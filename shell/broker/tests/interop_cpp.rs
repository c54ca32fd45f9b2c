//! Interop with the REAL C++ RocketMQ client (PyPI `rocketmq==0.4.4`, Apache's
//! rocketmq-client-cpp 1.2.x) against the real `tern-broker --standalone` process.
//!
//! The scenarios live in `tests/interop/cpp_interop.py` at the repo root; this file starts
//! the broker (embedded name server, temp data dir, ephemeral ports), runs the script, streams
//! its output and checks its verdict, then stops the broker with SIGTERM. The restart test
//! sends with the C++ producer, `kill -9`s the broker mid-stream (SYNC_FLUSH), restarts it
//! on the same data dir and consumes with the C++ push consumer: every acknowledged message
//! must come back; then the same across a clean SIGTERM stop.
//!
//! Needs a venv with rocketmq (tests/support/rocketmq_python.rs finds it; made by
//! `scripts/setup-python.sh`, which `./test.sh` runs). Without one each test prints a SKIP
//! line and passes, unless TERN_REQUIRE_INTEROP is set (test.sh sets it). On failure the scratch folder (broker log,
//! data dir, C++ client logs under home/logs/rocketmq-cpp) is kept and its path printed.

#[path = "../../../tests/support/rocketmq_python.rs"]
mod rocketmq_python;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::thread;

use rocketmq_python::{python_or_skip, repo_root};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The C++ client and the broker are heavy on 2 cores: run these tests one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn script() -> PathBuf {
    repo_root().join("tests/interop/cpp_interop.py")
}

/// A scratch folder, removed when the test passes and kept (path printed) when it fails.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
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

    fn path(&self, rel: &str) -> PathBuf {
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

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A running `tern-broker --standalone`: embedded name server plus broker.
struct Broker {
    child: Child,
    namesrv: String,
    addr: String,
    log: PathBuf,
}

impl Broker {
    /// `tern-broker --standalone` (embedded name server) on `data`.
    fn start(data: &Path, conf: Option<&Path>, log: PathBuf) -> Broker {
        Self::launch(data, conf, log, None)
    }

    /// `tern-broker` registering with `namesrv`; `conf` must name its store.
    fn start_joined(namesrv: &str, conf: &Path, log: PathBuf) -> Broker {
        Self::launch(Path::new(""), Some(conf), log, Some(namesrv))
    }

    fn launch(data: &Path, conf: Option<&Path>, log: PathBuf, join: Option<&str>) -> Broker {
        let log_file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
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
        if let Some(conf) = conf {
            cmd.arg("-c").arg(conf);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn tern-broker");
        let pid = child.id();
        let lines = lines_of(child.stdout.take().unwrap());
        let (mut namesrv, mut addr, mut ready) = (None, None, false);
        let start = Instant::now();
        while !ready && start.elapsed() < Duration::from_secs(30) {
            match lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    eprintln!("  broker[{pid}]| {line}");
                    if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
                        namesrv = Some(a.trim().to_string());
                    } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
                        addr = Some(a.trim().to_string());
                    } else if line.starts_with("ready") {
                        ready = true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        panic!(
                            "tern-broker exited during startup with {status}; log:\n{}",
                            tail(&log, 80)
                        );
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let namesrv = namesrv.or(join.map(str::to_owned));
        let (Some(namesrv), Some(addr)) = (namesrv, addr) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tern-broker did not print both listening addresses within 30 s; log:\n{}",
                tail(&log, 80)
            );
        };
        if !ready {
            eprintln!("note: tern-broker printed its addresses but no `ready` line");
        }
        // Keep draining stdout so the broker never blocks on a full pipe.
        thread::spawn(move || {
            for line in lines {
                eprintln!("  broker[{pid}]| {line}");
            }
        });
        eprintln!("tern-broker pid {pid}: name server {namesrv}, broker {addr}");
        Broker {
            child,
            namesrv,
            addr,
            log,
        }
    }

    /// SIGTERM, then waits (30 s at most) and returns the exit status.
    fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        match wait_timeout(&mut self.child, Duration::from_secs(30)) {
            Some(status) => status,
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "tern-broker did not exit within 30 s of SIGTERM; log:\n{}",
                    tail(&self.log, 80)
                );
            }
        }
    }

    /// `kill -9`: a crash.
    fn crash(&mut self) {
        self.child.kill().expect("SIGKILL tern-broker");
        let _ = self.child.wait();
    }

    fn stop_cleanly(&mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "tern-broker exited with {status} after SIGTERM (want 0); log:\n{}",
            tail(&self.log, 80)
        );
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "--- broker log tail ({}):\n{}",
                self.log.display(),
                tail(&self.log, 60)
            );
        }
    }
}

fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() >= limit {
            return None;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The interop script as a child: HOME in the scratch folder, stderr streamed, stdout
/// streamed and collected.
struct Script {
    child: Child,
    stdout: Receiver<String>,
    lines: Vec<String>,
}

impl Script {
    fn spawn(py: &Path, scratch: &Scratch, args: &[&str]) -> Script {
        eprintln!(
            "$ {} {} {}",
            py.display(),
            script().display(),
            args.join(" ")
        );
        let mut child = Command::new(py)
            .arg(script())
            .args(args)
            .env("HOME", scratch.path("home"))
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python");
        let err = lines_of(child.stderr.take().unwrap());
        thread::spawn(move || {
            for line in err {
                eprintln!("  py| {line}");
            }
        });
        let stdout = lines_of(child.stdout.take().unwrap());
        Script {
            child,
            stdout,
            lines: Vec::new(),
        }
    }

    /// The next stdout line (echoed), None at EOF or after `limit`.
    fn next_line(&mut self, limit: Duration) -> Option<String> {
        let line = self.stdout.recv_timeout(limit).ok()?;
        eprintln!("  py> {line}");
        self.lines.push(line.clone());
        Some(line)
    }

    /// Reads everything up to EOF and waits for the exit (`limit` in all).
    fn finish(&mut self, limit: Duration) -> ExitStatus {
        let end = Instant::now() + limit;
        loop {
            match self.stdout.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    eprintln!("  py> {line}");
                    self.lines.push(line);
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("interop script still running after {limit:?}: killed");
            }
        }
        let left = end.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
        wait_timeout(&mut self.child, left).unwrap_or_else(|| {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!("interop script closed stdout but did not exit");
        })
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Asserts exit 0 and a last line `N passed, 0 failed` with N > 0.
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

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// `N passed, M failed` → (N, M).
fn parse_verdict(line: &str) -> Option<(u32, u32)> {
    let (p, rest) = line.trim().split_once(" passed, ")?;
    let m = rest.strip_suffix(" failed")?;
    Some((p.parse().ok()?, m.parse().ok()?))
}

/// UPDATE_AND_CREATE_TOPIC (17) to the broker, as mqadmin updateTopic sends it (JSON
/// header, all-string extFields). Panics unless the broker answers SUCCESS.
fn create_topic(broker: &str, topic: &str, queues: u32) {
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

const SCRIPT_LIMIT: Duration = Duration::from_secs(240);

#[test]
fn cpp_client_scenarios_against_standalone_broker() {
    let _serial = serial();
    let Some(py) = python_or_skip("cpp_client_scenarios_against_standalone_broker") else {
        return;
    };
    let scratch = Scratch::new("scenarios");
    // Short delay levels keep the delay scenario to seconds: level 2 (its sends) is 2 s,
    // level 3 (a first retry) 1 s.
    let levels = "1s 2s 1s";
    let conf = scratch.path("broker.conf");
    fs::write(&conf, format!("messageDelayLevel={levels}\n")).unwrap();
    let mut broker = Broker::start(
        &scratch.path("data"),
        Some(&conf),
        scratch.path("broker.log"),
    );
    let mut run = Script::spawn(
        &py,
        &scratch,
        &[
            "--namesrv",
            &broker.namesrv,
            "--prefix",
            "TernCpp",
            "--delay-levels",
            levels,
        ],
    );
    run.assert_passed("C++ client scenarios (auto-created topics)", SCRIPT_LIMIT);
    broker.stop_cleanly();
}

#[test]
fn cpp_client_uses_topic_precreated_with_update_and_create_topic() {
    let _serial = serial();
    let Some(py) = python_or_skip("cpp_client_uses_topic_precreated_with_update_and_create_topic")
    else {
        return;
    };
    let scratch = Scratch::new("precreated");
    let mut broker = Broker::start(&scratch.path("data"), None, scratch.path("broker.log"));
    create_topic(&broker.addr, "TernPre-sync", 8);
    let mut run = Script::spawn(
        &py,
        &scratch,
        &[
            "--namesrv",
            &broker.namesrv,
            "--prefix",
            "TernPre",
            "--precreated",
            "--expect-queues",
            "8",
            "--scenarios",
            "sync",
            "--count",
            "120",
        ],
    );
    run.assert_passed("C++ client on a precreated topic", SCRIPT_LIMIT);
    broker.stop_cleanly();
}

/// Sends with the C++ producer; once `kill_after` sends are acknowledged, calls `crash`
/// (if given) while the producer is still sending. Returns the acknowledged keys.
fn send_acked(
    py: &Path,
    scratch: &Scratch,
    namesrv: &str,
    topic: &str,
    count: u32,
    mut crash: Option<(usize, &mut Broker)>,
    extra: &[&str],
) -> Vec<String> {
    let count_s = count.to_string();
    let mut args = vec![
        "--namesrv",
        namesrv,
        "--send-only",
        "--topic",
        topic,
        "--count",
        &count_s,
        "--prefix",
        "TernRestart",
    ];
    args.extend_from_slice(extra);
    if crash.is_some() {
        args.push("--stop-on-error");
    }
    let mut run = Script::spawn(py, scratch, &args);
    let mut acked = Vec::new();
    let ack = |line: &str, acked: &mut Vec<String>| {
        if let Some(rest) = line.strip_prefix("ACK ") {
            acked.push(
                rest.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    };
    match crash.as_mut() {
        Some((after, broker)) => {
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
            eprintln!(
                "kill -9 tern-broker after {} acknowledged sends",
                acked.len()
            );
            broker.crash();
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

fn consume_acked(
    py: &Path,
    scratch: &Scratch,
    namesrv: &str,
    topic: &str,
    keys: &[String],
    extra: &[&str],
) {
    let file = scratch.path(&format!("{topic}.keys"));
    fs::write(&file, keys.join("\n") + "\n").unwrap();
    let mut args = vec![
        "--namesrv",
        namesrv,
        "--consume-only",
        "--topic",
        topic,
        "--expect-keys",
        file.to_str().unwrap(),
        "--prefix",
        "TernRestart",
    ];
    args.extend_from_slice(extra);
    let mut run = Script::spawn(py, scratch, &args);
    run.assert_passed(
        &format!(
            "{} acknowledged messages of {topic} consumed after restart",
            keys.len()
        ),
        SCRIPT_LIMIT,
    );
}

#[test]
fn cpp_acknowledged_messages_survive_kill9_and_clean_restart() {
    let _serial = serial();
    let Some(py) = python_or_skip("cpp_acknowledged_messages_survive_kill9_and_clean_restart")
    else {
        return;
    };
    let scratch = Scratch::new("restart");
    let conf = scratch.path("broker.conf");
    fs::write(
        &conf,
        "brokerClusterName=TernCluster\nbrokerName=tern-interop\nbrokerId=0\n\
         flushDiskType=SYNC_FLUSH\nautoCreateTopicEnable=true\n",
    )
    .unwrap();
    let data = scratch.path("data");

    // 1. kill -9 while the C++ producer is sending.
    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-1.log"));
    let crashed = send_acked(
        &py,
        &scratch,
        &broker.namesrv.clone(),
        "TernCrash",
        400,
        Some((150, &mut broker)),
        &[],
    );
    assert!(crashed.len() >= 150, "{} acknowledged", crashed.len());
    drop(broker);

    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-2.log"));
    consume_acked(&py, &scratch, &broker.namesrv, "TernCrash", &crashed, &[]);

    // 2. A clean stop (SIGTERM) between sending and consuming.
    let clean = send_acked(&py, &scratch, &broker.namesrv, "TernClean", 200, None, &[]);
    broker.stop_cleanly();
    let mut broker = Broker::start(&data, Some(&conf), scratch.path("broker-3.log"));
    consume_acked(&py, &scratch, &broker.namesrv, "TernClean", &clean, &[]);
    broker.stop_cleanly();
}

/// HA replication under the real client: the C++ producer's sends to a SYNC_MASTER are
/// acknowledged (SEND_OK) only once the slave holds them; the master is killed with
/// `kill -9`, and the C++ push consumer reads every acknowledged message from the slave,
/// finding it through the name server's route as it would a Java slave.
#[test]
fn cpp_client_reads_from_the_slave_after_the_master_is_killed() {
    let _serial = serial();
    let Some(py) = python_or_skip("cpp_client_reads_from_the_slave_after_the_master_is_killed")
    else {
        return;
    };
    let scratch = Scratch::new("ha");
    // The name server lives in a broker of its own, so killing the master leaves it up.
    let ns_host = Broker::start(&scratch.path("ns"), None, scratch.path("broker-ns.log"));
    let conf = |name: &str, extra: &str| {
        let path = scratch.path(&format!("{name}.conf"));
        fs::write(
            &path,
            format!(
                "brokerClusterName=TernCluster\nbrokerName=tern-ha\nstorePathRootDir={}\n\
                 haSendHeartbeatInterval=500\n{extra}",
                scratch.path(name).display()
            ),
        )
        .unwrap();
        path
    };
    let master_conf = conf("master", "brokerRole=SYNC_MASTER\nhaListenPort=0\n");
    let slave_conf = conf("slave", "brokerRole=SLAVE\nbrokerId=1\n");
    let mut master = Broker::start_joined(
        &ns_host.namesrv,
        &master_conf,
        scratch.path("broker-master.log"),
    );
    let slave = Broker::start_joined(
        &ns_host.namesrv,
        &slave_conf,
        scratch.path("broker-slave.log"),
    );
    create_topic(&master.addr, "TernHa", 4);
    // Sends before the slave is streaming would answer SLAVE_NOT_AVAILABLE.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fs::read_to_string(&master.log)
        .unwrap_or_default()
        .contains("streaming the log to the slave")
    {
        assert!(Instant::now() < deadline, "the slave never connected");
        thread::sleep(Duration::from_millis(50));
    }
    let acked = send_acked(&py, &scratch, &ns_host.namesrv, "TernHa", 200, None, &[]);
    master.crash();
    consume_acked(&py, &scratch, &ns_host.namesrv, "TernHa", &acked, &[]);
    drop(slave);
    drop(ns_host);
}

/// ACL under the real client: the C++ producer and push consumer sign their requests
/// with `set_session_credentials` (adding their own `OnsChannel` field, which the
/// signature covers), and a broker with `aclEnable=true` serves them; the same producer
/// with a wrong secret gets nothing acknowledged.
#[test]
fn cpp_client_signs_its_requests_for_an_acl_broker() {
    let _serial = serial();
    let Some(py) = python_or_skip("cpp_client_signs_its_requests_for_an_acl_broker") else {
        return;
    };
    let scratch = Scratch::new("acl");
    let rules = scratch.path("plain_acl.yml");
    fs::write(
        &rules,
        "accounts:\n  - accessKey: cpp_user\n    secretKey: cpp_secret\n    \
         defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n    topicPerms:\n      \
         - TernAcl=PUB|SUB\n      - TBW102=PUB|SUB\n",
    )
    .unwrap();
    let conf = scratch.path("broker.conf");
    fs::write(
        &conf,
        format!("aclEnable=true\nplainAclFile={}\n", rules.display()),
    )
    .unwrap();
    let mut broker = Broker::start(
        &scratch.path("data"),
        Some(&conf),
        scratch.path("broker.log"),
    );
    let signed = ["--access-key", "cpp_user", "--secret-key", "cpp_secret"];
    let acked = send_acked(
        &py,
        &scratch,
        &broker.namesrv,
        "TernAcl",
        100,
        None,
        &signed,
    );
    consume_acked(&py, &scratch, &broker.namesrv, "TernAcl", &acked, &signed);

    let mut run = Script::spawn(
        &py,
        &scratch,
        &[
            "--namesrv",
            &broker.namesrv,
            "--send-only",
            "--topic",
            "TernAcl",
            "--count",
            "3",
            "--access-key",
            "cpp_user",
            "--secret-key",
            "wrong_secret",
        ],
    );
    let status = run.finish(SCRIPT_LIMIT);
    assert!(!status.success(), "a wrong secret was accepted");
    assert!(
        !run.lines.iter().any(|l| l.starts_with("ACK ")),
        "{:?}",
        run.lines
    );
    let log = fs::read_to_string(&broker.log).unwrap_or_default();
    assert!(
        log.contains("Check signature failed for accessKey=cpp_user"),
        "the broker did not log the refusal"
    );
    broker.stop_cleanly();
}

#[test]
fn verdict_line_parses() {
    assert_eq!(parse_verdict("12 passed, 0 failed"), Some((12, 0)));
    assert_eq!(parse_verdict("3 passed, 2 failed\n"), Some((3, 2)));
    assert_eq!(parse_verdict("passed"), None);
}
