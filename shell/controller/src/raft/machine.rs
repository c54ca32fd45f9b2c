//! The state machine openraft applies committed entries to: the controller's
//! [`Metadata`], shared with the request handlers, and its snapshot.
//!
//! The state itself is not written on apply: a restart rebuilds it from the last snapshot
//! (`snapshot.tern`) and the log up to the saved commit point. Snapshots are the whole
//! state, postcard-encoded; it is small (a record per broker-set).

use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tern_engine_fs::meta;
use tern_shell::runtime;
use tern_shell::sync::{MutexExt, RwLockExt};

use super::TypeConfig;
use crate::state::{Metadata, Outcome};

type NodeId = u64;
type StorageResult<T> = Result<T, StorageError<NodeId>>;

/// Largest snapshot accepted from a leader (docs/design/controller.md §11.7).
pub const MAX_SNAPSHOT_BYTES: usize = 16 << 20;

/// A snapshot as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

/// What apply keeps beside the metadata.
#[derive(Debug, Default)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    snapshots_built: u64,
}

/// The state every request handler reads.
#[derive(Debug, Default)]
pub struct Shared {
    metadata: RwLock<Metadata>,
}

impl Shared {
    /// Reads the applied state (never held across an `.await`).
    pub fn read<T>(&self, f: impl FnOnce(&Metadata) -> T) -> T {
        f(&self.metadata.read_guard())
    }
}

/// openraft's state machine.
#[derive(Debug, Clone)]
pub struct StateMachine {
    dir: PathBuf,
    shared: Arc<Shared>,
    applied: Arc<Mutex<Applied>>,
    snapshot: Arc<Mutex<Option<StoredSnapshot>>>,
}

fn io_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl StateMachine {
    /// Opens the state machine in `dir`: the last snapshot, if any, restored.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let stored: Option<StoredSnapshot> =
            meta::load(&dir.join("snapshot.tern")).map_err(io_error)?;
        let mut metadata = Metadata::default();
        let mut applied = Applied::default();
        if let Some(s) = &stored {
            metadata = postcard::from_bytes(&s.data).map_err(io_error)?;
            applied.last = s.meta.last_log_id;
            applied.membership = s.meta.last_membership.clone();
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            shared: Arc::new(Shared {
                metadata: RwLock::new(metadata),
            }),
            applied: Arc::new(Mutex::new(applied)),
            snapshot: Arc::new(Mutex::new(stored)),
        })
    }

    /// The state the handlers read.
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    async fn save(&self, stored: StoredSnapshot) -> io::Result<()> {
        let path = self.dir.join("snapshot.tern");
        let keep = stored.clone();
        runtime::spawn_blocking(move || meta::save(&path, &stored).map_err(io_error)).await?;
        *self.snapshot.guard() = Some(keep);
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        // Metadata and applied position read under both locks: apply takes them in the
        // same order, so the snapshot is of one point in the log.
        let (data, meta) = {
            let metadata = self.shared.metadata.read_guard();
            let mut applied = self.applied.guard();
            applied.snapshots_built += 1;
            let data = postcard::to_stdvec(&*metadata)
                .map_err(|e| StorageIOError::write_snapshot(None, &io_error(e)))?;
            let snapshot_id = match applied.last {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, applied.snapshots_built),
                None => format!("--{}", applied.snapshots_built),
            };
            let meta = SnapshotMeta {
                last_log_id: applied.last,
                last_membership: applied.membership.clone(),
                snapshot_id,
            };
            (data, meta)
        };
        self.save(StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let applied = self.applied.guard();
        Ok((applied.last, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Outcome>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut metadata = self.shared.metadata.write_guard();
        let mut applied = self.applied.guard();
        let mut out = Vec::new();
        for entry in entries {
            applied.last = Some(entry.log_id);
            out.push(match entry.payload {
                EntryPayload::Blank => Outcome::Done,
                EntryPayload::Normal(cmd) => {
                    let outcome = metadata.apply(&cmd);
                    if let Outcome::Refused { code, remark } = &outcome {
                        log::info!("controller: {cmd:?} not applied ({code}): {remark}");
                    }
                    outcome
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    Outcome::Done
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let bad = |e: io::Error| StorageIOError::read_snapshot(Some(meta.signature()), &e);
        if data.len() > MAX_SNAPSHOT_BYTES {
            return Err(bad(io_error(format!(
                "snapshot of {} bytes, over {MAX_SNAPSHOT_BYTES}",
                data.len()
            )))
            .into());
        }
        let metadata: Metadata = postcard::from_bytes(&data).map_err(|e| bad(io_error(e)))?;
        self.save(StoredSnapshot {
            meta: meta.clone(),
            data,
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let mut current = self.shared.metadata.write_guard();
        let mut applied = self.applied.guard();
        *current = metadata;
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(self.snapshot.guard().as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}
