//! The client's integration tests, one binary: each module is a file of tests/ that
//! drives the real tern-broker (or Apache's C++ client) over real sockets. One binary
//! instead of one per file: each file linked alone re-compiled the client, the broker's
//! harness and their generics, most of CI's compile time.

#[path = "../../tests/support/certs.rs"]
mod certs;
mod common;

mod acl;
mod acl_admin;
mod admin_cli;
mod admin_cli_ops;
mod broker_epoch;
mod compression;
mod console;
mod consumer_admin;
mod cpp_cross;
mod delay;
mod fault_avoidance;
mod lite_pull_consumer;
mod produce_consume;
mod push_consumer;
mod push_pop;
mod replication;
mod request_reply;
mod simple_consumer;
mod smol_runtime;
mod sql_filter;
mod timer;
mod tls;
mod transaction;
