//! [`FsQueues`]: the engine's queue table on files, one folder per consume queue under
//! `consumequeue/<topic>/<queue>/`, made and found as the engine asks.

use std::collections::HashMap;
use std::io::ErrorKind;

use tern_engine::Error;
use tern_engine::store::{QueueSlot, QueueTable};

use crate::directory::{FileDirectory, Reclaim};
use crate::error::{FsError, FsOp};
use crate::fs_store::EngineError;
use crate::layout::StoreLayout;
use crate::mapped::Advised;
use crate::reader::SegmentFiles;
use crate::spare::Spares;
use crate::store::open_queue_dir;

/// The consume queues of a store, one folder each under `consumequeue/`.
///
/// Keyed topic first, then queue id, rather than by `(String, i32)`: the engine looks a
/// queue up by `&str` on every put, and a tuple key would need an owned `String` (an
/// allocation) per lookup.
#[derive(Debug)]
pub struct FsQueues {
    /// Where queue folders are made and found.
    layout: StoreLayout,
    /// The open queues.
    topics: HashMap<String, HashMap<i32, QueueSlot<FileDirectory>>>,
    /// Each open queue's segment files, for reading without the store's lock: taken from
    /// the directory before the engine owns it.
    files: HashMap<String, HashMap<i32, SegmentFiles>>,
    /// Where every directory's removed segments wait for deletion.
    reclaim: Reclaim,
    /// Files made ahead for new queue files.
    spares: Spares,
}

impl FsQueues {
    /// An empty table for the store laid out as `layout`; queues on disk are opened by
    /// the engine through [`QueueTable::open_existing`].
    pub fn new(layout: StoreLayout, reclaim: Reclaim, spares: Spares) -> Self {
        FsQueues {
            layout,
            topics: HashMap::new(),
            files: HashMap::new(),
            reclaim,
            spares,
        }
    }

    /// The segment files of queue (topic, queue id), if it is open (see [`SegmentFiles`]).
    pub fn files_of(&self, topic: &str, queue_id: i32) -> Option<SegmentFiles> {
        self.files.get(topic)?.get(&queue_id).cloned()
    }

    /// Number of open queues.
    pub fn len(&self) -> usize {
        self.topics.values().map(HashMap::len).sum()
    }

    /// True when no queue is open.
    pub fn is_empty(&self) -> bool {
        self.topics.values().all(HashMap::is_empty)
    }

    /// Each queue's part of `FsStore::advise_tails`: its last file whole, so that file
    /// stays one map area (`Advised::Whole`).
    pub(crate) fn advise_tails(&self) {
        for slot in self.topics.values().flat_map(|queues| queues.values()) {
            slot.queue
                .tail(&mut |m, r| m.appending_from(r.start, Advised::Whole));
        }
    }

    /// Every open queue as `(topic, queue id)`, sorted (for admin listings and tests).
    pub fn keys(&self) -> Vec<(String, i32)> {
        let mut keys: Vec<_> = self
            .topics
            .iter()
            .flat_map(|(t, qs)| qs.keys().map(move |&q| (t.clone(), q)))
            .collect();
        keys.sort();
        keys
    }

    /// Takes queue (topic, queue id) out of the table, with its files' read handles; the
    /// caller owns its folder from then on (see `StoreLayout::queue_dir`).
    pub fn remove(&mut self, topic: &str, queue_id: i32) -> Option<QueueSlot<FileDirectory>> {
        let queues = self.topics.get_mut(topic)?;
        let slot = queues.remove(&queue_id)?;
        if queues.is_empty() {
            self.topics.remove(topic);
        }
        if let Some(files) = self.files.get_mut(topic) {
            files.remove(&queue_id);
            if files.is_empty() {
                self.files.remove(topic);
            }
        }
        Some(slot)
    }

    /// The folder of (topic, queue id), created if missing. The engine's error has no
    /// room for a path, so the path is logged here before it is lost.
    fn dir_of(&mut self, topic: &str, queue_id: i32) -> Result<FileDirectory, EngineError> {
        let Ok(id) = u32::try_from(queue_id) else {
            log::warn!("queue id {queue_id} of topic {topic:?} is negative: refused");
            return Err(Error::Media(FsError::new(
                FsOp::Create,
                ErrorKind::InvalidInput,
            )));
        };
        let mut dir = open_queue_dir(&self.layout, topic, id).map_err(|e| {
            log::warn!("consume queue {topic}/{queue_id}: {e}");
            Error::Media(
                e.fs_error()
                    .unwrap_or(FsError::new(FsOp::Create, ErrorKind::InvalidInput)),
            )
        })?;
        self.files
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, dir.files());
        dir.remove_later(self.reclaim.clone());
        dir.use_spares(self.spares.clone());
        Ok(dir)
    }
}

impl QueueTable for FsQueues {
    type Dir = FileDirectory;

    fn get(&self, topic: &str, queue_id: i32) -> Option<&QueueSlot<FileDirectory>> {
        self.topics.get(topic)?.get(&queue_id)
    }

    fn get_mut(&mut self, topic: &str, queue_id: i32) -> Option<&mut QueueSlot<FileDirectory>> {
        self.topics.get_mut(topic)?.get_mut(&queue_id)
    }

    fn create_dir(&mut self, topic: &str, queue_id: i32) -> Result<FileDirectory, EngineError> {
        self.dir_of(topic, queue_id)
    }

    fn insert(
        &mut self,
        topic: &str,
        queue_id: i32,
        slot: QueueSlot<FileDirectory>,
    ) -> Result<(), EngineError> {
        self.topics
            .entry(topic.to_owned())
            .or_default()
            .insert(queue_id, slot);
        Ok(())
    }

    fn open_existing(
        &mut self,
        open: &mut dyn FnMut(FileDirectory) -> Result<QueueSlot<FileDirectory>, EngineError>,
    ) -> Result<(), EngineError> {
        let found = self.layout.list_queues().map_err(|e| {
            log::warn!("{e}");
            Error::Media(
                e.fs_error()
                    .unwrap_or(FsError::new(FsOp::Scan, ErrorKind::Other)),
            )
        })?;
        for (topic, id) in found {
            let Ok(queue_id) = i32::try_from(id) else {
                log::warn!("consume queue {topic}/{id}: queue id out of range, ignored");
                continue;
            };
            let dir = self.dir_of(&topic, queue_id)?;
            let slot = open(dir)?;
            self.insert(&topic, queue_id, slot)?;
        }
        Ok(())
    }

    fn for_each_mut(
        &mut self,
        f: &mut dyn FnMut(&str, i32, &mut QueueSlot<FileDirectory>) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        for (topic, queues) in &mut self.topics {
            for (&queue_id, slot) in queues {
                f(topic, queue_id, slot)?;
            }
        }
        Ok(())
    }
}
