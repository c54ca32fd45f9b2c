//! A binary under test as a child process: its stdout read line by line (what it
//! announces: addresses, `ready`), its stderr (the log) kept in memory or appended to a
//! file, signals, and a `Drop` that kills it, so a failing test never leaks a process,
//! and prints the log's tail when the test panics.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How many lines of the log a panicking test prints.
const TAIL: usize = 60;

/// A running child process, killed on drop.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Option<Child>,
    stdout: Receiver<String>,
    stderr: Stderr,
}

/// Where a [`Proc`]'s stderr goes.
#[derive(Debug)]
enum Stderr {
    /// Collected line by line by a thread that ends with the stream.
    Lines(Arc<Mutex<Vec<String>>>, Option<JoinHandle<()>>),
    /// Appended to a file: it outlives the process (a restart appends to it).
    File(PathBuf),
}

impl Proc {
    /// Spawns `cmd` (stdin closed, stdout and stderr piped) with its stderr kept in
    /// memory; `name` says which process a failure is about.
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let mut child = start(name, cmd, Stdio::piped());
        let err = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let done = thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                lock(&sink).push(line);
            }
        });
        Proc::new(name, child, Stderr::Lines(lines, Some(done)))
    }

    /// Spawns `cmd` like [`Proc::spawn`], with its stderr appended to the file `log`.
    pub fn spawn_logging_to(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        let child = start(name, cmd, file.into());
        Proc::new(name, child, Stderr::File(log.to_path_buf()))
    }

    fn new(name: &str, mut child: Child, stderr: Stderr) -> Proc {
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                // Nobody may listen any more; keep draining so the process never blocks.
                let _ = tx.send(line);
            }
        });
        Proc {
            name: name.to_owned(),
            child: Some(child),
            stdout: rx,
            stderr,
        }
    }

    /// Reads stdout up to the line starting with `ready`; the lines before it (what the
    /// process announced). Panics, with the log, when it does not come within `within`.
    pub fn wait_ready(&mut self, within: Duration) -> Vec<String> {
        let mut seen = Vec::new();
        self.wait_stdout("its `ready` line", within, |line| {
            if line.starts_with("ready") {
                return Some(());
            }
            seen.push(line.to_owned());
            None
        });
        seen
    }

    /// Reads stdout up to the first line starting with `prefix`; the rest of that line,
    /// trimmed (an address). Panics, with the log, when none comes within `within`.
    pub fn wait_announced(&mut self, prefix: &str, within: Duration) -> String {
        self.wait_stdout(&format!("{prefix:?}"), within, |line| {
            line.strip_prefix(prefix).map(|rest| rest.trim().to_owned())
        })
    }

    /// Reads stdout lines until `found` takes one; panics naming `what` and showing the
    /// log when none does within `within`, or stdout ends (the process exited) first.
    pub fn wait_stdout<T>(
        &mut self,
        what: &str,
        within: Duration,
        mut found: impl FnMut(&str) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = found(&line) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{} printed no {what} within {within:?}; stderr:\n{}",
                    self.name,
                    self.log()
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit(Duration::from_secs(5));
                    panic!(
                        "{} ended its stdout ({status:?}) before printing {what}; stderr:\n{}",
                        self.name,
                        self.log()
                    )
                }
            }
        }
    }

    /// The stdout lines not read yet, up to its end: for a process that exited (a run to
    /// completion whose output is the result). Panics when stdout stays open `within`
    /// longer (something the process started still holds it).
    pub fn stdout_to_end(&mut self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => return lines,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{}'s stdout still open after {within:?}", self.name)
                }
            }
        }
    }

    /// Its log (stderr) so far.
    pub fn log(&self) -> String {
        match &self.stderr {
            Stderr::Lines(lines, _) => lock(lines).join("\n"),
            Stderr::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
        }
    }

    /// Waits up to `within` for a log line containing every one of `needles`.
    pub fn wait_for_log(&self, needles: &[&str], within: Duration) -> Option<String> {
        crate::poll(within, || {
            self.log()
                .lines()
                .find(|l| needles.iter().all(|n| l.contains(n)))
                .map(str::to_owned)
        })
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (a name `kill` takes: `TERM`, `STOP`, `CONT`) to the running
    /// process.
    pub fn signal(&self, signal: &str) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{} not running", self.name));
        let ok = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {pid} ({}) failed", self.name);
    }

    /// Sends `signal` and waits up to `within` for the exit; its status. Past `within`,
    /// kills the process and panics with its log.
    pub fn signal_and_wait(&mut self, signal: &str, within: Duration) -> ExitStatus {
        self.signal(signal);
        self.wait_exit(within).unwrap_or_else(|| {
            self.kill9();
            panic!(
                "{} did not exit within {within:?} of SIG{signal}; stderr:\n{}",
                self.name,
                self.log()
            )
        })
    }

    /// Waits up to `within` for the process to exit on its own; its status (then its
    /// log is complete), or `None` while it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        };
        self.child = None;
        if let Stderr::Lines(_, done) = &mut self.stderr {
            if let Some(h) = done.take() {
                let _ = h.join();
            }
        }
        Some(status)
    }

    /// SIGKILL (`kill -9`: no flush, no clean close), then reaps the process; nothing
    /// when it no longer runs.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
        if thread::panicking() {
            let text = self.log();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- {} stderr (last {TAIL} lines) ---\n{}",
                self.name,
                lines[lines.len().saturating_sub(TAIL)..].join("\n")
            );
        }
    }
}

/// Spawns `cmd` with stdin closed, stdout piped and stderr to `stderr`.
fn start(name: &str, cmd: &mut Command, stderr: Stdio) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"))
}

/// The lines so far; a reader thread that panicked mid-push left them usable.
fn lock(lines: &Mutex<Vec<String>>) -> MutexGuard<'_, Vec<String>> {
    lines.lock().unwrap_or_else(|p| p.into_inner())
}
