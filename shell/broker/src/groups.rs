//! Subscription groups: per-group settings (retry queues, max retries), created on first
//! heartbeat when allowed, persisted under `config/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use tern_shell::body::{DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper};

use tern_shell::runtime::now_ms;

/// The group table.
#[derive(Debug)]
pub struct Groups {
    table: RwLock<BTreeMap<String, SubscriptionGroupConfig>>,
    auto_create: bool,
    path: PathBuf,
}

impl Groups {
    /// Loads `config/subscriptionGroup` under `store_root`. The file holds the JSON that
    /// RocketMQ's admin tools exchange, so it stays readable by them.
    pub fn load(store_root: &Path, auto_create: bool) -> Self {
        let path = store_root.join("config").join("subscriptionGroup.tern");
        let table = match tern_engine_fs::meta::load::<Vec<u8>>(&path) {
            Ok(Some(json)) => {
                match tern_shell::body::from_json::<SubscriptionGroupWrapper>(&json) {
                    Ok(w) => w.subscription_group_table,
                    Err(e) => {
                        log::error!("subscription groups unreadable: {e}");
                        BTreeMap::new()
                    }
                }
            }
            Ok(None) => BTreeMap::new(),
            Err(e) => {
                log::error!("subscription groups unreadable: {e}");
                BTreeMap::new()
            }
        };
        Self {
            table: RwLock::new(table),
            auto_create,
            path,
        }
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
        self.table
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .cloned()
    }

    /// Creates or replaces a group and persists the table.
    pub fn upsert(&self, g: SubscriptionGroupConfig) {
        self.table
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(g.group_name.clone(), g);
        self.persist();
    }

    /// Removes a group.
    pub fn delete(&self, group: &str) -> bool {
        let existed = self
            .table
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(group)
            .is_some();
        if existed {
            self.persist();
        }
        existed
    }

    /// Every group, as GET_ALL_SUBSCRIPTIONGROUP_CONFIG carries it.
    pub fn wrapper(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            subscription_group_table: self.table.read().unwrap_or_else(|p| p.into_inner()).clone(),
            data_version: DataVersion {
                state_version: 0,
                timestamp: now_ms(),
                counter: 0,
            },
            ..SubscriptionGroupWrapper::default()
        }
    }

    fn persist(&self) {
        let json = tern_shell::body::to_json(&self.wrapper());
        if let Err(e) = tern_engine_fs::meta::save(&self.path, &json) {
            log::error!("saving subscription groups: {e}");
        }
    }
}
