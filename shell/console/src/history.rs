//! Produce and consume TPS of the last 30 minutes, sampled by the console itself (no
//! external database): every `sample_every` it reads each broker's day counters
//! (`msgPutTotalTodayNow`, `msgGetTotalTodayNow` in GET_BROKER_RUNTIME_INFO, RocketMQ's
//! keys) and keeps the rate since the previous sample.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tern_client::Admin;
use tern_shell::runtime::{self, Shutdown, now_ms};
use tern_shell::sync::MutexExt;

/// How far back the charts go.
pub const WINDOW: Duration = Duration::from_secs(30 * 60);

/// One point of the charts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// When, ms since the epoch.
    pub time: i64,
    /// Messages stored per second over the cluster since the previous sample.
    pub put_tps: f64,
    /// Messages delivered to consumers per second.
    pub get_tps: f64,
}

/// The samples, oldest first, and each broker's last counters.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    last: BTreeMap<String, (i64, u64, u64)>,
}

impl History {
    /// The samples of the window, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.iter().copied().collect()
    }

    /// The newest per-broker rates: `addr → (put, get)` per second.
    pub fn record(&mut self, time: i64, counters: &BTreeMap<String, (u64, u64)>) {
        let (mut put, mut get, mut known) = (0.0, 0.0, false);
        for (addr, &(p, g)) in counters {
            if let Some(&(t0, p0, g0)) = self.last.get(addr) {
                let secs = (time - t0) as f64 / 1000.0;
                // A counter that went back is a new day (or a restarted broker): no rate.
                if secs > 0.0 && p >= p0 && g >= g0 {
                    put += (p - p0) as f64 / secs;
                    get += (g - g0) as f64 / secs;
                    known = true;
                }
            }
            self.last.insert(addr.clone(), (time, p, g));
        }
        self.last.retain(|a, _| counters.contains_key(a));
        if known {
            self.samples.push_back(Sample {
                time,
                put_tps: put,
                get_tps: get,
            });
        }
        let oldest = time - WINDOW.as_millis() as i64;
        while self.samples.front().is_some_and(|s| s.time < oldest) {
            self.samples.pop_front();
        }
    }
}

/// Samples until `shutdown`. A broker that does not answer is left out of that sample.
pub async fn run(admin: Admin, history: Arc<Mutex<History>>, every: Duration, shutdown: Shutdown) {
    let mut tick = runtime::Ticker::new(every);
    loop {
        let mut counters = BTreeMap::new();
        if let Ok(info) = admin.cluster_info().await {
            for b in info.broker_addr_table.values() {
                for addr in b.broker_addrs.0.values() {
                    if let Ok(t) = admin.broker_runtime_info(addr).await {
                        let n = |k: &str| t.get(k).and_then(|v| v.parse::<u64>().ok());
                        if let (Some(p), Some(g)) =
                            (n("msgPutTotalTodayNow"), n("msgGetTotalTodayNow"))
                        {
                            counters.insert(addr.clone(), (p, g));
                        }
                    }
                }
            }
        }
        history.guard().record(now_ms(), &counters);
        if runtime::race(
            async {
                tick.tick().await;
                false
            },
            async {
                shutdown.wait().await;
                true
            },
        )
        .await
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_counter_deltas_and_age_out() {
        let mut h = History::default();
        let at = |p, g| BTreeMap::from([("b:1".to_string(), (p, g))]);
        h.record(1_000, &at(100, 10));
        assert!(h.samples().is_empty(), "one reading is no rate");
        h.record(3_000, &at(300, 50));
        assert_eq!(h.samples()[0].put_tps, 100.0);
        assert_eq!(h.samples()[0].get_tps, 20.0);
        // A new day: counters restart, no negative rate.
        h.record(5_000, &at(5, 0));
        assert_eq!(h.samples().len(), 1);
        h.record(5_000 + WINDOW.as_millis() as i64, &at(6, 1));
        assert_eq!(h.samples().len(), 1, "the old sample left the window");
    }
}
