//! The scenario's section of the report: the runs side by side, the background work,
//! where sends stalled and what failed, and the timeline CSV.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::background::{Counters, QUERY_TASKS, SQL_CONSUMERS, SQL_EXPR};
use super::send::{self, BUCKET, SLOW};
use super::{ROLL_SPAN, Run, StallsParams, events, us};
use crate::table::unix_secs;

/// The section printed for the scenario.
pub(super) fn markdown(p: &StallsParams, runs: &[&Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} sync senders, {} B bodies (a unique KEYS and property `a` on each), ASYNC_FLUSH, \
         {} MiB commit-log segments, enablePropertyFilter=true; {:.0} s timed after {:.1} s of \
         warm-up. Each run is on a fresh broker holding a {}-message backlog, restarted and then \
         dropped from the page cache. Both runs roll segments and take the broker's 1 s \
         checkpoint; the loaded run adds {QUERY_TASKS} QUERY_MESSAGE-by-key tasks, \
         {SQL_CONSUMERS} SQL92 consumers (`{SQL_EXPR}`) and a catch-up consumer from offset 0. \
         A paced run's senders offer a fixed rate in all (a sender behind its schedule sends \
         at once; latency is timed from the send).\n",
        p.senders,
        p.body,
        p.segment_bytes >> 20,
        p.duration.as_secs_f64(),
        p.warmup.as_secs_f64(),
        p.backlog,
    );
    s.push_str(
        "| run | offered msgs/s | msgs/s | p50 µs | p99 µs | p99.9 µs | max µs | sends > 5 ms | send errors | broker CPU | harness CPU | other processes |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cores = |c: Option<f64>| c.map_or("?".into(), |c| format!("{c:.2} cores"));
    for r in runs {
        let l = r.sent.latency();
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
            r.name,
            r.paced.map_or("all it can".into(), |x| format!("{x:.0}")),
            r.sent.msgs_per_s(),
            l.p50_us,
            l.p99_us,
            l.p999_us,
            us(r.sent.hist.max()),
            r.sent.slow.len(),
            r.sent.errors,
            cores(r.broker_cores),
            cores(r.harness_cores),
            cores(r.other_cores),
        );
    }
    for r in runs {
        if let Some(c) = &r.background {
            background_table(&mut s, r.name, c, p.duration);
        }
    }
    let _ = writeln!(s, "\nPage cache before each run:\n");
    for r in runs {
        let _ = writeln!(s, "- {}: {}", r.name, r.cache.describe());
    }
    let _ = writeln!(s, "\nWhere sends stalled:\n");
    for r in runs {
        where_stalled(&mut s, p, r);
    }
    let _ = writeln!(s, "\nFailures:\n");
    for r in runs {
        failures(&mut s, r);
    }
    s
}

fn background_table(s: &mut String, run: &str, c: &Counters, duration: Duration) {
    let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let per_s = |x: u64| x as f64 / duration.as_secs_f64();
    let _ = write!(
        s,
        "\n| background ({run}) | count | per s | errors | detail |\n|---|---:|---:|---:|---|\n",
    );
    let q = c.queries();
    let _ = writeln!(
        s,
        "| QUERY_MESSAGE by key ({QUERY_TASKS} tasks) | {q} | {:.0} | {} | backlog keys: {} found, {} not found; live keys: {} found, {} not found yet |",
        per_s(q),
        n(&c.query_errors) + n(&c.cold_missed),
        n(&c.cold_found),
        n(&c.cold_missed),
        n(&c.live_found),
        n(&c.live_missed),
    );
    let sql = n(&c.sql_msgs);
    let _ = writeln!(
        s,
        "| SQL92-filtered messages (`{SQL_EXPR}`, {SQL_CONSUMERS} consumers) | {sql} | {:.0} | {} | {} delivered that do not match |",
        per_s(sql),
        n(&c.sql_errors) + n(&c.sql_mismatched),
        n(&c.sql_mismatched),
    );
    let cu = n(&c.catchup_msgs);
    let cold = n(&c.cold_msgs);
    let done = n(&c.cold_done_ns);
    let pass = if done > 0 {
        let secs = done as f64 / 1e9;
        format!(
            "cold pass over the backlog: {cold} msgs in {secs:.2} s ({:.0} msgs/s), then following the live end",
            cold as f64 / secs
        )
    } else {
        format!("cold pass over the backlog not finished: {cold} msgs read")
    };
    let _ = writeln!(
        s,
        "| catch-up messages from offset 0 | {cu} | {:.0} | {} | {pass} |",
        per_s(cu),
        n(&c.catchup_errors),
    );
}

/// The slow sends by cause (a segment roll, a checkpoint, other), the cold pass against
/// the rest, and the worst windows.
fn where_stalled(s: &mut String, p: &StallsParams, r: &Run) {
    let slow = &r.sent.slow;
    let at_roll = |x: &send::Slow| {
        x.log_offset
            .is_some_and(|o| o % p.segment_bytes < ROLL_SPAN)
    };
    let at_ckpt = |x: &send::Slow| events::overlaps(&r.checkpoints, x.at, x.latency);
    let rolls = slow.iter().filter(|x| at_roll(x)).count();
    let ckpts = slow.iter().filter(|x| !at_roll(x) && at_ckpt(x)).count();
    let _ = write!(
        s,
        "- {}: {} sends > {} ms over {} segment rolls and {} checkpoints: {rolls} stored in the \
         first {} KiB of a segment (just after a roll; {:.1}% of the log), {ckpts} more in flight \
         when the checkpoint file was written, {} other",
        r.name,
        slow.len(),
        SLOW.as_millis(),
        r.rolls,
        r.checkpoints.len(),
        ROLL_SPAN >> 10,
        ROLL_SPAN as f64 * 100.0 / p.segment_bytes as f64,
        slow.len() - rolls - ckpts,
    );
    let tl = &r.sent.timeline;
    let empty = tl
        .iter()
        .take(tl.len().saturating_sub(1))
        .filter(|b| b.sends == 0)
        .count();
    if empty > 0 {
        let _ = write!(s, "; {empty} windows of 100 ms without a completed send");
    }
    let cold_ns = r
        .background
        .as_ref()
        .map_or(0, |c| c.cold_done_ns.load(Ordering::Relaxed));
    if cold_ns > 0 {
        let edge = (cold_ns as u128).div_ceil(BUCKET.as_nanos()) as usize;
        let part = |b: &[send::Bucket]| {
            let max = b.iter().map(|b| b.max_ns).max().unwrap_or(0);
            let n: u32 = b.iter().map(|b| b.slow).sum();
            format!(
                "{n} sends > {} ms, max {:.1} ms",
                SLOW.as_millis(),
                max as f64 / 1e6
            )
        };
        let (during, after) = tl.split_at(edge.min(tl.len()));
        let _ = write!(
            s,
            "; during the cold catch-up pass (first {:.2} s): {}; after it: {}",
            cold_ns as f64 / 1e9,
            part(during),
            part(after)
        );
    }
    let mut worst: Vec<(usize, &send::Bucket)> = tl.iter().enumerate().collect();
    worst.sort_by_key(|(_, b)| std::cmp::Reverse(b.max_ns));
    let mut top: Vec<_> = worst
        .into_iter()
        .take(5)
        .filter(|(_, b)| b.max_ns > 0)
        .collect();
    top.sort_by_key(|(i, _)| *i);
    let list: Vec<String> = top
        .iter()
        .map(|(i, b)| {
            let from = BUCKET * *i as u32;
            let to = from + BUCKET;
            let inside: Vec<&send::Slow> =
                slow.iter().filter(|x| x.at >= from && x.at < to).collect();
            let mut why = Vec::new();
            if inside.iter().any(|x| at_roll(x)) {
                why.push("roll");
            }
            if inside.iter().any(|x| at_ckpt(x)) {
                why.push("checkpoint");
            }
            format!(
                "{:.1} s: {:.1} ms, {} slow of {}{}",
                from.as_secs_f64(),
                b.max_ns as f64 / 1e6,
                b.slow,
                b.sends,
                if why.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", why.join(", "))
                }
            )
        })
        .collect();
    let _ = writeln!(s, ". Worst 100 ms windows: {}.", list.join("; "));
}

fn failures(s: &mut String, r: &Run) {
    let mut parts = Vec::new();
    if r.sent.errors > 0 {
        parts.push(format!(
            "**{} failed sends** ({})",
            r.sent.errors,
            r.sent.first_errors.join("; ")
        ));
    }
    if let Some(c) = &r.background {
        let e = c.errors();
        if e > 0 {
            parts.push(format!(
                "**{e} failed background operations** ({})",
                c.first_errors().join("; ")
            ));
        }
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (what, count) in [
            ("QUERY_MESSAGE", c.queries()),
            ("SQL92 consumer", n(&c.sql_msgs)),
            ("catch-up consumer", n(&c.catchup_msgs)),
        ] {
            if count == 0 {
                parts.push(format!("**the {what} did nothing**"));
            }
        }
    }
    if r.cache.worked() != Some(true) {
        parts.push("the backlog was not dropped from the page cache".into());
    }
    if !r.broker_log.is_empty() {
        parts.push(format!(
            "the broker logged {} warnings or errors (first: {})",
            r.broker_log.len(),
            r.broker_log[0]
        ));
    }
    let text = if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join("; ")
    };
    let _ = writeln!(s, "- {}: {text}", r.name);
}

/// Writes the runs' timelines to `<dir>/stalls-timeline-<unix seconds>.csv`.
pub(super) fn write_timeline(dir: &Path, runs: &[&Run]) -> std::io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let mut csv = String::from("run,t_ms,sends,mean_us,max_us,slow_sends,checkpoints\n");
    for r in runs {
        for (i, b) in r.sent.timeline.iter().enumerate() {
            let from = BUCKET * i as u32;
            let ckpts = r
                .checkpoints
                .iter()
                .filter(|c| **c >= from && **c < from + BUCKET)
                .count();
            let mean = if b.sends > 0 {
                b.sum_ns as f64 / f64::from(b.sends) / 1e3
            } else {
                0.0
            };
            let _ = writeln!(
                csv,
                "{},{},{},{mean:.1},{:.1},{},{ckpts}",
                r.name,
                from.as_millis(),
                b.sends,
                us(b.max_ns),
                b.slow
            );
        }
    }
    let path = dir.join(format!("stalls-timeline-{}.csv", unix_secs()));
    fs::write(&path, csv)?;
    Ok(path)
}
