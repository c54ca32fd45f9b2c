//! What Tern's process tests share (dev-only): the broker's, name server's,
//! controller's, client's and edge gateway's tests each start real binaries, read the
//! addresses they print, wait for them to get somewhere and tear them down. One copy of
//! each of those steps, so a fix to one (a race on a port, a missing log on failure)
//! reaches every suite.

mod binaries;
pub mod metrics;
mod ports;
mod process;
pub mod python;
mod small_store;
mod wait;

pub use binaries::{binary, binary_of};
pub use ports::{free_port, free_ports, restartable_port};
pub use process::Proc;
pub use small_store::GEOMETRY;
pub use wait::{EVERY, eventually, poll, poll_until, poll_until_async, wait_until};
