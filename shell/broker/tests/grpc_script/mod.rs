//! The harness of the gRPC interop tests: `tests/interop/grpc_interop.py` (Apache's 5.x
//! Python client) as a child process, its output read line by line and its verdict
//! checked. Used by `interop_grpc.rs` (the endpoint in the broker) and
//! `proxy_cluster.rs` (the `tern-proxy` binary in front of a cluster).

#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use crate::common::BrokerProc;

use tern_testkit::python::repo_root;
pub use tern_testkit::python::{Script, parse_verdict};

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

/// What every 5.x client test starts with: its turn ([`serial`]) and the client's python,
/// `None` when the test should skip (see
/// [`grpc_python_or_skip`](tern_testkit::python::grpc_python_or_skip)).
pub fn grpc_test(test: &str) -> Option<(MutexGuard<'static, ()>, PathBuf)> {
    let serial = serial();
    let py = tern_testkit::python::grpc_python_or_skip(test)?;
    Some((serial, py))
}

pub fn admin() -> PathBuf {
    tern_testkit::binary_of("tern-client", "tern-admin")
}

/// `tests/interop/grpc_interop.py` against `target` with `args` as a child: HOME in the
/// test's temp dir (the client's logs), stdin piped (the restart scenario waits on it),
/// stdout collected and streamed.
pub fn script(py: &Path, home: &Path, target: &Target<'_>, args: &[&str]) -> Script {
    script_with_env(py, home, target, args, &[])
}

/// [`script`] with `env` added (ACL keys for tern-admin, TLS roots).
pub fn script_with_env(
    py: &Path,
    home: &Path,
    target: &Target<'_>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Script {
    let admin = admin();
    let mut full: Vec<OsString> = vec![
        "--endpoint".into(),
        target.endpoint.into(),
        "--namesrv".into(),
        target.namesrv.into(),
        "--admin".into(),
        admin.into(),
    ];
    full.extend(args.iter().map(OsString::from));
    let script = repo_root().join("tests/interop/grpc_interop.py");
    Script::spawn(py, &script, &full, home, env, true)
}

/// How a test ends a [`script`] run.
pub trait GrpcScript {
    /// Reads the rest of stdout and waits for the exit (killed past `limit`).
    fn finish(&mut self, limit: Duration) -> Option<ExitStatus>;

    /// Asserts exit 0, the `N passed, 0 failed` verdict and a PASS line starting with each
    /// of `expect`; prints the servers' stderr (`stderr`) tail before panicking.
    fn assert_passed(&mut self, what: &str, expect: &[&str], stderr: impl Fn() -> String);
}

impl GrpcScript for Script {
    fn finish(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.read_until(None, limit);
        let status = self.wait_exit(Duration::from_secs(10));
        if status.is_none() {
            self.kill();
        }
        status
    }

    fn assert_passed(&mut self, what: &str, expect: &[&str], stderr: impl Fn() -> String) {
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
