//! A pull's records that lie back to back in the log, read with one `pread`.

use tern_engine_fs::{ReadError, ReadMode};

use super::WouldBlock;
use crate::store::StoreService;

/// Records of a pull adjacent in the log, not read yet: (queue offset, log offset, size).
#[derive(Debug, Default)]
pub(super) struct Run {
    records: Vec<(u64, u64, u32)>,
    /// Their sizes' sum.
    bytes: usize,
}

impl Run {
    /// Whether a record at log offset `at` may join (it starts where the run ends).
    pub(super) fn continues(&self, at: u64) -> bool {
        self.records
            .last()
            .is_none_or(|&(_, offset, size)| offset + u64::from(size) == at)
    }

    pub(super) fn push(&mut self, n: u64, at: u64, size: u32) {
        self.records.push((n, at, size));
        self.bytes += size as usize;
    }

    /// Bytes the run will read.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn clear(&mut self) {
        self.records.clear();
        self.bytes = 0;
    }
}

/// What [`StoreService::copy_run`] made of a run.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct RunTaken {
    /// Records the run held.
    queued: u32,
    /// Records copied (the rest were gone).
    copied: u32,
    /// Queue offset of the last record copied.
    last: Option<u64>,
}

impl StoreService {
    /// Appends the records of `run` (adjacent in the log) to `out` with one read, and
    /// empties it. Ok says what became of them ([`RunTaken`]); a record deleted by
    /// retention meanwhile sends the run through [`Self::copy_record_mode`] one record
    /// at a time, which skips it.
    pub(super) fn copy_run(
        &self,
        run: &mut Run,
        out: &mut Vec<u8>,
        mode: ReadMode,
    ) -> Result<RunTaken, WouldBlock> {
        let Some(&(_, start, _)) = run.records.first() else {
            return Ok(RunTaken::default());
        };
        let taken = RunTaken {
            queued: run.records.len() as u32,
            ..RunTaken::default()
        };
        let at = out.len();
        out.resize(at + run.bytes, 0);
        let read = self.read_log_mode(start, &mut out[at..], mode);
        let taken = match read {
            Ok(()) => RunTaken {
                copied: taken.queued,
                last: run.records.last().map(|r| r.0),
                ..taken
            },
            Err(ReadError::WouldBlock) => {
                out.truncate(at);
                run.clear();
                return Err(WouldBlock);
            }
            Err(_) => {
                out.truncate(at);
                let mut t = taken;
                for &(n, offset, size) in &run.records {
                    if let Err(e) = self.copy_record_mode(offset, size, out, mode).map(|ok| {
                        if ok {
                            t.copied += 1;
                            t.last = Some(n);
                        }
                    }) {
                        run.clear();
                        return Err(e);
                    }
                }
                t
            }
        };
        run.clear();
        Ok(taken)
    }

    /// Corrects a pull's count and last queue offset taken for a run's records that
    /// were counted when queued but were gone when read.
    pub(super) fn count_run(taken: RunTaken, matched: &mut u32, last_taken: &mut Option<u64>) {
        if taken.copied < taken.queued {
            *matched -= taken.queued - taken.copied;
            if taken.last.is_some() || *matched == 0 {
                *last_taken = taken.last;
            }
        }
    }
}
