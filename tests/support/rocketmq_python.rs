//! Finds the Python that drives Apache's C++ client (PyPI `rocketmq==0.4.4`) for the
//! interop tests of every crate, which include this file with `#[path]`.
//!
//! Looked for in `TERN_RMQ_PYTHON`, `.venv` at the repo root (`scripts/setup-python.sh`,
//! which `./test.sh` runs) and `/tmp/rmqvenv`. Without one a test skips with a note,
//! unless `TERN_REQUIRE_INTEROP` is set (test.sh sets it): then a missing client is a
//! failure, so CI can never pass by skipping the real-client checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The repository root.
pub fn repo_root() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Crates sit one or two folders below the root.
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

/// The first of `candidates` that runs `probe` (python code) cleanly, or `None` (after a
/// note saying `why`) when the test should skip. Panics when none does and
/// `TERN_REQUIRE_INTEROP` is set. Shared by the venv finders of each client.
pub fn venv_python_or_skip(
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
