//! Controller mode (RocketMQ 5, RIP-44) on the broker side: what a broker keeps so that
//! a controller group (`tern-controller`, or Java's) can move the master role between the
//! replicas of a broker-set without losing an acknowledged message
//! (docs/design/controller.md §6-7).
//!
//! * [`epoch`]: the epoch file, `<epoch, start offset>` per master term, and the point two
//!   replicas' logs agree up to.
//!
//! The broker does not run in controller mode yet (`enableControllerMode` is not read):
//! the role manager, the AutoSwitch replication and the truncation that use these come
//! next (issue 16).

pub mod epoch;
