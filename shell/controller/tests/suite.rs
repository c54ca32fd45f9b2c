//! Process tests of `tern-controller`: real binaries, real sockets, kill -9.

mod common;
mod group;
