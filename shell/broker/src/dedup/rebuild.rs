//! Rebuilding the window at start from the commit log's records of the last window, so
//! it survives a restart and `kill -9`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_engine::commitlog::Appended;
use tern_engine::delay::SCHEDULE_TOPIC;
use tern_engine::properties::{self, key};
use tern_engine::record::RecordView;
use tern_engine::store::Stored;

use super::{FirstCopy, Window, key_of};
use crate::store::{LogReadError, StoreService};

/// Bytes one rebuild read copies from the log.
const REBUILD_READ_BYTES: usize = 4 << 20;
/// Records one rebuild read returns.
const REBUILD_READ_RECORDS: usize = 4096;

/// The outcome of one rebuild, for the start log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilt {
    /// Records read.
    pub records: u64,
    /// Keys in the window afterwards.
    pub keys: usize,
    /// Log offset the scan started at.
    pub from: u64,
    /// How long it took.
    pub took: Duration,
}

impl Window {
    /// Rebuilds the window from the log's records stored in the last window, before the
    /// broker takes sends. The scan starts at the newest segment whose first record is
    /// older than the window, so it reads the window's records plus at most one segment;
    /// records are parsed only as far as topic, properties and offsets.
    pub fn rebuild(&self, store: &StoreService, now_ms: i64) -> Result<Rebuilt, LogReadError> {
        let started = Instant::now();
        let (min, end, seg) = store.log_span();
        let cutoff = now_ms.saturating_sub(self.window_ms);
        let mut rebuilt = Rebuilt {
            records: 0,
            keys: 0,
            from: min,
            took: Duration::ZERO,
        };
        if !self.is_on() || end <= min || seg == 0 {
            return Ok(rebuilt);
        }
        // Segment starts, newest first: the first one whose first record is older than
        // the window is where the window's records begin.
        let mut start = (end - 1) - (end - 1) % seg;
        while start > min {
            let (first, _) = store.records_from(start, end, 1, 1)?;
            let older = first
                .first()
                .and_then(|r| RecordView::parse(&r.bytes).ok())
                .is_some_and(|v| v.store_timestamp() < cutoff);
            if older {
                break;
            }
            start -= seg;
        }
        rebuilt.from = start.max(min);
        let mut at = rebuilt.from;
        let mut buf = String::new();
        let mut st = self.lock();
        while at < end {
            let (records, next) =
                store.records_from(at, end, REBUILD_READ_BYTES, REBUILD_READ_RECORDS)?;
            for r in &records {
                rebuilt.records += 1;
                let view =
                    RecordView::parse(&r.bytes).map_err(|error| LogReadError::Unreadable {
                        offset: r.offset,
                        error,
                    })?;
                if view.store_timestamp() < cutoff {
                    continue;
                }
                if let Some((k, first)) = recovered(&mut buf, &view, r.offset) {
                    if !st.slots.contains_key(&k) {
                        st.publish(k, first, self.max_keys);
                    }
                }
            }
            if next <= at {
                break;
            }
            at = next;
        }
        rebuilt.keys = st.order.len();
        rebuilt.took = started.elapsed();
        Ok(rebuilt)
    }
}

/// The key and first copy a stored record stands for, as the live window would have
/// recorded them: a delayed message by its real topic and queue, the records the window
/// does not cover (and deliveries of delayed ones, whose `REAL_TOPIC` is their own topic)
/// by none.
fn recovered(
    buf: &mut String,
    view: &RecordView<'_>,
    offset: u64,
) -> Option<(Arc<str>, FirstCopy)> {
    let topic = view.topic_str()?;
    let props = view.properties();
    let (topic, queue_id) = if topic == SCHEDULE_TOPIC {
        let real = properties::get(props, key::REAL_TOPIC)?;
        let qid = properties::get(props, key::REAL_QID)?.trim().parse().ok()?;
        (real, qid)
    } else if properties::get(props, key::REAL_TOPIC) == Some(topic) {
        // A delayed message delivered to its topic (delivery keeps REAL_TOPIC).
        return None;
    } else {
        (topic, view.queue_id())
    };
    let k = key_of(buf, topic, props)?;
    Some((
        k,
        FirstCopy {
            stored: Stored {
                at: Appended {
                    offset,
                    size: view.total_size(),
                },
                queue_offset: view.queue_offset().max(0) as u64,
            },
            queue_id,
            store_ms: view.store_timestamp(),
        },
    ))
}
