//! The `edge` scenario: what the gateway costs on the way to the central cluster.
//!
//! A central `tern-broker --standalone` and a `tern-edge` forwarding to it (the native
//! binary, or a cross-built one under qemu-user with [`EdgeParams::runner`]). Each case
//! runs twice, alternated A/B per round: *direct*, the producers send to the central
//! broker (the baseline), and *via edge*, the same producers (same settings, same load)
//! send to the gateway. Either way one long-polling consumer on the central broker times
//! every message from its send (the stamp in its body, made just before the send) to its
//! receipt there, which is after the central store and its dispatch.
//!
//! Cases: `async` with [`EdgeParams::producers`] senders (as fast as the gateway takes
//! them: its forwarding rate, and the delay a backlog adds), and `sync` with one sender
//! (a paced stream: the delay forwarding itself adds). Reported per case and path:
//! messages/s through to the central consumer (the timed part's messages over the time
//! until the last arrived), the local send rate, delay p50/p99; then the edge's figures as
//! ratios to direct. The gateway's RSS at rest and its peak while forwarding are values
//! (under qemu-user they are qemu's, which includes qemu itself).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_shell::runtime::block_on;

use crate::consume::{self, E2e};
use crate::load::{self, Load, Mode};
use crate::proc::{Server, start_edge, start_tern, tern_edge_bin};
use crate::table::{Latency, Measure};

/// Topic of the direct runs.
const DIRECT_TOPIC: &str = "EdgeBenchDirect";
/// Topic of the runs through the gateway.
const EDGE_TOPIC: &str = "EdgeBenchForwarded";
/// Name of the direct path in tables.
const DIRECT: &str = "direct";
/// Name of the gateway path in tables (a runner's name is added when there is one).
pub const VIA_EDGE: &str = "via tern-edge";
/// Row case of the gateway's RSS before any load (footprint scenario).
pub const RSS_REST: &str = "RSS at rest";
/// Row case of the gateway's peak RSS over the runs.
pub const RSS_PEAK: &str = "RSS peak (forwarding)";

/// What to measure.
#[derive(Clone, Debug)]
pub struct EdgeParams {
    /// Folder for the brokers' data (removed afterwards).
    pub dir: PathBuf,
    /// Senders of the `async` case.
    pub producers: u32,
    /// Body bytes.
    pub body: usize,
    /// Timed part of each run.
    pub duration: Duration,
    /// Untimed sends before it.
    pub warmup: Duration,
    /// A/B rounds.
    pub rounds: u32,
    /// Longest wait for what the gateway still holds once its producers stop.
    pub drain: Duration,
    /// The gateway binary (`--edge-bin`); the native one beside tern-bench when `None`.
    pub bin: Option<PathBuf>,
    /// What runs it (`--edge-runner`, e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`).
    pub runner: Option<String>,
}

impl EdgeParams {
    /// The full scenario: 5 s runs, 3 rounds.
    pub fn full(dir: PathBuf) -> Self {
        EdgeParams {
            dir,
            producers: 4,
            body: 1024,
            duration: Duration::from_secs(5),
            warmup: Duration::from_millis(500),
            rounds: 3,
            drain: Duration::from_secs(60),
            bin: None,
            runner: None,
        }
    }

    /// `--quick`: one round of 0.5 s runs (about 10 s in all, natively).
    pub fn quick(dir: PathBuf) -> Self {
        EdgeParams {
            duration: Duration::from_millis(500),
            warmup: Duration::from_millis(100),
            rounds: 1,
            drain: Duration::from_secs(10),
            ..Self::full(dir)
        }
    }
}

/// One case's figures on one path, summed over rounds.
#[derive(Debug, Default)]
struct Totals {
    received: u64,
    through_secs: f64,
    sent: u64,
    send_secs: f64,
    errors: u64,
    delivery: Option<hdrhistogram::Histogram<u64>>,
}

impl Totals {
    fn add(&mut self, r: &E2e) {
        self.received += r.received;
        self.through_secs += r.through_secs;
        self.sent += r.send.msgs;
        self.send_secs += r.send.secs;
        self.errors += r.send.errors;
        match &mut self.delivery {
            Some(h) => {
                let _ = h.add(&r.delivery);
            }
            None => self.delivery = Some(r.delivery.clone()),
        }
    }

    fn through_per_s(&self) -> f64 {
        self.received as f64 / self.through_secs.max(1e-9)
    }

    fn latency(&self) -> Option<Latency> {
        self.delivery.as_ref().and_then(Latency::of)
    }
}

/// Runs the scenario, prints its section and adds its rows.
pub fn run(p: &EdgeParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    fs::create_dir_all(&p.dir).map_err(|e| format!("{}: {e}", p.dir.display()))?;
    let bin = match &p.bin {
        Some(b) => b.clone(),
        None => tern_edge_bin()?,
    };
    let system = match &p.runner {
        Some(r) => format!("{VIA_EDGE} ({})", r.split_whitespace().next().unwrap_or(r)),
        None => VIA_EDGE.to_owned(),
    };
    eprintln!(
        "edge: {} ({}), {} round(s) of {} s",
        bin.display(),
        p.runner.as_deref().unwrap_or("native"),
        p.rounds,
        p.duration.as_secs_f64()
    );
    let central = start_tern(&p.dir.join("central"), "flushDiskType=ASYNC_FLUSH\n")?;
    let central_ns = central.namesrv.clone().ok_or("central: no name server")?;
    // The gateway's device defaults (16 MiB segments, SYNC_FLUSH): what a device runs.
    let edge = start_edge(
        &p.dir.join("edge"),
        "",
        &bin,
        p.runner.as_deref(),
        &central_ns,
    )?;
    let edge_ns = edge.namesrv.clone().ok_or("tern-edge: no name server")?;
    block_on(async {
        load::create_topic(&central_ns, DIRECT_TOPIC).await?;
        load::create_topic(&central_ns, EDGE_TOPIC).await?;
        load::create_topic(&edge_ns, EDGE_TOPIC).await
    })?;
    // At rest: started, topics made, nothing sent yet.
    std::thread::sleep(Duration::from_millis(500));
    let idle = edge.rss().unwrap_or_default();

    let cases = [(Mode::Async, p.producers), (Mode::Sync, 1)];
    for (mode, n) in cases {
        let case = format!("{} P={n}", mode.name());
        eprintln!("edge: {case}");
        let (mut direct, mut via) = (Totals::default(), Totals::default());
        for round in 0..p.rounds {
            let mut order = [false, true];
            if round % 2 == 1 {
                order.reverse();
            }
            for through_edge in order {
                let (namesrv, topic) = if through_edge {
                    (&edge_ns, EDGE_TOPIC)
                } else {
                    (&central_ns, DIRECT_TOPIC)
                };
                let load = Load {
                    namesrv: namesrv.clone(),
                    topic: topic.into(),
                    mode,
                    producers: n,
                    body: p.body,
                    duration: p.duration,
                    warmup: p.warmup,
                    tls: None,
                };
                let r = block_on(consume::e2e_across(&load, &central_ns, p.drain))
                    .map_err(|e| format!("edge {case} ({}): {e}", path(through_edge)))?;
                let t = if through_edge { &mut via } else { &mut direct };
                t.add(&r);
            }
        }
        for (name, t) in [(DIRECT, &direct), (system.as_str(), &via)] {
            let m = Measure {
                latency: t.latency(),
                errors: t.errors,
                ..Measure::rate(
                    "edge",
                    name,
                    &format!("{case} to central consumer"),
                    n,
                    p.body,
                )
                .with_rate(t.received, t.through_secs)
            };
            let local = t.sent as f64 / t.send_secs.max(1e-9);
            eprintln!(
                "  {name:<28} {:>8.0} msgs/s through, {local:>8.0} msgs/s sent, delay p50 {} p99 {}",
                m.msgs_per_s,
                ms(m.latency.map(|l| l.p50_us)),
                ms(m.latency.map(|l| l.p99_us)),
            );
            rows.push(m);
        }
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b * 100.0 } else { 0.0 };
        let (dl, vl) = (direct.latency(), via.latency());
        let rate = ratio(via.through_per_s(), direct.through_per_s());
        rows.push(Measure::value(
            "edge",
            &system,
            &format!("{case} msgs/s through vs direct"),
            rate,
            "%",
        ));
        if let (Some(d), Some(v)) = (dl, vl) {
            for (q, via, direct) in [("p50", v.p50_us, d.p50_us), ("p99", v.p99_us, d.p99_us)] {
                rows.push(Measure::value(
                    "edge",
                    &system,
                    &format!("{case} delay {q} vs direct"),
                    via / direct.max(1e-9),
                    "×",
                ));
            }
        }
        eprintln!("  via edge / direct: {rate:.0}% of the rate");
    }
    let peak = edge.rss().unwrap_or_default();
    let whose = if p.runner.is_some() {
        " (qemu-user process: qemu included)"
    } else {
        ""
    };
    eprintln!(
        "  tern-edge RSS at rest {:.1} MiB, peak {:.1} MiB{whose}",
        idle.total_mib(),
        peak.peak_kib as f64 / 1024.0
    );
    rows.push(Measure::value(
        "footprint",
        &system,
        &format!("{RSS_REST}{whose}"),
        idle.total_mib(),
        "MiB",
    ));
    rows.push(Measure::value(
        "footprint",
        &system,
        &format!("{RSS_PEAK}{whose}"),
        peak.peak_kib as f64 / 1024.0,
        "MiB",
    ));
    stop(edge, central, &p.dir);
    Ok(())
}

fn path(through_edge: bool) -> &'static str {
    if through_edge { VIA_EDGE } else { DIRECT }
}

fn ms(us: Option<f64>) -> String {
    us.map_or_else(|| "–".into(), |us| format!("{:.2} ms", us / 1e3))
}

/// Stops the gateway first (its forwarder saves progress), then the central broker.
fn stop(mut edge: Server, mut central: Server, dir: &Path) {
    edge.terminate(Duration::from_secs(10));
    central.terminate(Duration::from_secs(10));
    let _ = fs::remove_dir_all(dir);
}
