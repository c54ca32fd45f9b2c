//! The `tern-proxy` binary's start-up as an operator meets it: flags over the JSON file,
//! the effective configuration printed, and every refusal a clear line on stderr with a
//! non-zero exit. (Serving through it is `shell/broker/tests/proxy_cluster.rs`.) Being an
//! integration test also makes `cargo test` build the binary that test runs.

use std::path::Path;
use std::process::{Command, Output};

fn proxy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern-proxy"))
        .args(args)
        .env_remove("NAMESRV_ADDR")
        .output()
        .expect("run tern-proxy")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn an_unknown_flag_exits_2_with_the_usage() {
    let out = proxy(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("unknown argument '--bogus'"), "{err}");
    assert!(err.contains("usage: tern-proxy"), "{err}");
}

#[test]
fn print_config_shows_the_file_under_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "rmq-proxy.json",
        "{\n \"namesrvAddr\": \"10.0.0.1:9876\",\n \"grpcServerPort\": 18081,\n \
         \"rocketMQClusterName\": \"east\"\n}\n",
    );
    let out = proxy(&["-pc", &file, "-n", "127.0.0.1:9877", "-p"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        "namesrvAddr=127.0.0.1:9877",
        "grpcServerPort=18081",
        "rocketMQClusterName=east",
        "proxyMode=cluster",
        "topicConfigCacheRefreshSeconds=20",
        "subscriptionGroupConfigCacheMaxNum=20000",
    ] {
        assert!(lines.contains(&want), "no {want} in\n{text}");
    }
    let mut sorted = lines.clone();
    sorted.sort_unstable();
    assert_eq!(lines, sorted, "sorted key=value");
}

#[test]
fn local_mode_is_refused_and_points_at_the_broker() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "p.json", "{\"proxyMode\": \"local\"}\n");
    let out = proxy(&["-pc", &file, "-n", "127.0.0.1:9876"]);
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains(&format!("{file}:1: proxyMode")), "{err}");
    assert!(err.contains("tern-broker --enable-proxy"), "{err}");
}

#[test]
fn a_bad_value_names_its_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "p.json",
        "{\n \"namesrvAddr\": \"127.0.0.1:9876\",\n \"grpcServerPort\": \"x\"\n}\n",
    );
    let out = proxy(&["-pc", &file, "-p"]);
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains(&format!("{file}:3: grpcServerPort")), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing printed for a refused configuration"
    );
}

#[test]
fn a_file_that_is_not_json_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "p.json", "{\n \"namesrvAddr\":\n");
    let out = proxy(&["-pc", &file]);
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains(&format!("{file}: not JSON")), "{err}");
}

#[test]
fn a_missing_file_is_refused() {
    let out = proxy(&["-pc", "/nonexistent/rmq-proxy.json"]);
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert!(err.contains("/nonexistent/rmq-proxy.json"), "{err}");
}
