//! `tern-namesrv`: the name server binary. Flags, config file and logging here; the
//! server itself is [`tern_namesrv::NameServer`].

use std::path::PathBuf;
use std::process::ExitCode;

use tern_namesrv::config::kv_path_in_home;
use tern_namesrv::{NameServer, NamesrvConfig};
use tern_shell::cli::{self, Args};
use tern_shell::config::{ConfigSource, Origin};

const NAME: &str = "tern-namesrv";

const USAGE: &str = "\
usage: tern-namesrv [-c FILE] [-p] [--listen HOST:PORT] [--home DIR] [--log-level LEVEL]

  -c, --config FILE     namesrv.conf in RocketMQ's key=value form
  -p, --print-config    print the effective configuration (sorted key=value) and exit
      --listen ADDR     bind address and port, overriding bindAddress/listenPort
      --home DIR        keep kvConfig.json in DIR (overrides kvConfigPath)
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

/// The name server's own flags.
#[derive(Debug, Default)]
struct Own {
    listen: Option<String>,
    home: Option<PathBuf>,
}

fn parse_args(it: impl IntoIterator<Item = String>) -> Result<Option<Args<Own>>, String> {
    cli::parse(it, cli::CONFIG_FLAG, |a: &mut Own, flag, f| {
        match flag {
            "--listen" => a.listen = Some(f.value(flag)?),
            "--home" => a.home = Some(PathBuf::from(f.value(flag)?)),
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// File first, then flags over it.
fn config_source(args: &Args<Own>) -> Result<ConfigSource, String> {
    let mut src = args.common.file_source(ConfigSource::load_file)?;
    if let Some(listen) = &args.own.listen {
        cli::set_host_port(&mut src, "--listen", listen, ["bindAddress", "listenPort"])?;
    }
    if let Some(home) = &args.own.home {
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
    let serve = async |config, mut signals| {
        let ns = cli::or_exit(NAME, NameServer::start(config).await)?;
        cli::announce(format_args!(
            "tern-namesrv listening on {}",
            ns.local_addr()
        ));
        if let Some(c) = ns.controller_addr() {
            cli::announce(format_args!("tern-namesrv controller on {c}"));
        }
        if let Some(m) = ns.metrics_addr() {
            cli::announce(format_args!("tern-namesrv metrics on http://{m}/metrics"));
        }
        cli::until_signal(&mut signals).await;
        ns.shutdown().await;
        Ok(())
    };
    cli::serve::<_, NamesrvConfig>(NAME, USAGE, parsed, config_source, serve)
}
