//! [`StoreLayout`]: where each part of a store lives under its root, as RocketMQ lays a
//! store out, so operators' habits and tools (`ls commitlog/`, `du consumequeue/`) carry
//! over.
//!
//! ```text
//! {root}/lock                          flock'd while a process has the store open
//! {root}/abort                         present while open; found at open ⇒ crash recovery
//! {root}/checkpoint                    4096 bytes, the engine's recovery checkpoint
//! {root}/commitlog/{20 digits}         commit-log segments
//! {root}/consumequeue/{topic}/{queue}/{20 digits}
//! {root}/index/{yyyyMMddHHmmssSSS}     hash-index files
//! {root}/config/                       metadata files (topics, offsets, ...)
//! ```

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{FsError, FsOp, StoreError};

/// Longest topic name RocketMQ accepts (`TopicValidator`), and so the longest folder name
/// under `consumequeue/` we look at.
pub const MAX_TOPIC_LEN: usize = 127;

/// The paths of one store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreLayout {
    /// The store's root (`storePathRootDir`).
    root: PathBuf,
}

impl StoreLayout {
    /// The layout of the store at `root`. Touches nothing on disk.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        StoreLayout { root: root.into() }
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Folder of the commit-log segments.
    pub fn commitlog_dir(&self) -> PathBuf {
        self.root.join("commitlog")
    }

    /// Folder holding one folder per topic of consume queues.
    pub fn consumequeue_dir(&self) -> PathBuf {
        self.root.join("consumequeue")
    }

    /// Folder of one consume queue's segments: `consumequeue/<topic>/<queue_id>/`.
    ///
    /// Refuses a topic that is not a plain file name (empty, `.`, `..`, a `/` or NUL in it,
    /// longer than [`MAX_TOPIC_LEN`]) so a name from the network can never reach outside
    /// the store. The broker validates topic names more strictly before this.
    pub fn queue_dir(&self, topic: &str, queue_id: u32) -> Result<PathBuf, StoreError> {
        if !is_plain_name(topic) {
            return Err(StoreError::Invalid {
                path: self.consumequeue_dir(),
                reason: "topic is not usable as a folder name",
            });
        }
        Ok(self
            .consumequeue_dir()
            .join(topic)
            .join(queue_id.to_string()))
    }

    /// Folder of the hash-index files.
    pub fn index_dir(&self) -> PathBuf {
        self.root.join("index")
    }

    /// Folder of the metadata files.
    pub fn config_dir(&self) -> PathBuf {
        self.root.join("config")
    }

    /// The checkpoint file.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.root.join("checkpoint")
    }

    /// The timer wheel (RocketMQ's `timerwheel`).
    pub fn timer_wheel_path(&self) -> PathBuf {
        self.root.join("timerwheel")
    }

    /// Folder of the timer-log segments (RocketMQ's `timerlog`).
    pub fn timer_log_dir(&self) -> PathBuf {
        self.root.join("timerlog")
    }

    /// The timer checkpoint (RocketMQ's `config/timercheck`).
    pub fn timer_checkpoint_path(&self) -> PathBuf {
        self.config_dir().join("timercheck")
    }

    /// The abort marker.
    pub fn abort_path(&self) -> PathBuf {
        self.root.join("abort")
    }

    /// The lock file.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// Creates the root and its fixed folders if missing.
    pub fn create_dirs(&self) -> Result<(), StoreError> {
        for dir in [
            self.root.clone(),
            self.commitlog_dir(),
            self.consumequeue_dir(),
            self.index_dir(),
            self.config_dir(),
        ] {
            fs::create_dir_all(&dir)
                .map_err(|e| StoreError::io(&dir, FsError::io(FsOp::Create, &e)))?;
        }
        Ok(())
    }

    /// Every consume queue present on disk as `(topic, queue_id)`, sorted, so the store can
    /// reopen them. Names that are not a topic folder holding numeric queue folders are
    /// skipped with a warning; a missing `consumequeue/` means none.
    pub fn list_queues(&self) -> Result<Vec<(String, u32)>, StoreError> {
        let root = self.consumequeue_dir();
        let mut queues = Vec::new();
        let Some(topics) = read_dir_if_exists(&root)? else {
            return Ok(queues);
        };
        for topic in topics {
            let topic = topic.map_err(|e| StoreError::io(&root, FsError::io(FsOp::Scan, &e)))?;
            let topic_path = topic.path();
            let name = topic.file_name();
            let Some(name) = name.to_str().filter(|n| is_plain_name(n)) else {
                log::warn!("{}: ignoring, not a topic folder", topic_path.display());
                continue;
            };
            if !topic.file_type().is_ok_and(|t| t.is_dir()) {
                log::warn!("{}: ignoring, not a folder", topic_path.display());
                continue;
            }
            let Some(ids) = read_dir_if_exists(&topic_path)? else {
                continue;
            };
            for id in ids {
                let id =
                    id.map_err(|e| StoreError::io(&topic_path, FsError::io(FsOp::Scan, &e)))?;
                let parsed = id
                    .file_name()
                    .to_str()
                    .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u32>().ok());
                match parsed {
                    Some(queue_id) if id.file_type().is_ok_and(|t| t.is_dir()) => {
                        queues.push((name.to_owned(), queue_id));
                    }
                    _ => log::warn!("{}: ignoring, not a queue folder", id.path().display()),
                }
            }
        }
        queues.sort();
        Ok(queues)
    }
}

/// True when `name` can be one path component and nothing else.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOPIC_LEN
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
}

/// `read_dir`, with a missing folder as `None`.
fn read_dir_if_exists(path: &Path) -> Result<Option<fs::ReadDir>, StoreError> {
    match fs::read_dir(path) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, FsError::io(FsOp::Scan, &e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_rocketmq_layout() {
        let layout = StoreLayout::new("/s");
        assert_eq!(layout.commitlog_dir(), Path::new("/s/commitlog"));
        assert_eq!(
            layout.queue_dir("TopicTest", 3).unwrap(),
            Path::new("/s/consumequeue/TopicTest/3")
        );
        assert_eq!(layout.index_dir(), Path::new("/s/index"));
        assert_eq!(layout.checkpoint_path(), Path::new("/s/checkpoint"));
        assert_eq!(layout.abort_path(), Path::new("/s/abort"));
        assert_eq!(layout.config_dir(), Path::new("/s/config"));
        assert_eq!(layout.lock_path(), Path::new("/s/lock"));
    }

    #[test]
    fn topic_that_would_escape_the_store_is_refused() {
        let layout = StoreLayout::new("/s");
        for topic in ["", ".", "..", "a/b", "../etc", "a\0b"] {
            assert!(layout.queue_dir(topic, 0).is_err(), "{topic:?}");
        }
        assert!(layout.queue_dir("%RETRY%group", 0).is_ok());
    }

    #[test]
    fn list_queues_finds_queue_folders_and_skips_strays() {
        let dir = tempfile::tempdir().unwrap();
        let layout = StoreLayout::new(dir.path());
        assert!(layout.list_queues().unwrap().is_empty());
        layout.create_dirs().unwrap();
        for (topic, id) in [("B", 1), ("A", 10), ("A", 2)] {
            fs::create_dir_all(layout.queue_dir(topic, id).unwrap()).unwrap();
        }
        fs::create_dir_all(layout.consumequeue_dir().join("A").join("notanumber")).unwrap();
        fs::write(layout.consumequeue_dir().join("A").join("7"), b"file").unwrap();
        fs::write(layout.consumequeue_dir().join("stray"), b"file").unwrap();
        assert_eq!(
            layout.list_queues().unwrap(),
            vec![("A".into(), 2), ("A".into(), 10), ("B".into(), 1)]
        );
    }
}
