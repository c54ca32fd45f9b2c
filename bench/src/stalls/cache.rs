//! Dropping the commit log from the page cache, and checking that it left.
//!
//! `posix_fadvise(DONTNEED)` drops clean, unmapped pages only. The broker writes its
//! segments through a shared mapping, so pages it touched stay while its mapping holds
//! them: the scenario restarts the broker after the pre-fill (a clean stop unmaps and
//! flushes everything) and drops the pages before anything reads them again.
//!
//! Whether it worked is measured, not assumed: one 4 KiB `preadv2(RWF_NOWAIT)` per
//! [`PROBE_STEP`] of every segment. A buffered read with `RWF_NOWAIT` answers only from
//! the page cache and starts no I/O (`EAGAIN` otherwise), so it reads residency without
//! changing it.

use std::fs::{self, File};
use std::io::{self, IoSliceMut};
use std::path::{Path, PathBuf};

use rustix::io::{Errno, ReadWriteFlags};

/// Distance between residency probes.
pub const PROBE_STEP: u64 = 256 << 10;

/// What dropping the log from the page cache did.
#[derive(Clone, Debug, Default)]
pub struct CacheDrop {
    /// Commit-log segment files.
    pub files: usize,
    /// Their bytes (preallocated sizes).
    pub bytes: u64,
    /// Fraction of probes resident before the drop.
    pub before: Option<f64>,
    /// … and after it.
    pub after: Option<f64>,
    /// What failed, if anything (the drop or the probe).
    pub error: Option<String>,
}

impl CacheDrop {
    /// Did the pages leave the cache (fewer than 5% of probes still resident)?
    pub fn worked(&self) -> Option<bool> {
        if self.error.is_some() && self.after.is_none() {
            return Some(false);
        }
        self.after.map(|a| a < 0.05)
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("?".into(), |v| format!("{:.1}%", v * 100.0));
        let verdict = match self.worked() {
            Some(true) => "worked",
            Some(false) => "**did not work**: the catch-up reads warm pages",
            None => "not checked",
        };
        let mut s = format!(
            "{} segment files ({:.0} MiB): {} of probed pages resident before fadvise(DONTNEED), {} after: {verdict}",
            self.files,
            self.bytes as f64 / (1 << 20) as f64,
            pct(self.before),
            pct(self.after),
        );
        if let Some(e) = &self.error {
            s.push_str(&format!(" ({e})"));
        }
        s
    }
}

/// The commit-log folder under a broker's data folder (a folder named `commitlog`).
fn commit_log_dir(data: &Path) -> Option<PathBuf> {
    let mut stack = vec![(data.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if dir.file_name().is_some_and(|n| n == "commitlog") {
            return Some(dir);
        }
        if depth >= 4 {
            continue;
        }
        for e in fs::read_dir(&dir).ok()?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    None
}

/// The segment files of the broker whose data folder is `data`, sorted: names of 20
/// digits only (a segment being made ahead is a `.tmp` file that may vanish).
pub fn commit_log_files(data: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = commit_log_dir(data).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no commitlog folder under {}", data.display()),
        )
    })?;
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// Fraction of [`PROBE_STEP`] probes of `files` whose page is in the page cache.
pub fn resident_fraction(files: &[PathBuf]) -> io::Result<f64> {
    let mut buf = [0u8; 4096];
    let (mut probes, mut resident) = (0u64, 0u64);
    for path in files {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        let mut at = 0;
        while at < len {
            probes += 1;
            let mut bufs = [IoSliceMut::new(&mut buf)];
            match rustix::io::preadv2(&f, &mut bufs, at, ReadWriteFlags::NOWAIT) {
                Ok(n) if n > 0 => resident += 1,
                Ok(_) | Err(Errno::AGAIN) => {}
                Err(e) => return Err(io::Error::from(e)),
            }
            at += PROBE_STEP;
        }
    }
    Ok(if probes == 0 {
        0.0
    } else {
        resident as f64 / probes as f64
    })
}

/// Flushes and drops every commit-log segment under `data` from the page cache, with
/// residency measured before and after.
pub fn drop_commit_log(data: &Path) -> CacheDrop {
    let mut out = CacheDrop::default();
    let files = match commit_log_files(data) {
        Ok(f) => f,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    out.files = files.len();
    out.bytes = files
        .iter()
        .filter_map(|f| fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let probe_err = |e: io::Error| format!("residency probe: {e}");
    let before = resident_fraction(&files).map_err(probe_err);
    out.before = before.as_ref().ok().copied();
    for path in &files {
        let r = File::open(path).and_then(|f| {
            // Dirty pages are not dropped: write them first (a no-op after a clean stop).
            rustix::fs::fdatasync(&f)?;
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
            Ok(())
        });
        if let Err(e) = r {
            out.error = Some(format!("fadvise(DONTNEED) of {}: {e}", path.display()));
            return out;
        }
    }
    // The newest two segments are left out of the after-probe: the running broker keeps
    // the pages past its log end cached on purpose (its warm task, and the next segment
    // made ahead), and the catch-up reads the backlog, which lies before them.
    let backlog = &files[..files.len().saturating_sub(2)];
    match resident_fraction(backlog) {
        Ok(a) => out.after = Some(a),
        Err(e) => out.error = Some(probe_err(e)),
    }
    if let Err(e) = before {
        out.error.get_or_insert(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_is_resident_and_dropping_it_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("store").join("commitlog");
        fs::create_dir_all(&log).unwrap();
        let seg = log.join("00000000000000000000");
        fs::write(&seg, vec![7u8; 4 << 20]).unwrap();
        let files = commit_log_files(dir.path()).unwrap();
        assert_eq!(files, vec![seg]);
        assert!(resident_fraction(&files).unwrap() > 0.9);
        let d = drop_commit_log(dir.path());
        assert_eq!(d.files, 1);
        assert_eq!(d.bytes, 4 << 20);
        // tmpfs keeps its pages whatever the advice: only check the probe ran.
        assert!(d.after.is_some(), "{d:?}");
        assert!(d.describe().contains("1 segment files"));
    }

    #[test]
    fn a_folder_without_a_log_is_an_error_not_a_success() {
        let dir = tempfile::tempdir().unwrap();
        let d = drop_commit_log(dir.path());
        assert!(d.error.is_some());
        assert_eq!(d.worked(), Some(false));
    }
}
