//! `tern-bench`: runs named scenarios, prints markdown tables, writes CSV and SVG plots
//! to `bench/results/` (or `--out`).
//!
//! ```text
//! tern-bench [--scenario all|engine|produce|e2e|backlog|stalls|edge|timer|tls|grpc]... [--quick]
//!            [--dir PATH]
//!            [--out PATH] [--producers 1,4,16] [--duration-ms N] [--backlog N]
//!            [--modes sync,async,oneway,batch] [--flush async,sync]
//!            [--stalls-backlog N] [--edge-bin PATH] [--edge-runner CMD]
//!            [--broker-conf KEY=VALUE]... [--no-peers]
//!            [--install-peers]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tern_bench::edge::{self, EdgeParams};
use tern_bench::engine::{self, EngineParams};
use tern_bench::load::Mode;
use tern_bench::stalls::{self, StallsParams};
use tern_bench::suite::{self, SuiteParams};
use tern_bench::timer::{self, TimerParams};
use tern_bench::{default_data_dir, goals, plot, report, results_dir, rocketmq_peer, table};

const USAGE: &str = "usage: tern-bench [--scenario NAME]... [--quick] [options]\n\
  --scenario NAME   all (default), engine, produce, e2e, backlog, stalls, edge, timer, tls,\n\
                    grpc;\n\
                    repeatable\n\
  --quick           small counts, every scenario in well under 3 minutes (CI smoke)\n\
  --dir PATH        folder for data written (default: target/tern-bench-data)\n\
  --out PATH        folder for CSV and SVG (default: bench/results)\n\
  --producers LIST  sender counts for ASYNC_FLUSH runs, e.g. 1,4,16,64\n\
  --duration-ms N   timed part of each load run\n\
  --backlog N       messages in the catch-up backlog (default 1000000)\n\
  --stalls-backlog N  messages pre-filled before each stalls run (default 300000)\n\
  --body N          message body bytes (default 1024)\n\
  --edge-bin PATH   the tern-edge the edge scenario runs (default: the native one, built)\n\
  --edge-runner CMD what runs it, e.g. \"qemu-aarch64 -L /usr/aarch64-linux-gnu\"\n\
  --modes LIST      produce send modes, of sync,async,oneway,batch (default all)\n\
  --flush LIST      produce flush policies, of async,sync (default both)\n\
  --broker-conf KEY=VALUE  a broker.conf line for Tern's broker in produce/e2e/backlog runs\n\
                    (e.g. duplicateCheckWindowSeconds=60); repeatable\n\
  --no-peers        measure Tern only\n\
  --install-peers   cargo install rocketmq-rust into ~/.cache/tern-bench/peers first";

#[derive(Debug, Default)]
struct Args {
    scenarios: Vec<String>,
    quick: bool,
    dir: Option<PathBuf>,
    out: Option<PathBuf>,
    producers: Option<Vec<u32>>,
    duration_ms: Option<u64>,
    backlog: Option<u64>,
    stalls_backlog: Option<u64>,
    body: Option<usize>,
    edge_bin: Option<PathBuf>,
    edge_runner: Option<String>,
    modes: Option<Vec<Mode>>,
    flush: Option<Vec<bool>>,
    broker_conf: Vec<String>,
    no_peers: bool,
    install_peers: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::default();
    let num = |v: Option<String>, f: &str| -> Result<u64, String> {
        v.ok_or(format!("{f} needs a value"))?
            .parse()
            .map_err(|e| format!("{f}: {e}"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--scenario" => a
                .scenarios
                .push(args.next().ok_or("--scenario needs a name")?),
            "--dir" => a.dir = Some(args.next().ok_or("--dir needs a path")?.into()),
            "--out" => a.out = Some(args.next().ok_or("--out needs a path")?.into()),
            "--producers" => {
                let list = args.next().ok_or("--producers needs a list")?;
                let v: Result<Vec<u32>, _> = list.split(',').map(str::parse).collect();
                a.producers = Some(v.map_err(|e| format!("--producers: {e}"))?);
            }
            "--duration-ms" => a.duration_ms = Some(num(args.next(), "--duration-ms")?),
            "--backlog" => a.backlog = Some(num(args.next(), "--backlog")?),
            "--stalls-backlog" => {
                a.stalls_backlog = Some(num(args.next(), "--stalls-backlog")?);
            }
            "--body" => a.body = Some(num(args.next(), "--body")? as usize),
            "--edge-bin" => a.edge_bin = Some(args.next().ok_or("--edge-bin needs a path")?.into()),
            "--edge-runner" => {
                a.edge_runner = Some(args.next().ok_or("--edge-runner needs a command")?);
            }
            "--modes" => {
                let list = args.next().ok_or("--modes needs a list")?;
                let v: Option<Vec<Mode>> = list.split(',').map(Mode::parse).collect();
                a.modes =
                    Some(v.ok_or(format!("--modes: {list:?}: want sync,async,oneway,batch"))?);
            }
            "--flush" => {
                let list = args.next().ok_or("--flush needs a list")?;
                let v: Option<Vec<bool>> = list
                    .split(',')
                    .map(|f| match f {
                        "async" => Some(false),
                        "sync" => Some(true),
                        _ => None,
                    })
                    .collect();
                a.flush = Some(v.ok_or(format!("--flush: {list:?}: want async,sync"))?);
            }
            "--broker-conf" => {
                let line = args.next().ok_or("--broker-conf needs KEY=VALUE")?;
                if !line.contains('=') {
                    return Err(format!("--broker-conf: {line:?} is not KEY=VALUE"));
                }
                a.broker_conf.push(line);
            }
            "--no-peers" => a.no_peers = true,
            "--install-peers" => a.install_peers = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.scenarios.is_empty() {
        a.scenarios.push("all".into());
    }
    for s in &a.scenarios {
        if ![
            "all", "engine", "produce", "e2e", "backlog", "stalls", "edge", "timer", "tls", "grpc",
        ]
        .contains(&s.as_str())
        {
            return Err(format!("unknown scenario {s:?}"));
        }
    }
    Ok(a)
}

fn wants(a: &Args, name: &str) -> bool {
    a.scenarios.iter().any(|s| s == name || s == "all")
}

fn suite_params(a: &Args, dir: PathBuf) -> SuiteParams {
    let mut p = if a.quick {
        SuiteParams::quick(dir)
    } else {
        SuiteParams::full(dir)
    };
    if let Some(v) = &a.producers {
        p.producers = v.clone();
    }
    if let Some(ms) = a.duration_ms {
        p.duration = Duration::from_millis(ms);
    }
    if let Some(n) = a.backlog {
        p.backlog = n;
    }
    if let Some(b) = a.body {
        p.body = b.max(8);
    }
    if let Some(m) = &a.modes {
        p.modes = m.clone();
    }
    if let Some(f) = &a.flush {
        p.flush = f.clone();
    }
    for line in &a.broker_conf {
        p.conf.push_str(line);
        p.conf.push('\n');
    }
    if a.no_peers {
        p.rocketmq = false;
        p.redis = false;
        p.nats = false;
    }
    p
}

fn stalls_params(a: &Args, dir: PathBuf, out: PathBuf) -> StallsParams {
    let mut p = if a.quick {
        StallsParams::quick(dir, out)
    } else {
        StallsParams::full(dir, out)
    };
    if let Some(ms) = a.duration_ms {
        p.duration = Duration::from_millis(ms);
    }
    if let Some(n) = a.stalls_backlog {
        p.backlog = n;
    }
    if let Some(b) = a.body {
        p.body = b.max(8);
    }
    p
}

fn edge_params(a: &Args, dir: PathBuf) -> EdgeParams {
    let mut p = if a.quick {
        EdgeParams::quick(dir)
    } else {
        EdgeParams::full(dir)
    };
    if let Some(ms) = a.duration_ms {
        p.duration = Duration::from_millis(ms);
    }
    if let Some(b) = a.body {
        p.body = b.max(8);
    }
    p.bin = a.edge_bin.clone();
    p.runner = a.edge_runner.clone();
    p
}

fn run(a: &Args) -> Result<(), String> {
    let started = Instant::now();
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(default_data_dir)
        .join(format!("run-{}", std::process::id()));
    let out = a.out.clone().unwrap_or_else(results_dir);
    if a.install_peers {
        rocketmq_peer::install()?;
    }
    if wants(a, "engine") {
        let params = if a.quick {
            EngineParams::quick(dir.join("engine"))
        } else {
            EngineParams::full(dir.join("engine"))
        };
        eprintln!(
            "engine: {} rounds, {} MiB per append run",
            params.rounds,
            params.append_bytes >> 20
        );
        let rows = engine::run(&params).map_err(|e| format!("engine: {e}"))?;
        println!("## engine\n\n{}", report::markdown(&rows));
        match report::write_csv(&out, "engine", &rows) {
            Ok(path) => eprintln!("wrote {}", path.display()),
            Err(e) => eprintln!("could not write CSV to {}: {e}", out.display()),
        }
    }
    let p = suite_params(a, dir.join("suite"));
    let mut rows = Vec::new();
    let result = (|| {
        if wants(a, "produce") || wants(a, "e2e") {
            suite::produce(&p, wants(a, "e2e"), &mut rows)?;
        }
        if wants(a, "backlog") {
            suite::backlog(&p, &mut rows)?;
        }
        if wants(a, "stalls") {
            stalls::run(
                &stalls_params(a, dir.join("stalls"), out.clone()),
                &mut rows,
            )?;
        }
        if wants(a, "edge") {
            edge::run(&edge_params(a, dir.join("edge")), &mut rows)?;
        }
        if wants(a, "timer") {
            let mut tp = if a.quick {
                TimerParams::quick(dir.join("timer"))
            } else {
                TimerParams::full(dir.join("timer"))
            };
            if let Some(b) = a.body {
                tp.body = b.max(8);
            }
            timer::run(&tp, &mut rows)?;
        }
        if wants(a, "tls") {
            tern_bench::tls::run(&p, &mut rows)?;
        }
        if wants(a, "grpc") {
            tern_bench::grpc::run(&p, &mut rows)?;
        }
        Ok::<(), String>(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    if !rows.is_empty() {
        println!("\n## brokers\n\n{}", table::markdown(&rows));
        println!("\n## goals\n\n{}", goals::markdown(&goals::evaluate(&rows)));
        match table::write_csv(&out, "brokers", &rows) {
            Ok(path) => eprintln!("wrote {}", path.display()),
            Err(e) => eprintln!("could not write CSV to {}: {e}", out.display()),
        }
        match plot::write_all(&out, &rows) {
            Ok(paths) => paths
                .iter()
                .for_each(|p| eprintln!("wrote {}", p.display())),
            Err(e) => eprintln!("could not plot: {e}"),
        }
    }
    eprintln!("finished in {:.1} s", started.elapsed().as_secs_f64());
    result
}

/// The broker's allocator (shell/broker/src/main.rs says why), so that Tern's client in
/// this process, and the peers' clients beside it, do not pay glibc's malloc either.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("{e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
