//! Finds (or builds) a workspace binary for tests of a crate that does not own it (a
//! crate's own binaries are `env!("CARGO_BIN_EXE_<name>")`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary `name` (also its package's name) in this test's target profile directory,
/// built there (`cargo build -p <name>`) when absent.
pub fn binary(name: &str) -> PathBuf {
    binary_of(name, name)
}

/// The binary `name` of package `package` (e.g. `tern-admin` of `tern-client`), found or
/// built like [`binary`].
pub fn binary_of(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf();
    let bin = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !bin.exists() {
        let target_dir = profile_dir.parent().expect("target dir");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", package, "--bin", name, "--target-dir"])
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build");
        assert!(
            status.success(),
            "cargo build -p {package} --bin {name} failed"
        );
    }
    assert!(bin.exists(), "no {name} at {}", bin.display());
    bin
}
