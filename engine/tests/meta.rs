//! Metadata files over a real temp dir: atomic replace, `.bak` fallback, clear errors.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use tern_engine_fs::meta::{Corruption, backup_path};
use tern_engine_fs::{MetaError, load, save};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Offsets {
    version: u64,
    table: BTreeMap<String, Vec<u64>>,
}

fn offsets(version: u64) -> Offsets {
    let mut table = BTreeMap::new();
    table.insert("TopicTest@group".to_owned(), vec![12, 7, version]);
    Offsets { version, table }
}

fn flip_last_byte(path: &Path) {
    let mut bytes = fs::read(path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    fs::write(path, bytes).unwrap();
}

/// A temp dir with the file `name` saved at version 1, then 2: version 1 is its `.bak`.
fn saved_twice(name: &str) -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(name);
    save(&path, &offsets(1)).unwrap();
    save(&path, &offsets(2)).unwrap();
    (tmp, path)
}

#[test]
fn missing_file_loads_as_none() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        load::<Offsets>(&tmp.path().join("consumerOffset")).unwrap(),
        None
    );
}

#[test]
fn saved_value_loads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("consumerOffset");
    save(&path, &offsets(1)).unwrap();
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(1)));
    assert!(!backup_path(&path).exists(), "no previous version yet");
}

#[test]
fn saving_again_keeps_previous_version_as_bak() {
    let (tmp, path) = saved_twice("consumerOffset");
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(2)));
    assert_eq!(
        load::<Offsets>(&backup_path(&path)).unwrap(),
        Some(offsets(1))
    );
    assert!(!tmp.path().join("consumerOffset.tmp").exists());
}

#[test]
fn corrupted_main_file_falls_back_to_bak() {
    let (_tmp, path) = saved_twice("topics");
    flip_last_byte(&path);
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(1)));
}

#[test]
fn missing_main_file_falls_back_to_bak() {
    let (_tmp, path) = saved_twice("topics");
    // As after a crash between moving the old file to .bak and renaming the new one in.
    fs::remove_file(&path).unwrap();
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(1)));
}

#[test]
fn both_files_corrupt_is_a_clear_error() {
    let (_tmp, path) = saved_twice("topics");
    flip_last_byte(&path);
    fs::write(backup_path(&path), b"garbage").unwrap();
    let error = load::<Offsets>(&path).unwrap_err();
    let MetaError::Corrupt { main, backup, .. } = &error else {
        panic!("expected Corrupt, got {error}");
    };
    assert_eq!(*main, Corruption::CrcMismatch);
    assert_eq!(*backup, Corruption::TooShort);
    let message = error.to_string();
    assert!(message.contains("topics.bak"), "{message}");
    assert!(message.contains("CRC mismatch"), "{message}");
}

#[test]
fn corrupt_main_without_backup_is_an_error_not_none() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("topics");
    fs::write(&path, b"{\"json\": \"from RocketMQ\"}").unwrap();
    assert!(matches!(
        load::<Offsets>(&path),
        Err(MetaError::Corrupt {
            main: Corruption::BadMagic,
            backup: Corruption::Missing,
            ..
        })
    ));
}

#[test]
fn torn_temp_file_is_ignored_and_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("delayOffset");
    save(&path, &offsets(1)).unwrap();
    // A crash while writing the next version left half a temp file.
    fs::write(tmp.path().join("delayOffset.tmp"), b"TRNM\0\0").unwrap();
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(1)));
    save(&path, &offsets(2)).unwrap();
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(2)));
}

#[test]
fn saving_over_a_corrupt_file_keeps_the_good_backup() {
    let (_tmp, path) = saved_twice("topics");
    flip_last_byte(&path);
    save(&path, &offsets(3)).unwrap();
    assert_eq!(load::<Offsets>(&path).unwrap(), Some(offsets(3)));
    assert_eq!(
        load::<Offsets>(&backup_path(&path)).unwrap(),
        Some(offsets(1))
    );
}

#[test]
fn payload_of_another_type_is_reported_as_undecodable() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("topics");
    save(&path, &u8::MAX).unwrap();
    assert!(matches!(
        load::<Offsets>(&path),
        Err(MetaError::Corrupt {
            main: Corruption::Decode,
            ..
        })
    ));
}

#[test]
fn saving_into_a_missing_folder_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("no/such/dir/topics");
    let error = save(&path, &offsets(1)).unwrap_err();
    assert!(error.to_string().contains("topics.tmp"), "{error}");
}
