//! Finds the Pythons that drive the real RocketMQ clients in the interop tests of every
//! crate: Apache's C++ client (PyPI `rocketmq==0.4.4`) and Apache's 5.x client (PyPI
//! `rocketmq-python-client==5.1.2`, gRPC).
//!
//! The C++ client's is looked for in `TERN_RMQ_PYTHON`, `.venv` at the repo root
//! (`scripts/setup-python.sh`, which `./test.sh` runs) and `/tmp/rmqvenv`; the 5.x
//! client's in `TERN_RMQ_GRPC_PYTHON` and `.venv-grpc` (`scripts/setup-python-grpc.sh`; a
//! venv of its own, as the C++ client's package has the same top-level name). Without one
//! a test skips with a note, unless `TERN_REQUIRE_INTEROP` is set (test.sh sets it): then
//! a missing client is a failure, so CI can never pass by skipping the real-client checks.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"));
    // This crate sits two folders below the root.
    p.ancestors()
        .find(|a| a.join("test.sh").exists())
        .map_or_else(|| p.to_path_buf(), Path::to_path_buf)
}

/// A python that imports `rocketmq.client`, or `None` (after a note) when the test
/// should skip. Panics when none is found and `TERN_REQUIRE_INTEROP` is set.
pub fn python_or_skip(test: &str) -> Option<PathBuf> {
    let candidates = std::env::var_os("TERN_RMQ_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            repo_root().join(".venv/bin/python"),
            PathBuf::from("/tmp/rmqvenv/bin/python"),
        ]);
    venv_python_or_skip(
        test,
        candidates,
        "import rocketmq.client",
        "no python venv with rocketmq==0.4.4 (run scripts/setup-python.sh, or set \
         TERN_RMQ_PYTHON)",
    )
}

/// A python that imports the 5.x client's Producer and consumers, or `None` (after a note)
/// when the test should skip. Panics when none is found and `TERN_REQUIRE_INTEROP` is set.
pub fn grpc_python_or_skip(test: &str) -> Option<PathBuf> {
    let candidates = std::env::var_os("TERN_RMQ_GRPC_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([repo_root().join(".venv-grpc/bin/python")]);
    venv_python_or_skip(
        test,
        candidates,
        "from rocketmq import Producer, SimpleConsumer, PushConsumer",
        "no python venv with rocketmq-python-client==5.1.2 (run scripts/setup-python-grpc.sh, \
         or set TERN_RMQ_GRPC_PYTHON)",
    )
}

/// The first of `candidates` that runs `probe` (python code) cleanly, or `None` (after a
/// note saying `why`) when the test should skip. Panics when none does and
/// `TERN_REQUIRE_INTEROP` is set. Shared by the venv finders of each client.
fn venv_python_or_skip(
    test: &str,
    candidates: impl IntoIterator<Item = PathBuf>,
    probe: &str,
    why: &str,
) -> Option<PathBuf> {
    for py in candidates {
        if !py.exists() {
            continue;
        }
        let ok = Command::new(&py)
            .args(["-c", probe])
            .env("HOME", std::env::temp_dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(py);
        }
        eprintln!("note: {} exists but fails `{probe}`", py.display());
    }
    assert!(
        std::env::var_os("TERN_REQUIRE_INTEROP").is_none(),
        "{test}: {why}; TERN_REQUIRE_INTEROP is set, so this is a failure"
    );
    eprintln!("SKIP {test}: {why}");
    None
}

/// A script (an interop driver) as a child: its stderr echoed (`  py| `), its stdout
/// echoed (`  py> `) and kept line by line; killed on drop.
#[derive(Debug)]
pub struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    /// Every stdout line read so far.
    pub lines: Vec<String>,
}

/// How a read of a [`Script`]'s stdout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// The line looked for came.
    Found,
    /// Stdout ended (the script exits).
    End,
    /// The time ran out first.
    TimedOut,
}

impl Script {
    /// Runs `script` with `py` and `args`: HOME at `home` (the clients' logs), unbuffered
    /// output, the repository root as its folder, and `env` added; `stdin` piped or
    /// not (a script that waits for a go-ahead there).
    pub fn spawn(
        py: &Path,
        script: &Path,
        args: &[OsString],
        home: &Path,
        env: &[(&str, &str)],
        stdin: bool,
    ) -> Script {
        eprintln!("$ {} {} {args:?}", py.display(), script.display());
        std::fs::create_dir_all(home).unwrap();
        let mut child = Command::new(py)
            .arg(script)
            .args(args)
            .env("HOME", home)
            .env("PYTHONUNBUFFERED", "1")
            .envs(env.iter().copied())
            .current_dir(repo_root())
            .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
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
        Script {
            stdin: child.stdin.take(),
            stdout: lines_of(child.stdout.take().unwrap()),
            child,
            lines: Vec::new(),
        }
    }

    /// The next stdout line (echoed), None at EOF or after `limit`.
    pub fn next_line(&mut self, limit: Duration) -> Option<String> {
        let line = self.stdout.recv_timeout(limit).ok()?;
        eprintln!("  py> {line}");
        self.lines.push(line.clone());
        Some(line)
    }

    /// Collects stdout lines until one equals `want` (or, without one, to the end of
    /// stdout), for `limit` at most.
    pub fn read_until(&mut self, want: Option<&str>, limit: Duration) -> Reached {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            match self.stdout.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    eprintln!("  py> {line}");
                    let hit = want == Some(line.as_str());
                    self.lines.push(line);
                    if hit {
                        return Reached::Found;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Reached::End,
            }
        }
        Reached::TimedOut
    }

    /// Reads stdout until the line `want` (true), or its end or `limit` (false).
    pub fn wait_line(&mut self, want: &str, limit: Duration) -> bool {
        self.read_until(Some(want), limit) == Reached::Found
    }

    /// Writes a line to the script's stdin (spawned with it piped).
    pub fn tell(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin piped");
        writeln!(stdin, "{line}").expect("write to the script's stdin");
        stdin.flush().unwrap();
    }

    /// Waits up to `limit` for the exit; its status, or `None` while it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= end {
                return None;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, then reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// The lines of `r`, read by a thread of their own.
fn lines_of(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The arguments of `tests/interop/cpp_interop.py` that have the C++ push consumer read
/// `topic` through `namesrv` until every key listed in `keys_file` came, its group named
/// from `prefix`; shared by the crates whose tests drive the script.
pub fn cpp_consume_only_args<'a>(
    namesrv: &'a str,
    topic: &'a str,
    keys_file: &'a str,
    prefix: &'a str,
) -> Vec<&'a str> {
    vec![
        "--namesrv",
        namesrv,
        "--consume-only",
        "--topic",
        topic,
        "--expect-keys",
        keys_file,
        "--prefix",
        prefix,
    ]
}

/// `N passed, M failed` (the scripts' verdict line) → (N, M).
pub fn parse_verdict(line: &str) -> Option<(u32, u32)> {
    let (p, f) = line.trim().split_once(" passed, ")?;
    Some((p.parse().ok()?, f.strip_suffix(" failed")?.parse().ok()?))
}
