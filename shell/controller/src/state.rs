//! The replicated state: broker-sets, their replicas, master and SyncStateSet, and the
//! commands that change them (RocketMQ's `ReplicasInfoManager` events,
//! docs/design/controller.md §5.2).
//!
//! Every controller applies the same commands in the same order. Unlike RocketMQ, whose
//! apply re-checks nothing, each command carries the epochs its decision was made on and
//! apply refuses it when they no longer hold: a decision computed on a stale view (a
//! leader that lost and regained leadership, two elections racing) can never be applied.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tern_shell::ResponseCode;

/// RocketMQ's `MixAll.FIRST_BROKER_CONTROLLER_ID`: the id of a set's first replica.
pub const FIRST_BROKER_ID: i64 = 1;

/// Most broker-sets one controller group holds (`controllerMaxBrokerSets`' default).
pub const MAX_BROKER_SETS: usize = 4096;

/// Most replicas in one broker-set.
pub const MAX_REPLICAS_PER_SET: usize = 32;

/// One replica of a broker-set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// Its remoting address.
    pub addr: String,
    /// The `registerCheckCode` it applied with (`addr;timestampMs`): the same broker
    /// retrying gets its id again, another is refused it.
    pub check_code: String,
}

/// A broker-set (RocketMQ's `BrokerReplicaInfo` and `SyncStateInfo` in one record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerSet {
    /// The cluster it belongs to.
    pub cluster: String,
    /// The id CONTROLLER_GET_NEXT_BROKER_ID hands out.
    pub next_id: i64,
    /// Controller id → replica.
    pub replicas: BTreeMap<i64, Replica>,
    /// The master's controller id, when there is one.
    pub master: Option<i64>,
    /// Grows on every election, successful or not.
    pub master_epoch: i32,
    /// The replicas that hold every acknowledged message.
    pub sync_state_set: BTreeSet<i64>,
    /// Grows on every change of the set (elections included).
    pub sync_state_set_epoch: i32,
}

impl BrokerSet {
    /// The master's address, when there is a master.
    pub fn master_addr(&self) -> Option<&str> {
        self.master
            .and_then(|id| self.replicas.get(&id))
            .map(|r| r.addr.as_str())
    }
}

/// A change to the state: one Raft log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// An empty entry a new leader commits before it answers (RocketMQ's
    /// `RoleChangeHandler` does the same with DLedger).
    Noop,
    /// A broker takes `id` in `name` (CONTROLLER_APPLY_BROKER_ID).
    ApplyBrokerId {
        /// Cluster.
        cluster: String,
        /// Broker-set.
        name: String,
        /// The id applied for.
        id: i64,
        /// Its address.
        addr: String,
        /// Its check code.
        check_code: String,
    },
    /// A new master (or none) for `name`, decided while the epoch was `expect_master_epoch`.
    Elect {
        /// Broker-set.
        name: String,
        /// The new master; `None` clears it (no eligible replica is alive).
        master: Option<i64>,
        /// The master epoch the decision saw.
        expect_master_epoch: i32,
    },
    /// The master's new SyncStateSet (CONTROLLER_ALTER_SYNC_STATE_SET).
    AlterSyncStateSet {
        /// Broker-set.
        name: String,
        /// The new members.
        members: BTreeSet<i64>,
        /// The master that proposed it.
        master: i64,
        /// Its master epoch.
        master_epoch: i32,
        /// The set epoch it proposed against.
        sync_state_set_epoch: i32,
    },
    /// A replica's address changed (CONTROLLER_REGISTER_BROKER from a new address).
    UpdateAddr {
        /// Broker-set.
        name: String,
        /// Replica.
        id: i64,
        /// Its new address.
        addr: String,
    },
    /// Forget replicas, or the whole set (CLEAN_BROKER_DATA).
    Clean {
        /// Broker-set.
        name: String,
        /// The replicas; `None` forgets the set.
        ids: Option<Vec<i64>>,
    },
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Applied.
    Done,
    /// Not applied: a precondition no longer held. The code is RocketMQ's for that case.
    Refused {
        /// A `ResponseCode` number (2000-2014).
        code: i32,
        /// Why, for the caller.
        remark: String,
    },
}

fn refused(code: ResponseCode, remark: impl Into<String>) -> Outcome {
    Outcome::Refused {
        code: code.raw(),
        remark: remark.into(),
    }
}

/// Every broker-set the group knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    sets: BTreeMap<String, BrokerSet>,
    /// The epochs a forgotten set had reached: a set created again under the same name
    /// starts above them, so its brokers' epoch files (which only grow) accept the next
    /// election (RocketMQ restarts at 0, docs/design/controller.md §10.10).
    epoch_floor: BTreeMap<String, (i32, i32)>,
}

impl Metadata {
    /// The set named `name`.
    pub fn set(&self, name: &str) -> Option<&BrokerSet> {
        self.sets.get(name)
    }

    /// Every set, by name.
    pub fn sets(&self) -> impl Iterator<Item = (&str, &BrokerSet)> {
        self.sets.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The id a new replica of `name` should apply for.
    pub fn next_broker_id(&self, name: &str) -> i64 {
        self.sets.get(name).map_or(FIRST_BROKER_ID, |s| s.next_id)
    }

    /// Applies `cmd`, re-checking what it was decided on.
    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        match cmd {
            Command::Noop => Outcome::Done,
            Command::ApplyBrokerId {
                cluster,
                name,
                id,
                addr,
                check_code,
            } => self.apply_broker_id(cluster, name, *id, addr, check_code),
            Command::Elect {
                name,
                master,
                expect_master_epoch,
            } => self.elect(name, *master, *expect_master_epoch),
            Command::AlterSyncStateSet {
                name,
                members,
                master,
                master_epoch,
                sync_state_set_epoch,
            } => self.alter_sync_state_set(
                name,
                members,
                *master,
                *master_epoch,
                *sync_state_set_epoch,
            ),
            Command::UpdateAddr { name, id, addr } => {
                match self.sets.get_mut(name).and_then(|s| s.replicas.get_mut(id)) {
                    Some(r) => {
                        r.addr.clone_from(addr);
                        Outcome::Done
                    }
                    None => refused(
                        ResponseCode::ControllerBrokerNeedToBeRegistered,
                        format!("broker {name} id {id} is not registered"),
                    ),
                }
            }
            Command::Clean { name, ids } => self.clean(name, ids.as_deref()),
        }
    }

    fn apply_broker_id(
        &mut self,
        cluster: &str,
        name: &str,
        id: i64,
        addr: &str,
        check_code: &str,
    ) -> Outcome {
        let invalid = || {
            refused(
                ResponseCode::ControllerBrokerIdInvalid,
                format!("broker id {id} of {name} is taken or out of turn"),
            )
        };
        let replica = Replica {
            addr: addr.to_owned(),
            check_code: check_code.to_owned(),
        };
        let Some(set) = self.sets.get_mut(name) else {
            if id != FIRST_BROKER_ID {
                return invalid();
            }
            if self.sets.len() >= MAX_BROKER_SETS {
                return refused(
                    ResponseCode::ControllerBrokerIdInvalid,
                    format!("the controller holds {MAX_BROKER_SETS} broker-sets already"),
                );
            }
            let (master_epoch, sync_state_set_epoch) =
                self.epoch_floor.get(name).copied().unwrap_or((0, 0));
            self.sets.insert(
                name.to_owned(),
                BrokerSet {
                    cluster: cluster.to_owned(),
                    next_id: id + 1,
                    replicas: [(id, replica)].into_iter().collect(),
                    master: None,
                    master_epoch,
                    sync_state_set: BTreeSet::new(),
                    sync_state_set_epoch,
                },
            );
            return Outcome::Done;
        };
        match set.replicas.get(&id) {
            Some(held) if held.check_code == check_code => Outcome::Done,
            Some(_) => invalid(),
            None if id < FIRST_BROKER_ID => invalid(),
            None if set.replicas.len() >= MAX_REPLICAS_PER_SET => refused(
                ResponseCode::ControllerBrokerIdInvalid,
                format!("{name} has {MAX_REPLICAS_PER_SET} replicas already"),
            ),
            None => {
                set.replicas.insert(id, replica);
                set.next_id = set.next_id.max(id + 1);
                Outcome::Done
            }
        }
    }

    fn elect(&mut self, name: &str, master: Option<i64>, expect_master_epoch: i32) -> Outcome {
        let Some(set) = self.sets.get_mut(name) else {
            return refused(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker-set {name} is not registered"),
            );
        };
        if set.master_epoch != expect_master_epoch {
            return refused(
                ResponseCode::ControllerFencedMasterEpoch,
                format!(
                    "the election was decided at master epoch {expect_master_epoch}, {name} is at {}",
                    set.master_epoch
                ),
            );
        }
        if let Some(id) = master {
            if !set.replicas.contains_key(&id) {
                return refused(
                    ResponseCode::ControllerElectMasterFailed,
                    format!("broker {id} is not a replica of {name}"),
                );
            }
            set.sync_state_set = [id].into_iter().collect();
            set.sync_state_set_epoch += 1;
        }
        set.master = master;
        set.master_epoch += 1;
        Outcome::Done
    }

    fn alter_sync_state_set(
        &mut self,
        name: &str,
        members: &BTreeSet<i64>,
        master: i64,
        master_epoch: i32,
        sync_state_set_epoch: i32,
    ) -> Outcome {
        let Some(set) = self.sets.get_mut(name) else {
            return refused(
                ResponseCode::ControllerAlterSyncStateSetFailed,
                "Broker metadata is not existed",
            );
        };
        if set.master != Some(master) {
            return refused(
                ResponseCode::ControllerInvalidMaster,
                format!("broker {master} is not the master of {name}"),
            );
        }
        if set.master_epoch != master_epoch {
            return refused(
                ResponseCode::ControllerFencedMasterEpoch,
                format!(
                    "master epoch {master_epoch} is not {name}'s epoch {}",
                    set.master_epoch
                ),
            );
        }
        if set.sync_state_set_epoch != sync_state_set_epoch {
            return refused(
                ResponseCode::ControllerFencedSyncStateSetEpoch,
                format!(
                    "sync state set epoch {sync_state_set_epoch} is not {name}'s epoch {}",
                    set.sync_state_set_epoch
                ),
            );
        }
        if let Some(stranger) = members.iter().find(|id| !set.replicas.contains_key(id)) {
            return refused(
                ResponseCode::ControllerInvalidReplicas,
                format!("broker {stranger} is not a replica of {name}"),
            );
        }
        if !members.contains(&master) {
            return refused(
                ResponseCode::ControllerAlterSyncStateSetFailed,
                "the new sync state set does not contain the master",
            );
        }
        set.sync_state_set.clone_from(members);
        set.sync_state_set_epoch += 1;
        Outcome::Done
    }

    fn clean(&mut self, name: &str, ids: Option<&[i64]>) -> Outcome {
        let Some(set) = self.sets.get_mut(name) else {
            return refused(
                ResponseCode::ControllerInvalidCleanBrokerMetadata,
                format!("broker-set {name} is not registered"),
            );
        };
        if let Some(ids) = ids {
            for id in ids {
                set.replicas.remove(id);
                set.sync_state_set.remove(id);
                if set.master == Some(*id) {
                    // A forgotten master is no master; the epoch moves so that it, should
                    // it come back, is fenced.
                    set.master = None;
                    set.master_epoch += 1;
                }
            }
            if !set.replicas.is_empty() {
                return Outcome::Done;
            }
        }
        if let Some(set) = self.sets.remove(name) {
            self.epoch_floor.insert(
                name.to_owned(),
                (set.master_epoch, set.sync_state_set_epoch),
            );
        }
        Outcome::Done
    }
}

#[cfg(test)]
mod tests;
