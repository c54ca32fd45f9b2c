//! HA replication, RocketMQ's classic master/slave protocol on its own port.
//!
//! A slave dials its master's HA address and reports, as an 8-byte big-endian offset,
//! where its commit log ends: at connect, after each chunk it stored, and every
//! `haSendHeartbeatInterval` when idle. The master streams its log from the first report
//! on as frames of a 12-byte header (8-byte log offset, 4-byte length) and that many log
//! bytes; an empty frame is its heartbeat. Frames need not end on a record boundary:
//! the slave keeps an incomplete record until the rest arrives ([`slave`]). In controller
//! mode, once the epoch handshake opened the connection, each header also carries the
//! master's confirm offset ([`FRAME_CONFIRM`]), and a frame goes out when it moves.
//!
//! The slave's acknowledged offset is what a SYNC_MASTER waits on before answering a
//! send, the same watermark idea as the flush's group commit.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use event_listener::Event;
use tern_shell::runtime;

pub mod auth;
mod error;
pub mod master;
pub mod slave;

pub use error::HaError;

/// Bytes of a master frame's header: log offset (i64) and length (i32), big-endian.
pub const FRAME_HEADER: usize = 12;
/// Bytes a controller-mode master adds to each frame's header: its confirm offset (i64),
/// which bounds what the slave dispatches (see `store::visible`).
pub const FRAME_CONFIRM: usize = 8;
/// Bytes of a slave's report: its log end (i64), big-endian.
pub const REPORT: usize = 8;
/// Largest frame a slave accepts (Java's slave reads into a 4 MiB buffer).
pub const MAX_FRAME_BODY: usize = 4 << 20;

/// How a replication wait ended (SYNC_MASTER).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// A slave holds everything up to the offset waited for.
    Replicated,
    /// No slave connected, or the slave is too far behind to count.
    SlaveNotAvailable,
    /// A slave is connected but did not acknowledge in time.
    Timeout,
}

/// Where a slave finds its master.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MasterAddrs {
    /// The master's remoting address (metadata sync).
    pub addr: Option<String>,
    /// The master's HA address (log stream).
    pub ha_addr: Option<String>,
}

/// Replication state shared by the HA tasks and the send path.
#[derive(Debug, Default)]
pub struct HaService {
    /// Highest log offset any slave acknowledged since start.
    acked: AtomicU64,
    /// Signalled when `acked` moves or a slave comes or goes.
    ack_moved: Event,
    /// Slaves connected now.
    slaves: AtomicUsize,
    /// Slave side: the master to follow.
    master: Mutex<MasterAddrs>,
    /// Slave side: signalled when `master` changes.
    master_changed: Event,
    /// Slave side: where this slave's log ended at its last report (runtime info).
    reported: AtomicU64,
    /// Slave side: the master's end as last seen in a frame (runtime info). Apart from
    /// `reported` because the reader and the reporter each set one of them.
    master_end: AtomicU64,
    /// Slave side: replication connections open now (0 or 1).
    following: AtomicUsize,
    /// Signalled when a follower connection ends.
    follower_stopped: Event,
    /// Master side, controller mode: each slave's acknowledgements, by controller id.
    members: Mutex<BTreeMap<i64, Member>>,
    /// Signalled when a member connects, catches up or goes.
    members_moved: Event,
}

/// A slave of a controller-mode master, by its controller id.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// Everything below this is on the slave.
    acked: u64,
    /// When the slave last held everything sent to it.
    caught_up_at: Option<Instant>,
    /// Its connections open now.
    connections: usize,
}

impl HaService {
    /// A service whose slave side follows `fixed` (`haMasterAddress`) when given.
    pub fn new(fixed: Option<String>) -> Self {
        let s = Self::default();
        if let Some(ha) = fixed {
            s.master.guard().ha_addr = Some(ha);
        }
        s
    }

    /// Slaves connected now.
    pub fn slave_count(&self) -> usize {
        self.slaves.load(Ordering::Acquire)
    }

    /// Highest offset any slave acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// A slave acknowledged everything below `offset`.
    pub(crate) fn ack(&self, offset: u64) {
        if self.acked.fetch_max(offset, Ordering::AcqRel) < offset {
            self.ack_moved.notify(usize::MAX);
        }
    }

    pub(crate) fn slave_joined(&self) {
        self.slaves.fetch_add(1, Ordering::AcqRel);
        self.ack_moved.notify(usize::MAX);
    }

    pub(crate) fn slave_left(&self) {
        self.slaves.fetch_sub(1, Ordering::AcqRel);
        self.ack_moved.notify(usize::MAX);
    }

    /// RocketMQ's `isSlaveOK`: a slave is connected and not more than `max_gap` behind
    /// `master_end`.
    pub fn slave_ok(&self, master_end: u64, max_gap: u64) -> bool {
        self.slave_count() > 0 && master_end.saturating_sub(self.acked()) < max_gap
    }

    /// Waits until a slave acknowledged `end` (SYNC_MASTER), for at most `timeout`.
    pub async fn await_replicated(&self, end: u64, max_gap: u64, timeout: Duration) -> Replication {
        if !self.slave_ok(end, max_gap) {
            return Replication::SlaveNotAvailable;
        }
        // The last slave going away (or the broker stopping) ends the wait too: nobody
        // will answer.
        let mut gone = false;
        runtime::wait_on(&self.ack_moved, timeout, || {
            gone = self.acked() < end && self.slave_count() == 0;
            self.acked() >= end || gone
        })
        .await;
        if self.acked() >= end {
            Replication::Replicated
        } else if gone {
            Replication::SlaveNotAvailable
        } else {
            Replication::Timeout
        }
    }

    /// The master this slave follows.
    pub fn master(&self) -> MasterAddrs {
        self.master.guard().clone()
    }

    /// Updates the master from a registration answer. As in RocketMQ, an address only
    /// replaces the known one when the answer carries it (a name server that lost the
    /// master says nothing), and a fixed `haMasterAddress` is never replaced. Wakes the
    /// slave task when anything changed.
    pub fn set_master(&self, addr: Option<String>, ha_addr: Option<String>, fixed_ha: bool) {
        let mut m = self.master.guard();
        let mut next = m.clone();
        if let Some(a) = addr.filter(|a| !a.is_empty()) {
            next.addr = Some(a);
        }
        if let Some(a) = ha_addr.filter(|a| !a.is_empty() && !fixed_ha) {
            next.ha_addr = Some(a);
        }
        if *m != next {
            log::info!(
                "master is now {} (HA {})",
                next.addr.as_deref().unwrap_or("unknown"),
                next.ha_addr.as_deref().unwrap_or("unknown")
            );
            *m = next;
            drop(m);
            self.master_changed.notify(usize::MAX);
        }
    }

    /// Controller mode: follows the master at remoting address `addr` (None: follows
    /// nobody, this broker is the master). Its HA address is learnt anew from the name
    /// servers; the connection open now, if any, ends.
    pub fn follow(&self, addr: Option<String>) {
        *self.master.guard() = MasterAddrs {
            addr,
            ha_addr: None,
        };
        self.master_changed.notify(usize::MAX);
    }

    /// Controller mode: takes `ha_addr` as the master's HA address when `addr` is the
    /// master followed (a registration answer naming another master is stale).
    pub fn learn_master_ha(&self, addr: Option<String>, ha_addr: Option<String>) {
        let mut m = self.master.guard();
        let (Some(a), Some(h)) = (addr, ha_addr.filter(|h| !h.is_empty())) else {
            return;
        };
        if m.addr.as_deref() == Some(a.as_str()) && m.ha_addr.as_deref() != Some(h.as_str()) {
            log::info!("master {a} replicates from HA address {h}");
            m.ha_addr = Some(h);
            drop(m);
            self.master_changed.notify(usize::MAX);
        }
    }

    /// A listener woken when the master followed changes.
    pub(crate) fn listen_master_changed(&self) -> event_listener::EventListener {
        self.master_changed.listen()
    }

    /// Slave side: a replication connection to the master is open now.
    pub fn following_master(&self) -> bool {
        self.following.load(Ordering::Acquire) > 0
    }

    pub(crate) fn follower_started(&self) {
        self.following.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn follower_ended(&self) {
        self.following.fetch_sub(1, Ordering::AcqRel);
        self.follower_stopped.notify(usize::MAX);
    }

    /// Waits (at most `within`) until no follower connection is open.
    pub async fn await_follower_stopped(&self, within: Duration) {
        runtime::wait_on(&self.follower_stopped, within, || {
            self.following.load(Ordering::Acquire) == 0
        })
        .await;
    }

    /// Master side, controller mode: slave `id` connected.
    pub(crate) fn member_joined(&self, id: i64) {
        let mut m = self.members.guard();
        let e = m.entry(id).or_insert(Member {
            acked: 0,
            caught_up_at: None,
            connections: 0,
        });
        e.connections += 1;
        drop(m);
        self.members_moved.notify(usize::MAX);
    }

    /// Master side, controller mode: slave `id` holds everything below `acked`, and
    /// everything sent to it when `caught_up`.
    pub(crate) fn member_acked(&self, id: i64, acked: u64, caught_up: bool) {
        let mut m = self.members.guard();
        let Some(e) = m.get_mut(&id) else { return };
        let newly = caught_up && e.caught_up_at.is_none();
        e.acked = e.acked.max(acked);
        if caught_up {
            e.caught_up_at = Some(Instant::now());
        }
        drop(m);
        self.ack_moved.notify(usize::MAX);
        if newly {
            self.members_moved.notify(usize::MAX);
        }
    }

    /// Master side, controller mode: a connection of slave `id` closed.
    pub(crate) fn member_left(&self, id: i64) {
        let mut m = self.members.guard();
        if let Some(e) = m.get_mut(&id) {
            e.connections = e.connections.saturating_sub(1);
            if e.connections == 0 {
                m.remove(&id);
            }
        }
        drop(m);
        self.members_moved.notify(usize::MAX);
        self.ack_moved.notify(usize::MAX);
    }

    /// Master side, controller mode: what slave `id` acknowledged, while connected.
    pub fn member_offset(&self, id: i64) -> Option<u64> {
        self.members
            .guard()
            .get(&id)
            .filter(|m| m.connections > 0)
            .map(|m| m.acked)
    }

    /// Master side, controller mode: the confirm offset of the SyncStateSet `set` gives
    /// (ids; this broker's own, `me`, is skipped), handed to `apply`. The set is read and
    /// the offset applied under the members' lock, so computations land in the order of
    /// the acknowledgements and sets they read, and the last one read the newest of both
    /// (RocketMQ's `computeConfirmOffset`): the least a member acknowledged, `u64::MAX`
    /// when the set is this broker alone. A member not connected leaves the offset as it
    /// was, as in RocketMQ: what it holds is unknown until it is back or out of the set.
    pub fn confirm_offset(&self, me: i64, set: impl FnOnce() -> Vec<i64>, apply: impl FnOnce(u64)) {
        let m = self.members.guard();
        let mut least = u64::MAX;
        for id in set().iter().filter(|id| **id != me) {
            match m.get(id) {
                Some(e) => least = least.min(e.acked),
                None => return,
            }
        }
        apply(least);
    }

    /// Master side, controller mode: connected slaves that held everything sent to them
    /// within `within` (RocketMQ's `haMaxTimeSlaveNotCatchup`).
    pub fn caught_up_members(&self, within: Duration) -> Vec<i64> {
        let now = Instant::now();
        self.members
            .guard()
            .iter()
            .filter(|(_, m)| {
                m.connections > 0
                    && m.caught_up_at
                        .is_some_and(|t| now.saturating_duration_since(t) <= within)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// A listener woken when members connect, catch up or go.
    pub fn listen_members(&self) -> event_listener::EventListener {
        self.members_moved.listen()
    }

    /// Master side, controller mode: waits until every slave of `set` (ids; this
    /// broker's own, `me`, is skipped) acknowledged `end`, for at most `timeout`. `set`
    /// is asked again on every wake, so a member the controller dropped stops counting.
    pub async fn await_members(
        &self,
        me: i64,
        set: impl Fn() -> Vec<i64>,
        end: u64,
        timeout: Duration,
    ) -> Replication {
        let deadline = Instant::now() + timeout;
        loop {
            let listener = self.ack_moved.listen();
            let done = {
                let m = self.members.guard();
                set()
                    .iter()
                    .filter(|id| **id != me)
                    .all(|id| m.get(id).is_some_and(|e| e.acked >= end))
            };
            if done {
                return Replication::Replicated;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Replication::Timeout;
            }
            // Bounded: a change of the set wakes nobody here.
            let _ = runtime::timeout(left.min(Duration::from_millis(100)), listener).await;
        }
    }

    /// Slave side: this slave's reported end and the master's end seen last.
    pub fn slave_progress(&self) -> (u64, u64) {
        (
            self.reported.load(Ordering::Acquire),
            self.master_end.load(Ordering::Acquire),
        )
    }

    pub(crate) fn set_reported(&self, offset: u64) {
        self.reported.store(offset, Ordering::Release);
    }

    pub(crate) fn set_master_end(&self, offset: u64) {
        self.master_end.store(offset, Ordering::Release);
    }

    /// Replication keys of GET_BROKER_RUNTIME_INFO. RocketMQ 4.9 reports none (its
    /// `slaveFallBehindMuch` is only logged), so these are Tern's own; a lag is the
    /// master's `commitLogMaxOffset` minus `haSlaveAckOffset`, or `haMasterOffset` minus
    /// `haReportedOffset` on a slave.
    pub fn runtime_stats(&self, is_slave: bool, out: &mut BTreeMap<String, String>) {
        if is_slave {
            let m = self.master();
            let (reported, master_end) = self.slave_progress();
            out.insert("haMasterAddr".into(), m.addr.unwrap_or_default());
            out.insert("haMasterHaAddr".into(), m.ha_addr.unwrap_or_default());
            out.insert("haReportedOffset".into(), reported.to_string());
            out.insert("haMasterOffset".into(), master_end.to_string());
        } else {
            out.insert("haSlaveCount".into(), self.slave_count().to_string());
            out.insert("haSlaveAckOffset".into(), self.acked().to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GAP: u64 = 1 << 20;
    const WAIT: Duration = Duration::from_secs(5);

    #[test]
    fn waits_end_on_the_acknowledgement_on_no_slave_and_on_the_timeout() {
        let ha = HaService::new(None);
        let wait = |end| runtime::block_on(ha.await_replicated(end, GAP, WAIT));
        assert_eq!(wait(100), Replication::SlaveNotAvailable);
        ha.slave_joined();
        ha.ack(100);
        assert_eq!(wait(100), Replication::Replicated);
        assert_eq!(
            runtime::block_on(ha.await_replicated(200, GAP, Duration::from_millis(20))),
            Replication::Timeout
        );
        // Too far behind to count.
        assert!(!ha.slave_ok(100 + GAP, GAP));
        assert_eq!(wait(100 + GAP), Replication::SlaveNotAvailable);
        // A waiter is released by an acknowledgement, and by the last slave leaving.
        runtime::block_on(async {
            let acked = runtime::race(ha.await_replicated(300, GAP, WAIT), async {
                runtime::sleep(Duration::from_millis(20)).await;
                ha.ack(400);
                runtime::sleep(WAIT * 2).await;
                Replication::Timeout
            });
            assert_eq!(acked.await, Replication::Replicated);
            let left = runtime::race(ha.await_replicated(500, GAP, WAIT), async {
                runtime::sleep(Duration::from_millis(20)).await;
                ha.slave_left();
                runtime::sleep(WAIT * 2).await;
                Replication::Timeout
            });
            assert_eq!(left.await, Replication::SlaveNotAvailable);
        });
    }

    #[test]
    fn runtime_info_reports_the_side_this_broker_plays() {
        let ha = HaService::new(None);
        ha.slave_joined();
        ha.ack(4096);
        let mut t = BTreeMap::new();
        ha.runtime_stats(false, &mut t);
        assert_eq!(t["haSlaveCount"], "1");
        assert_eq!(t["haSlaveAckOffset"], "4096");
        assert!(!t.contains_key("haMasterAddr"));

        let s = HaService::new(Some("m:10912".into()));
        s.set_reported(100);
        s.set_master_end(300);
        let mut t = BTreeMap::new();
        s.runtime_stats(true, &mut t);
        assert_eq!(t["haMasterAddr"], "");
        assert_eq!(t["haMasterHaAddr"], "m:10912");
        assert_eq!(t["haReportedOffset"], "100");
        assert_eq!(t["haMasterOffset"], "300");
        assert!(!t.contains_key("haSlaveCount"));
    }

    #[test]
    fn registration_answers_replace_known_addresses_only_with_news() {
        let ha = HaService::new(None);
        ha.set_master(Some("m:10911".into()), Some("m:10912".into()), false);
        ha.set_master(None, Some(String::new()), false);
        assert_eq!(
            ha.master(),
            MasterAddrs {
                addr: Some("m:10911".into()),
                ha_addr: Some("m:10912".into())
            }
        );
        let fixed = HaService::new(Some("f:1".into()));
        fixed.set_master(Some("m:10911".into()), Some("m:10912".into()), true);
        assert_eq!(fixed.master().ha_addr.as_deref(), Some("f:1"));
        assert_eq!(fixed.master().addr.as_deref(), Some("m:10911"));
    }
}
