//! Records the broker still needs from its own log: whatever a service will read again
//! by its queue offset, so deleting the segment that holds it would lose a message.
//!
//! - delayed messages not yet delivered: each level's `SCHEDULE_TOPIC_XXXX` queue from
//!   the offset delivery resumes at after a crash ([`crate::schedule`]);
//! - transaction halves not yet resolved, and the op records that say which are: the half
//!   and op queues from the check service's progress ([`crate::transaction`]);
//! - `%RETRY%` messages a local group has not consumed yet: each retry queue from the
//!   group's committed offset (none committed: the queue's start, where a retry
//!   subscription begins).
//!
//! [`BrokerCtx::oldest_pending`] reduces these to the lowest log offset, which whoever
//! deletes segments early (the edge gateway, which deletes what it has forwarded) must
//! keep. Retention by `fileReservedTime` or disk pressure still deletes them, and says so
//! ([`crate::retention`]). A later kind of held record (timer messages) joins by adding
//! a [`PendingKind`] and its cursors to [`BrokerCtx::pending_cursors`].

use tern_engine::delay::{MAX_LEVELS, SCHEDULE_TOPIC};

use crate::BrokerCtx;
use crate::transaction::SYS_GROUP;
use crate::transaction::half::{HALF_TOPIC, OP_TOPIC};

/// Why a record is still needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingKind {
    /// A delayed message of this level, not yet delivered.
    Delayed {
        /// Delay level (1-based).
        level: i32,
    },
    /// A transaction half not yet committed, rolled back or discarded.
    TransactionHalf,
    /// An op record the check service has not read yet.
    TransactionOp,
    /// A retry message `group` has not consumed yet.
    Retry {
        /// The consumer group.
        group: String,
    },
}

impl std::fmt::Display for PendingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Delayed { level } => write!(f, "delayed message (level {level})"),
            Self::TransactionHalf => f.write_str("unresolved transaction half"),
            Self::TransactionOp => f.write_str("unread transaction op record"),
            Self::Retry { group } => write!(f, "retry message of group {group}"),
        }
    }
}

/// Where one service resumes reading a queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// What the queue holds.
    pub kind: PendingKind,
    /// Topic.
    pub topic: String,
    /// Queue id.
    pub queue_id: i32,
    /// First queue offset still needed.
    pub queue_offset: u64,
}

/// The oldest record still needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its log offset: segments wholly below it may go.
    pub log_offset: u64,
    /// The cursor it was found through.
    pub cursor: Cursor,
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at log offset {} ({} queue {} offset {})",
            self.cursor.kind,
            self.log_offset,
            self.cursor.topic,
            self.cursor.queue_id,
            self.cursor.queue_offset
        )
    }
}

impl BrokerCtx {
    /// Every queue position a service will read again (see the module docs).
    pub fn pending_cursors(&self) -> Vec<Cursor> {
        let mut out = Vec::new();
        let delays = self.schedule.offsets().resume_table();
        for q in 0..MAX_LEVELS as i32 {
            let level = q + 1;
            if self.store.queue_bounds(SCHEDULE_TOPIC, q).1 == 0 {
                continue;
            }
            out.push(Cursor {
                kind: PendingKind::Delayed { level },
                topic: SCHEDULE_TOPIC.to_owned(),
                queue_id: q,
                queue_offset: delays.get(&level).map_or(0, |o| (*o).max(0) as u64),
            });
        }
        // The check service's live progress, and the one saved in the offsets table
        // (what a restart resumes from): the lower of the two. Before the service has
        // loaded its state the live one reads 0, which keeps everything.
        let (half, op) = self.transactions.progress();
        let saved = |topic: &str| {
            self.offsets
                .query(SYS_GROUP, topic, 0)
                .map_or(0, |o| o.max(0) as u64)
        };
        out.push(Cursor {
            kind: PendingKind::TransactionHalf,
            topic: HALF_TOPIC.to_owned(),
            queue_id: 0,
            queue_offset: half.min(saved(HALF_TOPIC)),
        });
        out.push(Cursor {
            kind: PendingKind::TransactionOp,
            topic: OP_TOPIC.to_owned(),
            queue_id: 0,
            queue_offset: op.min(saved(OP_TOPIC)),
        });
        for (topic, cfg) in self.topics.wrapper().topic_config_table {
            let Some(group) = topic.strip_prefix("%RETRY%") else {
                continue;
            };
            for q in 0..cfg.read_queue_nums.max(cfg.write_queue_nums) {
                let offset = self.offsets.query(group, &topic, q).unwrap_or(0);
                out.push(Cursor {
                    kind: PendingKind::Retry {
                        group: group.to_owned(),
                    },
                    topic: topic.clone(),
                    queue_id: q,
                    queue_offset: offset.max(0) as u64,
                });
            }
        }
        out
    }

    /// The record with the lowest log offset any service still needs, or `None` when
    /// none is (every cursor is at its queue's end). A cursor below its queue's start
    /// (entries already deleted) counts from the first entry left.
    pub fn oldest_pending(&self) -> Option<Pending> {
        let mut oldest: Option<Pending> = None;
        for c in self.pending_cursors() {
            let (min, max) = self.store.queue_bounds(&c.topic, c.queue_id);
            let at = c.queue_offset.max(min);
            if at >= max {
                continue;
            }
            let entry = match self.store.queue_entry(&c.topic, c.queue_id, at) {
                Ok(Some(e)) => e,
                Ok(None) => continue,
                Err(e) => {
                    // Unreadable now: keep everything rather than guess.
                    log::warn!("pending records of {} queue {}: {e}", c.topic, c.queue_id);
                    return Some(Pending {
                        log_offset: 0,
                        cursor: c,
                    });
                }
            };
            if oldest
                .as_ref()
                .is_none_or(|o| entry.physical_offset < o.log_offset)
            {
                oldest = Some(Pending {
                    log_offset: entry.physical_offset,
                    cursor: Cursor {
                        queue_offset: at,
                        ..c
                    },
                });
            }
        }
        oldest
    }
}
