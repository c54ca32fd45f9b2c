//! Finds the Python that drives Apache's RocketMQ 5.x client (PyPI
//! `rocketmq-python-client==5.1.2`, gRPC) for the gRPC interop tests, which include this
//! file with `#[path]` beside `rocketmq_python.rs` (as the sibling module `rocketmq_python`).
//!
//! Looked for in `TERN_RMQ_GRPC_PYTHON` and `.venv-grpc` at the repo root
//! (`scripts/setup-python-grpc.sh`, which `./test.sh` runs; a venv of its own, as the C++
//! client's package `rocketmq==0.4.4` has the same top-level name). Without one a test skips
//! with a note, unless `TERN_REQUIRE_INTEROP` is set (test.sh sets it): then a missing client
//! is a failure.

use std::path::PathBuf;

use super::rocketmq_python::{repo_root, venv_python_or_skip};

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
