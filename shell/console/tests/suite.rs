//! Every integration test of tern-console, gathered in one binary.

mod api;
