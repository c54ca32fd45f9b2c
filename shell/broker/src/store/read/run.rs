//! A pull's records that lie back to back in the log, read with one `pread`.

use tern_engine_fs::{ReadError, ReadMode};

use super::WouldBlock;
use crate::store::StoreService;

/// Records of a pull adjacent in the log, not read yet: (log offset, size) each.
#[derive(Debug, Default)]
pub(super) struct Run {
    records: Vec<(u64, u32)>,
    /// Their sizes' sum.
    bytes: usize,
}

impl Run {
    /// Whether a record at log offset `at` may join (it starts where the run ends).
    pub(super) fn continues(&self, at: u64) -> bool {
        self.records
            .last()
            .is_none_or(|&(offset, size)| offset + u64::from(size) == at)
    }

    pub(super) fn push(&mut self, at: u64, size: u32) {
        self.records.push((at, size));
        self.bytes += size as usize;
    }

    /// Bytes the run will read.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    fn clear(&mut self) {
        self.records.clear();
        self.bytes = 0;
    }
}

impl StoreService {
    /// Appends the records of `run` (adjacent in the log) to `out` with one read, and
    /// empties it; returns how many of them were gone. A record deleted by retention
    /// meanwhile sends the run through [`Self::copy_record_mode`] one record at a
    /// time, which skips it. On `WouldBlock` nothing of the run is appended.
    pub(super) fn copy_run(
        &self,
        run: &mut Run,
        out: &mut Vec<u8>,
        mode: ReadMode,
    ) -> Result<u32, WouldBlock> {
        let Some(&(start, _)) = run.records.first() else {
            return Ok(0);
        };
        let at = out.len();
        out.resize(at + run.bytes, 0);
        let gone = match self.read_log_mode(start, &mut out[at..], mode) {
            Ok(()) => Ok(0),
            Err(ReadError::WouldBlock) => {
                out.truncate(at);
                Err(WouldBlock)
            }
            Err(_) => {
                out.truncate(at);
                run.records.iter().try_fold(0, |gone, &(offset, size)| {
                    let copied = self.copy_record_mode(offset, size, out, mode)?;
                    Ok(gone + u32::from(!copied))
                })
            }
        };
        run.clear();
        gone
    }
}
