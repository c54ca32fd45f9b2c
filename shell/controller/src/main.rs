//! `tern-controller`: a controller node. Flags, config file and logging here; the node
//! itself is [`tern_controller::Controller`].

use std::path::PathBuf;
use std::process::ExitCode;

use tern_controller::{Controller, ControllerConfig};
use tern_shell::cli::{self, Flags};
use tern_shell::config::ConfigSource;
use tern_shell::runtime;

const USAGE: &str = "\
usage: tern-controller -c FILE [-p] [--log-level LEVEL]

  -c, --config FILE     controller.conf in RocketMQ's key=value form (controllerDLegerGroup,
                        controllerDLegerPeers, controllerDLegerSelfId, controllerStorePath, ...)
  -p, --print-config    print the effective configuration (sorted key=value) and exit
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

/// Parsed command line.
#[derive(Debug, Default)]
struct Args {
    config_file: Option<PathBuf>,
    print_config: bool,
    log_level: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut f = Flags::new(it);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "-c" | "--config" => a.config_file = Some(PathBuf::from(f.value(&flag)?)),
            "-p" | "--print-config" => a.print_config = true,
            "--log-level" => a.log_level = Some(f.value(&flag)?),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit("tern-controller", USAGE, parsed, |a| a.log_level.as_deref())
    {
        Ok(a) => a,
        Err(code) => return code,
    };
    let source = match &args.config_file {
        Some(path) => ConfigSource::load_file(path).map_err(|e| e.to_string()),
        None => Ok(ConfigSource::new()),
    };
    let loaded =
        match cli::config_or_exit::<ControllerConfig>("tern-controller", source, args.print_config)
        {
            Ok(l) => l,
            Err(code) => return code,
        };
    let mut signals = match cli::signals_or_exit("tern-controller") {
        Ok(s) => s,
        Err(code) => return code,
    };
    runtime::block_on(async move {
        let node = match Controller::start(loaded.config).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("tern-controller: {e}");
                return ExitCode::FAILURE;
            }
        };
        cli::announce(format_args!(
            "tern-controller n{} listening on {}",
            node.config().self_id,
            node.local_addr()
        ));
        let sig = signals.wait().await;
        log::info!("{sig:?} received, shutting down");
        node.shutdown().await;
        ExitCode::SUCCESS
    })
}
