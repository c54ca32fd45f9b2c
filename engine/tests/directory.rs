//! `FileDirectory` and `MappedFile` over real files in a temp dir: the segment lifecycle
//! the engine drives, and what survives a reopen.

use std::fs;

use tern_engine::media::{Directory, Media};
use tern_engine_fs::{Access, FileDirectory, FsOp, INDEX_NAME_DIGITS, OFFSET_NAME_DIGITS};

fn bases(dir: &mut FileDirectory) -> Vec<u64> {
    let mut found = Vec::new();
    dir.scan(&mut |base| found.push(base)).unwrap();
    found
}

fn open(path: &std::path::Path) -> FileDirectory {
    FileDirectory::open(path, OFFSET_NAME_DIGITS, Access::Sequential).unwrap()
}

#[test]
fn created_segment_is_preallocated_zeroed_and_named_by_base() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(6_000_000, 4096).unwrap();
    let path = tmp.path().join("00000000000006000000");
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 4096);
    // fallocate reserved the blocks: the file is not sparse.
    use std::os::unix::fs::MetadataExt;
    assert!(meta.blocks() * 512 >= 4096, "blocks {}", meta.blocks());
    let media = dir.media(6_000_000).unwrap();
    assert_eq!(media.len(), 4096);
    assert!(media.as_bytes().unwrap().iter().all(|&b| b == 0));
    assert!(dir.media(0).is_none());
}

#[test]
fn scan_reports_bases_in_ascending_order() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    for base in [2048, 0, 1_073_741_824, 1024] {
        dir.create(base, 1024).unwrap();
    }
    assert_eq!(bases(&mut dir), vec![0, 1024, 2048, 1_073_741_824]);
    let mut reopened = open(tmp.path());
    assert_eq!(bases(&mut reopened), vec![0, 1024, 2048, 1_073_741_824]);
}

#[test]
fn scan_ignores_unrelated_names_and_deletes_stale_temp_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(0, 64).unwrap();
    fs::write(tmp.path().join("README"), b"x").unwrap();
    fs::write(tmp.path().join("0000000000000000100"), b"x").unwrap(); // 19 digits
    fs::write(tmp.path().join("99999999999999999999"), b"x").unwrap(); // > u64::MAX
    fs::create_dir(tmp.path().join("00000000000000000200")).unwrap(); // a folder
    let stale = tmp.path().join("00000000000000000064.tmp");
    fs::write(&stale, b"half").unwrap();
    // As makers name them now: one temp file each.
    let stale_numbered = tmp.path().join("00000000000000000128.7.tmp");
    fs::write(&stale_numbered, b"half").unwrap();

    let mut reopened = open(tmp.path());
    assert_eq!(bases(&mut reopened), vec![0]);
    assert!(!stale.exists(), "stale temp segment should be deleted");
    assert!(
        !stale_numbered.exists(),
        "stale temp segment should be deleted"
    );
    assert!(
        tmp.path().join("README").exists(),
        "unrelated files are left alone"
    );
    // The interrupted creation can now be redone.
    reopened.create(64, 64).unwrap();
    assert_eq!(bases(&mut reopened), vec![0, 64]);
}

#[test]
fn creating_an_existing_segment_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(0, 64).unwrap();
    let error = dir.create(0, 64).unwrap_err();
    assert_eq!(error.op, FsOp::Create);
    assert_eq!(error.kind, std::io::ErrorKind::AlreadyExists);
    // Also when the file exists on disk but was not scanned yet.
    let mut other = open(tmp.path());
    assert_eq!(
        other.create(0, 64).unwrap_err().kind,
        std::io::ErrorKind::AlreadyExists
    );
}

/// The race the prepare task can lose: the log rolled into a segment and made it inline
/// (and wrote to it) before the task, which looked a moment earlier, makes the same one.
/// The task's file must not take the written segment's name.
#[test]
fn preparing_a_segment_that_exists_fails_and_keeps_the_written_one() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(4096, 4096).unwrap();
    let media = dir.media_mut(4096).unwrap();
    media
        .write_at(0, b"a record written after the roll")
        .unwrap();
    let next = tern_engine_fs::NextSegment::default();
    let error = FileDirectory::prepare(
        tmp.path(),
        OFFSET_NAME_DIGITS,
        (&next, next.generation()),
        (4096, 4096),
        0,
    )
    .unwrap_err();
    assert_eq!(error.kind, std::io::ErrorKind::AlreadyExists);
    assert!(!next.is_prepared(4096));
    // What a restart reads: the file under the segment's name holds the write.
    let on_disk = fs::read(tmp.path().join("00000000000000004096")).unwrap();
    assert_eq!(&on_disk[..31], b"a record written after the roll");
    let names: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temp file left: {names:?}");
}

#[test]
fn remove_unlinks_and_tolerates_missing_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(0, 64).unwrap();
    dir.create(64, 64).unwrap();
    dir.remove(0).unwrap();
    assert!(dir.media(0).is_none());
    assert!(!tmp.path().join("00000000000000000000").exists());
    dir.remove(0).unwrap();
    dir.remove(12345).unwrap();
    assert_eq!(bases(&mut dir), vec![64]);
}

#[test]
fn scan_forgets_segments_deleted_behind_its_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(0, 64).unwrap();
    dir.create(64, 64).unwrap();
    fs::remove_file(tmp.path().join("00000000000000000000")).unwrap();
    assert_eq!(bases(&mut dir), vec![64]);
    assert!(dir.media(0).is_none());
}

#[test]
fn written_and_flushed_bytes_are_there_after_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mut dir = open(tmp.path());
        dir.create(0, 8192).unwrap();
        let media = dir.media_mut(0).unwrap();
        media.write_at(0, b"first record").unwrap();
        media.write_at(5000, b"second record").unwrap();
        media.flush(0..5013).unwrap();
    }
    let mut dir = open(tmp.path());
    assert_eq!(bases(&mut dir), vec![0]);
    let media = dir.media(0).unwrap();
    let mut buf = [0u8; 13];
    media.read_at(5000, &mut buf).unwrap();
    assert_eq!(&buf, b"second record");
    assert_eq!(&media.as_bytes().unwrap()[..12], b"first record");
}

#[test]
fn set_len_grows_with_zeros_and_shrinks_keeping_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    dir.create(0, 100).unwrap();
    let media = dir.media_mut(0).unwrap();
    media.write_at(90, b"0123456789").unwrap();
    media.set_len(10_000).unwrap();
    assert_eq!(media.len(), 10_000);
    assert_eq!(&media.as_bytes().unwrap()[90..100], b"0123456789");
    assert!(media.as_bytes().unwrap()[100..].iter().all(|&b| b == 0));
    media.write_at(9_990, b"tail!tail!").unwrap();
    media.set_len(95).unwrap();
    assert_eq!(media.len(), 95);
    assert_eq!(media.as_bytes().unwrap()[90..], *b"01234");
    let mut buf = [0u8; 1];
    assert!(media.read_at(95, &mut buf).is_err());
    media.set_len(200).unwrap();
    assert!(media.as_bytes().unwrap()[95..].iter().all(|&b| b == 0));
    assert_eq!(
        fs::metadata(tmp.path().join("00000000000000000000"))
            .unwrap()
            .len(),
        200
    );
}

#[test]
fn garbled_tail_on_disk_reads_back_as_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("00000000000000000000");
    {
        let mut dir = open(tmp.path());
        dir.create(0, 4096).unwrap();
        let media = dir.media_mut(0).unwrap();
        media.write_at(0, &[0xAB; 1000]).unwrap();
        media.flush(0..1000).unwrap();
    }
    // A torn write: garbage over the end of the last record and past it.
    let mut bytes = fs::read(&path).unwrap();
    bytes[900..1100].fill(0x5A);
    fs::write(&path, &bytes).unwrap();

    let mut dir = open(tmp.path());
    assert_eq!(bases(&mut dir), vec![0]);
    let stored = dir.media(0).unwrap().as_bytes().unwrap();
    assert_eq!(stored.len(), 4096);
    assert!(stored[..900].iter().all(|&b| b == 0xAB));
    assert!(stored[900..1100].iter().all(|&b| b == 0x5A));
    assert!(stored[1100..].iter().all(|&b| b == 0));
}

#[test]
fn truncated_segment_reopens_at_its_size_on_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("00000000000000004096");
    {
        let mut dir = open(tmp.path());
        dir.create(4096, 4096).unwrap();
        let media = dir.media_mut(4096).unwrap();
        media.write_at(0, b"kept bytes, then lost ones").unwrap();
        media.flush(0..4096).unwrap();
    }
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(10)
        .unwrap();

    let mut dir = open(tmp.path());
    assert_eq!(bases(&mut dir), vec![4096]);
    let media = dir.media_mut(4096).unwrap();
    assert_eq!(media.len(), 10);
    assert_eq!(media.as_bytes().unwrap(), b"kept bytes");
    // Reading where the segment should have been is an error, not a fault.
    let mut buf = [0u8; 16];
    assert!(media.read_at(0, &mut buf).is_err());
    // The engine can restore the segment's size; the lost bytes come back as zeros.
    media.set_len(4096).unwrap();
    assert_eq!(&media.as_bytes().unwrap()[..10], b"kept bytes");
    assert!(media.as_bytes().unwrap()[10..].iter().all(|&b| b == 0));
}

#[test]
fn index_files_use_seventeen_digit_time_stamp_names() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = FileDirectory::open(tmp.path(), INDEX_NAME_DIGITS, Access::Random).unwrap();
    dir.create(20_240_102_030_405_006, 128).unwrap();
    dir.create(20_231_231_235_959_999, 128).unwrap();
    assert!(tmp.path().join("20240102030405006").exists());
    // A 20-digit name is not an index file.
    fs::write(tmp.path().join("00000000000000000000"), b"x").unwrap();
    let mut reopened = FileDirectory::open(tmp.path(), INDEX_NAME_DIGITS, Access::Random).unwrap();
    assert_eq!(
        bases(&mut reopened),
        vec![20_231_231_235_959_999, 20_240_102_030_405_006]
    );
    // A base wider than the names is refused rather than misnamed.
    assert_eq!(
        dir.create(100_000_000_000_000_000, 128).unwrap_err().kind,
        std::io::ErrorKind::InvalidInput
    );
}

#[test]
fn failed_create_leaves_no_segment_and_no_temp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = open(tmp.path());
    // Larger than any file system allows: fallocate refuses at once (EFBIG/EINVAL)
    // without touching the disk, as it would refuse a segment with ENOSPC.
    let error = dir.create(0, u64::MAX / 2).unwrap_err();
    assert!(matches!(error.op, FsOp::Allocate | FsOp::Resize), "{error}");
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    assert!(dir.media(0).is_none());
    dir.create(0, 64).unwrap();
}
