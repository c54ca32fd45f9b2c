//! The goals, checked against the rows of one run. Nothing fails on a miss: the
//! table says which goals a run met, for a human to read (CI runs `--quick` with no
//! thresholds).

use std::fmt::Write as _;

use crate::suite::{NATS, REDIS, RMQ, TERN};
use crate::table::{Latency, Measure};

/// rocketmq-rust's sync 1 KiB sends/s at 16 senders, measured on this machine earlier:
/// the reference when the peer is not measured in the same run.
pub const RMQ_SYNC_16_REFERENCE: f64 = 1_400.0;

/// One goal and what the run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    /// The goal in words.
    pub what: String,
    /// Target.
    pub target: String,
    /// Measured, with its baseline where it has one.
    pub measured: String,
    /// Met, missed, or not measured in this run.
    pub met: Option<bool>,
}

/// The raw sequential write() a run's batched send is held to: the median of the lower
/// half of the run's raw writes (the middle one included when their count is odd), `None`
/// when there are none.
///
/// Each raw write is measured right after a batched run, but some land on pages the
/// kernel just freed, 10× faster on a VM than memory not recently used (see
/// suite::raw_write_mb_s): runs have shown 2 of 4 raw writes at 4.9–6.1 GB/s beside
/// 311–331 MB/s, and 3 of 7 at 1.3–2.3 GB/s, so the median of them all was one of those
/// outliers and the goal meaningless. The effect only ever makes a write faster, and the
/// lower half's median is out of its reach while at most half the writes are outliers.
/// The minimum would be too, but then one write slowed by writeback would set the bar
/// alone; here it moves the baseline half as far with four writes, and from five on only
/// to a neighbouring honest write.
fn raw_baseline(raws: &mut [f64]) -> Option<f64> {
    raws.sort_by(f64::total_cmp);
    let lower = &raws[..raws.len().div_ceil(2)];
    let mid = lower.len() / 2;
    match lower.len() {
        0 => None,
        n if n % 2 == 1 => Some(lower[mid]),
        _ => Some((lower[mid - 1] + lower[mid]) / 2.0),
    }
}

fn find<'a>(
    rows: &'a [Measure],
    scenario: &str,
    system: &str,
    case: &str,
    p: u32,
) -> Option<&'a Measure> {
    rows.iter().find(|r| {
        r.scenario == scenario
            && r.system == system
            && r.case == case
            && (p == 0 || r.producers == p)
    })
}

fn value(rows: &[Measure], system: &str, case_prefix: &str, not: &str) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.scenario == "footprint"
                && r.system == system
                && r.case.starts_with(case_prefix)
                && (not.is_empty() || !r.case.contains(not))
        })
        .and_then(|r| r.value.as_ref().map(|v| v.0))
}

/// A throughput goal's measurement: the row's rate, met when at least `min` msgs/s.
fn at_least(r: &Measure, min: f64) -> (String, bool) {
    (format!("{:.0} msgs/s", r.msgs_per_s), r.msgs_per_s >= min)
}

/// A latency goal's measurement: the row's percentile `pick`, met when below `max_us`.
fn below_us(r: Option<&Measure>, pick: fn(&Latency) -> f64, max_us: f64) -> Option<(String, bool)> {
    let us = pick(&r?.latency?);
    Some((format!("{us:.0} µs"), us < max_us))
}

fn goal(what: &str, target: &str, measured: Option<(String, bool)>) -> Goal {
    let (measured, met) = match measured {
        Some((m, ok)) => (m, Some(ok)),
        None => ("not measured".into(), None),
    };
    Goal {
        what: what.into(),
        target: target.into(),
        measured,
        met,
    }
}

/// Every goal of the issue against `rows`.
pub fn evaluate(rows: &[Measure]) -> Vec<Goal> {
    let mut out = Vec::new();
    let sync16 = find(rows, "produce", TERN, "sync ASYNC_FLUSH", 16);
    out.push(goal(
        "sync send 1 KiB, 16 senders (ASYNC_FLUSH)",
        "≥ 30,000 msgs/s",
        sync16.map(|r| at_least(r, 30_000.0)),
    ));
    let peer = find(rows, "produce", RMQ, "sync ASYNC_FLUSH", 16);
    out.push(goal(
        "… against rocketmq-rust",
        "≥ 20×",
        sync16.map(|r| {
            let (base, src) = match peer {
                Some(p) => (
                    p.msgs_per_s,
                    format!("{:.0} msgs/s, same run", p.msgs_per_s),
                ),
                None => (
                    RMQ_SYNC_16_REFERENCE,
                    "1,400 msgs/s, earlier measurement".into(),
                ),
            };
            let x = r.msgs_per_s / base.max(1e-9);
            (format!("{x:.1}× ({src})"), x >= 20.0)
        }),
    ));
    out.push(goal(
        "… p99 latency",
        "< 2 ms",
        below_us(sync16, |l| l.p99_us, 2_000.0),
    ));
    out.push(goal(
        "sync send, one sender, p50",
        "< 150 µs",
        below_us(
            find(rows, "produce", TERN, "sync ASYNC_FLUSH", 1),
            |l| l.p50_us,
            150.0,
        ),
    ));
    // Batched send: the best load level, against the raw writes of the run (see
    // raw_baseline for why not their median).
    let best_batch = rows
        .iter()
        .filter(|r| r.scenario == "produce" && r.system == TERN && r.case == "batch32 ASYNC_FLUSH")
        .max_by(|a, b| a.mb_per_s.total_cmp(&b.mb_per_s));
    let mut raws: Vec<f64> = rows
        .iter()
        .filter(|r| r.scenario == "produce" && r.system == "raw write")
        .map(|r| r.mb_per_s)
        .collect();
    let raw_base = raw_baseline(&mut raws);
    out.push(goal(
        "batched send (32 × 1 KiB) vs raw sequential write()",
        // Issue 17's bar for fresh pages, which the raw writes kept apart from freed
        // ones (raw_baseline) stand for.
        "≥ 80%",
        best_batch.zip(raw_base).map(|(b, raw)| {
            let x = b.mb_per_s / raw.max(1e-9);
            (
                format!(
                    "{:.1}% ({:.0} MB/s at P={} of a lower-half median {:.0} MB/s over {} raw runs)",
                    x * 100.0,
                    b.mb_per_s,
                    b.producers,
                    raw,
                    raws.len()
                ),
                x >= 0.8,
            )
        }),
    ));
    out.push(goal(
        "SYNC_FLUSH (group commit), 64 senders",
        "≥ 20,000 msgs/s",
        find(rows, "produce", TERN, "sync SYNC_FLUSH", 64).map(|r| at_least(r, 20_000.0)),
    ));
    out.push(goal(
        "consume catch-up from offset 0",
        "≥ 300,000 msgs/s",
        find(rows, "catchup", TERN, "pull from 0 (32/pull, 4 queues)", 0)
            .map(|r| at_least(r, 300_000.0)),
    ));
    out.push(goal(
        "broker RSS idle",
        "< 16 MiB",
        value(rows, TERN, "RSS idle", "anon").map(|v| (format!("{v:.1} MiB"), v < 16.0)),
    ));
    out.push(goal(
        "start-up to listening, empty",
        "< 20 ms",
        value(rows, TERN, "start-up to listening, empty", "")
            .map(|v| (format!("{v:.1} ms"), v < 20.0)),
    ));
    out.push(goal(
        "start-up to listening, with 2 GB",
        "< 100 ms",
        rows.iter()
            .find(|r| {
                r.system == TERN
                    && r.case.starts_with("start-up to listening, ")
                    && !r.case.ends_with("empty")
            })
            .and_then(|r| {
                Some((
                    r.case
                        .trim_start_matches("start-up to listening, ")
                        .to_owned(),
                    r.value.as_ref()?.0,
                ))
            })
            .map(|(size, v)| (format!("{v:.1} ms ({size})"), v < 100.0)),
    ));
    against_peers(rows, &mut out);
    stalls(rows, &mut out);
    edge(rows, &mut out);
    out
}

/// The request-path goals (issue 17): Tern against Redis streams and NATS JetStream on
/// the matching rows of the same run, so a slow day moves both sides.
fn against_peers(rows: &[Measure], out: &mut Vec<Goal>) {
    let ratio = |scenario: &str, case: &str, peer: &str, peer_case: &str, p: u32| {
        let tern = find(rows, scenario, TERN, case, p)?;
        let them = find(rows, scenario, peer, peer_case, p)?;
        let x = tern.msgs_per_s / them.msgs_per_s.max(1e-9);
        // Rounded down, so a miss never reads "1.00×".
        let shown = (x * 100.0).floor() / 100.0;
        Some((
            format!(
                "{shown:.2}× ({:.0} vs {:.0} msgs/s)",
                tern.msgs_per_s, them.msgs_per_s
            ),
            x >= 1.0,
        ))
    };
    for p in [16, 64] {
        out.push(goal(
            &format!("sync send, {p} senders (ASYNC_FLUSH) vs Redis XADD (AOF everysec)"),
            "≥ 1.0×",
            ratio(
                "produce",
                "sync ASYNC_FLUSH",
                REDIS,
                "sync XADD ASYNC_FLUSH",
                p,
            ),
        ));
    }
    let p50 =
        |system: &str, case: &str| Some(find(rows, "produce", system, case, 1)?.latency?.p50_us);
    out.push(goal(
        "sync send, one sender, p50 vs Redis XADD",
        "≤ Redis's",
        p50(TERN, "sync ASYNC_FLUSH")
            .zip(p50(REDIS, "sync XADD ASYNC_FLUSH"))
            .map(|(t, r)| (format!("{t:.0} vs {r:.0} µs"), t <= r)),
    ));
    out.push(goal(
        "sync send, 64 senders, SYNC_FLUSH vs Redis (appendfsync always)",
        "≥ 1.0×",
        ratio(
            "produce",
            "sync SYNC_FLUSH",
            REDIS,
            "sync XADD SYNC_FLUSH",
            64,
        ),
    ));
    for p in [1, 16, 64] {
        let senders = if p == 1 {
            "1 sender".to_owned()
        } else {
            format!("{p} senders")
        };
        out.push(goal(
            &format!("sync send, {senders}, vs NATS JetStream sync publish"),
            "≥ 1.0×",
            ratio(
                "produce",
                "sync ASYNC_FLUSH",
                NATS,
                "sync publish ASYNC_FLUSH",
                p,
            ),
        ));
        out.push(goal(
            &format!("async send, {senders}, vs NATS JetStream async publish"),
            "≥ 1.0×",
            ratio(
                "produce",
                "async ASYNC_FLUSH",
                NATS,
                "async publish ASYNC_FLUSH",
                p,
            ),
        ));
    }
    let pull = find(rows, "catchup", TERN, "pull from 0 (32/pull, 4 queues)", 0);
    out.push(goal(
        "catch-up from offset 0 (issue 17)",
        "≥ 1,000,000 msgs/s",
        pull.map(|r| at_least(r, 1_000_000.0)),
    ));
    out.push(goal(
        "… vs NATS JetStream ordered consumer",
        "≥ 1.0×",
        ratio(
            "catchup",
            "pull from 0 (32/pull, 4 queues)",
            NATS,
            "ordered consumer from seq 1",
            0,
        ),
    ));
}

/// The gateway's memory goals, on the native run (under qemu-user the process is qemu's).
fn edge(rows: &[Measure], out: &mut Vec<Goal>) {
    use crate::edge::{RSS_PEAK, RSS_REST, VIA_EDGE};
    let mib = |case: &str| {
        rows.iter()
            .find(|r| r.scenario == "footprint" && r.system == VIA_EDGE && r.case == case)
            .and_then(|r| r.value.as_ref().map(|v| v.0))
    };
    out.push(goal(
        "tern-edge RSS at rest (native)",
        "< 8 MiB",
        mib(RSS_REST).map(|v| (format!("{v:.1} MiB"), v < 8.0)),
    ));
    out.push(goal(
        "tern-edge RSS peak while forwarding (native)",
        "< 16 MiB",
        mib(RSS_PEAK).map(|v| (format!("{v:.1} MiB"), v < 16.0)),
    ));
}

/// The stalls scenario's goals: the loaded run against the quiet one.
fn stalls(rows: &[Measure], out: &mut Vec<Goal>) {
    use crate::stalls::{
        CASE_LOADED, CASE_LOADED_PACED, CASE_QUIET, CASE_QUIET_PACED, CATCHUP_MSGS, MAX_LOADED,
        QUERIES, SQL_MSGS,
    };
    let quiet = find(rows, "stalls", TERN, CASE_QUIET, 0);
    let loaded = find(rows, "stalls", TERN, CASE_LOADED, 0);
    let stalls_value = |case: &str| {
        rows.iter()
            .find(|r| r.scenario == "stalls" && r.system == TERN && r.case == case)
    };
    let ratio = |q: Option<&Measure>, l: Option<&Measure>| {
        q.zip(l).map(|(q, l)| {
            let x = l.msgs_per_s / q.msgs_per_s.max(1e-9);
            (
                format!(
                    "{:.1}% ({:.0} of {:.0} msgs/s)",
                    x * 100.0,
                    l.msgs_per_s,
                    q.msgs_per_s
                ),
                x >= 0.9,
            )
        })
    };
    out.push(goal(
        "stalls: sync send throughput, loaded vs quiet",
        "≥ 90%",
        ratio(quiet, loaded),
    ));
    // The same at a rate the machine can carry with the background beside it: what is
    // lost here is waiting, not CPU share (see `stalls`).
    out.push(goal(
        "… the same with paced senders",
        "≥ 90%",
        ratio(
            find(rows, "stalls", TERN, CASE_QUIET_PACED, 0),
            find(rows, "stalls", TERN, CASE_LOADED_PACED, 0),
        ),
    ));
    out.push(goal(
        "… p99.9 send latency, loaded",
        "< 5 ms",
        below_us(loaded, |l| l.p999_us, 5_000.0),
    ));
    out.push(goal(
        "… max send latency, loaded",
        "< 25 ms",
        stalls_value(MAX_LOADED)
            .and_then(|r| r.value.as_ref())
            .map(|v| (format!("{:.0} µs", v.0), v.0 < 25_000.0)),
    ));
    // Not a goal of the issue: whether the loaded run measured what it claims.
    let bg: Option<Vec<&Measure>> = [QUERIES, SQL_MSGS, CATCHUP_MSGS]
        .iter()
        .map(|c| stalls_value(c))
        .collect();
    out.push(goal(
        "… background load ran, nothing failed",
        "all three > 0, 0 errors",
        bg.map(|bg| {
            let errors: u64 = bg.iter().map(|r| r.errors).sum::<u64>()
                + loaded.map_or(0, |l| l.errors)
                + quiet.map_or(0, |q| q.errors);
            let counts: Vec<String> = bg
                .iter()
                .map(|r| {
                    let (v, unit) = r.value.clone().unwrap_or_default();
                    format!("{v:.0} {unit}")
                })
                .collect();
            let ran = bg
                .iter()
                .all(|r| r.value.as_ref().is_some_and(|v| v.0 > 0.0));
            (
                format!("{}; {errors} errors", counts.join(", ")),
                ran && errors == 0,
            )
        }),
    ));
}

/// The goals as a markdown table.
pub fn markdown(goals: &[Goal]) -> String {
    let mut out = String::from("| goal | target | measured | met |\n|---|---|---|---|\n");
    for g in goals {
        let met = match g.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {met} |",
            g.what, g.target, g.measured
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, system: &str, case: &str, p: u32, msgs_per_s: u64) -> Measure {
        Measure::rate(scenario, system, case, p, 1024).with_rate(msgs_per_s, 1.0)
    }

    fn find_goal<'a>(goals: &'a [Goal], what: &str) -> &'a Goal {
        goals.iter().find(|g| g.what == what).expect(what)
    }

    #[test]
    fn peer_goals_are_ratios_of_matching_rows_of_the_run() {
        let mut one = row("produce", TERN, "sync ASYNC_FLUSH", 1, 9_000);
        one.latency = Some(Latency {
            p50_us: 99.0,
            ..Latency::default()
        });
        let mut redis_one = row("produce", REDIS, "sync XADD ASYNC_FLUSH", 1, 13_000);
        redis_one.latency = Some(Latency {
            p50_us: 70.0,
            ..Latency::default()
        });
        let rows = vec![
            one,
            redis_one,
            row("produce", TERN, "sync ASYNC_FLUSH", 16, 60_000),
            row("produce", REDIS, "sync XADD ASYNC_FLUSH", 16, 50_000),
            // Redis has no 64-sender row: its 4-sender one must not stand in for it.
            row("produce", TERN, "sync ASYNC_FLUSH", 64, 55_000),
            row("produce", REDIS, "sync XADD ASYNC_FLUSH", 4, 1),
            row("produce", NATS, "sync publish ASYNC_FLUSH", 16, 80_000),
            row(
                "catchup",
                TERN,
                "pull from 0 (32/pull, 4 queues)",
                0,
                900_000,
            ),
            row("catchup", NATS, "ordered consumer from seq 1", 0, 450_000),
        ];
        let goals = evaluate(&rows);
        let g = find_goal(
            &goals,
            "sync send, 16 senders (ASYNC_FLUSH) vs Redis XADD (AOF everysec)",
        );
        assert_eq!(g.met, Some(true));
        assert_eq!(g.measured, "1.20× (60000 vs 50000 msgs/s)");
        let g = find_goal(
            &goals,
            "sync send, 16 senders, vs NATS JetStream sync publish",
        );
        assert_eq!(g.met, Some(false));
        let g = find_goal(&goals, "sync send, one sender, p50 vs Redis XADD");
        assert_eq!((g.met, g.measured.as_str()), (Some(false), "99 vs 70 µs"));
        let g = find_goal(
            &goals,
            "sync send, 64 senders (ASYNC_FLUSH) vs Redis XADD (AOF everysec)",
        );
        assert_eq!(g.met, None, "no 64-sender Redis row in this run");
        assert_eq!(
            find_goal(&goals, "catch-up from offset 0 (issue 17)").met,
            Some(false)
        );
        let g = find_goal(&goals, "… vs NATS JetStream ordered consumer");
        assert_eq!(g.met, Some(true));
        assert!(g.measured.starts_with("2.00×"), "{}", g.measured);
    }

    #[test]
    fn the_raw_baseline_ignores_up_to_half_the_writes_landing_on_freed_pages() {
        assert_eq!(raw_baseline(&mut []), None);
        assert_eq!(raw_baseline(&mut [400.0]), Some(400.0));
        // docs/perf/brokers.csv: two of four on pages just freed; the median was 4936.
        assert_eq!(
            raw_baseline(&mut [4936.2, 6072.2, 311.0, 333.0]),
            Some(322.0)
        );
        // brokers-2026-11-29.csv: three of seven.
        let mut seven = [2251.0, 410.0, 427.0, 425.0, 442.0, 1665.0, 1341.0];
        assert_eq!(raw_baseline(&mut seven), Some(426.0));
        // One slow write among honest ones does not set the bar alone.
        assert_eq!(
            raw_baseline(&mut [100.0, 400.0, 410.0, 5000.0, 420.0]),
            Some(400.0)
        );
    }

    #[test]
    fn batched_send_is_held_to_the_raw_baseline_not_to_an_outlier() {
        let raw = |p: u32, mb_per_s: f64| Measure {
            mb_per_s,
            ..row("produce", "raw write", "sequential write()", p, 0)
        };
        let goal_at = |batch_mb_per_s: f64| {
            let mut batch = row("produce", TERN, "batch32 ASYNC_FLUSH", 16, 0);
            batch.mb_per_s = batch_mb_per_s;
            let rows = vec![
                batch,
                raw(1, 4936.2),
                raw(4, 6072.2),
                raw(16, 311.0),
                raw(64, 333.0),
            ];
            let goals = evaluate(&rows);
            let g = find_goal(
                &goals,
                "batched send (32 × 1 KiB) vs raw sequential write()",
            );
            (g.met, g.measured.clone())
        };
        assert_eq!(
            goal_at(200.0),
            (
                Some(false),
                "62.1% (200 MB/s at P=16 of a lower-half median 322 MB/s over 4 raw runs)".into()
            )
        );
        assert_eq!(goal_at(260.0).0, Some(true), "80.7% of 322 MB/s");
    }
}
