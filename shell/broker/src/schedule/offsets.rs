//! Delivery progress: for each delay level, the next offset of its schedule queue to
//! deliver, kept in `config/delayOffset.tern`. The payload is the JSON RocketMQ keeps in
//! `delayOffset.json`, `{"offsetTable":{1:55,3:9},"dataVersion":{...}}` (fastjson's
//! unquoted keys), inside the checked, atomically replaced metadata file the other tables
//! use (`tern_engine_fs::meta`), so a torn write falls back to the previous version.
//!
//! An offset is saved only once the copies it stands for are durable in the commit log:
//! each tick saves the snapshot taken at an earlier tick, once the log's flushed end has
//! passed the log end noted with it. A crash can therefore repeat deliveries made since
//! the last save (at-least-once, as RocketMQ), never skip one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tern_shell::sync::MutexExt;

use tern_shell::body::{DataVersion, DelayOffsetSerializeWrapper, NumKeyMap};
use tern_shell::runtime::now_ms;

use crate::persist::{LoadError, load_json};

/// The table, shared by the schedule task (writes) and admin requests (reads).
#[derive(Debug)]
pub struct DelayOffsets {
    inner: Mutex<Inner>,
    path: PathBuf,
}

#[derive(Debug)]
struct Inner {
    /// Level → next schedule-queue offset to deliver.
    table: BTreeMap<i32, i64>,
    /// The table moved since the last snapshot.
    changed: bool,
    /// A snapshot waiting for the log to be durable up to its `log_end`.
    pending: Option<Snapshot>,
    /// The table as last loaded or saved: where delivery resumes after a crash, so the
    /// records from there on must stay ([`crate::pending`]).
    saved: BTreeMap<i32, i64>,
    version: DataVersion,
}

#[derive(Debug, Clone)]
struct Snapshot {
    table: BTreeMap<i32, i64>,
    /// The log's end when the snapshot was taken: every delivery it counts ends below.
    log_end: u64,
}

impl DelayOffsets {
    /// Loads `config/delayOffset.tern` under `store_root`; an unreadable file is logged and
    /// treated as empty (every level then starts from its queue's first entry: repeats,
    /// no loss).
    pub fn load(store_root: &Path) -> Self {
        let path = store_root.join("config").join("delayOffset.tern");
        let mut table = BTreeMap::new();
        let mut version = DataVersion {
            state_version: 0,
            timestamp: now_ms(),
            counter: 0,
        };
        match load_json::<DelayOffsetSerializeWrapper>(&path) {
            Ok(Some(w)) => {
                table = levels(w.offset_table);
                version = w.data_version.unwrap_or(version);
            }
            Ok(None) => {}
            Err(LoadError::Json(e)) => {
                log::error!("{}: unreadable, starting over: {e}", path.display())
            }
            Err(LoadError::File(e)) => log::error!("delay offsets unreadable, starting over: {e}"),
        }
        Self {
            inner: Mutex::new(Inner {
                saved: table.clone(),
                table,
                changed: false,
                pending: None,
                version,
            }),
            path,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.guard()
    }

    /// The next offset to deliver at `level`, if any was recorded.
    pub fn get(&self, level: i32) -> Option<i64> {
        self.lock().table.get(&level).copied()
    }

    /// Records that `level` continues at `offset`.
    pub fn set(&self, level: i32, offset: i64) {
        let mut g = self.lock();
        if g.table.insert(level, offset) != Some(offset) {
            g.changed = true;
        }
    }

    /// Level → offset.
    pub fn table(&self) -> BTreeMap<i32, i64> {
        self.lock().table.clone()
    }

    /// Level → the offset delivery resumes at after a crash: per level the lower of the
    /// live and the saved offset (a level missing from either resumes at its queue's
    /// start, reported as 0).
    pub fn resume_table(&self) -> BTreeMap<i32, i64> {
        let g = self.lock();
        g.table
            .iter()
            .map(|(l, o)| (*l, g.saved.get(l).map_or(0, |s| (*s).min(*o))))
            .collect()
    }

    /// The table as RocketMQ sends it (GET_ALL_DELAY_OFFSET).
    pub fn wrapper(&self) -> DelayOffsetSerializeWrapper {
        let g = self.lock();
        wrapper(&g.table, &g.version)
    }

    /// One save tick: saves the pending snapshot if the log is durable past it, then
    /// snapshots the table if it moved. `log_end` is the log's end now (every delivery so
    /// far ends below it), `flushed` its durable end.
    pub fn save_when_durable(&self, log_end: u64, flushed: u64) {
        let ready = {
            let mut g = self.lock();
            let ready = match &g.pending {
                Some(p) if flushed >= p.log_end => g.pending.take(),
                // The last snapshot is not durable yet: keep it, take no newer one.
                Some(_) => return,
                None => None,
            };
            if g.changed {
                g.pending = Some(Snapshot {
                    table: g.table.clone(),
                    log_end,
                });
                g.changed = false;
            }
            ready
        };
        if let Some(s) = ready {
            if !self.save(&s.table) {
                // Retry at the next tick unless a newer snapshot supersedes it.
                self.lock().pending.get_or_insert(s);
            }
        }
    }

    /// Saves the table as it is: the caller knows every delivery is durable (the store
    /// was closed cleanly).
    pub fn save_all(&self) {
        let table = {
            let mut g = self.lock();
            if !g.changed && g.pending.is_none() {
                return;
            }
            g.changed = false;
            g.pending = None;
            g.table.clone()
        };
        self.save(&table);
    }

    /// A slave takes its master's progress (RocketMQ's `SlaveSynchronize.syncDelayOffset`,
    /// which overwrites `delayOffset.json`): the table and version become the master's and
    /// are saved at once, since a slave runs no delivery task to save them later. Levels
    /// that are not valid `i32`s are dropped. Returns whether the file was written.
    pub fn replace_from_master(&self, master: DelayOffsetSerializeWrapper) -> bool {
        let (table, version) = {
            let mut g = self.lock();
            g.table = levels(master.offset_table);
            if let Some(v) = master.data_version {
                g.version = v;
            }
            g.changed = false;
            g.pending = None;
            (g.table.clone(), g.version.clone())
        };
        self.write(&table, &version)
    }

    fn save(&self, table: &BTreeMap<i32, i64>) -> bool {
        let version = {
            let mut g = self.lock();
            g.version.counter += 1;
            g.version.timestamp = now_ms();
            g.version.clone()
        };
        self.write(table, &version)
    }

    fn write(&self, table: &BTreeMap<i32, i64>, version: &DataVersion) -> bool {
        let json = tern_shell::body::to_json(&wrapper(table, version));
        match tern_engine_fs::meta::save(&self.path, &json) {
            Ok(()) => {
                self.lock().saved = table.clone();
                true
            }
            Err(e) => {
                log::error!("saving delay offsets: {e}");
                false
            }
        }
    }
}

/// The level → offset table of a JSON body; a negative offset counts as 0.
fn levels(json: NumKeyMap<i64>) -> BTreeMap<i32, i64> {
    json.0
        .into_iter()
        .filter_map(|(l, o)| Some((i32::try_from(l).ok()?, o.max(0))))
        .collect()
}

fn wrapper(table: &BTreeMap<i32, i64>, version: &DataVersion) -> DelayOffsetSerializeWrapper {
    DelayOffsetSerializeWrapper {
        offset_table: NumKeyMap(table.iter().map(|(l, o)| (i64::from(*l), *o)).collect()),
        data_version: Some(version.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("config")).unwrap();
        d
    }

    #[test]
    fn offsets_are_saved_only_once_the_log_is_durable_past_them() {
        let d = dir();
        let o = DelayOffsets::load(d.path());
        o.set(2, 5);
        o.save_when_durable(1_000, 900);
        assert_eq!(
            DelayOffsets::load(d.path()).get(2),
            None,
            "only snapshotted"
        );
        o.set(2, 6);
        o.save_when_durable(1_200, 999);
        assert_eq!(
            DelayOffsets::load(d.path()).get(2),
            None,
            "log not durable to 1000"
        );
        o.save_when_durable(1_200, 1_000);
        assert_eq!(
            DelayOffsets::load(d.path()).get(2),
            Some(5),
            "the durable snapshot"
        );
        o.save_when_durable(1_300, 1_200);
        assert_eq!(DelayOffsets::load(d.path()).get(2), Some(6));
        o.set(3, 1);
        o.save_all();
        let again = DelayOffsets::load(d.path());
        assert_eq!(again.table(), BTreeMap::from([(2, 6), (3, 1)]));
    }

    #[test]
    fn the_file_holds_rocketmqs_json() {
        let d = dir();
        let o = DelayOffsets::load(d.path());
        o.set(1, 55);
        o.set(3, 9);
        o.save_all();
        let json = tern_engine_fs::meta::load::<Vec<u8>>(&d.path().join("config/delayOffset.tern"))
            .unwrap()
            .unwrap();
        let text = String::from_utf8(json).unwrap();
        assert!(text.starts_with(r#"{"dataVersion":{"#), "{text}");
        assert!(text.contains(r#""offsetTable":{1:55,3:9}"#), "{text}");
    }

    #[test]
    fn a_slave_saves_its_masters_progress_at_once() {
        let d = dir();
        let o = DelayOffsets::load(d.path());
        o.set(1, 3);
        o.set(2, 4);
        let master = DelayOffsetSerializeWrapper {
            offset_table: NumKeyMap(BTreeMap::from([(2, 10), (5, -1), (1 << 40, 1)])),
            data_version: Some(DataVersion {
                state_version: 0,
                timestamp: 77,
                counter: 3,
            }),
        };
        assert!(o.replace_from_master(master.clone()));
        assert_eq!(o.table(), BTreeMap::from([(2, 10), (5, 0)]));
        assert_eq!(o.wrapper().data_version, master.data_version);
        let again = DelayOffsets::load(d.path());
        assert_eq!(again.table(), o.table());
        assert_eq!(again.wrapper(), o.wrapper());
    }
}
