//! [`MappedFile`] over real files: writes, bounds, population and the write modes.

use super::*;

fn scratch(len: u64) -> (tempfile::TempDir, MappedFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seg");
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    allocate(&file, len).unwrap();
    let media = MappedFile::from_file(file, Access::Sequential).unwrap();
    (dir, media)
}

#[test]
fn write_is_visible_to_read_and_as_bytes() {
    let (_dir, mut media) = scratch(4096);
    media.write_at(100, b"hello").unwrap();
    let mut buf = [0u8; 5];
    media.read_at(100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    assert_eq!(&media.as_bytes().unwrap()[100..105], b"hello");
    media.flush(0..4096).unwrap();
}

#[test]
fn access_past_end_is_an_error_not_a_panic() {
    let (_dir, mut media) = scratch(16);
    let mut buf = [0u8; 4];
    assert_eq!(media.read_at(13, &mut buf).unwrap_err().op, FsOp::Read);
    assert_eq!(media.write_at(u64::MAX, b"x").unwrap_err().op, FsOp::Write);
    assert_eq!(media.flush(0..17).unwrap_err().op, FsOp::Flush);
    media.write_at(12, &buf).unwrap();
}

#[test]
fn zero_length_file_maps_to_empty_slice() {
    let (_dir, mut media) = scratch(0);
    assert!(media.is_empty());
    assert_eq!(media.as_bytes(), Some(&[][..]));
    media.flush(0..0).unwrap();
    media.set_len(10).unwrap();
    assert_eq!(media.as_bytes(), Some(&[0u8; 10][..]));
}

/// This thread's page faults so far, minor and major (`minflt` and `majflt` of
/// /proc/thread-self/stat: a write fault on a page not yet in the page cache counts as
/// major), read into a stack buffer so the reading takes no fault of its own.
fn page_faults() -> u64 {
    use std::io::Read;
    let mut buf = [0u8; 1024];
    let mut f = File::open("/proc/thread-self/stat").unwrap();
    let n = f.read(&mut buf).unwrap();
    let stat = std::str::from_utf8(&buf[..n]).unwrap();
    // After the command name's closing parenthesis: state, ppid, pgrp, session,
    // tty_nr, tpgid, flags, minflt, cminflt, majflt.
    let mut fields = stat[stat.rfind(')').unwrap() + 1..].split_whitespace();
    let mut count = |skip: usize| fields.nth(skip).unwrap().parse::<u64>().unwrap();
    count(7) + count(1)
}

#[test]
fn populated_pages_are_written_without_a_fault() {
    let page = rustix::param::page_size();
    let (_dir, mut media) = scratch(64 * page as u64);
    // From the middle of a page: the whole page is populated.
    match media.populate(100..32 * page as u64) {
        Err(e) if e.kind() == ErrorKind::InvalidInput => {
            eprintln!("skipped: this kernel has no MADV_POPULATE_WRITE ({e})");
            return;
        }
        populated => populated.unwrap(),
    }
    page_faults(); // the first call's own faults, if any, before counting
    let mut faults_writing = |pages: Range<usize>| {
        let bytes = media.as_mut_bytes();
        let before = page_faults();
        for p in pages {
            bytes[p * page] = 1;
        }
        page_faults() - before
    };
    // The unpopulated half takes one a page (a write fault maps one page of a shared
    // file mapping); the populated half none, give or take a fault the thread takes
    // elsewhere.
    let populated = faults_writing(0..32);
    let unpopulated = faults_writing(32..64);
    assert!(populated <= 1, "{populated} faults writing populated pages");
    assert!(unpopulated >= 32, "{unpopulated} faults writing the others");
    // Past the end: nothing to do, no error.
    media.populate(64 * page as u64..u64::MAX).unwrap();
}

#[test]
fn written_through_the_file_the_mapping_is_not_written() {
    let page = rustix::param::page_size() as u64;
    let (_dir, mut media) = scratch(64 * page);
    media.set_writes(Writes::Through);
    assert!(media.as_bytes_mut().is_none(), "no writes into the mapping");
    page_faults();
    let before = page_faults();
    // Writes and the zeros ahead go through the file: the mapping takes no fault
    // (a write into it would take one a page, as the test above shows).
    media.write_at(10, b"head").unwrap();
    media
        .write_pieces(3 * page - 2, &[b"ab", b"", b"cdef", b"g"])
        .unwrap();
    media.populate(8 * page..40 * page).unwrap();
    let faults = page_faults() - before;
    assert!(faults <= 1, "{faults} faults writing through the file");
    // What was written reads back, through the mapping and `read_at` alike.
    let bytes = media.as_bytes().unwrap();
    assert_eq!(&bytes[10..14], b"head");
    let at = (3 * page - 2) as usize;
    assert_eq!(&bytes[at..at + 7], b"abcdefg");
    assert!(
        bytes[8 * page as usize..40 * page as usize]
            .iter()
            .all(|&b| b == 0)
    );
    let mut buf = [0u8; 7];
    media.read_at(3 * page - 2, &mut buf).unwrap();
    assert_eq!(&buf, b"abcdefg");
    // Zeros ahead from the middle of a written page start at the next page: what the
    // page holds stays. Empty writes are writes of nothing, as through the mapping.
    media.write_at(44 * page + 10, b"kept").unwrap();
    media.populate(44 * page + 5..48 * page).unwrap();
    media.write_at(0, b"").unwrap();
    media.write_pieces(45 * page, &[b"", b""]).unwrap();
    let mut buf = [0u8; 4];
    media.read_at(44 * page + 10, &mut buf).unwrap();
    assert_eq!(&buf, b"kept");
    // Past the end: an error, nothing written.
    let end = 64 * page;
    let err = media.write_pieces(end - 2, &[b"ab", b"c"]).unwrap_err();
    assert_eq!(err.op, FsOp::Write);
    assert_eq!(media.write_at(end, b"x").unwrap_err().op, FsOp::Write);
    media.flush(0..end).unwrap();
    // Back to the mapping: writes land there again.
    media.set_writes(Writes::Mapped);
    media.as_bytes_mut().unwrap()[20] = 7;
    media.write_pieces(21, &[b"x", b"y"]).unwrap();
    let mut buf = [0u8; 3];
    media.read_at(20, &mut buf).unwrap();
    assert_eq!(&buf, &[7, b'x', b'y']);
}
