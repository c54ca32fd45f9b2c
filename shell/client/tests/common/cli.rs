//! Running `tern-admin` from the tests: the binary with `-n`, its output checked.

use std::process::{Command, Output};

use serde_json::Value;

/// Runs `tern-admin` with `args` against the name server `ns`.
pub fn admin(ns: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern-admin"))
        .args(args)
        .args(["-n", ns])
        .env_remove("NAMESRV_ADDR")
        .output()
        .expect("run tern-admin")
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(ns: &str, args: &[&str]) -> String {
    let out = admin(ns, args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tern-admin {args:?} failed ({}):\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Creates `topic` with `queues` queues through the CLI; its stdout.
pub fn make_topic(ns: &str, topic: &str, queues: &str) -> String {
    ok(
        ns,
        &[
            "updateTopic",
            "-c",
            "DefaultCluster",
            "-t",
            topic,
            "-r",
            queues,
            "-w",
            queues,
        ],
    )
}

/// Creates subscription group `group` on every master through the CLI; its stdout.
pub fn make_group(ns: &str, group: &str) -> String {
    ok(ns, &["updateSubGroup", "-c", "DefaultCluster", "-g", group])
}

/// The stdout of a command that must have succeeded (else its output in the panic).
pub fn succeeded(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs a `--json` command; its stdout must parse as JSON.
pub fn json(ns: &str, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let text = ok(ns, &a);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{text}"))
}
