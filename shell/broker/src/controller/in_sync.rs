//! What a send waits for in controller mode, and the confirm offset that follows the same
//! acknowledgements: `allAckInSyncStateSet` on the broker's send path.

use super::ControllerMode;
use crate::BrokerCtx;
use crate::ha::Replication;
use crate::store::Durability;

impl BrokerCtx {
    /// Controller mode, as master: moves the store's confirm offset to what every
    /// member of the SyncStateSet (and of a set this master proposed) acknowledged, with
    /// `allAckInSyncStateSet`; no bound without it, as in RocketMQ. Called after each
    /// acknowledgement and each change of the set, and by a send before its answer, so a
    /// reader after a SEND_OK finds the message. A slave's bound comes from its master's
    /// frames instead.
    pub(crate) fn update_confirm(&self) {
        let Some(cm) = &self.controller else { return };
        if !self.store.leads() {
            return;
        }
        if !self.config.controller.all_ack_in_sync_state_set {
            self.store.set_confirm(u64::MAX);
            return;
        }
        let me = cm.replica.broker_id().unwrap_or(-1);
        self.ha
            .confirm_offset(me, || cm.replica.wait_set(), |c| self.store.set_confirm(c));
    }

    /// Controller mode's answer to a send: durable as `flushDiskType` says, and with
    /// `allAckInSyncStateSet` held by every member of the SyncStateSet (and of one this
    /// master proposed), so any member the controllers elect has it. A record this broker
    /// appended as master but that it lost the role (or began a new term) before answering
    /// is never acknowledged: it may be cut when the broker rejoins as a slave.
    pub(crate) async fn await_in_sync(&self, cm: &ControllerMode, end: u64) -> Durability {
        let term = cm.replica.last_epoch();
        let durable = self.store.await_durable(end).await;
        if durable != Durability::Durable {
            return durable;
        }
        let deposed = || self.role.is_slave() || cm.replica.last_epoch() != term;
        if deposed() {
            return Durability::SlaveNotAvailable;
        }
        if self.config.controller.all_ack_in_sync_state_set {
            let me = cm.replica.broker_id().unwrap_or(-1);
            let waited = self.ha.await_members(
                me,
                || cm.replica.wait_set(),
                end,
                self.config.controller.slave_timeout,
            );
            if waited.await != Replication::Replicated {
                return Durability::SlaveTimeout;
            }
            self.update_confirm();
        }
        if deposed() {
            return Durability::SlaveNotAvailable;
        }
        Durability::Durable
    }
}
