//! Prometheus metrics under RocketMQ 5's names and labels (`BrokerMetricsConstant`,
//! `RemotingMetricsConstant`), served on `metricsPromExporterPort` when
//! `metricsExporterType=PROM`.
//!
//! Two kinds of figure:
//! - **Counted on the request path** ([`Metrics`]): messages and bytes in per topic and
//!   message type, out per topic and group, message sizes, request latencies per request
//!   and response code, dead-lettered sends, transaction ends. Each is a relaxed atomic
//!   add behind a shared read lock of a map from its labels, which is written only the
//!   first time a label set is seen; nothing on the path waits on another request.
//! - **Read at scrape time** ([`render`]): topic and group counts, connections, consumer
//!   lag, storage size and how far flush and dispatch are behind, half messages, timer
//!   and reput figures, from the broker's own state.
//!
//! [`render`] encodes both with `prometheus-client` (OpenMetrics text).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tern_shell::sync::RwLockExt;

pub mod daily;
pub mod render;
pub mod settings;
pub mod windows;

pub use render::render;
pub use settings::{ExporterType, MetricsSettings};

/// Upper bounds of `rocketmq_message_size`'s buckets, bytes (RocketMQ's: 1 KiB, 4 KiB,
/// 512 KiB, 1 MiB, 2 MiB, 4 MiB, then the overflow).
pub const SIZE_BUCKETS: [f64; 6] = [
    1024.0,
    4096.0,
    524_288.0,
    1_048_576.0,
    2_097_152.0,
    4_194_304.0,
];

/// Upper bounds of `rocketmq_rpc_latency`'s buckets, ms (RocketMQ's).
pub const LATENCY_BUCKETS_MS: [f64; 6] = [1.0, 3.0, 5.0, 10.0, 100.0, 1_000.0];

/// RocketMQ's `message_type` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MessageType {
    /// A plain message.
    Normal,
    /// A transaction half message.
    Transaction,
    /// A delay-level or timer message.
    Delay,
}

impl MessageType {
    /// The label's value, as RocketMQ writes it.
    pub fn label(self) -> &'static str {
        match self {
            MessageType::Normal => "Normal",
            MessageType::Transaction => "Transaction",
            MessageType::Delay => "Delay",
        }
    }
}

/// A histogram's buckets, count and sum, in atomics.
#[derive(Debug)]
pub struct Buckets<const N: usize> {
    bounds: &'static [f64; N],
    /// Per bucket (not cumulative), then the overflow.
    counts: [AtomicU64; 7],
    sum: AtomicU64,
}

impl<const N: usize> Buckets<N> {
    /// Empty buckets with these upper bounds.
    pub fn new(bounds: &'static [f64; N]) -> Self {
        assert!(N < 7, "one slot is the overflow");
        Buckets {
            bounds,
            counts: Default::default(),
            sum: AtomicU64::new(0),
        }
    }

    /// Counts one value.
    pub fn observe(&self, v: u64) {
        let i = self.bounds.iter().position(|b| v as f64 <= *b).unwrap_or(N);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
    }

    /// (sum, count, per-bucket counts with the overflow last), as `prometheus-client`'s
    /// encoder takes them: it adds them up, and writes an upper bound of `f64::MAX` as
    /// `+Inf`.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut total = 0;
        let mut out = Vec::with_capacity(N + 1);
        for (i, c) in self.counts.iter().take(N + 1).enumerate() {
            let n = c.load(Ordering::Relaxed);
            total += n;
            out.push((self.bounds.get(i).copied().unwrap_or(f64::MAX), n));
        }
        (self.sum.load(Ordering::Relaxed) as f64, total, out)
    }
}

/// What is counted per topic and message type on the way in.
#[derive(Debug)]
pub struct InCounters {
    /// Messages stored.
    pub messages: AtomicU64,
    /// Body bytes stored.
    pub bytes: AtomicU64,
    /// Body sizes.
    pub sizes: Buckets<6>,
}

/// What is counted per topic and group on the way out.
#[derive(Debug)]
pub struct OutCounters {
    /// Messages handed to consumers.
    pub messages: AtomicU64,
    /// Bytes handed to consumers (stored record sizes).
    pub bytes: AtomicU64,
    /// Pull responses that carried them (the events VIEW_BROKER_STATS_DATA averages over).
    pub responses: AtomicU64,
    /// Per queue id, the offset the group's last pull answered with as the next to read
    /// (0: never pulled), RocketMQ's pull offset: what the inflight and ready gauges are
    /// measured from. Grown (under the write lock) only for a new, higher queue id.
    next_pull: RwLock<Vec<AtomicU64>>,
}

impl OutCounters {
    /// The next offset the group's last pull of `queue_id` answered with, if it pulled.
    pub fn next_pull(&self, queue_id: i32) -> Option<u64> {
        let v = self.next_pull.read_guard();
        let n = v
            .get(usize::try_from(queue_id).ok()?)?
            .load(Ordering::Relaxed);
        (n > 0).then_some(n)
    }

    fn set_next_pull(&self, queue_id: i32, next: u64) {
        // Queue ids are bounded by the topic's queue count (at most 1024), checked
        // before a pull is served.
        let Ok(i) = usize::try_from(queue_id) else {
            return;
        };
        {
            let v = self.next_pull.read_guard();
            if let Some(a) = v.get(i) {
                a.store(next, Ordering::Relaxed);
                return;
            }
        }
        let mut v = self.next_pull.write_guard();
        while v.len() <= i {
            v.push(AtomicU64::new(0));
        }
        v[i].store(next, Ordering::Relaxed);
    }

    fn new() -> Self {
        OutCounters {
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            responses: AtomicU64::new(0),
            next_pull: RwLock::new(Vec::new()),
        }
    }
}

/// A map from labels to counters, written only when a label set is new.
#[derive(Debug)]
struct Table<K, V>(RwLock<HashMap<K, Arc<V>>>);

impl<K, V> Default for Table<K, V> {
    fn default() -> Self {
        Table(RwLock::new(HashMap::new()))
    }
}

impl<K: Eq + Hash + Clone, V> Table<K, V> {
    fn get_or<Q>(&self, key: &Q, owned: impl FnOnce() -> K, new: impl FnOnce() -> V) -> Arc<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        if let Some(v) = self.0.read_guard().get(key) {
            return v.clone();
        }
        let mut w = self.0.write_guard();
        w.entry(owned()).or_insert_with(|| Arc::new(new())).clone()
    }

    fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        self.0.read_guard().get(key).cloned()
    }

    fn snapshot(&self) -> Vec<(K, Arc<V>)> {
        let r = self.0.read_guard();
        r.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

/// The request-path counters (see the module docs).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Per message type, then topic.
    messages_in: [Table<String, InCounters>; 3],
    messages_out: Table<(String, String), OutCounters>,
    rpc: Table<(i32, i32), Buckets<6>>,
    dlq: Table<(String, String), AtomicU64>,
    commits: AtomicU64,
    rollbacks: AtomicU64,
    /// Minute, hour and day windows of these counters (VIEW_BROKER_STATS_DATA).
    pub windows: windows::StatsWindows,
    /// The put and get totals at the last two midnights (runtime info).
    pub daily: daily::DailyTotals,
}

impl Metrics {
    /// `n` messages of `body_bytes` in all (`sizes`: each body's) stored in `topic`.
    pub fn message_in(&self, topic: &str, kind: MessageType, body_len: usize) {
        let c = self.messages_in[kind as usize].get_or(
            topic,
            || topic.to_owned(),
            || InCounters {
                messages: AtomicU64::new(0),
                bytes: AtomicU64::new(0),
                sizes: Buckets::new(&SIZE_BUCKETS),
            },
        );
        c.messages.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(body_len as u64, Ordering::Relaxed);
        c.sizes.observe(body_len as u64);
    }

    /// `n` messages of `bytes` handed to `group` from `topic`.
    pub fn messages_out(&self, topic: &str, group: &str, n: u64, bytes: u64) {
        if n == 0 {
            return;
        }
        self.count_out(topic, group, n, bytes);
    }

    /// A pull of `queue_id` handed `group` `(messages, bytes)` and answered `next` as the
    /// offset to read from next.
    pub fn pulled(&self, topic: &str, group: &str, queue_id: i32, out: (u64, u64), next: u64) {
        if out.0 == 0 {
            return;
        }
        self.count_out(topic, group, out.0, out.1)
            .set_next_pull(queue_id, next);
    }

    fn count_out(&self, topic: &str, group: &str, n: u64, bytes: u64) -> Arc<OutCounters> {
        let key = (topic.to_owned(), group.to_owned());
        let c = self
            .messages_out
            .get_or(&key, || key.clone(), OutCounters::new);
        c.messages.fetch_add(n, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        c.responses.fetch_add(1, Ordering::Relaxed);
        c
    }

    /// The out-counters of `group` reading `topic`, if it read any.
    pub fn out_of(&self, topic: &str, group: &str) -> Option<Arc<OutCounters>> {
        self.messages_out.get(&(topic.to_owned(), group.to_owned()))
    }

    /// Messages stored and handed out since start, without system topics (RocketMQ's
    /// `BROKER_PUT_NUMS_WITHOUT_SYSTEM_TOPIC` and its get twin).
    pub fn totals_without_system_topics(&self) -> (u64, u64) {
        let put = self
            .messages_in
            .iter()
            .flat_map(Table::snapshot)
            .filter(|(t, _)| !daily::is_system_topic(t))
            .map(|(_, c)| c.messages.load(Ordering::Relaxed))
            .sum();
        let get = self
            .messages_out
            .snapshot()
            .iter()
            .filter(|((t, _), _)| !daily::is_system_topic(t))
            .map(|(_, c)| c.messages.load(Ordering::Relaxed))
            .sum();
        (put, get)
    }

    /// Messages per second `group` read from `topic` over about the last minute
    /// (RocketMQ's per-minute TPS of `GROUP_GET_NUMS`, from the stats windows).
    pub fn consume_tps(&self, topic: &str, group: &str) -> f64 {
        // The cluster names only the BROKER_ items; a group's item does not need it.
        self.windows
            .view(self, "", "GROUP_GET_NUMS", &format!("{topic}@{group}"))
            .map_or(0.0, |d| d.stats_minute.tps)
    }

    /// A request with `code` answered `response` after `micros`.
    pub fn rpc(&self, code: i32, response: i32, micros: u64) {
        let key = (code, response);
        self.rpc
            .get_or(&key, || key, || Buckets::new(&LATENCY_BUCKETS_MS))
            .observe(micros / 1000);
    }

    /// A message of `topic` sent by `group` to its dead-letter queue.
    pub fn sent_to_dlq(&self, topic: &str, group: &str) {
        let key = (topic.to_owned(), group.to_owned());
        self.dlq
            .get_or(&key, || key.clone(), || AtomicU64::new(0))
            .fetch_add(1, Ordering::Relaxed);
    }

    /// A transaction ended: committed or rolled back.
    pub fn transaction_ended(&self, committed: bool) {
        let c = if committed {
            &self.commits
        } else {
            &self.rollbacks
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}
