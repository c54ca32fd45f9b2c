//! `tern-console`: the web console as a process of its own, for any RocketMQ 4.x/5.x
//! cluster. Flags and config file here; the console itself is [`tern_console::Console`].

use std::process::ExitCode;

use tern_console::{Console, ConsoleConfig};
use tern_shell::cli::{self, Args};
use tern_shell::config::{ConfigSource, Origin};

const NAME: &str = "tern-console";

const USAGE: &str = "\
usage: tern-console [-c FILE] [-n ADDRS] [-p] [--listen HOST:PORT] [--log-level LEVEL]

  -c, --config FILE     console.conf, key=value: consoleListen, namesrvAddr, consoleUser,
                        consolePassword, consoleAccessKey, consoleSecretKey,
                        consoleSampleSeconds (docs/tern-console.md)
  -n, --namesrv ADDRS   name servers, \"host:port;host:port\" (overrides namesrvAddr;
                        default 127.0.0.1:9876)
  -p, --print-config    print the effective configuration (sorted key=value) and exit
      --listen ADDR     where to serve the console (overrides consoleListen; default
                        127.0.0.1:8080; another host needs consoleUser/consolePassword)
      --log-level LEVEL error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help            this text
";

/// The console's own flags.
#[derive(Debug, Default)]
struct Own {
    namesrv: Option<String>,
    listen: Option<String>,
}

fn parse_args(it: impl IntoIterator<Item = String>) -> Result<Option<Args<Own>>, String> {
    cli::parse(it, cli::CONFIG_FLAG, |a: &mut Own, flag, f| {
        match flag {
            "-n" | "--namesrv" => a.namesrv = Some(f.value(flag)?),
            "--listen" => a.listen = Some(f.value(flag)?),
            _ => return Ok(false),
        }
        Ok(true)
    })
}

fn source(args: &Args<Own>) -> Result<ConfigSource, String> {
    let mut src = args.common.file_source(ConfigSource::load_file)?;
    if let Some(n) = &args.own.namesrv {
        src.set("namesrvAddr", n.clone(), Origin::Flag("-n".into()));
    }
    if let Some(l) = &args.own.listen {
        src.set("consoleListen", l.clone(), Origin::Flag("--listen".into()));
    }
    Ok(src)
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    cli::serve::<_, ConsoleConfig>(NAME, USAGE, parsed, source, async |config, mut signals| {
        let console = cli::or_exit(NAME, Console::start(config).await)?;
        cli::announce(format_args!(
            "tern-console on http://{}",
            console.local_addr()
        ));
        cli::until_signal(&mut signals).await;
        console.shutdown().await;
        Ok(())
    })
}
