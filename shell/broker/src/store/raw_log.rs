//! The commit log read and written as bytes rather than messages: a slave appending its
//! master's stream, a master reading it out, and a reader walking records in log order
//! (the edge gateway's forwarder).

use event_listener::EventListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tern_engine::commitlog::Slot;
use tern_engine_fs::fs_store::FsStoreError;
use tern_engine_fs::{ReadError, ReadMode};

use super::read::WouldBlock;
use super::{LogReadError, PutError, StoreService};

/// One record of the log, copied out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its commit-log offset.
    pub offset: u64,
    /// Its stored bytes.
    pub bytes: Vec<u8>,
}

impl StoreService {
    /// Appends bytes of the master's log, which start at `at` (a slave's replication;
    /// see `Engine::append_replicated`). Returns the offset they were consumed to: an
    /// incomplete record after it waits for the caller's next chunk.
    pub fn append_replicated(&self, at: u64, bytes: &[u8]) -> Result<u64, PutError> {
        self.append(0, |s| s.engine_mut().append_replicated(at, bytes))
    }

    /// Where the log ends now.
    pub fn log_end(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Whether the log holds no segment yet (a new slave takes its master's start).
    pub fn log_is_empty(&self) -> bool {
        self.log_files.is_empty()
    }

    /// A listener woken by the next append; take it before looking at [`Self::log_end`].
    pub fn listen_appended(&self) -> EventListener {
        self.appended.listen()
    }

    /// Up to `max` log bytes from `from`, within one segment (a master's replication
    /// stream); empty at the end. `Err` when `from` is outside what the log holds.
    /// Copied without the store's lock; from the page cache on this thread, and again on
    /// a blocking thread only when that would wait for the disk (a slave catching up on
    /// a cold log must not hold up the requests this executor thread serves).
    pub async fn log_bytes_off_executor(
        self: &Arc<Self>,
        from: u64,
        max: usize,
    ) -> Result<Vec<u8>, LogReadError> {
        self.off_executor(from, move |s, mode| s.log_bytes(from, max, mode))
            .await
    }

    pub(super) fn log_bytes(
        &self,
        from: u64,
        max: usize,
        mode: ReadMode,
    ) -> Result<Result<Vec<u8>, LogReadError>, WouldBlock> {
        let Some(ticket) = self.cut_fence.enter() else {
            return Ok(Err(LogReadError::CutRaced));
        };
        let (min, end, seg) = self.log_span();
        if from < min || from > end {
            return Ok(Err(LogReadError::Outside {
                offset: from,
                min,
                end,
            }));
        }
        let seg_end = from - from % seg + seg;
        let len = (max as u64).min(end - from).min(seg_end - from) as usize;
        let mut buf = vec![0u8; len];
        if len > 0 {
            match self.read_log_mode(from, &mut buf, mode) {
                Ok(()) => {}
                Err(ReadError::WouldBlock) => return Err(WouldBlock),
                Err(e) => return Ok(Err(LogReadError::read(from, e))),
            }
        }
        if !self.cut_fence.unchanged(ticket) {
            return Ok(Err(LogReadError::CutRaced));
        }
        Ok(Ok(buf))
    }

    /// Oldest offset held, end, and segment size.
    pub fn log_span(&self) -> (u64, u64, u64) {
        (
            self.log_min.load(Ordering::Acquire),
            self.written.load(Ordering::Acquire),
            self.geometry.log_segment_size,
        )
    }

    /// Everything below this offset is on disk.
    pub fn durable_end(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// A listener woken after the next flush; take it before looking at
    /// [`Self::durable_end`].
    pub fn listen_flushed(&self) -> EventListener {
        self.flush_done.listen()
    }

    /// Whole records from `from` (a record boundary, or a segment's blank tail) up to
    /// `upto` in log order, at most `max_records` and about `max_bytes` (at least one
    /// record when any is there); returns them and the offset after the last one (past a
    /// blank tail, the next segment). `Err` when `from` is outside the log or the bytes
    /// there are not a record. Copied without the store's lock.
    ///
    /// The error is text for the edge gateway (`targets/edge-arm`), which adds its own
    /// text errors to it; the broker reads with [`Self::records_from`].
    pub fn read_records(
        &self,
        from: u64,
        upto: u64,
        max_bytes: usize,
        max_records: usize,
    ) -> Result<(Vec<LogRecord>, u64), String> {
        self.records_from(from, upto, max_bytes, max_records)
            .map_err(|e| e.to_string())
    }

    /// [`Self::read_records`] with a typed error.
    pub(crate) fn records_from(
        &self,
        from: u64,
        upto: u64,
        max_bytes: usize,
        max_records: usize,
    ) -> Result<(Vec<LogRecord>, u64), LogReadError> {
        let ticket = self.cut_fence.enter().ok_or(LogReadError::CutRaced)?;
        let (min, end, _) = self.log_span();
        if from < min || from > end {
            return Err(LogReadError::Outside {
                offset: from,
                min,
                end,
            });
        }
        let mut out = Vec::new();
        let (mut at, mut bytes) = (from, 0usize);
        let end = end.min(upto);
        while at < end && out.len() < max_records && (bytes < max_bytes || out.is_empty()) {
            match self.slot_at(at)? {
                Slot::Record(size) => {
                    let mut buf = vec![0u8; size as usize];
                    self.read_log(at, &mut buf)
                        .map_err(|e| LogReadError::read(at, e))?;
                    bytes += buf.len();
                    out.push(LogRecord {
                        offset: at,
                        bytes: buf,
                    });
                    at += u64::from(size);
                }
                Slot::Skip(next) => at = next,
                Slot::End => break,
            }
        }
        if !self.cut_fence.unchanged(ticket) {
            return Err(LogReadError::CutRaced);
        }
        Ok((out, at))
    }

    /// Deletes whole log segments below `offset` (and what only points into them);
    /// returns how many went. The active segment always stays. The engine forgets the
    /// files under the lock; readers that hold one keep reading it.
    pub fn delete_log_before(&self, offset: u64) -> Result<u32, FsStoreError> {
        let mut s = self.lock();
        let held = Instant::now();
        // Past the last checkpoint the engine would checkpoint first, flushing under the
        // lock; those segments wait for the checkpoint task instead (a second at most).
        let offset = offset.min(s.engine().checkpointed());
        let r = s.engine_mut().delete_before(offset);
        let r = r.map_err(|e| s.error("delete", e));
        self.log_min
            .store(s.engine().log().min_offset(), Ordering::Release);
        for (topic, queue_id) in s.engine().queues().keys() {
            self.publish_queue(&s, &topic, queue_id);
        }
        self.publish_index(&s);
        drop(s);
        super::note_slow_hold("retention", held);
        if let Err(e) = self.reclaim.run() {
            log::warn!("retention: deleting removed segment files: {e}");
        }
        r
    }
}
