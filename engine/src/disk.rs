//! Disk usage of the file system holding a store, for the broker's retention watermarks
//! (RocketMQ's: past `diskMaxUsedSpaceRatio` expired segments go at any hour, past
//! `diskSpaceCleanForciblyRatio` young ones too, past `diskSpaceWarningLevelRatio` writes
//! are refused).

use std::path::Path;

use crate::error::{FsError, FsOp, StoreError};

/// Sizes of one file system, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskUsage {
    /// The file system's size.
    pub total_bytes: u64,
    /// Free bytes, including those reserved for root.
    pub free_bytes: u64,
    /// Free bytes an unprivileged process may use; what the store can still fill.
    pub available_bytes: u64,
}

impl DiskUsage {
    /// Bytes in use, as `df` counts them.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes.saturating_sub(self.free_bytes)
    }

    /// Fraction of the space a process can use that is in use, in `0.0..=1.0`, as `df`'s
    /// "Use%" (`used / (used + available)`): the root reserve does not count as free.
    pub fn used_ratio(&self) -> f64 {
        let used = self.used_bytes();
        let usable = used.saturating_add(self.available_bytes);
        if usable == 0 {
            return 1.0;
        }
        used as f64 / usable as f64
    }
}

/// The usage of the file system holding `path`.
pub fn disk_usage(path: &Path) -> Result<DiskUsage, StoreError> {
    let stat = rustix::fs::statvfs(path)
        .map_err(|e| StoreError::io(path, FsError::errno(FsOp::Stat, e)))?;
    // f_frsize is the unit of the block counts (f_bsize is only the preferred I/O size);
    // some file systems leave it 0, then f_bsize is the unit.
    let unit = if stat.f_frsize != 0 {
        stat.f_frsize
    } else {
        stat.f_bsize
    };
    Ok(DiskUsage {
        total_bytes: stat.f_blocks.saturating_mul(unit),
        free_bytes: stat.f_bfree.saturating_mul(unit),
        available_bytes: stat.f_bavail.saturating_mul(unit),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dir_file_system_reports_consistent_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let usage = disk_usage(dir.path()).unwrap();
        assert!(usage.total_bytes > 0);
        assert!(usage.free_bytes <= usage.total_bytes);
        assert!(usage.available_bytes <= usage.free_bytes);
        assert!((0.0..=1.0).contains(&usage.used_ratio()));
    }

    #[test]
    fn used_ratio_ignores_root_reserve() {
        let usage = DiskUsage {
            total_bytes: 100,
            free_bytes: 30,
            available_bytes: 20,
        };
        assert_eq!(usage.used_bytes(), 70);
        assert!((usage.used_ratio() - 70.0 / 90.0).abs() < 1e-9);
    }

    #[test]
    fn missing_path_is_an_error_naming_it() {
        let error = disk_usage(Path::new("/nonexistent/tern/store")).unwrap_err();
        assert!(
            error.to_string().contains("/nonexistent/tern/store"),
            "{error}"
        );
    }
}
