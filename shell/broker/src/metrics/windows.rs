//! The minute, hour and day windows VIEW_BROKER_STATS_DATA answers, from the request-path
//! counters of [`Metrics`](super::Metrics).
//!
//! RocketMQ's `StatsItem` keeps cumulative samples (every 10 s for the minute, every
//! 10 min for the hour, every hour for the day) and reports a window as the difference
//! between its oldest sample and its newest. This does the same with the counters Tern
//! already keeps, sampling them all at once, so nothing is added to the request path:
//! the newest "sample" is the live counter, the oldest the snapshot taken a window ago.
//! A key missing from a snapshot had not been counted yet, so it stood at zero then.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tern_shell::sync::MutexExt;

use tern_shell::body::{BrokerStatsData, BrokerStatsItem};
use tern_shell::runtime::{self, now_ms};

use super::Metrics;
use crate::BrokerCtx;

/// How often the finest ring is sampled (RocketMQ's minute sampling period).
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);

/// Each ring: sample every `every` ticks, keep `keep` samples (the first and last of
/// them span the window). RocketMQ's: 7 × 10 s, 7 × 10 min, 25 × 1 h.
const RINGS: [(u64, usize); 3] = [(1, 7), (60, 7), (360, 25)];

/// Cumulative figures of one stats key: (value, events).
type Figures = (u64, u64);

/// Every counter at one moment: per topic (messages, bytes) stored, per topic and group
/// (messages, bytes, pull answers) handed out. One entry per topic and per pair, so
/// the rings hold about 40 copies of the label sets the metrics table already holds.
#[derive(Debug, Default)]
struct Snapshot {
    at_ms: i64,
    puts: HashMap<String, (u64, u64)>,
    gets: HashMap<(String, String), (u64, u64, u64)>,
}

/// The sampled history, one ring per window.
#[derive(Debug, Default)]
pub struct StatsWindows {
    state: Mutex<Rings>,
}

#[derive(Debug, Default)]
struct Rings {
    ticks: u64,
    rings: [VecDeque<Arc<Snapshot>>; 3],
}

/// The counters now, in a snapshot's shape: all of them, or (`only`) those of one
/// topic or one `topic@group`.
fn read_all(m: &Metrics, only: Option<&str>) -> Snapshot {
    let mut snap = Snapshot {
        at_ms: now_ms(),
        ..Snapshot::default()
    };
    for table in &m.messages_in {
        for (topic, c) in table.snapshot() {
            if only.is_some_and(|k| k != topic) {
                continue;
            }
            let e = snap.puts.entry(topic).or_default();
            e.0 += c.messages.load(Ordering::Relaxed);
            e.1 += c.bytes.load(Ordering::Relaxed);
        }
    }
    for (key, c) in m.messages_out.snapshot() {
        if only.is_some_and(|k| k.split_once('@') != Some((key.0.as_str(), key.1.as_str()))) {
            continue;
        }
        snap.gets.insert(
            key,
            (
                c.messages.load(Ordering::Relaxed),
                c.bytes.load(Ordering::Relaxed),
                c.responses.load(Ordering::Relaxed),
            ),
        );
    }
    snap
}

/// The figures of stats item `name`/`key` in `snap`, `None` when nothing was counted
/// under it. A batch counts each of its messages as one put event; a get event is one
/// pull answer. The broker-wide items are keyed by the cluster name, as RocketMQ keys
/// them.
fn figures(snap: &Snapshot, cluster: &str, name: &str, key: &str) -> Option<Figures> {
    let put = |(n, bytes): (u64, u64), size: bool| (if size { bytes } else { n }, n);
    let get =
        |(n, bytes, pulls): (u64, u64, u64), size: bool| (if size { bytes } else { n }, pulls);
    let sum = |it: &mut dyn Iterator<Item = Figures>| it.reduce(|a, b| (a.0 + b.0, a.1 + b.1));
    let found = match name {
        "TOPIC_PUT_NUMS" | "TOPIC_PUT_SIZE" => snap
            .puts
            .get(key)
            .map(|f| put(*f, name == "TOPIC_PUT_SIZE")),
        "GROUP_GET_NUMS" | "GROUP_GET_SIZE" => {
            let (topic, group) = key.split_once('@')?;
            snap.gets
                .get(&(topic.to_owned(), group.to_owned()))
                .map(|f| get(*f, name == "GROUP_GET_SIZE"))
        }
        "BROKER_PUT_NUMS" if key == cluster => sum(&mut snap.puts.values().map(|f| put(*f, false))),
        "BROKER_GET_NUMS" if key == cluster => sum(&mut snap.gets.values().map(|f| get(*f, false))),
        _ => None,
    };
    found.filter(|f| f.1 > 0)
}

/// One window: from `oldest` (zero when the item was not counted then) to `now`.
fn window(now: (i64, Figures), oldest: Option<(i64, Figures)>) -> BrokerStatsItem {
    let Some((at, (v0, n0))) = oldest else {
        return BrokerStatsItem::default();
    };
    let (t1, (v1, n1)) = now;
    let sum = v1.saturating_sub(v0);
    let events = n1.saturating_sub(n0);
    let span_ms = (t1 - at).max(1) as f64;
    BrokerStatsItem {
        sum: sum as i64,
        tps: sum as f64 * 1000.0 / span_ms,
        avgpt: if events == 0 {
            0.0
        } else {
            sum as f64 / events as f64
        },
    }
}

impl StatsWindows {
    /// Takes a sample of every counter into the rings that are due.
    pub fn sample(&self, m: &Metrics) {
        let snap = Arc::new(read_all(m, None));
        let mut st = self.state.guard();
        let tick = st.ticks;
        st.ticks += 1;
        for (ring, (every, keep)) in st.rings.iter_mut().zip(RINGS) {
            if tick % every == 0 {
                ring.push_back(snap.clone());
                while ring.len() > keep {
                    ring.pop_front();
                }
            }
        }
    }

    /// The minute, hour and day of `name`/`key`, or `None` when that item was never
    /// counted or is not one Tern keeps (RocketMQ answers both as not existing).
    pub fn view(
        &self,
        m: &Metrics,
        cluster: &str,
        name: &str,
        key: &str,
    ) -> Option<BrokerStatsData> {
        // The broker-wide items read everything; the others only their own key.
        let only = (!name.starts_with("BROKER_")).then_some(key);
        let live = read_all(m, only);
        let now = (live.at_ms, figures(&live, cluster, name, key)?);
        let st = self.state.guard();
        let oldest = |i: usize| {
            st.rings[i].front().map(|s| {
                let then = figures(s, cluster, name, key).unwrap_or_default();
                (s.at_ms, then)
            })
        };
        Some(BrokerStatsData {
            stats_minute: window(now, oldest(0)),
            stats_hour: window(now, oldest(1)),
            stats_day: window(now, oldest(2)),
        })
    }
}

/// The sampling task: a first sample at start (every counter at zero), then one every
/// [`SAMPLE_PERIOD`].
pub async fn run(ctx: Arc<BrokerCtx>) {
    while !ctx.shutdown.is_triggered() {
        ctx.metrics.windows.sample(&ctx.metrics);
        let _ = runtime::race(runtime::sleep(SAMPLE_PERIOD), ctx.shutdown.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MessageType;

    #[test]
    fn a_window_is_what_was_added_since_its_oldest_sample() {
        let m = Metrics::default();
        m.message_in("T", MessageType::Normal, 10);
        m.windows.sample(&m);
        for _ in 0..3 {
            m.message_in("T", MessageType::Normal, 100);
        }
        let d = m.windows.view(&m, "c", "TOPIC_PUT_NUMS", "T").unwrap();
        assert_eq!(d.stats_minute.sum, 3);
        assert_eq!(d.stats_day.sum, 3);
        let size = m.windows.view(&m, "c", "TOPIC_PUT_SIZE", "T").unwrap();
        assert_eq!(size.stats_hour.sum, 300);
        assert!((size.stats_hour.avgpt - 100.0).abs() < 1e-9);
        assert_eq!(
            m.windows
                .view(&m, "c", "BROKER_PUT_NUMS", "c")
                .unwrap()
                .stats_minute
                .sum,
            3
        );
    }

    #[test]
    fn a_key_first_counted_after_a_sample_counts_from_zero() {
        let m = Metrics::default();
        m.windows.sample(&m);
        m.messages_out("T", "G", 4, 400);
        let d = m.windows.view(&m, "c", "GROUP_GET_NUMS", "T@G").unwrap();
        assert_eq!(d.stats_minute.sum, 4);
        assert!(
            (d.stats_minute.avgpt - 4.0).abs() < 1e-9,
            "4 messages in 1 pull"
        );
    }

    #[test]
    fn an_item_never_counted_or_unknown_is_absent() {
        let m = Metrics::default();
        m.windows.sample(&m);
        assert!(m.windows.view(&m, "c", "TOPIC_PUT_NUMS", "T").is_none());
        m.message_in("T", MessageType::Normal, 1);
        assert!(m.windows.view(&m, "c", "SNDBCK_PUT_NUMS", "T").is_none());
    }

    #[test]
    fn rings_keep_their_bound() {
        let m = Metrics::default();
        for _ in 0..400 {
            m.windows.sample(&m);
        }
        let st = m.windows.state.lock().unwrap();
        assert_eq!(st.rings[0].len(), 7);
        assert_eq!(st.rings[1].len(), 7);
        assert_eq!(st.rings[2].len(), 2);
    }
}
