//! [`FileDirectory`]: the segments of one segmented structure as files in one folder.
//!
//! A segment is named by its base offset in decimal, zero-padded to a fixed width, as
//! RocketMQ names them (`UtilAll.offset2FileName`): 20 digits for the commit log and the
//! consume queues, 17 for index files, whose "base" is a `yyyyMMddHHmmssSSS` stamp.
//! Zero-padding makes the names sort as the bases do, which is what operators expect
//! when they list the folder.
//!
//! A new segment is created under a temp name, preallocated, synced and only then renamed
//! into place (and the folder synced), so a crash never leaves a segment of the wrong size
//! under a real name; a stale temp file found at [`Directory::scan`] is deleted.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use tern_engine::media::Directory;

use crate::error::{FsError, FsOp, StoreError};
use crate::mapped::{Access, MappedFile, allocate};

/// Suffix of a segment being created; such a file is never a segment.
const TEMP_SUFFIX: &str = ".tmp";

/// Widest name a base can have: `u64::MAX` has 20 decimal digits.
pub const MAX_NAME_DIGITS: u8 = 20;

/// Name width of commit-log and consume-queue segments (RocketMQ's).
pub const OFFSET_NAME_DIGITS: u8 = 20;

/// Name width of index files (`yyyyMMddHHmmssSSS`).
pub const INDEX_NAME_DIGITS: u8 = 17;

/// The segments of one folder, open and mapped, keyed by base offset.
#[derive(Debug)]
pub struct FileDirectory {
    /// The folder holding the segment files.
    path: PathBuf,
    /// Width of a segment's name.
    digits: u8,
    /// The access hint given to every segment's mapping.
    access: Access,
    /// The open segments. Filled by `scan` and `create`.
    segments: BTreeMap<u64, MappedFile>,
}

impl FileDirectory {
    /// Opens the folder at `path`, creating it (and its parents) if missing. Segments are
    /// opened by the first [`Directory::scan`].
    ///
    /// `digits` is the width of segment names (1 to 20: [`OFFSET_NAME_DIGITS`] or
    /// [`INDEX_NAME_DIGITS`]).
    pub fn open(path: &Path, digits: u8, access: Access) -> Result<Self, StoreError> {
        if digits == 0 || digits > MAX_NAME_DIGITS {
            return Err(StoreError::Invalid {
                path: path.to_path_buf(),
                reason: "segment names must have 1 to 20 digits",
            });
        }
        fs::create_dir_all(path)
            .map_err(|e| StoreError::io(path, FsError::io(FsOp::Create, &e)))?;
        Ok(FileDirectory {
            path: path.to_path_buf(),
            digits,
            access,
            segments: BTreeMap::new(),
        })
    }

    /// The folder holding the segments.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Width of a segment's name.
    pub fn digits(&self) -> u8 {
        self.digits
    }

    /// The bases of the open segments, ascending.
    pub fn bases(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.keys().copied()
    }

    /// The file name of the segment at `base`, or `None` if `base` does not fit the width.
    pub fn segment_name(&self, base: u64) -> Option<String> {
        segment_name(base, self.digits)
    }

    /// The path of the segment at `base`, or `None` if `base` does not fit the width.
    pub fn segment_path(&self, base: u64) -> Option<PathBuf> {
        self.segment_name(base).map(|name| self.path.join(name))
    }

    /// Reads the folder: deletes stale temp files, warns about names that are not
    /// segments, and returns the bases found, ascending.
    fn list(&self) -> Result<Vec<u64>, FsError> {
        let mut bases = Vec::new();
        let entries = fs::read_dir(&self.path).map_err(|e| FsError::io(FsOp::Scan, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| FsError::io(FsOp::Scan, &e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                log::warn!(
                    "{}: ignoring {:?}, not a segment name",
                    self.path.display(),
                    entry.file_name()
                );
                continue;
            };
            if let Some(stem) = name.strip_suffix(TEMP_SUFFIX) {
                if parse_segment_name(stem, self.digits).is_some() {
                    log::warn!(
                        "{}: deleting {name}, a segment whose creation was interrupted",
                        self.path.display()
                    );
                    fs::remove_file(entry.path()).map_err(|e| FsError::io(FsOp::Remove, &e))?;
                    continue;
                }
            }
            match parse_segment_name(name, self.digits) {
                Some(base) if entry.file_type().is_ok_and(|t| t.is_file()) => bases.push(base),
                _ => log::warn!(
                    "{}: ignoring {name}, not a segment of {} digits",
                    self.path.display(),
                    self.digits
                ),
            }
        }
        bases.sort_unstable();
        Ok(bases)
    }

    /// Makes the folder's entries (created, renamed, removed names) durable.
    fn sync(&self) -> Result<(), FsError> {
        sync_dir(&self.path)
    }
}

impl Directory for FileDirectory {
    type Media = MappedFile;
    type Error = FsError;

    /// Opens every segment present on disk that is not open yet, forgets the ones whose
    /// file has gone, and reports them all in ascending order.
    fn scan(&mut self, f: &mut dyn FnMut(u64)) -> Result<(), FsError> {
        let bases = self.list()?;
        self.segments
            .retain(|base, _| bases.binary_search(base).is_ok());
        for &base in &bases {
            if self.segments.contains_key(&base) {
                continue;
            }
            // `list` only returns names that `parse_segment_name` accepted at this width.
            let Some(path) = self.segment_path(base) else {
                continue;
            };
            let media = MappedFile::open(&path, self.access)?;
            self.segments.insert(base, media);
        }
        for &base in &bases {
            f(base);
        }
        Ok(())
    }

    fn create(&mut self, base: u64, len: u64) -> Result<(), FsError> {
        let Some(name) = self.segment_name(base) else {
            return Err(FsError::new(FsOp::Create, ErrorKind::InvalidInput));
        };
        let path = self.path.join(&name);
        if self.segments.contains_key(&base) || path.exists() {
            return Err(FsError::new(FsOp::Create, ErrorKind::AlreadyExists));
        }
        let temp = self.path.join(format!("{name}{TEMP_SUFFIX}"));
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)
            .map_err(|e| FsError::io(FsOp::Create, &e))?;
        let ready = allocate(&file, len)
            .and_then(|()| rustix::fs::fdatasync(&file).map_err(|e| FsError::errno(FsOp::Flush, e)))
            .and_then(|()| fs::rename(&temp, &path).map_err(|e| FsError::io(FsOp::Rename, &e)));
        if let Err(error) = ready {
            // Leave no half-made segment behind (ENOSPC in fallocate, typically).
            let _ = fs::remove_file(&temp);
            return Err(error);
        }
        self.sync()?;
        let media = MappedFile::from_file(file, self.access)?;
        self.segments.insert(base, media);
        Ok(())
    }

    fn media(&self, base: u64) -> Option<&MappedFile> {
        self.segments.get(&base)
    }

    fn media_mut(&mut self, base: u64) -> Option<&mut MappedFile> {
        self.segments.get_mut(&base)
    }

    fn remove(&mut self, base: u64) -> Result<(), FsError> {
        // Unmap first: the pages must not be reachable once the name is gone.
        self.segments.remove(&base);
        let Some(path) = self.segment_path(base) else {
            return Ok(());
        };
        match fs::remove_file(&path) {
            Ok(()) => self.sync(),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(FsError::io(FsOp::Remove, &e)),
        }
    }
}

/// The name of the segment at `base`: `base` in decimal, zero-padded to `digits`.
/// `None` when `base` needs more digits than that.
pub fn segment_name(base: u64, digits: u8) -> Option<String> {
    let name = format!("{base:0width$}", width = usize::from(digits));
    (name.len() == usize::from(digits)).then_some(name)
}

/// The base of a segment named `name`, if it is exactly `digits` decimal digits that fit
/// a `u64`.
pub fn parse_segment_name(name: &str, digits: u8) -> Option<u64> {
    if name.len() != usize::from(digits) || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}

/// fsyncs a folder so the names created, renamed or removed in it survive power loss.
pub(crate) fn sync_dir(path: &Path) -> Result<(), FsError> {
    let dir = File::open(path).map_err(|e| FsError::io(FsOp::Open, &e))?;
    rustix::fs::fsync(&dir).map_err(|e| FsError::errno(FsOp::Flush, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_zero_padded_to_the_width() {
        assert_eq!(
            segment_name(1_073_741_824, 20).as_deref(),
            Some("00000000001073741824")
        );
        assert_eq!(
            segment_name(20_240_101_120_000_000, 17).as_deref(),
            Some("20240101120000000")
        );
        assert_eq!(
            segment_name(u64::MAX, 20).as_deref(),
            Some("18446744073709551615")
        );
        assert_eq!(segment_name(100_000_000_000_000_000, 17), None);
    }

    #[test]
    fn only_exact_width_decimal_names_parse() {
        assert_eq!(
            parse_segment_name("00000000000006000000", 20),
            Some(6_000_000)
        );
        assert_eq!(parse_segment_name("0000000000000600000", 20), None);
        assert_eq!(parse_segment_name("0000000000000600000x", 20), None);
        assert_eq!(parse_segment_name("+0000000000000600000", 20), None);
        assert_eq!(parse_segment_name("99999999999999999999", 20), None);
    }
}
