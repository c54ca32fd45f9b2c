//! Command-line flags as the server binaries take them: `-x VALUE`, `--long VALUE` and
//! `--long=VALUE`. Each binary matches flag names itself; this only walks the arguments.

/// Walks arguments, splitting `--flag=value` and fetching a flag's value on request.
#[derive(Debug)]
pub struct Flags<I: Iterator<Item = String>> {
    args: I,
    inline: Option<String>,
}

impl<I: Iterator<Item = String>> Flags<I> {
    /// Flags from `args` (without the program name).
    pub fn new(args: I) -> Self {
        Self { args, inline: None }
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

/// The start every binary shares: the parsed arguments, or the exit for `--help` (the
/// usage on stdout, success) and for a usage error (the reason and the usage on stderr,
/// status 2); then the logger, from `--log-level` as `log_level` finds it.
pub fn args_or_exit<A>(
    name: &str,
    usage: &str,
    parsed: Result<Option<A>, String>,
    log_level: impl FnOnce(&A) -> Option<&str>,
) -> Result<A, std::process::ExitCode> {
    use std::process::ExitCode;
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
    if let Err(e) = crate::logger::init_from_flag(log_level(&args)) {
        eprintln!("{name}: {e}");
        return Err(ExitCode::from(2));
    }
    Ok(args)
}

/// The configuration the servers share the loading of: `source` (the file, then flags over
/// it) read as `C`, its warnings logged; the exit for a bad value (the reason on stderr,
/// failure) and for `-p` (the effective configuration on stdout, success).
pub fn config_or_exit<C: crate::config::Config>(
    name: &str,
    source: Result<crate::config::ConfigSource, String>,
    print_config: bool,
) -> Result<crate::config::Loaded<C>, std::process::ExitCode> {
    use std::process::ExitCode;
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
pub fn signals_or_exit(
    name: &str,
) -> Result<crate::signal::TerminationSignals, std::process::ExitCode> {
    crate::signal::TerminationSignals::install().map_err(|e| {
        eprintln!("{name}: cannot install signal handlers: {e}");
        std::process::ExitCode::FAILURE
    })
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
        let mut f = Flags::new(
            ["--listen=a:1", "-c", "x.conf", "-p", "--home"]
                .map(String::from)
                .into_iter(),
        );
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
