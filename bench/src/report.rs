//! Results: one row per case, printed as a markdown table and written as CSV.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A rate measured over one timed run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Messages (records) per second.
    pub msgs_per_s: f64,
    /// Record bytes per second, in MB (10^6 bytes).
    pub mb_per_s: f64,
}

impl Rate {
    /// The rate of `msgs` records of `record_bytes` each in `secs` seconds.
    pub fn of(msgs: u64, record_bytes: usize, secs: f64) -> Rate {
        let secs = secs.max(1e-9);
        Rate {
            msgs_per_s: msgs as f64 / secs,
            mb_per_s: msgs as f64 * record_bytes as f64 / secs / 1e6,
        }
    }
}

/// One case against its baseline: medians over the rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was measured (`append`, `flush G=8`).
    pub case: String,
    /// Message body bytes.
    pub body_bytes: usize,
    /// Bytes of the stored record (the unit both sides write).
    pub record_bytes: usize,
    /// The engine (or system under test).
    pub engine: Rate,
    /// The baseline doing the same job with plain system calls.
    pub raw: Rate,
    /// Median over the rounds of the per-round ratio engine/raw (msgs/s): pairs measured
    /// back to back, so drift during the run cancels out.
    pub ratio: f64,
    /// Lowest and highest per-round ratio: how much the machine moved during the run.
    pub ratio_range: (f64, f64),
    /// Rounds measured.
    pub rounds: u32,
}

/// The rows as a markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| case | body B | record B | engine msgs/s | engine MB/s | raw msgs/s | raw MB/s | engine/raw | range |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.2} | {:.2}–{:.2} |",
            r.case,
            r.body_bytes,
            r.record_bytes,
            r.engine.msgs_per_s,
            r.engine.mb_per_s,
            r.raw.msgs_per_s,
            r.raw.mb_per_s,
            r.ratio,
            r.ratio_range.0,
            r.ratio_range.1
        );
    }
    out
}

/// The rows as CSV, with a header line.
pub fn csv(scenario: &str, rows: &[Row]) -> String {
    let mut out = String::from(
        "scenario,case,body_bytes,record_bytes,engine_msgs_per_s,engine_mb_per_s,\
         raw_msgs_per_s,raw_mb_per_s,ratio,ratio_min,ratio_max,rounds\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{scenario},{},{},{},{:.1},{:.3},{:.1},{:.3},{:.4},{:.4},{:.4},{}",
            r.case,
            r.body_bytes,
            r.record_bytes,
            r.engine.msgs_per_s,
            r.engine.mb_per_s,
            r.raw.msgs_per_s,
            r.raw.mb_per_s,
            r.ratio,
            r.ratio_range.0,
            r.ratio_range.1,
            r.rounds
        );
    }
    out
}

/// Writes the rows to `<dir>/<scenario>-<unix seconds>.csv` and returns the path.
pub fn write_csv(dir: &Path, scenario: &str, rows: &[Row]) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = dir.join(format!("{scenario}-{stamp}.csv"));
    fs::write(&path, csv(scenario, rows))?;
    Ok(path)
}

/// The median of `values` (the upper one of the middle two); 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_and_ignores_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[f64::NAN, 5.0]), 5.0);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn rate_counts_record_bytes_in_megabytes() {
        let r = Rate::of(1_000, 1_000, 2.0);
        assert_eq!(r.msgs_per_s, 500.0);
        assert_eq!(r.mb_per_s, 0.5);
    }
}
