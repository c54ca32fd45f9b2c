//! Offset stores (Java's `RemoteBrokerOffsetStore` and `LocalFileOffsetStore`).
//!
//! Both keep the group's offsets in memory, updated as messages are consumed, and
//! persist them: clustering groups to the broker (UPDATE_CONSUMER_OFFSET, oneway every
//! 5 s, answered when a queue is given away or at shutdown), broadcasting consumers to a
//! local JSON file in Java's `OffsetSerializeWrapper` form, written to a temporary file
//! and renamed so a crash leaves the old file or the new one, never half of one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use tern_shell::sync::MutexExt;

use tern_shell::body::{MessageQueue, QueueKeyMap};
use tern_shell::headers::{
    OffsetResponseHeader, QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use crate::consumer::pull::broker_addr;
use crate::error::{ClientError, Result};
use crate::instance::{ClientInstance, ok};

/// The local offset file's shape (Java's `OffsetSerializeWrapper`).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct OffsetFile {
    offset_table: QueueKeyMap<i64>,
}

#[derive(Debug)]
enum Backend {
    Remote {
        client: ClientInstance,
        group: String,
    },
    Local {
        path: PathBuf,
    },
}

/// A group's consume offsets, in memory and persisted.
#[derive(Debug)]
pub struct OffsetStore {
    table: Mutex<HashMap<MessageQueue, i64>>,
    backend: Backend,
}

impl OffsetStore {
    /// Offsets kept by the brokers (clustering).
    pub fn remote(client: ClientInstance, group: &str) -> Self {
        Self {
            table: Mutex::new(HashMap::new()),
            backend: Backend::Remote {
                client,
                group: group.to_owned(),
            },
        }
    }

    /// Offsets kept in `dir/group/offsets.json` (broadcasting); loads the file if any.
    pub fn local(dir: &Path, group: &str) -> Result<Self> {
        let path = dir.join(group).join("offsets.json");
        let table = match read_file(&path) {
            Some(f) => f.offset_table.0.into_iter().collect(),
            None => HashMap::new(),
        };
        Ok(Self {
            table: Mutex::new(table),
            backend: Backend::Local { path },
        })
    }

    fn table(&self) -> MutexGuard<'_, HashMap<MessageQueue, i64>> {
        self.table.guard()
    }

    /// Records a consumed position; with `increase_only` an older value never wins.
    pub fn update(&self, mq: &MessageQueue, offset: i64, increase_only: bool) {
        let mut t = self.table();
        let e = t.entry(mq.clone()).or_insert(offset);
        if !increase_only || offset > *e {
            *e = offset;
        }
    }

    /// The in-memory offset.
    pub fn read_memory(&self, mq: &MessageQueue) -> Option<i64> {
        self.table().get(mq).copied()
    }

    /// The persisted offset (`None` when the group has none), remembered in memory.
    pub async fn read_store(&self, mq: &MessageQueue) -> Result<Option<i64>> {
        let found = match &self.backend {
            Backend::Local { path } => {
                read_file(path).and_then(|f| f.offset_table.0.get(mq).copied())
            }
            Backend::Remote { client, group } => {
                let addr = broker_addr(client, mq).await?;
                let h = QueryConsumerOffsetRequestHeader {
                    consumer_group: group.clone(),
                    topic: mq.topic.clone(),
                    queue_id: mq.queue_id,
                    // Let ConsumeFromWhere decide for a new group, as its semantics say.
                    set_zero_if_not_found: Some(false),
                };
                let cmd = RemotingCommand::request(RequestCode::QueryConsumerOffset, &h);
                let resp = client
                    .invoke(&addr, cmd, client.config().rpc_timeout)
                    .await?;
                if resp.response_code() == ResponseCode::QueryNotFound {
                    None
                } else {
                    let h: OffsetResponseHeader = ok(resp)?
                        .decode_header()
                        .map_err(|e| ClientError::Protocol(e.to_string()))?;
                    Some(h.offset)
                }
            }
        };
        if let Some(o) = found {
            self.update(mq, o, false);
        }
        Ok(found)
    }

    /// Forgets a queue given away (after [`OffsetStore::persist`]).
    pub fn remove(&self, mq: &MessageQueue) {
        if matches!(self.backend, Backend::Remote { .. }) {
            self.table().remove(mq);
        }
    }

    /// Persists one queue's offset and waits for the broker's answer.
    pub async fn persist(&self, mq: &MessageQueue) -> Result<()> {
        let Some(offset) = self.read_memory(mq) else {
            return Ok(());
        };
        match &self.backend {
            Backend::Local { .. } => self.write_file(),
            Backend::Remote { client, group } => {
                let addr = broker_addr(client, mq).await?;
                let cmd = update_cmd(group, mq, offset);
                client.invoke_ok(&addr, cmd).await.map(drop)
            }
        }
    }

    /// Every `interval` until `shutdown`: persists the offsets of the queues `owned`
    /// lists (a consumer's periodic commit, as Java's `persistAllConsumerOffset` task).
    pub(crate) async fn persist_every(
        &self,
        interval: std::time::Duration,
        shutdown: &tern_shell::runtime::Shutdown,
        owned: impl Fn() -> Vec<MessageQueue>,
    ) {
        while !shutdown.sleep(interval).await {
            self.persist_all(&owned(), false).await;
        }
    }

    /// Persists the offsets of `mqs` (oneway to brokers, as Java's periodic task does,
    /// or answered when `answered`).
    pub async fn persist_all(&self, mqs: &[MessageQueue], answered: bool) {
        match &self.backend {
            Backend::Local { .. } => {
                if let Err(e) = self.write_file() {
                    log::warn!("persisting local offsets: {e}");
                }
            }
            Backend::Remote { client, group } => {
                let offsets: Vec<(MessageQueue, i64)> = {
                    let t = self.table();
                    mqs.iter()
                        .filter_map(|mq| t.get(mq).map(|o| (mq.clone(), *o)))
                        .collect()
                };
                for (mq, offset) in offsets {
                    let addr = match broker_addr(client, &mq).await {
                        Ok(a) => a,
                        Err(e) => {
                            log::debug!("offset of {mq:?} not persisted: {e}");
                            continue;
                        }
                    };
                    let cmd = update_cmd(group, &mq, offset);
                    let r = if answered {
                        client.invoke_ok(&addr, cmd).await.map(drop)
                    } else {
                        client.invoke_oneway(&addr, cmd.oneway()).await
                    };
                    if let Err(e) = r {
                        log::debug!("offset of {mq:?} not persisted: {e}");
                    }
                }
            }
        }
    }

    fn write_file(&self) -> Result<()> {
        let Backend::Local { path } = &self.backend else {
            return Ok(());
        };
        let table: BTreeMap<MessageQueue, i64> =
            self.table().iter().map(|(k, v)| (k.clone(), *v)).collect();
        let body = tern_shell::body::to_json(&OffsetFile {
            offset_table: QueueKeyMap(table),
        });
        write_atomic(path, &body)
            .map_err(|e| ClientError::InvalidMessage(format!("{}: {e}", path.display())))
    }
}

fn update_cmd(group: &str, mq: &MessageQueue, offset: i64) -> RemotingCommand {
    let h = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.to_owned(),
        topic: mq.topic.clone(),
        queue_id: mq.queue_id,
        commit_offset: offset,
    };
    RemotingCommand::request(RequestCode::UpdateConsumerOffset, &h)
}

fn read_file(path: &Path) -> Option<OffsetFile> {
    let bytes = std::fs::read(path).ok()?;
    match tern_shell::body::from_json::<OffsetFile>(&bytes) {
        Ok(f) => Some(f),
        Err(e) => {
            log::warn!("ignoring unreadable offset file {}: {e}", path.display());
            None
        }
    }
}

fn write_atomic(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(i: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: i,
        }
    }

    #[test]
    fn local_offsets_survive_a_reload_in_java_form() {
        let dir = tempfile::tempdir().unwrap();
        let s = OffsetStore::local(dir.path(), "g").unwrap();
        s.update(&mq(0), 5, true);
        s.update(&mq(0), 3, true);
        s.update(&mq(1), 9, false);
        assert_eq!(s.read_memory(&mq(0)), Some(5));
        crate::block_on(s.persist_all(&[], false));
        let text = std::fs::read_to_string(dir.path().join("g/offsets.json")).unwrap();
        assert!(text.contains("offsetTable"), "{text}");
        assert!(text.contains("\"queueId\":1"), "{text}");
        let again = OffsetStore::local(dir.path(), "g").unwrap();
        assert_eq!(again.read_memory(&mq(0)), Some(5));
        assert_eq!(crate::block_on(again.read_store(&mq(1))).unwrap(), Some(9));
        assert_eq!(crate::block_on(again.read_store(&mq(2))).unwrap(), None);
    }
}
