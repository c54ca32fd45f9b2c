//! Subscription groups: per-group settings (retry queues, max retries), created on first
//! heartbeat (or pull, or send-back) when allowed, persisted under `config/` (written on
//! the blocking pool, see [`crate::persist`]). What a peer can make this way is bounded:
//! names as RocketMQ's clients validate them, and at most [`AUTO_CREATE_MAX_GROUPS`]
//! groups.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tern_shell::sync::RwLockExt;

use tern_shell::ResponseCode;
use tern_shell::body::{DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper};

use tern_shell::runtime::now_ms;

use crate::persist::{Saver, load_json};
use crate::topics::{NameError, NameOf, validate_name};

/// Longest group name (RocketMQ's `Validators.CHARACTER_MAX_LENGTH`).
pub const MAX_GROUP_NAME_LEN: usize = 255;

/// Auto-creation makes no group once the table holds this many: every group costs
/// memory, a share of each table write and, in clustering mode, a retry topic, and a
/// peer chooses the names. Groups made by an admin (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
/// are not limited.
pub const AUTO_CREATE_MAX_GROUPS: usize = 10_000;

/// Why a group name is refused: RocketMQ's client-side checks (`Validators.checkGroup`)
/// and their wording.
pub fn validate_group(group: &str) -> Result<(), NameError> {
    validate_name(NameOf::Group, group)
}

/// Why [`Groups::try_get_or_create`] gives no group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRefused {
    /// Absent, and auto-creation is off.
    NotFound,
    /// Absent, and its name breaks RocketMQ's rules (the reason).
    BadName(NameError),
    /// Absent, and the table already holds [`AUTO_CREATE_MAX_GROUPS`] groups.
    Full,
}

impl GroupRefused {
    /// The answer's code: SUBSCRIPTION_GROUP_NOT_EXIST, as RocketMQ answers for a group
    /// it does not have; the remark says why.
    pub fn response_code(&self) -> ResponseCode {
        ResponseCode::SubscriptionGroupNotExist
    }

    /// The answer's remark for `group`.
    pub fn remark(&self, group: &str) -> String {
        match self {
            Self::NotFound => format!("subscription group [{group}] does not exist"),
            Self::BadName(why) => {
                format!("subscription group not created: {why}")
            }
            Self::Full => format!(
                "subscription group [{group}] does not exist and is not created: the broker \
                 holds {AUTO_CREATE_MAX_GROUPS} groups, the most auto-creation makes"
            ),
        }
    }
}

/// The group table.
#[derive(Debug)]
pub struct Groups {
    /// Shared with the saver, which copies it when it writes.
    table: Arc<RwLock<Table>>,
    /// `autoCreateSubscriptionGroup`, changed at run time by UPDATE_BROKER_CONFIG.
    auto_create: std::sync::atomic::AtomicBool,
    /// [`AUTO_CREATE_MAX_GROUPS`]; smaller in tests.
    auto_create_max: usize,
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
        let table = match load_json::<SubscriptionGroupWrapper>(&path) {
            Ok(Some(w)) => Table {
                groups: w.subscription_group_table,
                version: w.data_version,
                copied_from: None,
            },
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
            auto_create: std::sync::atomic::AtomicBool::new(auto_create),
            auto_create_max: AUTO_CREATE_MAX_GROUPS,
        }
    }

    /// Turns creation of unknown groups on or off (`autoCreateSubscriptionGroup`).
    pub fn set_auto_create(&self, on: bool) {
        self.auto_create
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        read(&self.table)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write_guard()
    }

    /// The group's settings, creating them with defaults when auto-creation is on and
    /// the name and the table's size allow it ([`Self::try_get_or_create`] says why not).
    pub fn get_or_create(&self, group: &str) -> Option<SubscriptionGroupConfig> {
        self.try_get_or_create(group).ok()
    }

    /// The group's settings, creating them with defaults when auto-creation is on, the
    /// name is valid ([`validate_group`]) and the table holds fewer than
    /// [`AUTO_CREATE_MAX_GROUPS`] groups. A group already present is returned whatever
    /// its name.
    pub fn try_get_or_create(&self, group: &str) -> Result<SubscriptionGroupConfig, GroupRefused> {
        if let Some(g) = self.get(group) {
            return Ok(g);
        }
        if !self.auto_create.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(GroupRefused::NotFound);
        }
        validate_group(group).map_err(GroupRefused::BadName)?;
        let g = SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        };
        {
            // Checked and inserted under one lock: concurrent creators cannot overshoot.
            let mut w = self.write();
            if let Some(existing) = w.groups.get(group) {
                return Ok(existing.clone());
            }
            if w.groups.len() >= self.auto_create_max {
                return Err(GroupRefused::Full);
            }
            w.groups.insert(group.to_owned(), g.clone());
            w.bump();
        }
        self.persist();
        log::info!("auto-created subscription group {group}");
        Ok(g)
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
    table.read_guard()
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
        crate::topics::bump(&mut self.version);
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
    fn group_names_follow_rocketmq_rules() {
        assert!(validate_group("CID_consumer-1|%RETRY%x").is_ok());
        assert!(validate_group(&"g".repeat(MAX_GROUP_NAME_LEN)).is_ok());
        assert!(
            validate_group("")
                .unwrap_err()
                .to_string()
                .contains("blank")
        );
        assert!(
            validate_group(" ")
                .unwrap_err()
                .to_string()
                .contains("blank")
        );
        assert!(
            validate_group(&"g".repeat(MAX_GROUP_NAME_LEN + 1))
                .unwrap_err()
                .to_string()
                .contains("longer than group max length 255")
        );
        for bad in ["a b", "a/b", "a.b", "grüppe", "a\0"] {
            assert!(
                validate_group(bad)
                    .unwrap_err()
                    .to_string()
                    .contains("illegal characters"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn auto_creation_refuses_bad_names_and_stops_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let mut g = Groups::load(dir.path(), true);
        g.auto_create_max = 3;
        g.upsert(group("by_admin", 1));
        assert!(matches!(
            g.try_get_or_create("bad name"),
            Err(GroupRefused::BadName(_))
        ));
        assert!(matches!(
            g.try_get_or_create(&"x".repeat(256)),
            Err(GroupRefused::BadName(_))
        ));
        assert!(g.get_or_create("a").is_some());
        assert!(g.get_or_create("b").is_some());
        assert_eq!(g.try_get_or_create("c"), Err(GroupRefused::Full));
        assert!(
            GroupRefused::Full
                .remark("c")
                .contains("holds 10000 groups")
        );
        assert!(g.get("c").is_none());
        // Present groups are still served, and admins may still add.
        assert_eq!(g.try_get_or_create("a").unwrap().group_name, "a");
        g.upsert(group("by_admin_2", 1));
        assert!(g.get("by_admin_2").is_some());
        let off = Groups::load(dir.path(), false);
        assert_eq!(off.try_get_or_create("zzz"), Err(GroupRefused::NotFound));
        // Made concurrently, the count still holds.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let mut g = Groups::load(dir.path(), true);
        g.auto_create_max = 50;
        let g = std::sync::Arc::new(g);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let g = g.clone();
                std::thread::spawn(move || {
                    (0..40)
                        .filter(|i| g.get_or_create(&format!("g{t}_{i}")).is_some())
                        .count()
                })
            })
            .collect();
        let made: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(made, 50);
        assert_eq!(g.wrapper().subscription_group_table.len(), 50);
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
