//! `tern-namesrv`: the name server binary. Flags, config file and logging here; the
//! server itself is [`tern_namesrv::NameServer`].

use std::path::PathBuf;
use std::process::ExitCode;

use tern_namesrv::config::kv_path_in_home;
use tern_namesrv::{NameServer, NamesrvConfig};
use tern_shell::cli::{self, Flags, split_host_port};
use tern_shell::config::{ConfigSource, Origin};
use tern_shell::runtime;

const USAGE: &str = "\
usage: tern-namesrv [-c FILE] [-p] [--listen HOST:PORT] [--home DIR] [--log-level LEVEL]

  -c, --config FILE     namesrv.conf in RocketMQ's key=value form
  -p, --print-config    print the effective configuration (sorted key=value) and exit
      --listen ADDR     bind address and port, overriding bindAddress/listenPort
      --home DIR        keep kvConfig.json in DIR (overrides kvConfigPath)
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

/// Parsed command line.
#[derive(Debug, Default)]
struct Args {
    config_file: Option<PathBuf>,
    print_config: bool,
    listen: Option<String>,
    home: Option<PathBuf>,
    log_level: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut f = Flags::new(it);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "-c" | "--config" => a.config_file = Some(PathBuf::from(f.value(&flag)?)),
            "-p" | "--print-config" => a.print_config = true,
            "--listen" => a.listen = Some(f.value(&flag)?),
            "--home" => a.home = Some(PathBuf::from(f.value(&flag)?)),
            "--log-level" => a.log_level = Some(f.value(&flag)?),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(a))
}

/// File first, then flags over it.
fn config_source(args: &Args) -> Result<ConfigSource, String> {
    let mut src = match &args.config_file {
        Some(path) => ConfigSource::load_file(path).map_err(|e| e.to_string())?,
        None => ConfigSource::new(),
    };
    if let Some(listen) = &args.listen {
        let (host, port) = split_host_port("--listen", listen)?;
        let origin = Origin::Flag("--listen".into());
        src.set("bindAddress", host, origin.clone());
        src.set("listenPort", port, origin);
    }
    if let Some(home) = &args.home {
        let path = kv_path_in_home(home);
        src.set(
            "kvConfigPath",
            path.display().to_string(),
            Origin::Flag("--home".into()),
        );
    }
    Ok(src)
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit("tern-namesrv", USAGE, parsed, |a| a.log_level.as_deref()) {
        Ok(a) => a,
        Err(code) => return code,
    };

    let loaded = match cli::config_or_exit::<NamesrvConfig>(
        "tern-namesrv",
        config_source(&args),
        args.print_config,
    ) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let mut signals = match cli::signals_or_exit("tern-namesrv") {
        Ok(s) => s,
        Err(code) => return code,
    };
    runtime::block_on(async move {
        let ns = match NameServer::start(loaded.config).await {
            Ok(ns) => ns,
            Err(e) => {
                eprintln!("tern-namesrv: {e}");
                return ExitCode::FAILURE;
            }
        };
        tern_shell::cli::announce(format_args!(
            "tern-namesrv listening on {}",
            ns.local_addr()
        ));
        if let Some(c) = ns.controller_addr() {
            tern_shell::cli::announce(format_args!("tern-namesrv controller on {c}"));
        }
        if let Some(m) = ns.metrics_addr() {
            tern_shell::cli::announce(format_args!("tern-namesrv metrics on http://{m}/metrics"));
        }
        let sig = signals.wait().await;
        log::info!("{sig:?} received, shutting down");
        ns.shutdown().await;
        ExitCode::SUCCESS
    })
}
