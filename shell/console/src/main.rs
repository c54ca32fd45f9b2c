//! `tern-console`: the web console as a process of its own, for any RocketMQ 4.x/5.x
//! cluster. Flags and config file here; the console itself is [`tern_console::Console`].

use std::path::PathBuf;
use std::process::ExitCode;

use tern_console::{Console, ConsoleConfig};
use tern_shell::cli::{self, Flags};
use tern_shell::config::{ConfigSource, Origin};
use tern_shell::runtime;

const USAGE: &str = "\
usage: tern-console [-c FILE] [-n ADDRS] [--listen HOST:PORT] [--log-level LEVEL]

  -c, --config FILE     console.conf, key=value: consoleListen, namesrvAddr, consoleUser,
                        consolePassword, consoleAccessKey, consoleSecretKey,
                        consoleSampleSeconds (docs/tern-console.md)
  -n, --namesrv ADDRS   name servers, \"host:port;host:port\" (overrides namesrvAddr;
                        default 127.0.0.1:9876)
      --listen ADDR     where to serve the console (overrides consoleListen; default
                        127.0.0.1:8080; another host needs consoleUser/consolePassword)
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

#[derive(Debug, Default)]
struct Args {
    config_file: Option<PathBuf>,
    namesrv: Option<String>,
    listen: Option<String>,
    log_level: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut f = Flags::new(it);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "-c" | "--config" => a.config_file = Some(PathBuf::from(f.value(&flag)?)),
            "-n" | "--namesrv" => a.namesrv = Some(f.value(&flag)?),
            "--listen" => a.listen = Some(f.value(&flag)?),
            "--log-level" => a.log_level = Some(f.value(&flag)?),
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(Some(a))
}

fn source(args: &Args) -> Result<ConfigSource, String> {
    let mut src = match &args.config_file {
        Some(path) => ConfigSource::load_file(path).map_err(|e| e.to_string())?,
        None => ConfigSource::new(),
    };
    if let Some(n) = &args.namesrv {
        src.set("namesrvAddr", n.clone(), Origin::Flag("-n".into()));
    }
    if let Some(l) = &args.listen {
        src.set("consoleListen", l.clone(), Origin::Flag("--listen".into()));
    }
    Ok(src)
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit("tern-console", USAGE, parsed, |a| a.log_level.as_deref()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let loaded = match cli::config_or_exit::<ConsoleConfig>("tern-console", source(&args), false) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let mut signals = match cli::signals_or_exit("tern-console") {
        Ok(s) => s,
        Err(code) => return code,
    };
    runtime::block_on(async {
        let console = match Console::start(loaded.config).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("tern-console: {e}");
                return ExitCode::FAILURE;
            }
        };
        cli::announce(format_args!(
            "tern-console on http://{}",
            console.local_addr()
        ));
        let sig = signals.wait().await;
        log::info!("{sig:?}: shutting down");
        console.shutdown().await;
        ExitCode::SUCCESS
    })
}
