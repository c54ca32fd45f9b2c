//! Server processes the harness starts and stops itself: `tern-broker --standalone`, the
//! peers' servers, and what can be read about them from `/proc` (RSS).
//!
//! Every child is owned by a [`Server`] whose `Drop` kills it (SIGKILL, by its own pid),
//! so an error anywhere in a scenario never leaves a server running.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Longest a server may take to start listening before the scenario gives up.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running server process.
#[derive(Debug)]
pub struct Server {
    /// What it is, for messages (`tern-broker`, `redis-server`).
    pub name: String,
    child: Option<Child>,
    /// The broker's (or server's) address, `ip:port`.
    pub addr: String,
    /// The name server's address, for RocketMQ-style brokers.
    pub namesrv: Option<String>,
    /// The RocketMQ 5.x gRPC endpoint's address, for a Tern broker serving one.
    pub grpc: Option<String>,
    /// From spawn to the address accepting (or announced): the start-up time.
    pub startup: Duration,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Server {
    /// A server just spawned as `child`: nothing announced, no start-up time yet.
    fn spawned(name: &str, child: Child, addr: &str, log: PathBuf) -> Self {
        Self {
            name: name.into(),
            child: Some(child),
            addr: addr.into(),
            namesrv: None,
            grpc: None,
            startup: Duration::ZERO,
            log,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Resident memory now.
    pub fn rss(&self) -> io::Result<Rss> {
        Rss::of(self.pid())
    }

    /// CPU time (user + system) the process has used so far.
    pub fn cpu_time(&self) -> io::Result<Duration> {
        cpu_time_of(&self.pid().to_string())
    }

    /// Kills the process with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Asks the process to stop (SIGTERM) and waits up to `grace` for it; kills it after.
    pub fn terminate(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Resident set of a process, from `/proc/PID/status`, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rss {
    /// All resident pages (`VmRSS`).
    pub total_kib: u64,
    /// Anonymous pages (`RssAnon`): heap and stacks, what the process itself allocated.
    pub anon_kib: u64,
    /// File pages (`RssFile`): mapped segments and the binary; reclaimable.
    pub file_kib: u64,
    /// Peak of `VmRSS` (`VmHWM`).
    pub peak_kib: u64,
}

impl Rss {
    /// Reads the process's RSS.
    pub fn of(pid: u32) -> io::Result<Rss> {
        let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        Ok(Rss {
            total_kib: field("VmRSS:"),
            anon_kib: field("RssAnon:"),
            file_kib: field("RssFile:"),
            peak_kib: field("VmHWM:"),
        })
    }

    /// `VmRSS` in MiB.
    pub fn total_mib(&self) -> f64 {
        self.total_kib as f64 / 1024.0
    }
}

/// The `tern-broker` binary: beside this one in the target dir, built on demand.
pub fn tern_broker_bin() -> Result<PathBuf, String> {
    workspace_bin("tern-broker")
}

/// The native `tern-edge` binary: beside this one in the target dir, built on demand.
pub fn tern_edge_bin() -> Result<PathBuf, String> {
    workspace_bin("tern-edge")
}

/// The binary `name` of the workspace package of the same name, beside this one in the
/// target dir, built on demand.
fn workspace_bin(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let dir = exe.parent().ok_or("the exe has no folder")?;
    let bin = dir.join(name);
    // From `cargo run` (target/<profile>/), build every time: a no-op when fresh, and a
    // stale binary would measure old code. Test binaries live in deps/: use what exists.
    let from_tests = dir.file_name().is_some_and(|n| n == "deps");
    if bin.exists() && (from_tests || std::env::var_os("TERN_BENCH_NO_BUILD").is_some()) {
        return Ok(bin);
    }
    // target/<profile>/tern-bench: build the binary into the same target dir.
    let target = dir.parent().ok_or("the exe is not in a target dir")?;
    let profile = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("release");
    eprintln!("building {name} into {}", target.display());
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["build", "-p", name])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile == "release" {
        cmd.arg("--release");
    }
    let status = cmd.status().map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() || !bin.exists() {
        return Err(format!("cargo build -p {name} failed ({status})"));
    }
    Ok(bin)
}

/// Starts `tern-edge` forwarding to `upstream` (the central name server), with its local
/// broker and name server on ephemeral ports and `conf` as its config file: `bin`
/// natively, or under `runner` (e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`) when
/// given. Waits for `ready`; `namesrv` is the local name server producers use. Under a
/// runner the process (pid, RSS) is the runner's, which runs the gateway inside it.
pub fn start_edge(
    data: &Path,
    conf: &str,
    bin: &Path,
    runner: Option<&str>,
    upstream: &str,
) -> Result<Server, String> {
    let mut words = runner.unwrap_or_default().split_whitespace();
    let mut cmd = match words.next() {
        Some(r) => {
            let mut c = Command::new(r);
            c.args(words).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(["--upstream", upstream]);
    let (mut server, rx, start) = spawn_ephemeral("tern-edge", cmd, data, "edge", conf, bin)?;
    loop {
        let (line, _) = next_line(&rx, start, &server)?;
        if let Some(a) = line.strip_prefix("tern-edge name server on ") {
            server.namesrv = Some(a.trim().to_owned());
        } else if let Some(a) = line.strip_prefix("tern-edge broker on ") {
            server.addr = a.trim().to_owned();
        } else if line.starts_with("ready") {
            server.startup = start.elapsed();
            return Ok(server);
        }
    }
}

/// A spawned process's stdout lines, each with when it arrived.
type Lines = mpsc::Receiver<(String, Instant)>;

/// Spawns `cmd` (`name`: tern-broker or tern-edge) with its data under `data`, its broker
/// and name server on ephemeral ports, `conf` written to `{stem}.conf` there as its config
/// file and stderr appended to `{stem}.log` beside it; returns the server, its stdout
/// lines as they arrive (each with its arrival time) and when it was spawned.
fn spawn_ephemeral(
    name: &str,
    mut cmd: Command,
    data: &Path,
    stem: &str,
    conf: &str,
    bin: &Path,
) -> Result<(Server, Lines, Instant), String> {
    fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let conf_path = data.join(format!("{stem}.conf"));
    fs::write(&conf_path, conf).map_err(|e| format!("{}: {e}", conf_path.display()))?;
    let log = data.join(format!("{stem}.log"));
    let stderr = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let start = Instant::now();
    let mut child = cmd
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0"])
        .arg("-c")
        .arg(&conf_path)
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    // Read to the end even once nobody listens: a process whose stdout closes early
    // would see its later lines fail.
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send((line, Instant::now()));
        }
    });
    Ok((Server::spawned(name, child, "", log), rx, start))
}

/// The next stdout line of `server` starting since `start`, with when it came; an error
/// pointing at its log once it has taken [`START_TIMEOUT`].
fn next_line(rx: &Lines, start: Instant, server: &Server) -> Result<(String, Instant), String> {
    let left = START_TIMEOUT.saturating_sub(start.elapsed());
    rx.recv_timeout(left).map_err(|_| {
        format!(
            "{} did not start; see {}",
            server.name,
            server.log.display()
        )
    })
}

/// Starts `tern-broker --standalone` on ephemeral ports with `conf` as broker.conf, and
/// waits for both "listening on" lines; the start-up time is spawn → broker line.
pub fn start_tern(data: &Path, conf: &str) -> Result<Server, String> {
    let bin = tern_broker_bin()?;
    // The gRPC endpoint (on with --standalone) on a free port unless the conf names one;
    // no console (its sampler would be load the peers do not carry).
    let mut conf = if conf.contains("grpcServerPort") {
        conf.to_owned()
    } else {
        format!("grpcServerPort=0\n{conf}")
    };
    if !conf.contains("consoleEnable") {
        conf = format!("consoleEnable=false\n{conf}");
    }
    let mut cmd = Command::new(&bin);
    cmd.arg("--standalone");
    let (mut server, rx, start) = spawn_ephemeral("tern-broker", cmd, data, "broker", &conf, &bin)?;
    loop {
        let (line, at) = next_line(&rx, start, &server)?;
        if let Some(a) = line.strip_prefix("tern-namesrv listening on ") {
            server.namesrv = Some(a.trim().to_owned());
        } else if let Some(a) = line.strip_prefix("tern-broker listening on ") {
            server.addr = a.trim().to_owned();
            server.startup = at - start;
        } else if let Some(a) = line.strip_prefix("tern-broker gRPC endpoint on ") {
            server.grpc = Some(a.trim().to_owned());
        } else if line.starts_with("ready") && !server.addr.is_empty() {
            break;
        }
    }
    Ok(server)
}

/// Starts a peer's server: `cmd` must listen on `addr`; start-up is spawn → first accept.
pub fn start_listening(
    name: &str,
    mut cmd: Command,
    addr: &str,
    log: PathBuf,
) -> Result<Server, String> {
    let stderr = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let out = stderr
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let start = Instant::now();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    let mut server = Server::spawned(name, child, addr, log);
    let sock: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    loop {
        if TcpStream::connect_timeout(&sock, Duration::from_millis(100)).is_ok() {
            server.startup = start.elapsed();
            return Ok(server);
        }
        if let Some(c) = server.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(format!(
                    "{name} exited ({st}); see {}",
                    server.log.display()
                ));
            }
        }
        if start.elapsed() > START_TIMEOUT {
            return Err(format!("{name} did not listen on {addr}"));
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// An executable by name on `PATH` (or in the usual sbin folders Debian uses).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Bytes used by the files under `dir` (apparent sizes, recursively).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// CPU time (user + system) process `pid` (or `self`) has used so far, from
/// `/proc/PID/stat`.
pub fn cpu_time_of(pid: &str) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which may hold spaces, closed by the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |i: usize| -> u64 {
        rest.split_whitespace()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let ticks = field(11) + field(12);
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Ok(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// CPU time the whole machine has spent busy (every state of `/proc/stat`'s `cpu` line
/// but idle and iowait), summed over cores: with [`cpu_time_of`] it tells how much of the
/// machine other processes took during a run.
pub fn machine_busy() -> io::Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no cpu line in /proc/stat"))?;
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy: u64 = f
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    let hz = rustix::param::clock_ticks_per_second().max(1);
    Ok(Duration::from_secs_f64(busy as f64 / hz as f64))
}
