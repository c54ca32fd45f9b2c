//! POP consumption (RocketMQ 5.x broker-side load balancing; docs/design/pop.md).
//!
//! A POP reads messages for a group, writes a checkpoint (CK) record naming them to the
//! revive topic `rmq_sys_REVIVE_LOG_<cluster>` and moves the group's consumer offset past
//! them. An ACK writes an ack record to the same revive queue. The revive service
//! ([`revive`]) reads each revive queue in order and, once a CK's revive time
//! (`popTime + invisibleTime`) has passed with some message unacked, stores a copy of
//! that message in the pop retry topic `%RETRY%<group>_<topic>` with reconsumeTimes + 1,
//! where the next POP finds it. Every piece of state that decides a redelivery is a
//! record in the commit log or an offset saved once the log is durable past what it
//! counts, so the store's crash safety covers POP: a crash can repeat a delivery, never
//! lose one.
//!
//! Deliberate difference from RocketMQ: CK and ack records are written at once, without
//! `TIMER_DELIVER_MS` (RocketMQ routes them through its timer wheel so they appear in
//! revive order). Within one revive queue a CK always precedes its acks, so one
//! sequential scan sees both; pending CKs wait in memory until due ([`revive`]).
//!
//! Modules: [`receive`] (POP_MESSAGE, PEEK_MESSAGE), [`notification`], [`ack`] (ACK_MESSAGE,
//! BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), [`records`] (writing CK and ack
//! records), [`revive`], [`order`] (orderly POP's per-queue batches), [`modes`]
//! (SET_MESSAGE_REQUEST_MODE, GET_ALL_MESSAGE_REQUEST_MODE), [`assign`]
//! (QUERY_ASSIGNMENT), [`config`].

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use tern_shell::runtime;

pub mod ack;
pub mod assign;
pub mod config;
pub mod modes;
pub mod notification;
pub mod order;
pub mod polling;
pub mod receive;
pub mod records;
pub mod revive;

pub use config::PopConfig;

/// The polling key of held POPs on one queue (`-1`: POPs of every queue), RocketMQ's
/// `KeyBuilder.buildPollingKey`.
pub fn poll_key(topic: &str, group: &str, queue_id: i32) -> String {
    format!("{topic}@{group}@{queue_id}")
}

/// The polling key of held NOTIFICATIONs: their own table in RocketMQ, so POLLING_INFO
/// does not count them and they do not use up the POPs' room.
pub fn notification_key(topic: &str, group: &str, queue_id: i32) -> String {
    format!("{}@notification", poll_key(topic, group, queue_id))
}

/// Popped and unacked messages: topic → group → count.
pub type InflightCounts = HashMap<String, HashMap<String, u64>>;

/// Most queue locks held at once (each is one POP in progress on one queue).
const MAX_LOCKS: usize = 100_000;
/// How long an orderly ack or change waits for a queue's lock before SYSTEM_BUSY.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// POP's shared state.
#[derive(Debug)]
pub struct PopService {
    /// `topic@group@queueId` of queues a POP is reading now (`tryLock` in RocketMQ):
    /// two POPs never read the same queue for the same group at once.
    locks: Mutex<HashSet<String>>,
    /// Picks the revive queue of each POP and where an all-queue POP starts.
    counter: AtomicU32,
    /// Held POP and NOTIFICATION requests per `topic@group@queueId` key.
    polling: Mutex<HashMap<String, usize>>,
    /// Orderly POP's batches.
    pub order: order::OrderTable,
    /// Each group's way of consuming each topic (PULL or POP).
    pub modes: modes::RequestModes,
    /// The revive service's progress, for saving once durable and at shutdown.
    pub progress: revive::Progress,
    /// Topic routes for QUERY_ASSIGNMENT.
    pub routes: assign::Routes,
    /// Popped and not yet acked or revived, per (topic, group), as of the revive
    /// service's last round (the inflight gauge).
    inflight: Mutex<InflightCounts>,
}

/// A queue lock; released on drop.
#[derive(Debug)]
pub struct QueueLock<'a> {
    svc: &'a PopService,
    key: String,
}

impl Drop for QueueLock<'_> {
    fn drop(&mut self) {
        self.svc.lock_set().remove(&self.key);
    }
}

/// A held request's place in the polling table; released on drop.
#[derive(Debug)]
pub struct PollSlot<'a> {
    svc: &'a PopService,
    key: String,
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        let mut p = self.svc.polling.guard();
        if let Some(n) = p.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                p.remove(&self.key);
            }
        }
    }
}

impl PopService {
    /// Loads the orderly table and the request modes under `store_root`.
    pub fn load(store_root: &Path) -> Self {
        Self {
            locks: Mutex::default(),
            counter: AtomicU32::new(0),
            polling: Mutex::default(),
            order: order::OrderTable::load(store_root),
            modes: modes::RequestModes::load(store_root),
            progress: revive::Progress::default(),
            routes: assign::Routes::default(),
            inflight: Mutex::default(),
        }
    }

    /// Replaces the popped-and-unacked counts (the revive service, each round).
    pub fn set_inflight(&self, counts: InflightCounts) {
        *self.inflight.guard() = counts;
    }

    /// Popped messages of `topic` that `group` has not acked yet (0 for pull groups).
    pub fn inflight_of(&self, topic: &str, group: &str) -> u64 {
        self.inflight
            .guard()
            .get(topic)
            .and_then(|groups| groups.get(group))
            .copied()
            .unwrap_or(0)
    }

    fn lock_set(&self) -> MutexGuard<'_, HashSet<String>> {
        self.locks.guard()
    }

    /// The next value of the POP counter.
    pub fn next_count(&self) -> u32 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes the lock of one queue for one group, or `None` when a POP holds it (or the
    /// table is full).
    pub fn try_lock(&self, topic: &str, group: &str, queue_id: i32) -> Option<QueueLock<'_>> {
        let key = poll_key(topic, group, queue_id);
        let mut set = self.lock_set();
        if set.len() >= MAX_LOCKS || !set.insert(key.clone()) {
            return None;
        }
        Some(QueueLock { svc: self, key })
    }

    /// Waits (at most 3 s) for the lock of one queue: orderly acks and changes must not
    /// race a POP of the same queue.
    pub async fn lock(&self, topic: &str, group: &str, queue_id: i32) -> Option<QueueLock<'_>> {
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            if let Some(l) = self.try_lock(topic, group, queue_id) {
                return Some(l);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            runtime::sleep(Duration::from_millis(1)).await;
        }
    }

    /// POP requests held now under `key` (POLLING_INFO).
    pub fn polling_num(&self, key: &str) -> usize {
        let p = self.polling.guard();
        p.get(key).copied().unwrap_or(0)
    }

    /// Registers a held request under `key`, or `None` when the key holds
    /// `popPollingSize` already or the table `maxPopPollingSize` (POLLING_FULL).
    pub fn poll_slot(&self, key: String, cfg: &PopConfig) -> Option<PollSlot<'_>> {
        let mut p = self.polling.guard();
        let total: usize = p.values().sum();
        let here = p.get(&key).copied().unwrap_or(0);
        if total >= cfg.max_pop_polling_size || here >= cfg.pop_polling_size {
            return None;
        }
        *p.entry(key.clone()).or_default() += 1;
        Some(PollSlot { svc: self, key })
    }
}
