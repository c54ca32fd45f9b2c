//! Subscription groups: per-group settings (retry queues, max retries), created on first
//! heartbeat when allowed, persisted under `config/` (written on the blocking pool, see
//! [`crate::persist`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tern_shell::body::{DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper};

use tern_shell::runtime::now_ms;

use crate::persist::Saver;

/// The group table.
#[derive(Debug)]
pub struct Groups {
    /// Shared with the saver, which copies it when it writes.
    table: Arc<RwLock<Table>>,
    auto_create: bool,
    /// The table's JSON, as RocketMQ's admin tools exchange it.
    saver: Saver<Vec<u8>>,
}

#[derive(Debug)]
struct Table {
    groups: BTreeMap<String, SubscriptionGroupConfig>,
    /// Moves on every change, as RocketMQ's `SubscriptionGroupManager` does, so a slave
    /// copies the table only when it changed.
    version: DataVersion,
    /// The master version this table was last copied from: a change made on the slave
    /// can get the very stamp of a change on the master (same millisecond, same
    /// counter), so equal versions prove nothing unless the table has not moved since.
    copied_from: Option<DataVersion>,
}

fn fresh_version() -> DataVersion {
    DataVersion {
        state_version: 0,
        timestamp: now_ms(),
        counter: 0,
    }
}

impl Groups {
    /// Loads `config/subscriptionGroup` under `store_root`. The file holds the JSON that
    /// RocketMQ's admin tools exchange, so it stays readable by them.
    pub fn load(store_root: &Path, auto_create: bool) -> Self {
        let path = store_root.join("config").join("subscriptionGroup.tern");
        let table = match tern_engine_fs::meta::load::<Vec<u8>>(&path) {
            Ok(Some(json)) => {
                match tern_shell::body::from_json::<SubscriptionGroupWrapper>(&json) {
                    Ok(w) => Table {
                        groups: w.subscription_group_table,
                        version: w.data_version,
                        copied_from: None,
                    },
                    Err(e) => {
                        log::error!("subscription groups unreadable: {e}");
                        Table::empty()
                    }
                }
            }
            Ok(None) => Table::empty(),
            Err(e) => {
                log::error!("subscription groups unreadable: {e}");
                Table::empty()
            }
        };
        let table = Arc::new(RwLock::new(table));
        let copy = table.clone();
        Self {
            saver: Saver::new("subscription groups", path, move || {
                let w = read(&copy).wrapper();
                tern_shell::body::to_json(&w)
            }),
            table,
            auto_create,
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        read(&self.table)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The group's settings, creating them with defaults when auto-creation is on.
    pub fn get_or_create(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        if let Some(g) = self.get(group) {
            return Some(g);
        }
        if !self.auto_create {
            return None;
        }
        let g = SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        };
        self.upsert(g.clone());
        Some(g)
    }

    /// The group's settings, if present.
    pub fn get(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.read().groups.get(group).cloned()
    }

    /// Creates or replaces a group and persists the table; an identical config changes
    /// nothing, so the version moves only with the table.
    pub fn upsert(&self, g: SubscriptionGroupConfig) {
        {
            let mut w = self.write();
            if w.groups.get(&g.group_name) == Some(&g) {
                return;
            }
            w.groups.insert(g.group_name.clone(), g);
            w.bump();
        }
        self.persist();
    }

    /// Removes a group.
    pub fn delete(&self, group: &str) -> bool {
        let existed = {
            let mut w = self.write();
            let existed = w.groups.remove(group).is_some();
            if existed {
                w.bump();
            }
            existed
        };
        if existed {
            self.persist();
        }
        existed
    }

    /// A slave takes its master's table (RocketMQ's
    /// `SlaveSynchronize.syncSubscriptionGroupConfig`): when the master's data version
    /// differs from this table's, the table and version become the master's and are
    /// persisted. Unlike RocketMQ, equal versions skip the copy only when the table is
    /// still the one last copied. Returns true when the table was replaced.
    pub fn replace_from_master(&self, master: SubscriptionGroupWrapper) -> bool {
        {
            let mut w = self.write();
            if w.version == master.data_version && w.copied_from.as_ref() == Some(&w.version) {
                return false;
            }
            *w = Table {
                groups: master.subscription_group_table,
                copied_from: Some(master.data_version.clone()),
                version: master.data_version,
            };
        }
        self.persist();
        true
    }

    /// Every group, as GET_ALL_SUBSCRIPTIONGROUP_CONFIG carries it.
    pub fn wrapper(&self) -> SubscriptionGroupWrapper {
        self.read().wrapper()
    }

    /// Queues a write of the table; returns without waiting for the disk
    /// ([`Self::persisted`] does).
    pub fn persist(&self) {
        self.saver.save();
    }

    /// Resolves once every write queued so far is done.
    pub async fn persisted(&self) {
        self.saver.saved().await;
    }
}

fn read(table: &RwLock<Table>) -> RwLockReadGuard<'_, Table> {
    table.read().unwrap_or_else(|p| p.into_inner())
}

impl Table {
    fn wrapper(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            subscription_group_table: self.groups.clone(),
            data_version: self.version.clone(),
            ..SubscriptionGroupWrapper::default()
        }
    }

    fn empty() -> Self {
        Self {
            groups: BTreeMap::new(),
            version: fresh_version(),
            copied_from: None,
        }
    }

    fn bump(&mut self) {
        self.version.counter += 1;
        self.version.timestamp = now_ms();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, retries: i32) -> SubscriptionGroupConfig {
        SubscriptionGroupConfig {
            group_name: name.into(),
            retry_max_times: retries,
            ..SubscriptionGroupConfig::default()
        }
    }

    #[test]
    fn the_version_moves_only_when_the_table_changes_and_survives_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let g = Groups::load(dir.path(), true);
        let v0 = g.wrapper().data_version;
        assert_eq!(g.wrapper().data_version, v0, "stable between reads");
        g.upsert(group("g", 3));
        let v1 = g.wrapper().data_version;
        assert_eq!(v1.counter, v0.counter + 1);
        g.upsert(group("g", 3));
        assert_eq!(g.wrapper().data_version, v1, "same config: no change");
        assert!(!g.delete("nope"));
        assert_eq!(g.wrapper().data_version, v1);
        tern_shell::runtime::block_on(g.persisted());
        let again = Groups::load(dir.path(), true);
        assert_eq!(again.wrapper(), g.wrapper());
    }

    #[test]
    fn a_slave_takes_a_master_table_with_another_version() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let slave = Groups::load(dir.path(), true);
        slave.upsert(group("slave_only", 1));
        let mut master = SubscriptionGroupWrapper::default();
        master
            .subscription_group_table
            .insert("g".into(), group("g", 7));
        master.data_version.counter = 9;
        assert!(slave.replace_from_master(master.clone()));
        assert!(slave.get("slave_only").is_none());
        assert_eq!(slave.get("g").unwrap().retry_max_times, 7);
        assert!(!slave.replace_from_master(master.clone()));
        // A local change stamped exactly as the master's next one must not hide it.
        slave.upsert(group("slave_only", 1));
        let mut next = master;
        next.data_version = slave.wrapper().data_version;
        next.subscription_group_table
            .insert("h".into(), group("h", 2));
        assert!(slave.replace_from_master(next));
        assert!(slave.get("h").is_some() && slave.get("slave_only").is_none());
        tern_shell::runtime::block_on(slave.persisted());
        assert_eq!(Groups::load(dir.path(), true).wrapper(), slave.wrapper());
    }
}
