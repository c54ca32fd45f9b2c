//! Orderly POP (`ConsumerOrderInfoManager`): per (topic, group, queue) the batch last
//! popped. A queue is blocked while some message of that batch is unacked and still
//! invisible; the same `attemptId` asking again gets the same batch. Acks move the
//! group's offset to the first unacked message of the batch.
//!
//! Saved to `config/consumerOrderInfo.tern` on every change (bursts merged, see
//! [`crate::persist`]) and at shutdown. It never moves an offset past an unacked
//! message, so losing it (a crash before a save) only unblocks a queue early: its batch
//! is popped again (a duplicate RocketMQ allows), nothing is lost.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;

use serde::{Deserialize, Serialize};

use crate::persist::Saver;

/// Most queues with a batch in flight; past it the least recently used is forgotten
/// (its queue unblocks early: a duplicate, not a loss).
const MAX_ENTRIES: usize = 100_000;
/// An entry untouched this long is dropped (RocketMQ: 24 h).
const IDLE_MS: i64 = 24 * 3600 * 1000;

/// The batch last popped from one queue by one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderInfo {
    /// Pop time of the batch: acks must name it.
    pub pop_time: i64,
    /// Invisible time asked for.
    pub invisible_time: i64,
    /// The batch's queue offsets, ascending.
    pub offsets: Vec<u64>,
    /// When each message becomes visible again, ms.
    pub next_visible: Vec<i64>,
    /// How many times each message was delivered before this batch.
    pub counts: Vec<u32>,
    /// Acked messages (bit i = `offsets[i]`).
    pub acked: u64,
    /// The request that popped it.
    pub attempt_id: String,
    /// Last change, ms.
    pub last_used: i64,
}

impl OrderInfo {
    fn blocked(&self, now: i64) -> bool {
        (0..self.offsets.len()).any(|i| self.acked & (1 << i) == 0 && now < self.next_visible[i])
    }

    /// The offset the group resumes at: the first unacked message, or past the batch.
    pub fn commit_offset(&self) -> u64 {
        (0..self.offsets.len())
            .find(|i| self.acked & (1 << i) == 0)
            .map_or_else(
                || self.offsets.last().map_or(0, |o| o + 1),
                |i| self.offsets[i],
            )
    }
}

/// Whether a queue may be popped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// No batch in flight.
    Free,
    /// A batch is in flight and this request popped it: pop it again from here.
    SameAttempt(u64),
    /// A batch is in flight.
    Blocked,
}

/// What an orderly ack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderAck {
    /// Acked; the group's offset is now this, and whether the queue is free.
    Acked {
        /// The group's new offset.
        commit: u64,
        /// The queue is no longer blocked.
        unblocked: bool,
    },
    /// Its pop time is not the batch's (a stale handle): ignored, as RocketMQ does.
    Stale,
    /// The offset is not in the batch.
    NotInBatch,
}

/// (topic, group, queue id).
type Key = (String, String, i32);
type Table = HashMap<Key, OrderInfo>;
/// What the file holds.
type Saved = Vec<(Key, OrderInfo)>;

/// Every queue's batch.
#[derive(Debug)]
pub struct OrderTable {
    table: Arc<Mutex<Table>>,
    saver: Saver<Saved>,
}

impl OrderTable {
    /// Loads `config/consumerOrderInfo.tern`; unreadable is logged and starts empty.
    pub fn load(store_root: &Path) -> Self {
        let path = store_root.join("config").join("consumerOrderInfo.tern");
        let mut table = Table::new();
        match tern_engine_fs::meta::load::<Saved>(&path) {
            Ok(Some(v)) => table.extend(v.into_iter().filter(|(_, i)| valid(i))),
            Ok(None) => {}
            Err(e) => log::error!("orderly POP state unreadable, starting empty: {e}"),
        }
        let table = Arc::new(Mutex::new(table));
        let copy = table.clone();
        Self {
            saver: Saver::new("orderly POP state", path, move || {
                copy.guard()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }),
            table,
        }
    }

    fn key(topic: &str, group: &str, queue_id: i32) -> Key {
        (topic.to_owned(), group.to_owned(), queue_id)
    }

    /// Whether `attempt_id` may pop the queue now.
    pub fn check_block(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        attempt_id: &str,
        now: i64,
    ) -> Block {
        let t = self.table.guard();
        match t.get(&Self::key(topic, group, queue_id)) {
            Some(i) if i.blocked(now) => {
                if !attempt_id.is_empty() && i.attempt_id == attempt_id {
                    Block::SameAttempt(i.commit_offset())
                } else {
                    Block::Blocked
                }
            }
            _ => Block::Free,
        }
    }

    /// Records a popped batch; returns each message's earlier delivery count (a message
    /// of the previous batch popped again by another attempt counts one more).
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        pop_time: i64,
        invisible_time: i64,
        offsets: &[u64],
        attempt_id: &str,
    ) -> Vec<u32> {
        let mut t = self.table.guard();
        let key = Self::key(topic, group, queue_id);
        let prev = t.remove(&key);
        let counts: Vec<u32> = offsets
            .iter()
            .map(|o| {
                let Some(p) = &prev else { return 0 };
                match p.offsets.iter().position(|x| x == o) {
                    Some(i) if !attempt_id.is_empty() && p.attempt_id == attempt_id => p.counts[i],
                    Some(i) => p.counts[i].saturating_add(1),
                    None => 0,
                }
            })
            .collect();
        if t.len() >= MAX_ENTRIES {
            let oldest = t
                .iter()
                .min_by_key(|(_, v)| v.last_used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                t.remove(&k);
            }
        }
        t.retain(|_, v| pop_time - v.last_used < IDLE_MS);
        t.insert(
            key,
            OrderInfo {
                pop_time,
                invisible_time,
                offsets: offsets.to_vec(),
                next_visible: vec![pop_time.saturating_add(invisible_time); offsets.len()],
                counts: counts.clone(),
                acked: 0,
                attempt_id: attempt_id.to_owned(),
                last_used: pop_time,
            },
        );
        drop(t);
        self.saver.save();
        counts
    }

    /// Acks `offset` of the batch popped at `pop_time`.
    pub fn ack(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        pop_time: i64,
        offset: u64,
        now: i64,
    ) -> OrderAck {
        let key = Self::key(topic, group, queue_id);
        self.edit_in_batch(key, pop_time, offset, |info, i| {
            info.acked |= 1 << i;
            info.last_used = now;
            let acked = OrderAck::Acked {
                commit: info.commit_offset(),
                unblocked: !info.blocked(now),
            };
            let done = info.acked.count_ones() as usize == info.offsets.len();
            (acked, done)
        })
        .unwrap_or_else(|miss| miss)
    }

    /// Moves the next visible time of `offset` (CHANGE_MESSAGE_INVISIBLETIME); false
    /// if the batch or the offset is not the one named.
    pub fn change_visible(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        pop_time: i64,
        offset: u64,
        next_visible: i64,
    ) -> bool {
        let key = Self::key(topic, group, queue_id);
        self.edit_in_batch(key, pop_time, offset, |info, i| {
            info.next_visible[i] = next_visible;
            ((), false)
        })
        .is_ok()
    }

    /// Edits the batch under `key` popped at `pop_time` where `offset` stands in it
    /// (`edit` gets the entry and the offset's index, and says whether the batch is done:
    /// it is then forgotten), then saves the table; else why not: another batch (or none)
    /// is in flight ([`OrderAck::Stale`]), or the offset is not in it
    /// ([`OrderAck::NotInBatch`]).
    fn edit_in_batch<R>(
        &self,
        key: Key,
        pop_time: i64,
        offset: u64,
        edit: impl FnOnce(&mut OrderInfo, usize) -> (R, bool),
    ) -> Result<R, OrderAck> {
        let mut t = self.table.guard();
        let info = t
            .get_mut(&key)
            .filter(|info| info.pop_time == pop_time)
            .ok_or(OrderAck::Stale)?;
        let i = info
            .offsets
            .iter()
            .position(|o| *o == offset)
            .ok_or(OrderAck::NotInBatch)?;
        let (out, done) = edit(info, i);
        if done {
            t.remove(&key);
        }
        drop(t);
        self.saver.save();
        Ok(out)
    }

    /// Queues a save (shutdown) and resolves once written.
    pub async fn persisted(&self) {
        self.saver.save();
        self.saver.saved().await;
    }
}

/// A loaded entry is used only if its vectors agree (a file from a bug is not trusted).
fn valid(i: &OrderInfo) -> bool {
    let n = i.offsets.len();
    n > 0 && n <= 32 && i.next_visible.len() == n && i.counts.len() == n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_blocks_until_acked_or_invisible_time_passes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        let t = OrderTable::load(dir.path());
        assert_eq!(t.check_block("T", "G", 0, "a", 0), Block::Free);
        assert_eq!(t.update("T", "G", 0, 1000, 5000, &[0, 1], "a"), vec![0, 0]);
        assert_eq!(t.check_block("T", "G", 0, "b", 2000), Block::Blocked);
        assert_eq!(t.check_block("T", "G", 0, "a", 2000), Block::SameAttempt(0));
        assert_eq!(t.check_block("T", "G", 0, "b", 6000), Block::Free);
        assert_eq!(t.ack("T", "G", 0, 999, 0, 2000), OrderAck::Stale);
        assert_eq!(t.ack("T", "G", 0, 1000, 7, 2000), OrderAck::NotInBatch);
        assert_eq!(
            t.ack("T", "G", 0, 1000, 0, 2000),
            OrderAck::Acked {
                commit: 1,
                unblocked: false
            }
        );
        // Expired: another attempt pops offset 1 again, counted once more.
        assert_eq!(t.update("T", "G", 0, 7000, 5000, &[1, 2], "b"), vec![1, 0]);
        assert!(t.change_visible("T", "G", 0, 7000, 1, 100_000));
        assert_eq!(
            t.ack("T", "G", 0, 7000, 2, 8000),
            OrderAck::Acked {
                commit: 1,
                unblocked: false
            }
        );
        assert_eq!(t.check_block("T", "G", 0, "c", 50_000), Block::Blocked);
        assert_eq!(
            t.ack("T", "G", 0, 7000, 1, 8000),
            OrderAck::Acked {
                commit: 3,
                unblocked: true
            }
        );
        tern_shell::runtime::block_on(t.persisted());
        let again = OrderTable::load(dir.path());
        assert_eq!(again.check_block("T", "G", 0, "c", 8000), Block::Free);
    }
}
