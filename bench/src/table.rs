//! Rows of the broker scenarios (produce, e2e, catch-up, footprint): one system, one case,
//! one load; printed as markdown and written as CSV.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

/// Latency percentiles, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
}

/// Highest latency a histogram holds: 60 s in nanoseconds.
const MAX_NS: u64 = 60_000_000_000;

/// A histogram of nanoseconds, 3 significant figures, up to 60 s.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_NS, 3).unwrap_or_else(|_| unreachable!("valid bounds"))
}

/// Records `ns` (clamped to the histogram's range).
pub fn record(h: &mut Histogram<u64>, ns: u64) {
    let _ = h.record(ns.clamp(1, MAX_NS));
}

impl Latency {
    /// The percentiles of a histogram of nanoseconds; `None` when it is empty.
    pub fn of(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            p50_us: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
            p999_us: h.value_at_quantile(0.999) as f64 / 1e3,
        })
    }
}

/// One measured case.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measure {
    /// Scenario (`produce`, `e2e`, `catchup`, `footprint`, `baseline`).
    pub scenario: String,
    /// System measured (`tern`, `rocketmq-rust`, `redis`, `raw write`).
    pub system: String,
    /// What was measured (`sync ASYNC_FLUSH`, `RSS idle`).
    pub case: String,
    /// Concurrent senders (0 when not applicable).
    pub producers: u32,
    /// Message body bytes (0 when not applicable).
    pub body_bytes: usize,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// Body megabytes (10^6) per second.
    pub mb_per_s: f64,
    /// Latency percentiles, when measured.
    pub latency: Option<Latency>,
    /// A single value for cases that are not rates (RSS MiB, start-up ms), with its unit.
    pub value: Option<(f64, String)>,
    /// Errors (failed sends) during the run.
    pub errors: u64,
}

impl Measure {
    /// A row for a rate (and latency) measurement.
    pub fn rate(scenario: &str, system: &str, case: &str, producers: u32, body: usize) -> Self {
        Measure {
            scenario: scenario.into(),
            system: system.into(),
            case: case.into(),
            producers,
            body_bytes: body,
            ..Measure::default()
        }
    }

    /// A row holding one value with its unit.
    pub fn value(scenario: &str, system: &str, case: &str, value: f64, unit: &str) -> Self {
        Measure {
            value: Some((value, unit.into())),
            ..Measure::rate(scenario, system, case, 0, 0)
        }
    }

    /// Fills the rate from `msgs` messages in `secs` seconds.
    pub fn with_rate(mut self, msgs: u64, secs: f64) -> Self {
        let secs = secs.max(1e-9);
        self.msgs_per_s = msgs as f64 / secs;
        self.mb_per_s = msgs as f64 * self.body_bytes as f64 / secs / 1e6;
        self
    }
}

fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), num)
}

/// The rows as a markdown table.
pub fn markdown(rows: &[Measure]) -> String {
    let mut out = String::from(
        "| scenario | system | case | P | body B | msgs/s | MB/s | p50 µs | p99 µs | p99.9 µs | value |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let rate = r.value.is_none();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{}",
            r.scenario,
            r.system,
            r.case,
            if r.producers > 0 {
                r.producers.to_string()
            } else {
                "–".into()
            },
            if r.body_bytes > 0 {
                r.body_bytes.to_string()
            } else {
                "–".into()
            },
            opt(rate.then_some(r.msgs_per_s)),
            opt(rate.then_some(r.mb_per_s)),
            opt(r.latency.map(|l| l.p50_us)),
            opt(r.latency.map(|l| l.p99_us)),
            opt(r.latency.map(|l| l.p999_us)),
            r.value
                .as_ref()
                .map_or_else(|| "–".into(), |(v, u)| format!("{} {u}", num(*v))),
            if r.errors > 0 {
                format!(" {} errors", r.errors)
            } else {
                String::new()
            },
        );
    }
    out
}

/// The rows as CSV, with a header line.
pub fn csv(rows: &[Measure]) -> String {
    let mut out = String::from(
        "scenario,system,case,producers,body_bytes,msgs_per_s,mb_per_s,p50_us,p99_us,p999_us,value,unit,errors\n",
    );
    let f = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:.3}"));
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{:.1},{:.3},{},{},{},{},{},{}",
            r.scenario,
            r.system,
            r.case,
            r.producers,
            r.body_bytes,
            r.msgs_per_s,
            r.mb_per_s,
            f(r.latency.map(|l| l.p50_us)),
            f(r.latency.map(|l| l.p99_us)),
            f(r.latency.map(|l| l.p999_us)),
            f(r.value.as_ref().map(|v| v.0)),
            r.value.as_ref().map_or("", |v| v.1.as_str()),
            r.errors
        );
    }
    out
}

/// Writes the rows to `<dir>/<name>-<unix seconds>.csv` and returns the path.
pub fn write_csv(dir: &Path, name: &str, rows: &[Measure]) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}-{}.csv", unix_secs()));
    fs::write(&path, csv(rows))?;
    Ok(path)
}

/// Seconds since the epoch, for file names.
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_out_in_microseconds() {
        let mut h = histogram();
        for ns in 1..=1000u64 {
            record(&mut h, ns * 1000);
        }
        let l = Latency::of(&h).unwrap();
        assert!((l.p50_us - 500.0).abs() < 2.0, "{l:?}");
        assert!((l.p99_us - 990.0).abs() < 2.0, "{l:?}");
        assert!(Latency::of(&histogram()).is_none());
    }

    #[test]
    fn a_row_prints_dashes_for_what_was_not_measured() {
        let rows = [Measure::value("footprint", "tern", "RSS idle", 9.5, "MiB")];
        let t = markdown(&rows);
        assert!(
            t.contains("| footprint | tern | RSS idle | – | – | – | – | – | – | – | 9.50 MiB |")
        );
        assert_eq!(csv(&rows).lines().count(), 2);
    }
}
