//! `tern-broker`: the broker binary, and with `--standalone` a whole Tern in one process
//! (an embedded name server plus a broker on a local data directory).

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use tern_broker::config::BrokerConfig;
use tern_broker::store::CloseError;
use tern_broker::{Broker, StartError};
use tern_namesrv::{NameServer, NamesrvConfig};
use tern_shell::cli::{self, Args, split_host_port};
use tern_shell::config::{self, ConfigError, ConfigSource, Origin};
use tern_shell::runtime;
use tern_shell::signal::TerminationSignals;

const NAME: &str = "tern-broker";

const USAGE: &str = "\
usage: tern-broker [-c FILE] [-n ADDRS] [-p] [--listen HOST:PORT] [--enable-proxy] [--log-level LEVEL]
       tern-broker --standalone [--data-dir DIR] [--listen HOST:PORT] [--namesrv-listen HOST:PORT]

  -c, --config FILE        broker.conf in RocketMQ's key=value form
  -n, --namesrv ADDRS      name servers, \"host:port;host:port\" (overrides namesrvAddr)
  -p, --print-config       print the effective configuration (sorted key=value) and exit
      --listen ADDR        bind address and port (overrides listenAddr/listenPort)
      --enable-proxy       also serve RocketMQ 5.x gRPC clients on grpcServerPort (8081),
                           as mqbroker --enable-proxy (the key enableProxy=true)
      --standalone         also run a name server in this process (one-command Tern), the
                           Prometheus endpoint on :5557 unless metricsExporterType is set,
                           the gRPC endpoint on :8081 unless enableProxy=false, and the
                           web console on 127.0.0.1:8080 (consoleListen; consoleEnable=false
                           leaves it out)
      --data-dir DIR       standalone: store and name-server data under DIR (default ./data)
      --namesrv-listen ADDR standalone: the name server's address (default 127.0.0.1:9876)
      --log-level LEVEL    error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help               this text
";

/// The broker's own flags.
#[derive(Debug, Default)]
struct Own {
    namesrv: Option<String>,
    listen: Option<String>,
    standalone: bool,
    enable_proxy: bool,
    data_dir: Option<PathBuf>,
    namesrv_listen: Option<String>,
}

fn parse_args(it: impl IntoIterator<Item = String>) -> Result<Option<Args<Own>>, String> {
    let parsed = cli::parse(it, cli::CONFIG_FLAG, |a: &mut Own, flag, f| {
        match flag {
            "-n" | "--namesrv" => a.namesrv = Some(f.value(flag)?),
            "--listen" => a.listen = Some(f.value(flag)?),
            "--standalone" => a.standalone = true,
            "--enable-proxy" => a.enable_proxy = true,
            "--data-dir" => a.data_dir = Some(PathBuf::from(f.value(flag)?)),
            "--namesrv-listen" => a.namesrv_listen = Some(f.value(flag)?),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Some(a) = &parsed {
        if !a.own.standalone && (a.own.data_dir.is_some() || a.own.namesrv_listen.is_some()) {
            return Err("--data-dir and --namesrv-listen need --standalone".into());
        }
    }
    Ok(parsed)
}

/// The file first, then flags over it; standalone fills in what a one-command start needs.
fn broker_source(args: &Args<Own>, namesrv_addr: Option<&str>) -> Result<ConfigSource, String> {
    let mut src = args.common.file_source(ConfigSource::load_file)?;
    // UPDATE_BROKER_CONFIG writes changes back to the file read, as RocketMQ does.
    if let (Some(path), None) = (&args.common.config_file, src.get("brokerConfigPath")) {
        src.set(
            "brokerConfigPath",
            path.display().to_string(),
            Origin::Flag("-c".into()),
        );
    }
    if args.own.standalone {
        let data = args
            .own
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("data"));
        if src.get("storePathRootDir").is_none() {
            src.set(
                "storePathRootDir",
                data.join("store").display().to_string(),
                Origin::Flag("--data-dir".into()),
            );
        }
        if let Some(ns) = namesrv_addr {
            src.set("namesrvAddr", ns, Origin::Flag("--standalone".into()));
        }
        // One process with everything on: the 5.x clients' gRPC endpoint, and the
        // Prometheus endpoint (RocketMQ's default is DISABLE; set
        // metricsExporterType=DISABLE or enableProxy=false to turn them off).
        if src.get("enableProxy").is_none() {
            src.set("enableProxy", "true", Origin::Flag("--standalone".into()));
        }
        if src.get("metricsExporterType").is_none() {
            src.set(
                "metricsExporterType",
                "PROM",
                Origin::Flag("--standalone".into()),
            );
        }
    }
    if args.own.enable_proxy {
        src.set("enableProxy", "true", Origin::Flag("--enable-proxy".into()));
    }
    if let Some(n) = &args.own.namesrv {
        src.set("namesrvAddr", n.clone(), Origin::Flag("-n".into()));
    }
    if let Some(listen) = &args.own.listen {
        cli::set_host_port(&mut src, "--listen", listen, ["listenAddr", "listenPort"])?;
    }
    Ok(src)
}

/// The console's keys (`console*`) apart from the broker's, so neither warns of the
/// other's as unknown.
fn split_console(src: ConfigSource) -> (ConfigSource, ConfigSource) {
    let (mut broker, mut console) = (ConfigSource::new(), ConfigSource::new());
    for (key, entry) in src.iter() {
        let to = if key.starts_with("console") {
            &mut console
        } else {
            &mut broker
        };
        to.set(key, entry.value.clone(), entry.origin.clone());
    }
    (broker, console)
}

#[cfg(feature = "console")]
type ConsoleHandle = tern_console::Console;
#[cfg(not(feature = "console"))]
type ConsoleHandle = NoConsole;

/// The console of a build without one.
#[cfg(not(feature = "console"))]
struct NoConsole;

#[cfg(not(feature = "console"))]
impl NoConsole {
    async fn shutdown(self) {}
}

/// Standalone: the web console on the embedded name server, unless `consoleEnable=false`.
/// A console that cannot start (its port taken) is logged and the broker serves on.
#[cfg(feature = "console")]
async fn start_console(mut src: ConfigSource, namesrv: &str) -> Option<ConsoleHandle> {
    src.set("namesrvAddr", namesrv, Origin::Flag("--standalone".into()));
    let loaded = match config::load::<tern_console::ConsoleConfig>(&src) {
        Ok(l) => l,
        Err(e) => {
            log::error!("console not started: {e}");
            return None;
        }
    };
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    if !loaded.config.enable {
        return None;
    }
    match tern_console::Console::start(loaded.config).await {
        Ok(c) => {
            cli::announce(format_args!("tern-console on http://{}", c.local_addr()));
            Some(c)
        }
        Err(e) => {
            log::error!("{e}; serving without the console");
            None
        }
    }
}

#[cfg(not(feature = "console"))]
async fn start_console(src: ConfigSource, _namesrv: &str) -> Option<ConsoleHandle> {
    if src.iter().next().is_some() {
        log::warn!("this tern-broker is built without the console; console* keys ignored");
    }
    None
}

/// mimalloc rather than glibc's malloc: a request's header fields, properties and
/// bodies are many small allocations freed soon after, and a profile of sends showed
/// glibc's malloc, free and fastbin consolidation (a request of 1 KiB or more, such as a
/// body, first sweeps the fastbins) at ~22% of the broker's CPU. Redis links jemalloc for the same reason.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit(NAME, USAGE, parsed) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.common.print_config {
        // The configuration without a started name server: -p exits before anything runs.
        let source = broker_source(&args, None);
        return cli::exit(cli::config_or_exit::<BrokerConfig>(NAME, source, true).map(drop));
    }
    cli::exit(cli::or_exit(NAME, runtime::block_on(run(args))))
}

/// Why a run ended in failure; printed after the program's name, as it always was.
#[derive(Debug)]
enum RunError {
    /// The signal handlers could not be installed.
    Signals(std::io::Error),
    /// The configuration's sources: the file unreadable, a flag's `HOST:PORT` malformed.
    Source(String),
    /// A key's value is wrong (the name server's or the broker's).
    Config(ConfigError),
    /// Standalone: the embedded name server did not start.
    NameServer(tern_namesrv::StartError),
    /// The broker did not start.
    Start(StartError),
    /// The store did not close cleanly.
    Close(CloseError),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Signals(e) => write!(f, "installing signal handlers: {e}"),
            Self::Source(why) => f.write_str(why),
            Self::Config(e) => e.fmt(f),
            Self::NameServer(e) => write!(f, "starting the name server: {e}"),
            Self::Start(e) => e.fmt(f),
            Self::Close(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Signals(e) => Some(e),
            Self::Source(_) => None,
            Self::Config(e) => Some(e),
            Self::NameServer(e) => Some(e),
            Self::Start(e) => Some(e),
            Self::Close(e) => Some(e),
        }
    }
}

async fn run(args: Args<Own>) -> Result<(), RunError> {
    // Signals first: one that arrives while starting must stop us cleanly, not kill us.
    let mut signals = TerminationSignals::install().map_err(RunError::Signals)?;
    let namesrv = if args.own.standalone {
        let data = args
            .own
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("data"));
        let listen = args
            .own
            .namesrv_listen
            .clone()
            .unwrap_or_else(|| "127.0.0.1:9876".into());
        let (host, port) =
            split_host_port("--namesrv-listen", &listen).map_err(RunError::Source)?;
        let mut src = ConfigSource::new();
        // The embedded name server serves TLS as the broker does, from the same keys.
        for (key, entry) in broker_source(&args, None).map_err(RunError::Source)?.iter() {
            if key.starts_with("tls.server.") || key == "tls.test.mode.enable" {
                src.set(key, entry.value.clone(), entry.origin.clone());
            }
        }
        let origin = Origin::Flag("--standalone".into());
        src.set("bindAddress", host, origin.clone());
        src.set("listenPort", port, origin.clone());
        src.set(
            "kvConfigPath",
            data.join("namesrv")
                .join("kvConfig.json")
                .display()
                .to_string(),
            origin.clone(),
        );
        // Its metrics follow the broker's settings (on by default here), one port up:
        // 5558 beside the broker's 5557, tern-namesrv's own default; 0 stays 0.
        let broker_src = broker_source(&args, None).map_err(RunError::Source)?;
        for key in ["metricsExporterType", "metricsPromExporterHost"] {
            if let Some(e) = broker_src.get(key) {
                src.set(key, e.value.clone(), origin.clone());
            }
        }
        if let Some(p) = broker_src
            .get("metricsPromExporterPort")
            .and_then(|e| e.value.parse::<u16>().ok())
        {
            let port = if p == 0 { Some(0) } else { p.checked_add(1) };
            if let Some(port) = port {
                src.set("metricsPromExporterPort", port.to_string(), origin);
            }
        }
        let cfg = config::load::<NamesrvConfig>(&src)
            .map_err(RunError::Config)?
            .config;
        let ns = NameServer::start(cfg).await.map_err(RunError::NameServer)?;
        cli::announce(format_args!(
            "tern-namesrv listening on {}",
            ns.local_addr()
        ));
        if let Some(m) = ns.metrics_addr() {
            cli::announce(format_args!("tern-namesrv metrics on http://{m}/metrics"));
        }
        Some(ns)
    } else {
        None
    };
    let ns_addr = namesrv.as_ref().map(|n| n.local_addr().to_string());
    let source = broker_source(&args, ns_addr.as_deref()).map_err(RunError::Source)?;
    // Without --standalone there is no console: its keys stay to be warned of as unknown.
    let (source, console_source) = if args.own.standalone {
        split_console(source)
    } else {
        (source, ConfigSource::new())
    };
    let loaded = config::load::<BrokerConfig>(&source).map_err(RunError::Config)?;
    for w in &loaded.warnings {
        log::warn!("{w}");
    }
    let cfg = loaded.config;
    if cfg.namesrv_addrs.is_empty() {
        log::warn!(
            "no name server configured (namesrvAddr or -n): clients will not find this broker"
        );
    }
    let broker = Broker::start(cfg).await.map_err(RunError::Start)?;
    cli::announce(format_args!(
        "tern-broker listening on {}",
        broker.store_host()
    ));
    if let Some(m) = broker.metrics_addr() {
        cli::announce(format_args!("tern-broker metrics on http://{m}/metrics"));
    }
    if let Some(g) = broker.grpc_addr() {
        cli::announce(format_args!("tern-broker gRPC endpoint on {g}"));
    }
    let console = match &ns_addr {
        Some(ns) => start_console(console_source, ns).await,
        None => None,
    };
    if let Some(ns) = &ns_addr {
        cli::announce(format_args!("ready: clients use name server {ns}"));
    } else {
        cli::announce("ready");
    }
    let sig = signals.wait().await;
    log::info!("{sig:?}: shutting down");
    if let Some(c) = console {
        c.shutdown().await;
    }
    let result = broker.shutdown().await;
    if let Some(ns) = namesrv {
        ns.shutdown().await;
    }
    log::info!("stopped");
    result.map_err(RunError::Close)
}
