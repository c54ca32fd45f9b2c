//! The broker's role now. Set from `brokerRole` at start; in controller mode (to come,
//! issue 16) the controller moves it between master and slave while the broker runs, so
//! every path that behaves differently on a slave reads it here, per request, never from
//! the start-time configuration.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::BrokerRole;

/// The role, readable from any thread.
#[derive(Debug)]
pub struct RoleCell(AtomicU8);

fn encode(r: BrokerRole) -> u8 {
    match r {
        BrokerRole::AsyncMaster => 0,
        BrokerRole::SyncMaster => 1,
        BrokerRole::Slave => 2,
    }
}

fn decode(v: u8) -> BrokerRole {
    match v {
        0 => BrokerRole::AsyncMaster,
        1 => BrokerRole::SyncMaster,
        _ => BrokerRole::Slave,
    }
}

impl RoleCell {
    /// Starts as `role`.
    pub fn new(role: BrokerRole) -> Self {
        Self(AtomicU8::new(encode(role)))
    }

    /// The role now.
    pub fn get(&self) -> BrokerRole {
        decode(self.0.load(Ordering::Acquire))
    }

    /// Changes the role (the controller's decision, applied by the broker's role
    /// manager).
    pub fn set(&self, role: BrokerRole) {
        self.0.store(encode(role), Ordering::Release);
    }

    /// True on a slave: sends, offset commits and master-only services are refused.
    pub fn is_slave(&self) -> bool {
        self.get() == BrokerRole::Slave
    }
}

/// Waits until this broker is a master (in controller mode the role moves while the
/// broker runs; a classic slave waits until shutdown). False when the broker stops first.
pub async fn until_master(ctx: &crate::BrokerCtx) -> bool {
    while ctx.role.is_slave() && !ctx.shutdown.is_triggered() {
        let _ = tern_shell::runtime::race(
            tern_shell::runtime::sleep(std::time::Duration::from_millis(500)),
            ctx.shutdown.wait(),
        )
        .await;
    }
    !ctx.shutdown.is_triggered()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_reads_back_as_set() {
        let cell = RoleCell::new(BrokerRole::Slave);
        for r in [
            BrokerRole::AsyncMaster,
            BrokerRole::SyncMaster,
            BrokerRole::Slave,
        ] {
            cell.set(r);
            assert_eq!(cell.get(), r);
        }
        assert!(cell.is_slave());
    }
}
