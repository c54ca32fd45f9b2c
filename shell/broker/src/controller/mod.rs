//! Controller mode (RocketMQ 5, RIP-44) on the broker side: a controller group
//! (`tern-controller`, or Java's) assigns this broker's id and moves the master role
//! between the replicas of a broker-set without losing an acknowledged message
//! (docs/design/controller.md §6-7).
//!
//! * [`settings`]: `enableControllerMode` and its keys.
//! * [`epoch`]: the epoch file, `<epoch, start offset>` per master term, and the point two
//!   replicas' logs agree up to.
//! * [`replica`]: what this replica knows of its set (id, master, SyncStateSet, epochs).
//! * [`client`]: calls to the controller leader, heartbeats to every controller.
//! * [`manager`]: registration, heartbeats, the role loop and the switches.
//! * [`requests`]: NOTIFY_BROKER_ROLE_CHANGED and GET_BROKER_EPOCH_CACHE.
//! * [`in_sync`]: what a send waits for (`allAckInSyncStateSet`), and the confirm offset
//!   that bounds what readers see.
//! * [`handshake`]: the epoch exchange that opens a replication connection, so a
//!   rejoining replica cuts its log where it parts from the master's.

use std::path::Path;

pub mod client;
pub mod epoch;
mod error;
pub mod handshake;
mod in_sync;
pub mod manager;
pub mod replica;
pub mod requests;
pub mod settings;

pub use error::{ControllerError, EpochsError, IdentityError};
pub use settings::ControllerSettings;

/// A broker in controller mode: what it knows, and how it reaches the controllers.
#[derive(Debug)]
pub struct ControllerMode {
    /// The set as this replica knows it.
    pub replica: replica::Replica,
    /// The controllers.
    pub client: client::ControllerClient,
}

impl ControllerMode {
    /// Opens the epoch file under the store root; `pool` dials the controllers.
    pub fn open(
        settings: &ControllerSettings,
        root: &Path,
        pool: tern_shell::ConnectionPool,
    ) -> Result<Self, EpochsError> {
        Ok(Self {
            replica: replica::Replica::open(root).map_err(EpochsError::Open)?,
            client: client::ControllerClient::new(settings.addrs.clone(), pool),
        })
    }
}
