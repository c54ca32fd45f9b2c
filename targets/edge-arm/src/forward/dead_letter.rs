//! Dead letters: records the forwarder could not send and moved past, kept on the
//! device so nothing is lost without a trace. Each is `<dir>/<offset>.record` (the
//! record's stored bytes, RocketMQ's record format) beside `<offset>.reason` (one line of
//! text: why), both durable before the forwarder's progress moves past the record. The
//! record's own header gives its topic and size, so the sidecar holds only the reason.
//! `tern-edge dead-letters list|resend|drop` reads this folder ([`crate::cli`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use tern_engine::record::RecordView;

/// Most dead letters `list` reads in one go; a bound on an operator's command.
pub const MAX_LISTED: usize = 100_000;

/// One dead letter as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The record's offset in the local log (its name).
    pub offset: u64,
    /// Its topic (`?` when the record's header cannot be read).
    pub topic: String,
    /// Record bytes.
    pub size: u64,
    /// Why it was set aside.
    pub reason: String,
}

/// The dead-letter folder of a store.
#[derive(Clone, Debug)]
pub struct DeadLetters {
    dir: PathBuf,
}

impl DeadLetters {
    /// `<store_root>/dead-letter`.
    pub fn new(store_root: &Path) -> DeadLetters {
        DeadLetters {
            dir: store_root.join("dead-letter"),
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn record_path(&self, offset: u64) -> PathBuf {
        self.dir.join(format!("{offset:020}.record"))
    }

    fn reason_path(&self, offset: u64) -> PathBuf {
        self.dir.join(format!("{offset:020}.reason"))
    }

    /// Keeps `bytes` (the record at `offset`) with `reason`, durably: the reason first,
    /// so a record file never lacks one after a crash.
    pub fn keep(&self, offset: u64, bytes: &[u8], reason: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let line = reason.replace(['\n', '\r'], " ");
        write_synced(&self.reason_path(offset), format!("{line}\n").as_bytes())?;
        let path = self.record_path(offset);
        write_synced(&path, bytes)?;
        std::fs::File::open(&self.dir)?.sync_all()?;
        Ok(path)
    }

    /// How many there are (record files).
    pub fn count(&self) -> usize {
        self.offsets().map_or(0, |v| v.len())
    }

    /// Every dead letter's offset, ascending (at most [`MAX_LISTED`]).
    pub fn offsets(&self) -> std::io::Result<Vec<u64>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for e in entries {
            let name = e?.file_name();
            let Some(offset) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".record"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            out.push(offset);
            if out.len() >= MAX_LISTED {
                break;
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The stored bytes of the dead letter at `offset`.
    pub fn bytes(&self, offset: u64) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.record_path(offset))
    }

    /// One dead letter's description.
    pub fn describe(&self, offset: u64) -> std::io::Result<DeadLetter> {
        let bytes = self.bytes(offset)?;
        let topic = RecordView::parse(&bytes).ok().map_or_else(
            || "?".to_owned(),
            |v| String::from_utf8_lossy(v.topic()).into_owned(),
        );
        let reason = match std::fs::read_to_string(self.reason_path(offset)) {
            Ok(r) => r.trim_end().to_owned(),
            // Kept before reasons were: the cluster refused it for good.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "(no reason kept)".to_owned(),
            Err(e) => return Err(e),
        };
        Ok(DeadLetter {
            offset,
            topic,
            size: bytes.len() as u64,
            reason,
        })
    }

    /// Removes the dead letter at `offset` (record, then reason).
    pub fn remove(&self, offset: u64) -> std::io::Result<()> {
        std::fs::remove_file(self.record_path(offset))?;
        match std::fs::remove_file(self.reason_path(offset)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_record_is_listed_with_its_reason_and_removed_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = DeadLetters::new(dir.path());
        assert_eq!(d.count(), 0, "no folder yet");
        d.keep(4096, b"not a record", "undecodable: bad\nrecord")
            .unwrap();
        d.keep(12, b"x", "refused").unwrap();
        assert_eq!(d.offsets().unwrap(), vec![12, 4096]);
        let one = d.describe(4096).unwrap();
        assert_eq!(one.topic, "?");
        assert_eq!(one.size, 12);
        assert_eq!(one.reason, "undecodable: bad record", "one line");
        d.remove(4096).unwrap();
        assert_eq!(d.offsets().unwrap(), vec![12]);
        assert!(d.remove(4096).is_err(), "gone");
    }
}
