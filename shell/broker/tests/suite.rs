//! The broker's integration tests but the two gRPC interop binaries, one binary: each
//! module is a file of tests/ that drives the real tern-broker process over real sockets.
//! One binary instead of one per file: each file linked alone re-compiled the harness and
//! its generics, most of CI's compile time. interop_grpc.rs and proxy_cluster.rs stay
//! binaries of their own: each runs Apache's 5.x Python client for minutes, one scenario at
//! a time, and CI runs them beside this one.

#[path = "../../tests/support/certs.rs"]
mod certs;
mod common;
mod interop;

mod acl;
mod acl_resources;
mod admin_codes;
mod broker;
mod broker_clients;
mod broker_config;
mod broker_process;
mod dedup;
mod delay;
mod delete_topic;
mod grpc_endpoint;
mod ha;
mod ha_auth;
mod ha_tls;
mod interop_cpp;
mod interop_cpp_cluster;
mod metrics;
mod peer_bounds;
mod pop;
mod pop_restart;
mod pop_settings;
mod retention;
mod slave_sync;
mod sql_filter;
mod store_failure;
mod stuck_client;
mod sync_master_batch;
mod timer;
mod topic_attributes;
mod transaction;
