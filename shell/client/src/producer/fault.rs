//! Latency-based fault avoidance (Java's `MQFaultStrategy` with `sendLatencyFaultEnable`
//! and its `LatencyFaultToleranceImpl`).
//!
//! Every send records its broker's latency. A slow send, or a failed one (counted as
//! [`ISOLATION_LATENCY_MS`], as Java does), makes the broker unavailable for a while, per
//! Java's tables ([`LATENCY_MAX_MS`] → [`NOT_AVAILABLE_MS`]). Queue selection then prefers
//! queues of available brokers and, when none is, falls back to the broker that has been
//! failing least.
//!
//! Time comes from a [`Clock`] so tests can move it by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tern_shell::sync::MutexExt;

use tern_shell::body::MessageQueue;

use super::selector::PublishInfo;

/// Latency thresholds (ms), Java's `latencyMax`.
pub const LATENCY_MAX_MS: [u64; 7] = [50, 100, 550, 1000, 2000, 3000, 15_000];
/// How long a broker is avoided after a send at least as slow as the threshold of the same
/// index (ms), Java's `notAvailableDuration`.
pub const NOT_AVAILABLE_MS: [u64; 7] = [0, 0, 30_000, 60_000, 120_000, 180_000, 600_000];
/// The latency a failed send counts as (Java: 30 s, so 10 minutes unavailable).
pub const ISOLATION_LATENCY_MS: u64 = 30_000;
/// Most brokers tracked; beyond it, the entries already available again are forgotten.
const MAX_ITEMS: usize = 4096;

/// Milliseconds on a monotonic clock.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in ms since an arbitrary origin fixed for the clock's life.
    fn now_ms(&self) -> u64;
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct SystemClock(Instant);

impl Default for SystemClock {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }
}

/// Java's `computeNotAvailableDuration`: the duration of the highest threshold reached.
pub fn not_available_ms(latency_ms: u64) -> u64 {
    LATENCY_MAX_MS
        .iter()
        .zip(NOT_AVAILABLE_MS)
        .rev()
        .find(|(max, _)| latency_ms >= **max)
        .map_or(0, |(_, d)| d)
}

/// What is known of one broker (Java's `FaultItem`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FaultItem {
    /// The last send's latency (a failure counts as [`ISOLATION_LATENCY_MS`]).
    latency_ms: u64,
    /// When the broker may be chosen again, on the clock.
    available_at_ms: u64,
}

/// Latency bookkeeping per broker and the queue choice built on it.
#[derive(Debug)]
pub struct LatencyFaults {
    clock: Arc<dyn Clock>,
    items: Mutex<HashMap<String, FaultItem>>,
}

impl Default for LatencyFaults {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock::default()))
    }
}

impl LatencyFaults {
    /// Bookkeeping on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            items: Mutex::new(HashMap::new()),
        }
    }

    fn items(&self) -> MutexGuard<'_, HashMap<String, FaultItem>> {
        self.items.guard()
    }

    /// Records a send to `broker` that took `latency_ms`; `failed` sends count as
    /// [`ISOLATION_LATENCY_MS`] (Java's `updateFaultItem` with isolation).
    pub fn record(&self, broker: &str, latency_ms: u64, failed: bool) {
        let latency_ms = if failed {
            ISOLATION_LATENCY_MS
        } else {
            latency_ms
        };
        let now = self.clock.now_ms();
        let item = FaultItem {
            latency_ms,
            available_at_ms: now.saturating_add(not_available_ms(latency_ms)),
        };
        let mut items = self.items();
        if items.len() >= MAX_ITEMS && !items.contains_key(broker) {
            items.retain(|_, i| i.available_at_ms > now);
            if items.len() >= MAX_ITEMS {
                return;
            }
        }
        items.insert(broker.to_owned(), item);
    }

    /// True unless a recent slow or failed send put `broker` aside.
    pub fn is_available(&self, broker: &str) -> bool {
        let now = self.clock.now_ms();
        self.items()
            .get(broker)
            .is_none_or(|i| now >= i.available_at_ms)
    }

    /// How long (ms) `broker` stays unavailable; 0 when available.
    pub fn unavailable_for_ms(&self, broker: &str) -> u64 {
        let now = self.clock.now_ms();
        self.items()
            .get(broker)
            .map_or(0, |i| i.available_at_ms.saturating_sub(now))
    }

    /// Forgets a broker.
    pub fn remove(&self, broker: &str) {
        self.items().remove(broker);
    }

    /// Of `candidates`, the least bad broker: the one available soonest, then the one
    /// with the lowest last latency (Java's `pickOneAtLeast`, without its randomness).
    fn least_bad<'a>(&self, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
        let items = self.items();
        candidates.min_by_key(|b| {
            items
                .get(*b)
                .map_or((0, 0), |i| (i.available_at_ms, i.latency_ms))
        })
    }

    /// The next queue round-robin among available brokers, other than `avoid_broker`
    /// when possible; with every broker unavailable, a queue of the least bad one.
    pub fn select(&self, info: &PublishInfo, avoid_broker: Option<&str>) -> Option<MessageQueue> {
        if let Some(avoid) = avoid_broker {
            let q =
                info.pick_where(|q| q.broker_name != avoid && self.is_available(&q.broker_name));
            if q.is_some() {
                return q;
            }
        }
        if let Some(q) = info.pick_where(|q| self.is_available(&q.broker_name)) {
            return Some(q);
        }
        let best = self.least_bad(info.queues.iter().map(|q| q.broker_name.as_str()))?;
        let best = best.to_owned();
        info.pick_where(|q| q.broker_name == best)
            .or_else(|| info.pick(avoid_broker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tern_shell::body::{BrokerData, NumKeyMap, QueueData, TopicRouteData};

    #[derive(Debug, Default)]
    struct ManualClock(AtomicU64);

    impl ManualClock {
        fn advance(&self, ms: u64) {
            self.0.fetch_add(ms, Ordering::SeqCst);
        }
    }

    impl Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn faults() -> (Arc<ManualClock>, LatencyFaults) {
        let clock = Arc::new(ManualClock::default());
        (clock.clone(), LatencyFaults::new(clock))
    }

    /// Brokers `a` and `b`, two writable queues each.
    fn info() -> PublishInfo {
        let qd = |b: &str| QueueData {
            broker_name: b.into(),
            read_queue_nums: 2,
            write_queue_nums: 2,
            perm: 6,
            topic_sys_flag: 0,
        };
        let bd = |b: &str| BrokerData {
            broker_name: b.into(),
            broker_addrs: NumKeyMap([(0, "1.2.3.4:5".to_string())].into_iter().collect()),
            ..Default::default()
        };
        let route = TopicRouteData {
            queue_datas: vec![qd("a"), qd("b")],
            broker_datas: vec![bd("a"), bd("b")],
            ..Default::default()
        };
        PublishInfo::from_route("T", &route, None)
    }

    #[test]
    fn durations_follow_javas_tables() {
        assert_eq!(not_available_ms(0), 0);
        assert_eq!(not_available_ms(99), 0);
        assert_eq!(not_available_ms(549), 0);
        assert_eq!(not_available_ms(550), 30_000);
        assert_eq!(not_available_ms(999), 30_000);
        assert_eq!(not_available_ms(1000), 60_000);
        assert_eq!(not_available_ms(2000), 120_000);
        assert_eq!(not_available_ms(3000), 180_000);
        assert_eq!(not_available_ms(14_999), 180_000);
        assert_eq!(not_available_ms(15_000), 600_000);
        assert_eq!(not_available_ms(ISOLATION_LATENCY_MS), 600_000);
    }

    #[test]
    fn a_slow_send_puts_the_broker_aside_until_its_duration_passes() {
        let (clock, f) = faults();
        f.record("a", 40, false);
        assert!(f.is_available("a"), "fast sends change nothing");
        f.record("a", 1200, false);
        assert!(!f.is_available("a"));
        assert_eq!(f.unavailable_for_ms("a"), 60_000);
        clock.advance(59_999);
        assert!(!f.is_available("a"));
        clock.advance(1);
        assert!(f.is_available("a"));
        assert!(f.is_available("never-seen"));
    }

    #[test]
    fn a_failure_isolates_for_ten_minutes_and_a_fast_send_clears_it() {
        let (clock, f) = faults();
        f.record("a", 3, true);
        assert_eq!(f.unavailable_for_ms("a"), 600_000);
        clock.advance(300_000);
        assert!(!f.is_available("a"));
        f.record("a", 10, false);
        assert!(f.is_available("a"));
        f.record("a", 3, true);
        f.remove("a");
        assert!(f.is_available("a"));
    }

    #[test]
    fn selection_prefers_available_brokers() {
        let (clock, f) = faults();
        let info = info();
        f.record("a", 0, true);
        for _ in 0..10 {
            assert_eq!(f.select(&info, None).unwrap().broker_name, "b");
        }
        clock.advance(600_000);
        let brokers: std::collections::BTreeSet<String> = (0..4)
            .map(|_| f.select(&info, None).unwrap().broker_name)
            .collect();
        assert_eq!(
            brokers.len(),
            2,
            "both available again: round-robin over both"
        );
    }

    #[test]
    fn selection_avoids_the_last_failed_broker_when_it_can() {
        let (_, f) = faults();
        let info = info();
        for _ in 0..10 {
            assert_eq!(f.select(&info, Some("b")).unwrap().broker_name, "a");
        }
    }

    #[test]
    fn with_every_broker_unavailable_the_least_bad_one_is_used() {
        let (clock, f) = faults();
        let info = info();
        f.record("a", 0, true); // 10 minutes
        clock.advance(1000);
        f.record("b", 2500, false); // 2 minutes
        for _ in 0..4 {
            assert_eq!(f.select(&info, None).unwrap().broker_name, "b");
        }
        assert!(f.select(&PublishInfo::default(), None).is_none());
    }
}
