//! Consumer offsets: where each group is in each queue, committed by consumers and
//! persisted every few seconds and at shutdown (written on the blocking pool, see
//! [`crate::persist`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use tern_shell::sync::MutexExt;

use serde::{Deserialize, Serialize};
use tern_shell::body::TopicConfig;

use crate::persist::Saver;

/// Whether a consumer may commit (or query) an offset of queue `queue_id` of `topic`:
/// `0 <= queue_id < max(readQueueNums, writeQueueNums)`, the bound RocketMQ puts on a
/// send's queue id (a pull's is `readQueueNums`). The queue counts are bounded in turn
/// (UPDATE_AND_CREATE_TOPIC allows at most 1024), so a peer cannot grow the offset table
/// with made-up queues. RocketMQ itself checks nothing on UPDATE_CONSUMER_OFFSET; this is
/// for the offset processor to call before [`Offsets::commit`].
pub fn valid_queue_id(queue_id: i32, topic: &TopicConfig) -> bool {
    (0..topic.read_queue_nums.max(topic.write_queue_nums)).contains(&queue_id)
}

/// Key of a group's progress in a topic: `topic@group`, as RocketMQ writes it.
fn key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

/// The offset table.
#[derive(Debug)]
pub struct Offsets {
    /// Shared with the saver, which copies it when it writes.
    table: Arc<Mutex<OffsetTable>>,
    dirty: std::sync::atomic::AtomicBool,
    saver: Saver<Persisted>,
}

/// `topic@group` → queue → offset.
type OffsetTable = HashMap<String, BTreeMap<i32, i64>>;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    offsets: Vec<(String, Vec<(i32, i64)>)>,
}

impl Offsets {
    /// Loads `config/consumerOffset` under `store_root`.
    pub fn load(store_root: &Path) -> Self {
        let path = store_root.join("config").join("consumerOffset.tern");
        let mut table = OffsetTable::new();
        match tern_engine_fs::meta::load::<Persisted>(&path) {
            Ok(Some(p)) => {
                for (k, qs) in p.offsets {
                    table.insert(k, qs.into_iter().collect());
                }
            }
            Ok(None) => {}
            Err(e) => log::error!("consumer offsets unreadable, starting empty: {e}"),
        }
        let table = Arc::new(Mutex::new(table));
        let copy = table.clone();
        Self {
            saver: Saver::new("consumer offsets", path, move || Persisted {
                offsets: copy
                    .guard()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.iter().map(|(q, o)| (*q, *o)).collect()))
                    .collect(),
            }),
            table,
            dirty: false.into(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, OffsetTable> {
        self.table.guard()
    }

    /// Records that `group` consumed `topic`/`queue_id` up to `offset`.
    pub fn commit(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.lock()
            .entry(key(topic, group))
            .or_default()
            .insert(queue_id, offset);
        self.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The committed offset, if any.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        self.lock()
            .get(&key(topic, group))
            .and_then(|q| q.get(&queue_id).copied())
    }

    /// Every group's offsets for `topic`: group → (queue → offset).
    pub fn groups_of_topic(&self, topic: &str) -> Vec<(String, BTreeMap<i32, i64>)> {
        let prefix = format!("{topic}@");
        self.lock()
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|g| (g.to_owned(), v.clone())))
            .collect()
    }

    /// Every (topic, queue → offset) of `group`.
    pub fn topics_of_group(&self, group: &str) -> Vec<(String, BTreeMap<i32, i64>)> {
        let suffix = format!("@{group}");
        self.lock()
            .iter()
            .filter_map(|(k, v)| k.strip_suffix(&suffix).map(|t| (t.to_owned(), v.clone())))
            .collect()
    }

    /// The whole table as `topic@group → queue → offset` (GET_ALL_CONSUMER_OFFSET).
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<i32, i64>> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A slave takes its master's offsets (RocketMQ's `SlaveSynchronize.syncConsumerOffset`):
    /// each `topic@group` the master knows replaces the slave's; the others stay. Marks
    /// the table for the next [`persist`](Self::persist).
    pub fn put_all(&self, table: BTreeMap<String, BTreeMap<i32, i64>>) {
        self.lock().extend(table);
        self.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets a topic (deleted).
    pub fn delete_topic(&self, topic: &str) {
        let prefix = format!("{topic}@");
        self.lock().retain(|k, _| !k.starts_with(&prefix));
        self.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets a group's offsets in every topic (DELETE_SUBSCRIPTIONGROUP with
    /// `cleanOffset`).
    pub fn delete_group(&self, group: &str) {
        let suffix = format!("@{group}");
        self.lock().retain(|k, _| !k.ends_with(&suffix));
        self.dirty.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queues a write of the table if it changed since the last one (or that one
    /// failed); returns without waiting for the disk ([`Self::persisted`] does).
    pub fn persist(&self) {
        let retry = self.saver.take_failure();
        if !self.dirty.swap(false, std::sync::atomic::Ordering::Relaxed) && !retry {
            return;
        }
        self.saver.save();
    }

    /// Resolves once every write queued so far is done.
    pub async fn persisted(&self) {
        self.saver.saved().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_ids_are_those_the_topic_has() {
        let t = crate::topics::topic_config_new("t", 4, 2, 6);
        assert!(valid_queue_id(0, &t));
        assert!(valid_queue_id(3, &t), "read queues count");
        assert!(!valid_queue_id(4, &t));
        assert!(!valid_queue_id(-1, &t));
        assert!(!valid_queue_id(i32::MAX, &t));
        assert!(!valid_queue_id(i32::MIN, &t));
        let w = crate::topics::topic_config_new("w", 1, 8, 6);
        assert!(valid_queue_id(7, &w), "write queues count");
    }

    #[test]
    fn committed_offsets_survive_a_reload() {
        let dir = tempfile::tempdir().unwrap();
        // The store creates config/ before these tables are loaded.
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let o = Offsets::load(dir.path());
        o.commit("g", "t", 1, 42);
        o.commit("g2", "t", 0, 7);
        assert_eq!(o.query("g", "t", 1), Some(42));
        assert_eq!(o.query("g", "t", 0), None);
        o.persist();
        tern_shell::runtime::block_on(o.persisted());
        let again = Offsets::load(dir.path());
        assert_eq!(again.query("g", "t", 1), Some(42));
        assert_eq!(again.groups_of_topic("t").len(), 2);
    }

    #[test]
    fn put_all_replaces_the_masters_keys_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let o = Offsets::load(dir.path());
        o.commit("g", "t", 0, 5);
        o.commit("g", "t", 1, 6);
        o.commit("local", "t", 0, 1);
        o.persist();
        o.put_all(BTreeMap::from([("t@g".into(), BTreeMap::from([(0, 9)]))]));
        o.persist();
        tern_shell::runtime::block_on(o.persisted());
        let again = Offsets::load(dir.path());
        assert_eq!(again.query("g", "t", 0), Some(9));
        assert_eq!(
            again.query("g", "t", 1),
            None,
            "the master's queue map is taken whole"
        );
        assert_eq!(again.query("local", "t", 0), Some(1));
    }
}
