//! The epoch file (`{storePathRootDir}/epochFileCheckpoint`, RocketMQ's
//! `EpochFileCache` over `CheckpointFile`): every master term of the broker-set this
//! replica has seen, as `<epoch, start offset>`, so that a replica rejoining a new
//! master can find where their logs stop agreeing and cut its own log there.
//!
//! Format, in RocketMQ's exact text so a Java broker reads a Tern store's file and back:
//!
//! ```text
//! 2            entry count
//! 447245663    CRC32 of the entry lines (each with its '\n') & 0x7FFFFFFF; 0 = unchecked
//! 1-0          epoch-startOffset, ascending
//! 2-1048576
//! ```
//!
//! An entry's end is the next entry's start; the last one's is the log's end. Written
//! atomically (temp file, fsync, rename, folder fsync) after the previous version is
//! copied to `epochFileCheckpoint.bak`; RocketMQ overwrites in place without an fsync. Read
//! from the main file, falling back to `.bak` when it is missing or fails its count or
//! CRC, as RocketMQ does.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use tern_engine_fs::meta;

/// The file's name under the store root (`storePathEpochFile`'s default).
pub const FILE_NAME: &str = "epochFileCheckpoint";

/// Most entries kept: a Java master's HA handshake carries at most 1000
/// (docs/design/controller.md §7.2); older terms are dropped first.
pub const MAX_ENTRIES: usize = 1000;

/// Largest file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// One master term: from `start_offset` on, the log was written by the master of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The master epoch (the controller's `masterEpoch`).
    pub epoch: i32,
    /// The commit-log offset the term's first message was written at.
    pub start_offset: i64,
}

/// Why an entry was refused or a file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EpochError {
    /// Epochs and start offsets only grow: `epoch` at `start` does not follow the last
    /// entry.
    NotAfterLast {
        /// The refused entry.
        entry: EpochEntry,
        /// The last entry.
        last: EpochEntry,
    },
    /// Neither the file nor its backup could be used.
    Unreadable(String),
}

impl fmt::Display for EpochError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAfterLast { entry, last } => write!(
                f,
                "epoch {} at offset {} does not follow the last epoch {} at offset {}",
                entry.epoch, entry.start_offset, last.epoch, last.start_offset
            ),
            Self::Unreadable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for EpochError {}

/// RocketMQ's `UtilAll.crc32`: CRC32 with the sign bit cleared.
fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes) & 0x7FFF_FFFF
}

fn entry_lines(entries: &[EpochEntry]) -> String {
    entries
        .iter()
        .map(|e| format!("{}-{}\n", e.epoch, e.start_offset))
        .collect()
}

/// Renders `entries` as the file's text.
pub fn render(entries: &[EpochEntry]) -> String {
    let lines = entry_lines(entries);
    format!("{}\n{}\n{lines}", entries.len(), crc(lines.as_bytes()))
}

/// Parses the file's text; `Err` says why it cannot be used.
pub fn parse(text: &str) -> Result<Vec<EpochEntry>, String> {
    let mut lines = text.lines();
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("no entry count on the first line")?;
    let expected_crc: i64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or("no CRC on the second line")?;
    let mut entries = Vec::new();
    let mut body = String::new();
    for line in lines {
        body.push_str(line);
        body.push('\n');
        let Some((epoch, start)) = line.trim().split_once('-') else {
            return Err(format!("entry '{line}' is not epoch-startOffset"));
        };
        let (Ok(epoch), Ok(start_offset)) = (epoch.parse(), start.parse()) else {
            return Err(format!("entry '{line}' is not epoch-startOffset"));
        };
        entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        if entries.len() > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
    }
    if entries.len() != count {
        return Err(format!("expected {count} entries, found {}", entries.len()));
    }
    if expected_crc != 0 && expected_crc != i64::from(crc(body.as_bytes())) {
        return Err("the entries do not match their CRC".into());
    }
    if entries
        .windows(2)
        .any(|w| w[1].epoch <= w[0].epoch || w[1].start_offset < w[0].start_offset)
    {
        return Err("epochs do not ascend".into());
    }
    Ok(entries)
}

/// The epoch file and its entries.
#[derive(Debug)]
pub struct EpochFile {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

fn read_text(path: &Path) -> io::Result<Option<String>> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(m) if m.len() > MAX_FILE_BYTES => {
            return Err(io::Error::other(format!(
                "{} is larger than {MAX_FILE_BYTES} bytes",
                path.display()
            )));
        }
        Ok(_) => {}
    }
    Ok(Some(
        String::from_utf8_lossy(&std::fs::read(path)?).into_owned(),
    ))
}

impl EpochFile {
    /// Opens the file in `root` (the store root): its entries, or its backup's when it is
    /// missing or damaged, or none for a new replica.
    pub fn open(root: &Path) -> Result<Self, EpochError> {
        let path = root.join(FILE_NAME);
        let backup = meta::backup_path(&path);
        let unreadable =
            |p: &Path, e: String| EpochError::Unreadable(format!("{}: {e}", p.display()));
        let main = read_text(&path).map_err(|e| unreadable(&path, e.to_string()))?;
        let main_entries = main.as_deref().map(parse);
        let entries = match main_entries {
            Some(Ok(entries)) if !entries.is_empty() => entries,
            other => {
                let why = match &other {
                    Some(Err(e)) => e.clone(),
                    _ => "missing or empty".to_owned(),
                };
                match read_text(&backup).map_err(|e| unreadable(&backup, e.to_string()))? {
                    Some(text) => {
                        let entries = parse(&text).map_err(|e| unreadable(&backup, e))?;
                        if other.is_some() {
                            log::warn!("{}: {why}; using {}", path.display(), backup.display());
                        }
                        entries
                    }
                    None => match other {
                        Some(Err(e)) => return Err(unreadable(&path, e)),
                        _ => Vec::new(),
                    },
                }
            }
        };
        Ok(Self { path, entries })
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest entry.
    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Starts a term: `epoch` from `start_offset` on. Entries starting at or past it are
    /// dropped first (a term that wrote nothing, or a tail this replica no longer has),
    /// as RocketMQ's `changeToMaster` does before it appends. Refused when `epoch` is not
    /// newer than every kept entry: a master never goes back to an old epoch.
    pub fn begin(&mut self, epoch: i32, start_offset: i64) -> Result<(), EpochError> {
        let entry = EpochEntry {
            epoch,
            start_offset,
        };
        let mut kept = self.entries.clone();
        kept.retain(|e| e.start_offset < start_offset);
        if let Some(last) = kept.last().copied().or(self.last()) {
            if last.epoch >= epoch {
                return Err(EpochError::NotAfterLast { entry, last });
            }
        }
        kept.push(entry);
        if kept.len() > MAX_ENTRIES {
            kept.drain(..kept.len() - MAX_ENTRIES);
        }
        self.entries = kept;
        Ok(())
    }

    /// Takes `entries` (a master's list, ascending) as this replica's.
    pub fn replace(&mut self, entries: &[EpochEntry]) {
        let start = entries.len().saturating_sub(MAX_ENTRIES);
        self.entries = entries[start..].to_vec();
    }

    /// Drops the terms that start at or past `offset` (the log is cut there).
    pub fn truncate_suffix(&mut self, offset: i64) {
        self.entries.retain(|e| e.start_offset < offset);
    }

    /// Drops the terms that ended at or below `min_offset` (their segments were deleted);
    /// the newest is always kept.
    pub fn truncate_prefix(&mut self, min_offset: i64) {
        while self.entries.len() > 1 && self.entries[1].start_offset <= min_offset {
            self.entries.remove(0);
        }
    }

    /// Writes the entries: the current file is copied to `.bak`, then replaced
    /// atomically and durably. An empty list is not written (RocketMQ's rule: a new
    /// replica has no file).
    pub fn save(&self) -> io::Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        if let Some(current) = read_text(&self.path)? {
            if parse(&current).is_ok() {
                meta::replace_file(&meta::backup_path(&self.path), current.as_bytes())
                    .map_err(|e| io::Error::other(e.to_string()))?;
            }
        }
        meta::replace_file(&self.path, render(&self.entries).as_bytes())
            .map_err(|e| io::Error::other(e.to_string()))
    }
}

/// Where a replica's log and its master's agree up to (RocketMQ's `findConsistentPoint`):
/// walking the replica's terms from the newest, the first that the master also has, with
/// the same start, is shared up to the lesser of where the two logs end it. `None` when
/// no term is shared (the replica cannot follow this master without an operator).
pub fn consistent_point(
    local: &[EpochEntry],
    local_end: i64,
    master: &[EpochEntry],
    master_end: i64,
) -> Option<i64> {
    let end_of = |entries: &[EpochEntry], i: usize, last_end: i64| {
        entries
            .get(i + 1)
            .map_or(last_end, |next| next.start_offset)
    };
    for (i, e) in local.iter().enumerate().rev() {
        let Some(j) = master
            .iter()
            .position(|m| m.epoch == e.epoch && m.start_offset == e.start_offset)
        else {
            continue;
        };
        return Some(end_of(local, i, local_end).min(end_of(master, j, master_end)));
    }
    None
}

#[cfg(test)]
mod tests;
