//! The harness of the gRPC interop tests: `tests/interop/grpc_interop.py` (Apache's 5.x
//! Python client) as a child process, its output read line by line and its verdict
//! checked. Used by `interop_grpc.rs` (the endpoint in the broker) and
//! `proxy_cluster.rs` (the `tern-proxy` binary in front of a cluster).

#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use crate::common::BrokerProc;

#[path = "../../../../tests/support/rocketmq_python.rs"]
pub mod rocketmq_python;

#[path = "../../../../tests/support/rocketmq_python_grpc.rs"]
pub mod rocketmq_python_grpc;

// Only `binary_of` is used here (tern-admin belongs to tern-client).
#[allow(dead_code)]
#[path = "../../../../tests/support/binaries.rs"]
pub mod binaries;

use rocketmq_python::repo_root;

/// Where the script's clients go: a gRPC endpoint, and the name server its `tern-admin`
/// makes topics and groups through.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `host:port` of the gRPC endpoint.
    pub endpoint: &'a str,
    /// `host:port` of the name server.
    pub namesrv: &'a str,
}

impl<'a> Target<'a> {
    /// A standalone broker's endpoint and embedded name server.
    pub fn of(b: &'a BrokerProc) -> Self {
        Self {
            endpoint: b
                .grpc
                .as_deref()
                .expect("no `tern-broker gRPC endpoint on` line: grpcServerPort is set"),
            namesrv: b.namesrv.as_deref().expect("standalone name server"),
        }
    }
}

/// How long one script run may take (its own `--deadline` is shorter).
pub const SCRIPT_LIMIT: Duration = Duration::from_secs(300);

/// The client and the broker are heavy on 2 cores: one scenario at a time.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.guard()
}

pub fn admin() -> PathBuf {
    binaries::binary_of("tern-client", "tern-admin")
}

pub fn lines_of(r: impl Read + Send + 'static) -> Receiver<String> {
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

/// `tests/interop/grpc_interop.py` as a child: HOME in the test's temp dir (the client's
/// logs), stdin piped (the restart scenario waits on it), stdout collected and streamed.
pub struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    /// Every stdout line read so far.
    pub lines: Vec<String>,
}

impl Script {
    pub fn spawn(py: &Path, home: &Path, target: &Target<'_>, args: &[&str]) -> Script {
        Self::spawn_with_env(py, home, target, args, &[])
    }

    /// [`Script::spawn`] with `env` added (ACL keys for tern-admin, TLS roots).
    pub fn spawn_with_env(
        py: &Path,
        home: &Path,
        target: &Target<'_>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Script {
        let admin = admin();
        let script = repo_root().join("tests/interop/grpc_interop.py");
        let mut full: Vec<OsString> = vec![
            script.into(),
            "--endpoint".into(),
            target.endpoint.into(),
            "--namesrv".into(),
            target.namesrv.into(),
            "--admin".into(),
            admin.into(),
        ];
        full.extend(args.iter().map(OsString::from));
        eprintln!("$ {} {:?}", py.display(), full);
        std::fs::create_dir_all(home).unwrap();
        let mut child = Command::new(py)
            .args(&full)
            .env("HOME", home)
            .env("PYTHONUNBUFFERED", "1")
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .stdin(Stdio::piped())
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
            stdin: child.stdin.take(),
            child,
            stdout,
            lines: Vec::new(),
        }
    }

    /// Reads stdout until the line `want` (true), or its end or `limit` (false).
    pub fn wait_line(&mut self, want: &str, limit: Duration) -> bool {
        self.read_until(Some(want), limit)
    }

    /// Collects stdout lines until one equals `want` (true), or until the end of stdout or
    /// `limit` (false).
    fn read_until(&mut self, want: Option<&str>, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            match self.stdout.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    eprintln!("  py> {line}");
                    let hit = want == Some(line.as_str());
                    self.lines.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
        false
    }

    /// Writes a line to the script's stdin.
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin piped");
        writeln!(stdin, "{line}").expect("write to the script's stdin");
        stdin.flush().unwrap();
    }

    /// Reads the rest of stdout and waits for the exit (killed past `limit`).
    pub fn finish(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.read_until(None, limit);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts exit 0, the `N passed, 0 failed` verdict and a PASS line starting with each
    /// of `expect`; prints the servers' stderr (`stderr`) tail before panicking.
    pub fn assert_passed(&mut self, what: &str, expect: &[&str], stderr: impl Fn() -> String) {
        let status = self.finish(SCRIPT_LIMIT);
        let verdict = self.lines.iter().rev().find_map(|l| parse_verdict(l));
        let fails: Vec<&String> = self
            .lines
            .iter()
            .filter(|l| l.starts_with("FAIL"))
            .collect();
        let absent: Vec<&&str> = expect
            .iter()
            .filter(|e| {
                !self
                    .lines
                    .iter()
                    .any(|l| l.strip_prefix("PASS ").is_some_and(|p| p.starts_with(**e)))
            })
            .collect();
        let ok = status.is_some_and(|s| s.success())
            && verdict.is_some_and(|(p, f)| p > 0 && f == 0)
            && absent.is_empty();
        if !ok {
            let text = stderr();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- server stderr (last 150 lines) ---\n{}",
                lines[lines.len().saturating_sub(150)..].join("\n")
            );
        }
        assert!(
            ok,
            "{what}: exit {status:?}, verdict {verdict:?}; FAIL lines: {fails:#?}; \
             expected PASS lines missing: {absent:?}"
        );
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `N passed, M failed` → (N, M).
pub fn parse_verdict(line: &str) -> Option<(u32, u32)> {
    let (p, f) = line.trim().split_once(" passed, ")?;
    Some((p.parse().ok()?, f.strip_suffix(" failed")?.parse().ok()?))
}
