//! Metadata files (topics, consumer offsets, delay offsets, groups): small values saved
//! whole, atomically, with the previous version kept.
//!
//! A file is a 12-byte header and a postcard payload:
//!
//! ```text
//! magic "TRNM" (4) | payload length u32 BE (4) | CRC32 of payload u32 BE (4) | payload
//! ```
//!
//! [`save`] writes `<name>.tmp`, fsyncs it, moves the current (valid) file to `<name>.bak`,
//! renames the temp file to `<name>` and fsyncs the folder. A crash at any point leaves
//! either the new file or the previous one readable (as `<name>` or `<name>.bak`); a torn
//! temp file is never read. [`load`] falls back to `<name>.bak`, with a warning, when
//! `<name>` is missing or fails its check, as RocketMQ's `ConfigManager` does.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::directory::sync_dir;
use crate::error::{FsError, FsOp};

/// First bytes of every metadata file.
const MAGIC: [u8; 4] = *b"TRNM";

/// Size of the header before the payload.
const HEADER_LEN: usize = 12;

/// Largest metadata file read: a bound so a stray huge file cannot exhaust memory.
pub const MAX_META_BYTES: u64 = 256 * 1024 * 1024;

/// Why a metadata file could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// There is no such file.
    Missing,
    /// Shorter than its header.
    TooShort,
    /// Longer than [`MAX_META_BYTES`].
    TooLarge,
    /// Does not start with the magic: not one of our metadata files.
    BadMagic,
    /// The header's payload length is not the file's.
    LengthMismatch,
    /// The payload's CRC32 is not the header's: the file was damaged.
    CrcMismatch,
    /// The payload is intact but does not decode as the expected type.
    Decode,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Corruption::Missing => "missing",
            Corruption::TooShort => "shorter than its header",
            Corruption::TooLarge => "larger than the metadata size limit",
            Corruption::BadMagic => "not a metadata file (bad magic)",
            Corruption::LengthMismatch => "length does not match its header",
            Corruption::CrcMismatch => "CRC mismatch",
            Corruption::Decode => "payload does not decode",
        })
    }
}

/// A metadata file could not be saved or loaded.
#[derive(Debug)]
pub enum MetaError {
    /// A file operation failed.
    Io {
        /// The file concerned.
        path: PathBuf,
        /// What failed.
        error: FsError,
    },
    /// The value could not be encoded.
    Encode {
        /// The file it was meant for.
        path: PathBuf,
        /// Postcard's reason.
        error: postcard::Error,
    },
    /// Neither the file nor its backup holds a usable value.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with the file.
        main: Corruption,
        /// What is wrong with `<file>.bak`.
        backup: Corruption,
    },
}

impl MetaError {
    fn io(path: &Path, op: FsOp, error: &std::io::Error) -> Self {
        MetaError::Io {
            path: path.to_path_buf(),
            error: FsError::io(op, error),
        }
    }
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            MetaError::Encode { path, error } => {
                write!(f, "{}: cannot encode: {error}", path.display())
            }
            MetaError::Corrupt { path, main, backup } => write!(
                f,
                "{}: unusable ({main}) and its backup {} too ({backup})",
                path.display(),
                backup_path(path).display()
            ),
        }
    }
}

impl std::error::Error for MetaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MetaError::Io { error, .. } => Some(error),
            MetaError::Encode { error, .. } => Some(error),
            MetaError::Corrupt { .. } => None,
        }
    }
}

/// `<path>.bak`: the previous version of `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    with_suffix(path, ".bak")
}

/// Saves `value` at `path` atomically and durably, keeping the previous version as
/// `<path>.bak`. The folder must exist.
pub fn save<T: Serialize>(path: &Path, value: &T) -> Result<(), MetaError> {
    let payload = postcard::to_stdvec(value).map_err(|error| MetaError::Encode {
        path: path.to_path_buf(),
        error,
    })?;
    let payload_len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| u64::from(n) + HEADER_LEN as u64 <= MAX_META_BYTES)
        .ok_or(MetaError::Encode {
            path: path.to_path_buf(),
            error: postcard::Error::SerializeBufferFull,
        })?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&payload_len.to_be_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_be_bytes());
    bytes.extend_from_slice(&payload);

    let temp = write_temp(path, &bytes)?;
    // Keep the current version as the backup, but only if it is intact: replacing a good
    // backup with a damaged file would lose the last good version.
    match read_payload(path)? {
        Ok(_) => {
            let backup = backup_path(path);
            fs::rename(path, &backup).map_err(|e| MetaError::io(path, FsOp::Rename, &e))?;
        }
        Err(Corruption::Missing) => {}
        Err(corruption) => log::warn!(
            "{}: {corruption}; replacing it and keeping the older backup",
            path.display()
        ),
    }
    install(&temp, path)
}

/// Replaces the file at `path` with `bytes`, atomically and durably: a reader sees the
/// old content or the new, and after a crash the new one once this returned. For files
/// people edit too (`plain_acl.yml`), which keep their own format.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), MetaError> {
    let temp = write_temp(path, bytes)?;
    install(&temp, path)
}

/// Writes `bytes` to `<path>.tmp` and syncs it.
fn write_temp(path: &Path, bytes: &[u8]) -> Result<PathBuf, MetaError> {
    let temp = with_suffix(path, ".tmp");
    let mut file = File::create(&temp).map_err(|e| MetaError::io(&temp, FsOp::Create, &e))?;
    file.write_all(bytes)
        .map_err(|e| MetaError::io(&temp, FsOp::Write, &e))?;
    file.sync_all()
        .map_err(|e| MetaError::io(&temp, FsOp::Flush, &e))?;
    Ok(temp)
}

/// Renames `temp` over `path` and syncs the folder, so the rename survives a crash.
fn install(temp: &Path, path: &Path) -> Result<(), MetaError> {
    fs::rename(temp, path).map_err(|e| MetaError::io(temp, FsOp::Rename, &e))?;
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    sync_dir(folder).map_err(|error| MetaError::Io {
        path: folder.to_path_buf(),
        error,
    })
}

/// Loads the value saved at `path`, falling back to `<path>.bak` (with a warning) when
/// `path` is missing or damaged. `Ok(None)` when neither file exists.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, MetaError> {
    let main = match read_value(path)? {
        Ok(value) => return Ok(Some(value)),
        Err(corruption) => corruption,
    };
    let backup = backup_path(path);
    match read_value(&backup)? {
        Ok(value) => {
            log::warn!(
                "{}: {main}; loaded the previous version from {}",
                path.display(),
                backup.display()
            );
            Ok(Some(value))
        }
        Err(Corruption::Missing) if main == Corruption::Missing => Ok(None),
        Err(backup) => Err(MetaError::Corrupt {
            path: path.to_path_buf(),
            main,
            backup,
        }),
    }
}

/// The value in `path`, or why there is none.
fn read_value<T: DeserializeOwned>(path: &Path) -> Result<Result<T, Corruption>, MetaError> {
    Ok(read_payload(path)?
        .and_then(|payload| postcard::from_bytes(&payload).map_err(|_| Corruption::Decode)))
}

/// The checked payload of `path`, or why it is unusable. I/O failures other than a
/// missing file are errors: a file we cannot read is not a file we may skip.
fn read_payload(path: &Path) -> Result<Result<Vec<u8>, Corruption>, MetaError> {
    let len = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Err(Corruption::Missing)),
        Err(e) => return Err(MetaError::io(path, FsOp::Open, &e)),
    };
    if len > MAX_META_BYTES {
        return Ok(Err(Corruption::TooLarge));
    }
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Err(Corruption::Missing)),
        Err(e) => return Err(MetaError::io(path, FsOp::Read, &e)),
    };
    Ok(check(bytes))
}

/// Verifies the header and CRC of a file's bytes and returns the payload.
fn check(mut bytes: Vec<u8>) -> Result<Vec<u8>, Corruption> {
    let Some((header, payload)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(Corruption::TooShort);
    };
    let (magic, rest) = header.split_at(4);
    let (len, crc) = rest.split_at(4);
    if magic != MAGIC {
        return Err(Corruption::BadMagic);
    }
    let be = |b: &[u8]| b.try_into().map(u32::from_be_bytes).unwrap_or(u32::MAX);
    if u64::from(be(len)) != payload.len() as u64 {
        return Err(Corruption::LengthMismatch);
    }
    if be(crc) != crc32fast::hash(payload) {
        return Err(Corruption::CrcMismatch);
    }
    bytes.drain(..HEADER_LEN);
    Ok(bytes)
}

/// `path` with `suffix` appended to its file name (`topics.json` → `topics.json.bak`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_rejects_each_kind_of_damage() {
        assert_eq!(check(b"TRN".to_vec()), Err(Corruption::TooShort));
        let mut good = MAGIC.to_vec();
        good.extend_from_slice(&2u32.to_be_bytes());
        good.extend_from_slice(&crc32fast::hash(b"ok").to_be_bytes());
        good.extend_from_slice(b"ok");
        assert_eq!(check(good.clone()), Ok(b"ok".to_vec()));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert_eq!(check(magic), Err(Corruption::BadMagic));
        let mut short = good.clone();
        short.pop();
        assert_eq!(check(short), Err(Corruption::LengthMismatch));
        let mut flipped = good;
        flipped[13] ^= 1;
        assert_eq!(check(flipped), Err(Corruption::CrcMismatch));
    }

    #[test]
    fn backup_name_appends_bak() {
        assert_eq!(
            backup_path(Path::new("/s/config/topics.json")),
            Path::new("/s/config/topics.json.bak")
        );
    }
}
