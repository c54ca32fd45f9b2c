//! The gateway's process tests, one binary: each module is a file of tests/ that runs the
//! real tern-edge (natively, or cross-built under qemu-user with TERN_EDGE_BIN and
//! TERN_EDGE_RUNNER) against a real tern-broker. One binary instead of one per file: each
//! file linked alone re-compiled the harness, and test.sh runs them for three builds.

#[path = "../../../shell/tests/support/certs.rs"]
mod certs;
mod common;

mod blocked;
mod dead_letters;
mod exactly_once;
mod footprint;
mod gateway;
mod pending;
mod route_change;
