//! The name server's process tests, one binary: each module is a file of tests/ that
//! drives the real tern-namesrv over real sockets (one binary links once: CI time).

mod common;

mod acl;
mod config_codes;
mod metrics;
mod process;
mod routes;
mod state_version;
