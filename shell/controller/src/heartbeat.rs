//! Which brokers are alive, as this controller node sees them (RocketMQ's
//! `DefaultBrokerHeartbeatManager`): not replicated, every node keeps its own, fed by the
//! BROKER_HEARTBEAT every broker sends to every controller each second. A broker is alive
//! while its last heartbeat is younger than the timeout it announced; its connection
//! closing makes it inactive at once (a kill -9 is noticed without waiting).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tern_shell::headers::BrokerHeartbeatRequestHeader;
use tern_shell::sync::MutexExt;

/// Most brokers tracked; heartbeats from more are dropped (and logged).
pub const MAX_TRACKED: usize = 32_768;

/// RocketMQ's `DEFAULT_BROKER_CHANNEL_EXPIRED_TIME` for a heartbeat that names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A broker, by broker-set and controller id.
pub type BrokerKey = (String, i64);

/// What a broker last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveInfo {
    /// Cluster.
    pub cluster: String,
    /// Remoting address.
    pub addr: String,
    /// Last epoch in its epoch file.
    pub epoch: i32,
    /// Its max commit-log offset.
    pub max_offset: i64,
    /// Its confirm offset.
    pub confirm_offset: i64,
    /// `brokerElectionPriority` (lower wins).
    pub priority: i32,
    last: Instant,
    timeout: Duration,
    conn: u64,
}

/// The table.
#[derive(Debug, Default)]
pub struct Heartbeats {
    table: Mutex<HashMap<BrokerKey, LiveInfo>>,
    /// Brokers whose connection to this node closed and that have not beaten since:
    /// known dead, not merely unheard of (at most [`MAX_TRACKED`]).
    closed: Mutex<std::collections::HashSet<BrokerKey>>,
}

impl Heartbeats {
    /// Records a heartbeat that came on connection `conn`. False when the table is full.
    pub fn beat(&self, h: &BrokerHeartbeatRequestHeader, id: i64, conn: u64, now: Instant) -> bool {
        let mut table = self.table.guard();
        let key = (h.broker_name.clone(), id);
        if !table.contains_key(&key) && table.len() >= MAX_TRACKED {
            return false;
        }
        let timeout = h
            .heartbeat_timeout_mills
            .and_then(|ms| u64::try_from(ms).ok())
            .filter(|&ms| ms > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        self.closed.guard().remove(&key);
        table.insert(
            key,
            LiveInfo {
                cluster: h.cluster_name.clone(),
                addr: h.broker_addr.clone(),
                epoch: h.epoch.unwrap_or(0),
                max_offset: h.max_offset.unwrap_or(0),
                confirm_offset: h.confirm_offset.unwrap_or(0),
                priority: h.election_priority.unwrap_or(i32::MAX),
                last: now,
                timeout,
                conn,
            },
        );
        true
    }

    /// What `name`'s replica `id` reported, if it is alive.
    pub fn alive(&self, name: &str, id: i64, now: Instant) -> Option<LiveInfo> {
        self.table
            .guard()
            .get(&(name.to_owned(), id))
            .filter(|i| now.duration_since(i.last) <= i.timeout)
            .cloned()
    }

    /// Forgets brokers silent past their timeout; returns them.
    pub fn expire(&self, now: Instant) -> Vec<BrokerKey> {
        let mut table = self.table.guard();
        let gone: Vec<BrokerKey> = table
            .iter()
            .filter(|(_, i)| now.duration_since(i.last) > i.timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            table.remove(k);
        }
        gone
    }

    /// Forgets the brokers whose heartbeats came on connection `conn`, which closed;
    /// returns them.
    pub fn connection_closed(&self, conn: u64) -> Vec<BrokerKey> {
        let mut table = self.table.guard();
        let gone: Vec<BrokerKey> = table
            .iter()
            .filter(|(_, i)| i.conn == conn)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            table.remove(k);
        }
        drop(table);
        let mut closed = self.closed.guard();
        for k in &gone {
            if closed.len() < MAX_TRACKED {
                closed.insert(k.clone());
            }
        }
        gone
    }

    /// Whether this node saw broker `id` of `name`'s connection close, and has not heard
    /// from it since.
    pub fn seen_closed(&self, name: &str, id: i64) -> bool {
        self.closed.guard().contains(&(name.to_owned(), id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, timeout_ms: i64) -> BrokerHeartbeatRequestHeader {
        BrokerHeartbeatRequestHeader {
            cluster_name: "c".into(),
            broker_addr: "127.0.0.1:1".into(),
            broker_name: name.into(),
            broker_id: Some(1),
            heartbeat_timeout_mills: Some(timeout_ms),
            ..Default::default()
        }
    }

    #[test]
    fn a_broker_is_alive_until_its_own_timeout_or_its_connection_closes() {
        let hb = Heartbeats::default();
        let t0 = Instant::now();
        assert!(hb.beat(&header("a", 1000), 1, 7, t0));
        assert!(hb.beat(&header("b", 1000), 1, 8, t0));
        assert!(hb.alive("a", 1, t0 + Duration::from_millis(999)).is_some());
        assert!(hb.alive("a", 1, t0 + Duration::from_millis(1001)).is_none());
        assert_eq!(
            hb.expire(t0 + Duration::from_millis(500)),
            Vec::<BrokerKey>::new()
        );
        assert_eq!(hb.connection_closed(7), vec![("a".to_string(), 1)]);
        assert!(hb.alive("a", 1, t0).is_none());
        // Known dead, unlike a broker that merely timed out or was never heard of.
        assert!(hb.seen_closed("a", 1));
        assert_eq!(
            hb.expire(t0 + Duration::from_secs(2)),
            vec![("b".to_string(), 1)]
        );
        assert!(!hb.seen_closed("b", 1));
        assert!(!hb.seen_closed("c", 1));
        // A beat after the close: alive again, no longer known dead.
        assert!(hb.beat(&header("a", 1000), 1, 9, t0));
        assert!(!hb.seen_closed("a", 1));
    }
}
