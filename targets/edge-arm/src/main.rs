//! `tern-edge`: the edge gateway binary (see the crate docs and docs/tern-edge.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tern_edge::{EdgeConfig, Gateway};
use tern_shell::cli::{self, Args, split_host_port};
use tern_shell::config::{ConfigSource, Origin};
use tern_shell::runtime::{self, Runtime};
use tern_shell::signal::TerminationSignals;

const NAME: &str = "tern-edge";

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

/// The gateway's own flags.
#[derive(Debug, Default)]
struct Own {
    /// `dead-letters ACTION [OFFSET|--all]`.
    dead_letters: Option<(tern_edge::cli::Action, tern_edge::cli::Which)>,
    upstream: Option<String>,
    data_dir: Option<PathBuf>,
    listen: Option<String>,
    namesrv_listen: Option<String>,
    budget: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args<Own>>, String> {
    let mut it = it.peekable();
    let mut dead_letters = None;
    if it.peek().is_some_and(|s| s == "dead-letters") {
        it.next();
        let action = it
            .next()
            .ok_or("dead-letters needs an action: list, resend or drop")?;
        let which = it
            .next_if(|s| s == "--all" || !s.starts_with('-'))
            .filter(|_| action != "list");
        dead_letters = Some(tern_edge::cli::parse(&action, which.as_deref())?);
    }
    let parsed = cli::parse(it, cli::CONFIG_FLAG, |a: &mut Own, flag, f| {
        match flag {
            "-u" | "--upstream" => a.upstream = Some(f.value(flag)?),
            "--data-dir" => a.data_dir = Some(PathBuf::from(f.value(flag)?)),
            "--listen" => a.listen = Some(f.value(flag)?),
            "--namesrv-listen" => a.namesrv_listen = Some(f.value(flag)?),
            "--budget" => a.budget = Some(f.value(flag)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(parsed.map(|mut a| {
        a.own.dead_letters = dead_letters;
        a
    }))
}

fn source(a: &Args<Own>) -> Result<ConfigSource, String> {
    let data = a
        .own
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("edge-data"));
    let mut src = tern_edge::config::source(a.common.config_file.as_deref(), &data)
        .map_err(|e| e.to_string())?;
    if let Some(u) = &a.own.upstream {
        src.set(
            "edgeUpstreamNamesrv",
            u.clone(),
            Origin::Flag("--upstream".into()),
        );
    }
    if let Some(b) = &a.own.budget {
        src.set(
            "edgeBacklogBudget",
            b.clone(),
            Origin::Flag("--budget".into()),
        );
    }
    if let Some(listen) = &a.own.listen {
        cli::set_host_port(&mut src, "--listen", listen, ["listenAddr", "listenPort"])?;
    }
    Ok(src)
}

fn main() -> ExitCode {
    cli::exit(start())
}

fn start() -> Result<(), ExitCode> {
    let parsed = parse_args(std::env::args().skip(1));
    let args = cli::args_or_exit(NAME, USAGE, parsed)?;
    let config =
        cli::config_or_exit::<EdgeConfig>(NAME, source(&args), args.common.print_config)?.config;
    // The gateway runs on smol (design.md): a thread or two for a small device, where
    // async-std would start one per core. Chosen before anything spawns; the
    // dead-letter commands' client runs on it too.
    let threads = config.executor_threads;
    cli::or_exit(NAME, runtime::install(Runtime::Smol { threads }))?;
    if let Some((action, which)) = args.own.dead_letters {
        let out = runtime::block_on(tern_edge::cli::run(&config, action, which));
        print!("{}", cli::or_exit(NAME, out)?);
        return Ok(());
    }
    cli::or_exit(NAME, runtime::block_on(run(args.own, config)))
}

async fn run(args: Own, cfg: EdgeConfig) -> Result<(), String> {
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
    cli::announce(format_args!(
        "tern-edge {} on {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    ));
    cli::announce(format_args!(
        "tern-edge name server on {}",
        gw.namesrv_addr()
    ));
    cli::announce(format_args!("tern-edge broker on {}", gw.broker_addr()));
    if let Some(m) = gw.metrics_addr() {
        cli::announce(format_args!("tern-edge metrics on http://{m}/metrics"));
    }
    cli::announce("ready");
    cli::until_signal(&mut signals).await;
    let stats = gw.shutdown().await?;
    log::info!(
        "stopped: {} message(s) forwarded, {} failed attempt(s), {} dead letter(s)",
        stats.forwarded,
        stats.failures,
        stats.dead_letters
    );
    Ok(())
}
