//! Topic configurations: the broker's topic table, persisted under `config/` (written on
//! the blocking pool, see [`crate::persist`]), with RocketMQ's system topics and
//! auto-creation from the TBW102 template.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tern_shell::sync::{MutexExt, RwLockExt};

use serde::{Deserialize, Serialize};
use tern_engine_fs::MetaError;
use tern_shell::body::{DataVersion, TopicConfig, TopicConfigSerializeWrapper};

use tern_shell::runtime::now_ms;

use crate::persist::Saver;

/// Template topic for auto-creation.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";
/// Longest topic name RocketMQ accepts.
pub const MAX_TOPIC_LEN: usize = 127;
/// Perm: readable.
pub const PERM_READ: i32 = 4;
/// Perm: writable.
pub const PERM_WRITE: i32 = 2;
/// Perm: inheritable (a template topic).
pub const PERM_INHERIT: i32 = 1;

pub(crate) use names::validate_name;
pub use names::{NameError, NameOf};
pub use tern_shell::topic::{SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS};

mod names;
pub(crate) mod refusals;

/// Why a topic name is refused.
pub fn validate_topic(topic: &str) -> Result<(), NameError> {
    validate_name(NameOf::Topic, topic)
}

/// The topics by name, and the version that moves with every change.
type Table = (BTreeMap<String, TopicConfig>, DataVersion);

/// On-disk form of the table (`topics-v2.tern`): each topic with its attributes.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    topics: Vec<PersistedTopic>,
    counter: i64,
    timestamp: i64,
}

/// One topic on disk.
#[derive(Debug, Serialize, Deserialize)]
struct PersistedTopic {
    name: String,
    read: i32,
    write: i32,
    perm: i32,
    filter: String,
    sys_flag: i32,
    order: bool,
    attributes: Vec<(String, String)>,
}

/// The first on-disk form (`topics.tern`, before topic attributes): read when there is
/// no `topics-v2.tern` yet, which the next write makes. The binary encoding has no room
/// for a field added later, hence a new file rather than a new field.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PersistedV1 {
    topics: Vec<(String, i32, i32, i32, String, i32, bool)>,
    counter: i64,
    timestamp: i64,
}

impl From<PersistedV1> for Persisted {
    fn from(v1: PersistedV1) -> Self {
        let topics = v1
            .topics
            .into_iter()
            .map(
                |(name, read, write, perm, filter, sys_flag, order)| PersistedTopic {
                    name,
                    read,
                    write,
                    perm,
                    filter,
                    sys_flag,
                    order,
                    attributes: Vec::new(),
                },
            )
            .collect();
        Self {
            topics,
            counter: v1.counter,
            timestamp: v1.timestamp,
        }
    }
}

/// The table on disk under `config/`: the current form, else the first one.
fn load_persisted(config_dir: &std::path::Path) -> Result<Option<Persisted>, MetaError> {
    let v2 = tern_engine_fs::meta::load::<Persisted>(&config_dir.join("topics-v2.tern"))?;
    if v2.is_some() {
        return Ok(v2);
    }
    let v1 = tern_engine_fs::meta::load::<PersistedV1>(&config_dir.join("topics.tern"))?;
    Ok(v1.map(Persisted::from))
}

/// The topic table.
#[derive(Debug)]
pub struct Topics {
    /// Shared with the saver, which copies it when it writes.
    table: Arc<RwLock<Table>>,
    /// The system topics this broker adds at load: a slave copying its master's table
    /// keeps those the master lacks, as its next load would add them back anyway.
    system: Vec<TopicConfig>,
    /// The master version this table was last copied from. A change made on the slave
    /// can get the very stamp of a change on the master (same millisecond, same
    /// counter), so a version equal to the master's proves nothing unless the table has
    /// not moved since the copy.
    copied_from: std::sync::Mutex<Option<DataVersion>>,
    saver: Saver<Persisted>,
}

fn topic(name: &str, read: i32, write: i32, perm: i32) -> TopicConfig {
    TopicConfig {
        topic_name: name.into(),
        read_queue_nums: read,
        write_queue_nums: write,
        perm,
        ..TopicConfig::default()
    }
}

impl Topics {
    /// Loads `config/topics` under `store_root`, adding the system topics (with
    /// `trace_topic`, the message-trace topic of `traceTopicEnable`).
    pub fn load(
        store_root: &std::path::Path,
        cluster: &str,
        broker_name: &str,
        auto_create: bool,
        default_queues: i32,
        trace_topic: Option<&str>,
    ) -> Self {
        let path = store_root.join("config").join("topics-v2.tern");
        let mut table = BTreeMap::new();
        let mut version = DataVersion {
            state_version: 0,
            timestamp: now_ms(),
            counter: 0,
        };
        match load_persisted(&store_root.join("config")) {
            Ok(Some(p)) => {
                for p in p.topics {
                    let mut t = topic(&p.name, p.read, p.write, p.perm);
                    t.topic_filter_type = p.filter;
                    t.topic_sys_flag = p.sys_flag;
                    t.order = p.order;
                    t.attributes = p.attributes.into_iter().collect();
                    table.insert(p.name, t);
                }
                version.counter = p.counter;
                version.timestamp = p.timestamp;
            }
            Ok(None) => {}
            Err(e) => log::error!("topic table unreadable, starting with system topics only: {e}"),
        }
        let rw = PERM_READ | PERM_WRITE;
        let mut system = vec![
            topic("SELF_TEST_TOPIC", 1, 1, rw),
            topic("OFFSET_MOVED_EVENT", 1, 1, rw),
            topic("SCHEDULE_TOPIC_XXXX", 18, 18, rw),
            topic(tern_engine::timer::TIMER_TOPIC, 1, 1, rw),
            topic("RMQ_SYS_TRANS_HALF_TOPIC", 1, 1, rw),
            topic("RMQ_SYS_TRANS_OP_HALF_TOPIC", 1, 1, rw),
            topic("BenchmarkTest", 1024, 1024, rw),
            topic(cluster, 16, 16, rw | PERM_INHERIT),
            // Where request-reply's replies go (RocketMQ's `<cluster>_REPLY_TOPIC`).
            topic(&format!("{cluster}_REPLY_TOPIC"), 1, 1, rw),
            topic(broker_name, 1, 1, rw | PERM_INHERIT),
        ];
        if let Some(name) = trace_topic {
            system.push(topic(name, 1, 1, rw));
        }
        if auto_create {
            system.push(topic(
                AUTO_CREATE_TOPIC,
                default_queues,
                default_queues,
                rw | PERM_INHERIT,
            ));
        }
        for t in &system {
            table
                .entry(t.topic_name.clone())
                .or_insert_with(|| t.clone());
        }
        let table = Arc::new(RwLock::new((table, version)));
        let copy = table.clone();
        Self {
            saver: Saver::new("topics", path, move || on_disk(&read(&copy))),
            table,
            system,
            copied_from: std::sync::Mutex::new(None),
        }
    }

    /// The configuration of `topic`, if it exists.
    pub fn get(&self, topic: &str) -> Option<TopicConfig> {
        self.read().0.get(topic).cloned()
    }

    /// The configuration of `topic`, or TOPIC_NOT_EXIST with RocketMQ's remark for the
    /// admin and offset requests that name a topic.
    pub fn existing(&self, topic: &str) -> Result<TopicConfig, tern_shell::Refusal> {
        self.get(topic).ok_or_else(|| {
            tern_shell::Refusal::new(
                tern_shell::ResponseCode::TopicNotExist,
                format!("topic[{topic}] not exist"),
            )
        })
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        read(&self.table)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write_guard()
    }

    /// Creates or replaces a topic; persists and returns true when something changed.
    pub fn upsert(&self, config: TopicConfig) -> bool {
        let changed = {
            let mut w = self.write();
            let changed = w.0.get(&config.topic_name) != Some(&config);
            if changed {
                w.0.insert(config.topic_name.clone(), config);
                bump(&mut w.1);
            }
            changed
        };
        if changed {
            self.persist();
        }
        changed
    }

    /// Creates `topic` on first send from the template `default_topic`, as RocketMQ does:
    /// the template must exist and be inheritable; the queue count is the smaller of the
    /// producer's wish and the template's.
    pub fn create_from_template(
        &self,
        topic: &str,
        default_topic: &str,
        queues: i32,
        sys_flag: i32,
    ) -> Option<TopicConfig> {
        if let Some(t) = self.get(topic) {
            return Some(t);
        }
        let template = self.get(default_topic)?;
        if template.perm & PERM_INHERIT == 0 {
            return None;
        }
        let n = queues.clamp(1, template.write_queue_nums.max(1));
        let mut t = topic_config_new(topic, n, n, template.perm & !PERM_INHERIT);
        t.topic_sys_flag = sys_flag;
        self.upsert(t.clone());
        log::info!("auto-created topic {topic} with {n} queues from {default_topic}");
        Some(t)
    }

    /// Creates a retry or DLQ topic for a group if missing.
    pub fn ensure(&self, topic: &str, queues: i32, perm: i32) -> TopicConfig {
        if let Some(t) = self.get(topic) {
            return t;
        }
        let t = topic_config_new(topic, queues, queues, perm);
        self.upsert(t.clone());
        t
    }

    /// A slave stored a replicated record of `topic`'s queue `queue_id`: when the topic
    /// is missing (created on the master after the last metadata copy) or has fewer
    /// queues, it gets a read-write config covering the queue, so consumers that fail
    /// over to this slave can read it before the next copy (which then replaces it).
    pub fn ensure_replicated(&self, topic: &str, queue_id: i32) {
        let queues = queue_id.saturating_add(1);
        match self.get(topic) {
            Some(t) if t.read_queue_nums >= queues => {}
            Some(mut t) => {
                t.read_queue_nums = queues;
                t.write_queue_nums = t.write_queue_nums.max(queues);
                self.upsert(t);
            }
            None => {
                log::info!("topic {topic} seen in the replicated log before its config");
                self.upsert(topic_config_new(
                    topic,
                    queues,
                    queues,
                    PERM_READ | PERM_WRITE,
                ));
            }
        }
    }

    /// Moves the table's version without changing a topic: what registers differently
    /// changed (`brokerPermission`), and name servers take a registration's topics only
    /// when the version moved, as RocketMQ's `getDataVersion().nextVersion()`.
    pub fn bump_version(&self) {
        {
            let mut w = self.write();
            bump(&mut w.1);
        }
        self.persist();
    }

    /// Removes a topic; true when it existed.
    pub fn delete(&self, topic: &str) -> bool {
        let existed = {
            let mut w = self.write();
            let existed = w.0.remove(topic).is_some();
            if existed {
                bump(&mut w.1);
            }
            existed
        };
        if existed {
            self.persist();
        }
        existed
    }

    /// Every topic, as the GET_ALL_TOPIC_CONFIG body and the registration body carry it.
    pub fn wrapper(&self) -> TopicConfigSerializeWrapper {
        let r = self.read();
        TopicConfigSerializeWrapper {
            topic_config_table: r.0.clone(),
            data_version: r.1.clone(),
            ..TopicConfigSerializeWrapper::default()
        }
    }

    /// A slave takes its master's table (RocketMQ's `SlaveSynchronize.syncTopicConfig`):
    /// when the master's data version differs from this table's, the table becomes the
    /// master's, with its version, and is persisted. System topics the master lacks are
    /// kept. Unlike RocketMQ, equal versions skip the copy only when the table is still
    /// the one last copied (see `copied_from`). Returns true when the table was replaced.
    pub fn replace_from_master(&self, master: TopicConfigSerializeWrapper) -> bool {
        {
            let mut w = self.write();
            let mut copied = self.copied_from.guard();
            if w.1 == master.data_version && copied.as_ref() == Some(&w.1) {
                return false;
            }
            *copied = Some(master.data_version.clone());
            let mut table = master.topic_config_table;
            for t in &self.system {
                table
                    .entry(t.topic_name.clone())
                    .or_insert_with(|| t.clone());
            }
            *w = (table, master.data_version);
        }
        self.persist();
        true
    }

    /// Every system topic name: RocketMQ's set, this broker's own and the `rmq_sys_`
    /// topics in the table (GET_SYSTEM_TOPIC_LIST_FROM_BROKER).
    pub fn system_names(&self) -> std::collections::BTreeSet<String> {
        let mut out: std::collections::BTreeSet<String> =
            SYSTEM_TOPICS.iter().map(|t| (*t).to_owned()).collect();
        out.extend(self.system.iter().map(|t| t.topic_name.clone()));
        out.extend(
            self.read()
                .0
                .keys()
                .filter(|t| t.starts_with(SYSTEM_TOPIC_PREFIX))
                .cloned(),
        );
        out
    }

    /// Names of every topic.
    pub fn names(&self) -> Vec<String> {
        self.read().0.keys().cloned().collect()
    }

    /// Queues a write of the table (atomic, with the previous version kept); returns
    /// without waiting for the disk ([`Self::persisted`] does).
    pub fn persist(&self) {
        self.saver.save();
    }

    /// Resolves once every write queued so far is done.
    pub async fn persisted(&self) {
        self.saver.saved().await;
    }
}

/// Moves a table's version on a change (RocketMQ's `DataVersion.nextVersion`).
pub(crate) fn bump(version: &mut DataVersion) {
    version.counter += 1;
    version.timestamp = now_ms();
}

fn read(table: &RwLock<Table>) -> RwLockReadGuard<'_, Table> {
    table.read_guard()
}

/// The table's on-disk form.
fn on_disk(t: &Table) -> Persisted {
    Persisted {
        topics: t
            .0
            .values()
            .map(|t| PersistedTopic {
                name: t.topic_name.clone(),
                read: t.read_queue_nums,
                write: t.write_queue_nums,
                perm: t.perm,
                filter: t.topic_filter_type.clone(),
                sys_flag: t.topic_sys_flag,
                order: t.order,
                attributes: t
                    .attributes
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect(),
        counter: t.1.counter,
        timestamp: t.1.timestamp,
    }
}

/// A new topic's configuration.
pub fn topic_config_new(name: &str, read: i32, write: i32, perm: i32) -> TopicConfig {
    topic(name, read, write, perm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_rocketmq_rules() {
        assert!(validate_topic("Topic_A-1|%RETRY%g").is_ok());
        assert!(validate_topic("").is_err());
        assert!(
            validate_topic("bad topic")
                .unwrap_err()
                .to_string()
                .contains("illegal characters")
        );
        assert!(validate_topic(&"t".repeat(128)).is_err());
    }

    #[test]
    fn auto_create_takes_the_smaller_queue_count_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        // The store creates config/ before these tables are loaded.
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let topics = Topics::load(dir.path(), "C", "b", true, 8, None);
        let t = topics
            .create_from_template("New", AUTO_CREATE_TOPIC, 4, 0)
            .unwrap();
        assert_eq!((t.read_queue_nums, t.write_queue_nums, t.perm), (4, 4, 6));
        assert!(
            topics
                .create_from_template("X", "NoSuchTemplate", 4, 0)
                .is_none()
        );
        tern_shell::runtime::block_on(topics.persisted());
        let again = Topics::load(dir.path(), "C", "b", true, 8, None);
        assert_eq!(again.get("New").unwrap().write_queue_nums, 4);
    }

    #[test]
    fn a_table_in_the_first_form_is_read_and_rewritten_with_attributes() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        let v1 = PersistedV1 {
            topics: vec![("Old".into(), 3, 3, 6, "SINGLE_TAG".into(), 0, true)],
            counter: 7,
            timestamp: 1_700_000_000_000,
        };
        tern_engine_fs::meta::save(&config.join("topics.tern"), &v1).unwrap();
        let topics = Topics::load(dir.path(), "C", "b", true, 8, None);
        let old = topics.get("Old").unwrap();
        assert_eq!((old.read_queue_nums, old.order), (3, true));
        let mut fifo = old.clone();
        fifo.attributes.insert("message.type".into(), "FIFO".into());
        assert!(topics.upsert(fifo));
        tern_shell::runtime::block_on(topics.persisted());
        let again = Topics::load(dir.path(), "C", "b", true, 8, None);
        assert_eq!(again.get("Old").unwrap().attributes["message.type"], "FIFO");
        assert!(config.join("topics-v2.tern").exists());
    }

    #[test]
    fn a_slave_takes_a_newer_master_table_and_keeps_its_system_topics() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let slave = Topics::load(dir.path(), "C", "b", true, 8, None);
        slave.upsert(topic_config_new("SlaveOnly", 1, 1, 6));
        let mut master = TopicConfigSerializeWrapper::default();
        let mut schedule = topic("SCHEDULE_TOPIC_XXXX", 20, 20, 6);
        schedule.order = true;
        for t in [topic_config_new("FromMaster", 3, 3, 6), schedule.clone()] {
            master.topic_config_table.insert(t.topic_name.clone(), t);
        }
        master.data_version = DataVersion {
            state_version: 0,
            timestamp: 42,
            counter: 7,
        };
        assert!(slave.replace_from_master(master.clone()));
        assert!(
            slave.get("SlaveOnly").is_none(),
            "the master's table is the truth"
        );
        assert_eq!(slave.get("FromMaster").unwrap().write_queue_nums, 3);
        assert_eq!(
            slave.get("SCHEDULE_TOPIC_XXXX"),
            Some(schedule),
            "master's wins"
        );
        assert!(slave.get("RMQ_SYS_TRANS_HALF_TOPIC").is_some(), "kept");
        assert_eq!(slave.wrapper().data_version, master.data_version);
        assert!(
            !slave.replace_from_master(master.clone()),
            "same version: nothing to do"
        );
        // A local change stamped exactly as the master's next one must not hide it.
        slave.upsert(topic_config_new("SlaveOnly", 1, 1, 6));
        let mut next = master;
        next.data_version = slave.wrapper().data_version;
        next.topic_config_table
            .insert("Next".into(), topic_config_new("Next", 2, 2, 6));
        assert!(slave.replace_from_master(next));
        assert!(slave.get("Next").is_some() && slave.get("SlaveOnly").is_none());
        tern_shell::runtime::block_on(slave.persisted());
        let again = Topics::load(dir.path(), "C", "b", true, 8, None);
        assert_eq!(
            again.wrapper(),
            slave.wrapper(),
            "persisted with its version"
        );
    }
}
