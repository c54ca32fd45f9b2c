//! Command-line flags as the server binaries take them (`-x VALUE`, `--long VALUE`,
//! `--long=VALUE`), and the start they share: arguments, logger, configuration, signals.
//! Each binary matches its own flags; the ones every server takes are read here once.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{Config, ConfigSource};
use crate::signal::TerminationSignals;

/// Walks arguments, splitting `--flag=value` and fetching a flag's value on request.
#[derive(Debug)]
pub struct Flags {
    args: std::vec::IntoIter<String>,
    inline: Option<String>,
}

impl Flags {
    /// Flags from `args` (without the program name).
    pub fn new(args: impl IntoIterator<Item = String>) -> Self {
        let args: Vec<String> = args.into_iter().collect();
        Self {
            args: args.into_iter(),
            inline: None,
        }
    }

    /// The next flag's name, or `None` at the end.
    pub fn next_flag(&mut self) -> Option<String> {
        let arg = self.args.next()?;
        match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => {
                self.inline = Some(v.to_owned());
                Some(f.to_owned())
            }
            _ => {
                self.inline = None;
                Some(arg)
            }
        }
    }

    /// The value of the flag just read: its `=value`, or the next argument.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.inline
            .take()
            .or_else(|| self.args.next())
            .ok_or_else(|| format!("{flag} needs a value"))
    }
}

/// The flags every server binary takes alike.
#[derive(Debug, Default)]
pub struct Common {
    /// The configuration file (`-c`/`--config`; tern-proxy's `-pc`/`--proxy-config`).
    pub config_file: Option<PathBuf>,
    /// `-p`/`--print-config`: print the effective configuration and exit.
    pub print_config: bool,
    /// `--log-level`: overrides `RUST_LOG`.
    pub log_level: Option<String>,
}

impl Common {
    /// The configuration file read by `load` (key=value or JSON), or an empty source
    /// without one: what the flags are then set over.
    pub fn file_source<E: Display>(
        &self,
        load: impl FnOnce(&Path) -> Result<ConfigSource, E>,
    ) -> Result<ConfigSource, String> {
        match &self.config_file {
            Some(path) => load(path).map_err(|e| e.to_string()),
            None => Ok(ConfigSource::new()),
        }
    }
}

/// A server's command line: the shared flags, and its own in `A`.
#[derive(Debug, Default)]
pub struct Args<A> {
    /// The flags every server takes.
    pub common: Common,
    /// The binary's own.
    pub own: A,
}

/// The configuration file's flag as RocketMQ's servers name it (its proxy says `-pc`).
pub const CONFIG_FLAG: [&str; 2] = ["-c", "--config"];

/// Parses a command line (without the program name): the shared flags, with `config` the
/// configuration file's names, and the rest through `own`, which answers false for a flag
/// it does not know (a usage error). `None` for `-h`/`--help`.
pub fn parse<A: Default>(
    args: impl IntoIterator<Item = String>,
    config: [&str; 2],
    mut own: impl FnMut(&mut A, &str, &mut Flags) -> Result<bool, String>,
) -> Result<Option<Args<A>>, String> {
    let mut a = Args::<A>::default();
    let mut f = Flags::new(args);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            name if config.contains(&name) => {
                a.common.config_file = Some(PathBuf::from(f.value(&flag)?));
            }
            "-p" | "--print-config" => a.common.print_config = true,
            "--log-level" => a.common.log_level = Some(f.value(&flag)?),
            "-h" | "--help" => return Ok(None),
            other => {
                if !own(&mut a.own, other, &mut f)? {
                    return Err(format!("unknown argument '{other}'"));
                }
            }
        }
    }
    Ok(Some(a))
}

/// Splits a `HOST:PORT` flag value (`[v6]:port` too); errors name the flag.
pub fn split_host_port(flag: &str, addr: &str) -> Result<(String, String), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{flag}: expected HOST:PORT, got '{addr}'"))?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
        port.to_owned(),
    ))
}

/// Sets `keys` (the host's, the port's) from the `HOST:PORT` value of `flag`, which
/// they are then said to come from.
pub fn set_host_port(
    src: &mut ConfigSource,
    flag: &str,
    addr: &str,
    [host_key, port_key]: [&str; 2],
) -> Result<(), String> {
    let (host, port) = split_host_port(flag, addr)?;
    let origin = crate::config::Origin::Flag(flag.into());
    src.set(host_key, host, origin.clone());
    src.set(port_key, port, origin);
    Ok(())
}

/// The start every binary shares: the parsed arguments, or the exit for `--help` (the
/// usage on stdout, success) and for a usage error (the reason and the usage on stderr,
/// status 2); then the logger, from `--log-level`.
pub fn args_or_exit<A>(
    name: &str,
    usage: &str,
    parsed: Result<Option<Args<A>>, String>,
) -> Result<Args<A>, ExitCode> {
    let args = match parsed {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{usage}");
            return Err(ExitCode::SUCCESS);
        }
        Err(e) => {
            eprintln!("{name}: {e}\n{usage}");
            return Err(ExitCode::from(2));
        }
    };
    if let Err(e) = crate::logger::init_from_flag(args.common.log_level.as_deref()) {
        eprintln!("{name}: {e}");
        return Err(ExitCode::from(2));
    }
    Ok(args)
}

/// The configuration the servers share the loading of: `source` (the file, then flags over
/// it) read as `C`, its warnings logged; the exit for a bad value (the reason on stderr,
/// failure) and for `-p` (the effective configuration on stdout, success).
pub fn config_or_exit<C: Config>(
    name: &str,
    source: Result<ConfigSource, String>,
    print_config: bool,
) -> Result<crate::config::Loaded<C>, ExitCode> {
    let loaded =
        match source.and_then(|src| crate::config::load::<C>(&src).map_err(|e| e.to_string())) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("{name}: {e}");
                return Err(ExitCode::FAILURE);
            }
        };
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    if print_config {
        print!("{}", loaded.render());
        return Err(ExitCode::SUCCESS);
    }
    Ok(loaded)
}

/// SIGTERM and SIGINT, installed before a server announces readiness (a SIGTERM right
/// after the banner must shut it down cleanly); the exit when they cannot be.
fn signals_or_exit(name: &str) -> Result<TerminationSignals, ExitCode> {
    TerminationSignals::install().map_err(|e| {
        eprintln!("{name}: cannot install signal handlers: {e}");
        ExitCode::FAILURE
    })
}

/// A server ready to start: its configuration, and the signal handlers already in place.
#[derive(Debug)]
struct Ready<C> {
    /// The effective configuration.
    config: C,
    /// SIGTERM and SIGINT, installed.
    signals: TerminationSignals,
}

/// The start the servers share, in order: the arguments (or the exit for `-h` and a
/// usage error), the logger, the configuration `source` makes of them read as `C` (or the
/// exit for a bad value and `-p`), then the signal handlers.
fn start<A, C: Config>(
    name: &str,
    usage: &str,
    parsed: Result<Option<Args<A>>, String>,
    source: impl FnOnce(&Args<A>) -> Result<ConfigSource, String>,
) -> Result<Ready<C>, ExitCode> {
    let args = args_or_exit(name, usage, parsed)?;
    let loaded = config_or_exit::<C>(name, source(&args), args.common.print_config)?;
    Ok(Ready {
        config: loaded.config,
        signals: signals_or_exit(name)?,
    })
}

/// A server binary's whole run: the start they share (arguments, logger, configuration,
/// signal handlers), then `serve` on the runtime with the configuration and the installed
/// signals (it starts the server, announces it, waits with [`until_signal`] and shuts it
/// down); the status to exit with.
pub fn serve<A, C: Config>(
    name: &str,
    usage: &str,
    parsed: Result<Option<Args<A>>, String>,
    source: impl FnOnce(&Args<A>) -> Result<ConfigSource, String>,
    serve: impl AsyncFnOnce(C, TerminationSignals) -> Result<(), ExitCode>,
) -> ExitCode {
    exit(
        start::<A, C>(name, usage, parsed, source)
            .and_then(|ready| crate::runtime::block_on(serve(ready.config, ready.signals))),
    )
}

/// Waits for SIGTERM or SIGINT, then logs that the server stops.
pub async fn until_signal(signals: &mut TerminationSignals) {
    let sig = signals.wait().await;
    log::info!("{sig:?} received, shutting down");
}

/// `result`'s value (a started server, a runtime installed), or the exit for its error
/// (the reason on stderr, failure).
pub fn or_exit<S, E: Display>(name: &str, result: Result<S, E>) -> Result<S, ExitCode> {
    result.map_err(|e| {
        eprintln!("{name}: {e}");
        ExitCode::FAILURE
    })
}

/// The status a server's run ends with.
pub fn exit(run: Result<(), ExitCode>) -> ExitCode {
    run.err().unwrap_or(ExitCode::SUCCESS)
}

/// Writes `line` to stdout and flushes it: the address lines a server prints for whoever
/// started it. A stdout that was closed (a supervisor that stopped reading) is ignored:
/// `println!` would panic there and take the server down with it.
pub fn announce(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_inline_values_and_fetches_separate_ones() {
        let mut f = Flags::new(["--listen=a:1", "-c", "x.conf", "-p", "--home"].map(String::from));
        assert_eq!(f.next_flag().as_deref(), Some("--listen"));
        assert_eq!(f.value("--listen").as_deref(), Ok("a:1"));
        assert_eq!(f.next_flag().as_deref(), Some("-c"));
        assert_eq!(f.value("-c").as_deref(), Ok("x.conf"));
        assert_eq!(f.next_flag().as_deref(), Some("-p"));
        assert_eq!(f.next_flag().as_deref(), Some("--home"));
        assert_eq!(f.value("--home"), Err("--home needs a value".into()));
        assert_eq!(f.next_flag(), None);
    }

    #[test]
    fn parse_reads_the_shared_flags_and_hands_on_the_rest() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let own = |a: &mut Option<String>, flag: &str, f: &mut Flags| {
            if flag != "--home" {
                return Ok(false);
            }
            *a = Some(f.value(flag)?);
            Ok(true)
        };
        let a = parse(
            argv(&["-pc", "x.json", "-p", "--home=h", "--log-level", "debug"]),
            ["-pc", "--proxy-config"],
            own,
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.common.config_file, Some(PathBuf::from("x.json")));
        assert!(a.common.print_config);
        assert_eq!(a.common.log_level.as_deref(), Some("debug"));
        assert_eq!(a.own.as_deref(), Some("h"));
        assert_eq!(
            parse(argv(&["-c", "x.conf"]), ["-pc", "--proxy-config"], own).unwrap_err(),
            "unknown argument '-c'"
        );
        assert!(
            parse(argv(&["--home", "h", "-h"]), CONFIG_FLAG, own)
                .unwrap()
                .is_none()
        );
        assert_eq!(
            parse(argv(&["--home"]), CONFIG_FLAG, own).unwrap_err(),
            "--home needs a value"
        );
    }

    #[test]
    fn host_port_splits_v4_and_bracketed_v6() {
        assert_eq!(
            split_host_port("--listen", "127.0.0.1:0"),
            Ok(("127.0.0.1".into(), "0".into()))
        );
        assert_eq!(
            split_host_port("--listen", "[::1]:9876"),
            Ok(("::1".into(), "9876".into()))
        );
        assert!(
            split_host_port("--listen", "nohost")
                .unwrap_err()
                .contains("--listen")
        );
    }
}
