//! `tern-bench`: runs a named scenario, prints a markdown table, writes CSV to
//! `bench/results/`.
//!
//! ```text
//! tern-bench [--scenario engine] [--quick] [--dir PATH]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use tern_bench::engine::{self, EngineParams};
use tern_bench::{default_data_dir, report, results_dir};

const USAGE: &str = "usage: tern-bench [--scenario engine] [--quick] [--dir PATH]\n\
  --scenario NAME  scenario to run (engine)\n\
  --quick          small counts: finishes in seconds\n\
  --dir PATH       folder for data written (default: target/tern-bench-data)";

struct Args {
    scenario: String,
    quick: bool,
    dir: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        scenario: "engine".into(),
        quick: false,
        dir: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => parsed.quick = true,
            "--scenario" => parsed.scenario = args.next().ok_or("--scenario needs a name")?,
            "--dir" => parsed.dir = Some(args.next().ok_or("--dir needs a path")?.into()),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

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
    // A run folder of its own, so two runs never share files.
    let dir = args
        .dir
        .unwrap_or_else(default_data_dir)
        .join(format!("run-{}", std::process::id()));
    let rows = match args.scenario.as_str() {
        "engine" => {
            let params = if args.quick {
                EngineParams::quick(dir)
            } else {
                EngineParams::full(dir)
            };
            eprintln!(
                "engine: {} rounds, {} MiB per append run, {} MiB segments, data in {}",
                params.rounds,
                params.append_bytes >> 20,
                params.segment_bytes >> 20,
                params.dir.display()
            );
            engine::run(&params)
        }
        other => {
            eprintln!("unknown scenario {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("{}: {e}", args.scenario);
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report::markdown(&rows));
    match report::write_csv(&results_dir(), &args.scenario, &rows) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write CSV to {}: {e}", results_dir().display()),
    }
    ExitCode::SUCCESS
}
