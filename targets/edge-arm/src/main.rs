//! `tern-edge`: the edge gateway binary (see the crate docs and docs/tern-edge.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tern_edge::{EdgeConfig, Gateway};
use tern_shell::cli::{self, Flags, split_host_port};
use tern_shell::config::{self, Origin};
use tern_shell::runtime::{self, Runtime};
use tern_shell::signal::TerminationSignals;

const USAGE: &str = "\
usage: tern-edge --upstream ADDRS [-c FILE] [--data-dir DIR] [--listen HOST:PORT]
                 [--namesrv-listen HOST:PORT] [--budget BYTES] [-p] [--log-level LEVEL]
       tern-edge dead-letters list|resend OFFSET|resend --all|drop OFFSET|drop --all
                 [--upstream ADDRS] [-c FILE] [--data-dir DIR]

  dead-letters              the records the gateway could not forward (see
                            docs/tern-edge.md): list them (offset, topic, size,
                            reason), resend one or all to the central cluster (each
                            removed once the cluster took it), or drop them

  -u, --upstream ADDRS      the central cluster's name servers, \"host:port;host:port\"
                            (edgeUpstreamNamesrv)
  -c, --config FILE         broker.conf keys for the local broker plus edge* keys
      --data-dir DIR        store under DIR/store (default ./edge-data)
      --listen ADDR         the local broker's address (default 0.0.0.0:10911)
      --namesrv-listen ADDR the local name server producers use (default 0.0.0.0:9876)
      --budget BYTES        unforwarded bytes past which local sends are refused
                            (edgeBacklogBudget, default 268435456)
  -p, --print-config        print the effective configuration (sorted key=value) and exit
      --log-level LEVEL     error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help                this text
";

#[derive(Debug, Default)]
struct Args {
    /// `dead-letters ACTION [OFFSET|--all]`.
    dead_letters: Option<(tern_edge::cli::Action, tern_edge::cli::Which)>,
    config_file: Option<PathBuf>,
    upstream: Option<String>,
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    namesrv_listen: Option<String>,
    budget: Option<String>,
    print_config: bool,
    log_level: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut it = it.peekable();
    if it.peek().is_some_and(|s| s == "dead-letters") {
        it.next();
        let action = it
            .next()
            .ok_or("dead-letters needs an action: list, resend or drop")?;
        let which = it
            .next_if(|s| s == "--all" || !s.starts_with('-'))
            .filter(|_| action != "list");
        a.dead_letters = Some(tern_edge::cli::parse(&action, which.as_deref())?);
    }
    let mut f = Flags::new(it);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "-c" | "--config" => a.config_file = Some(PathBuf::from(f.value(&flag)?)),
            "-u" | "--upstream" => a.upstream = Some(f.value(&flag)?),
            "--data-dir" => a.data_dir = Some(PathBuf::from(f.value(&flag)?)),
            "--listen" => a.listen = Some(f.value(&flag)?),
            "--namesrv-listen" => a.namesrv_listen = Some(f.value(&flag)?),
            "--budget" => a.budget = Some(f.value(&flag)?),
            "-p" | "--print-config" => a.print_config = true,
            "--log-level" => a.log_level = Some(f.value(&flag)?),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(a))
}

fn load(a: &Args) -> Result<config::Loaded<EdgeConfig>, String> {
    let data = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("edge-data"));
    let mut src =
        tern_edge::config::source(a.config_file.as_deref(), &data).map_err(|e| e.to_string())?;
    if let Some(u) = &a.upstream {
        src.set(
            "edgeUpstreamNamesrv",
            u.clone(),
            Origin::Flag("--upstream".into()),
        );
    }
    if let Some(b) = &a.budget {
        src.set(
            "edgeBacklogBudget",
            b.clone(),
            Origin::Flag("--budget".into()),
        );
    }
    if let Some(listen) = &a.listen {
        let (host, port) = split_host_port("--listen", listen)?;
        let origin = Origin::Flag("--listen".into());
        src.set("listenAddr", host, origin.clone());
        src.set("listenPort", port, origin);
    }
    config::load::<EdgeConfig>(&src).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit("tern-edge", USAGE, parsed, |a| a.log_level.as_deref()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let loaded = match load(&args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tern-edge: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.print_config {
        print!("{}", loaded.render());
        return ExitCode::SUCCESS;
    }
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    // The gateway runs on smol (design.md): a thread or two for a small device, where
    // async-std would start one per core. Chosen before anything spawns; the
    // dead-letter commands' client runs on it too.
    let threads = loaded.config.executor_threads;
    if let Err(e) = runtime::install(Runtime::Smol { threads }) {
        eprintln!("tern-edge: {e}");
        return ExitCode::FAILURE;
    }
    if let Some((action, which)) = args.dead_letters {
        return match runtime::block_on(tern_edge::cli::run(&loaded.config, action, which)) {
            Ok(out) => {
                print!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tern-edge: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match runtime::block_on(run(args, loaded.config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tern-edge: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args, cfg: EdgeConfig) -> Result<(), String> {
    let mut signals =
        TerminationSignals::install().map_err(|e| format!("installing signal handlers: {e}"))?;
    let listen = args
        .namesrv_listen
        .clone()
        .unwrap_or_else(|| "0.0.0.0:9876".into());
    let (host, port) = split_host_port("--namesrv-listen", &listen)?;
    let ns: SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("--namesrv-listen {listen}: {e}"))?;
    let gw = Gateway::start(cfg, ns).await?;
    tern_shell::cli::announce(format_args!(
        "tern-edge {} on {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    ));
    tern_shell::cli::announce(format_args!(
        "tern-edge name server on {}",
        gw.namesrv_addr()
    ));
    tern_shell::cli::announce(format_args!("tern-edge broker on {}", gw.broker_addr()));
    if let Some(m) = gw.metrics_addr() {
        tern_shell::cli::announce(format_args!("tern-edge metrics on http://{m}/metrics"));
    }
    tern_shell::cli::announce("ready");
    let sig = signals.wait().await;
    log::info!("{sig:?}: shutting down");
    let stats = gw.shutdown().await?;
    log::info!(
        "stopped: {} message(s) forwarded, {} failed attempt(s), {} dead letter(s)",
        stats.forwarded,
        stats.failures,
        stats.dead_letters
    );
    Ok(())
}
