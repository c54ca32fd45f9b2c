//! `tern-proxy`: the RocketMQ 5.x gRPC endpoint in CLUSTER mode (RocketMQ's
//! `mqproxy -pm cluster`), in front of the brokers its name servers list. Flags, config
//! file and logging here; the endpoint is [`tern_proxy::Endpoint`], the cluster
//! [`tern_proxy::cluster::Cluster`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tern_proxy::cluster::Cluster;
use tern_proxy::config::ClusterConfig;
use tern_proxy::{Endpoint, Upstream};
use tern_shell::cli::{self, Flags, split_host_port};
use tern_shell::config::{ConfigSource, Origin};
use tern_shell::runtime::{self, Shutdown};

const USAGE: &str = "\
usage: tern-proxy [-pc FILE] [-n ADDRS] [-p] [--listen HOST:PORT] [--log-level LEVEL]

  -pc, --proxy-config FILE  rmq-proxy.json: RocketMQ's proxy keys, as a JSON object
  -n, --namesrv-addr ADDRS  name servers, host:port;host:port (overrides namesrvAddr;
                            without either, NAMESRV_ADDR)
  -p, --print-config        print the effective configuration (sorted key=value) and exit
      --listen ADDR         gRPC bind address and port (overrides listenAddr and
                            grpcServerPort; port 0 picks a free one)
      --log-level LEVEL     error|warn|info|debug|trace|off (default: RUST_LOG, else info)
  -h, --help                this text
";

/// Parsed command line.
#[derive(Debug, Default)]
struct Args {
    config_file: Option<PathBuf>,
    namesrv: Option<String>,
    print_config: bool,
    listen: Option<String>,
    log_level: Option<String>,
}

fn parse_args(it: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut a = Args::default();
    let mut f = Flags::new(it);
    while let Some(flag) = f.next_flag() {
        match flag.as_str() {
            "-pc" | "--proxy-config" => a.config_file = Some(PathBuf::from(f.value(&flag)?)),
            "-n" | "--namesrv-addr" => a.namesrv = Some(f.value(&flag)?),
            "-p" | "--print-config" => a.print_config = true,
            "--listen" => a.listen = Some(f.value(&flag)?),
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
        Some(path) => ConfigSource::load_json_file(path).map_err(|e| e.to_string())?,
        None => ConfigSource::new(),
    };
    if let Some(n) = &args.namesrv {
        src.set("namesrvAddr", n.clone(), Origin::Flag("-n".into()));
    }
    if let Some(listen) = &args.listen {
        let (host, port) = split_host_port("--listen", listen)?;
        let origin = Origin::Flag("--listen".into());
        src.set("listenAddr", host, origin.clone());
        src.set("grpcServerPort", port, origin);
    }
    Ok(src)
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let args = match cli::args_or_exit("tern-proxy", USAGE, parsed, |a| a.log_level.as_deref()) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let loaded = match cli::config_or_exit::<ClusterConfig>(
        "tern-proxy",
        config_source(&args),
        args.print_config,
    ) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let mut signals = match cli::signals_or_exit("tern-proxy") {
        Ok(s) => s,
        Err(code) => return code,
    };
    runtime::block_on(async move {
        let cfg = loaded.config;
        let stop = Shutdown::new();
        let (endpoint, cluster) = match start(&cfg, &stop) {
            Ok(started) => started,
            Err(e) => {
                eprintln!("tern-proxy: {e}");
                return ExitCode::FAILURE;
            }
        };
        cli::announce(format_args!(
            "tern-proxy gRPC endpoint on {} (CLUSTER mode, name servers {})",
            endpoint.local_addr(),
            cfg.namesrv_addrs.join(";")
        ));
        cli::announce("ready");
        let sig = signals.wait().await;
        log::info!("{sig:?} received, shutting down");
        stop.trigger();
        // The endpoint's shutdown joins its own runtime's thread: not on this executor.
        let _ = runtime::spawn_blocking(move || endpoint.shutdown()).await;
        cluster.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Opens the ACL rules and TLS files and starts the endpoint; any of them failing stops
/// the start (a proxy told to check or encrypt must not serve without it).
fn start(cfg: &ClusterConfig, stop: &Shutdown) -> Result<(Endpoint, Arc<Cluster>), String> {
    let acl = cfg.acl.open()?;
    if let Some(acl) = &acl {
        drop(runtime::spawn(acl.clone().run_reload(stop.clone())));
    }
    let upstream = Upstream {
        namesrv_addrs: cfg.namesrv_addrs.clone(),
        credentials: cfg.credentials.clone(),
        tls: tern_shell::tls::ClientTls::new(&cfg.tls.client)?,
    };
    let cluster = Arc::new(
        Cluster::new(&upstream, &cfg.cluster_name, acl, &cfg.cache)
            .map_err(|e| format!("cannot make the cluster's client: {e}"))?,
    );
    let tls = tern_shell::tls::ServerTls::with_alpn(&cfg.tls.server, &[b"h2"])
        .map_err(|e| format!("gRPC endpoint TLS: {e}"))?;
    let endpoint = Endpoint::start(
        cfg.listen_ip,
        cfg.proxy.clone(),
        upstream,
        cluster.clone(),
        tls,
    )
    .map_err(|e| format!("gRPC endpoint on {}:{}: {e}", cfg.listen_ip, cfg.proxy.port))?;
    Ok((endpoint, cluster))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::config;

    fn args(v: &[&str]) -> Result<Option<Args>, String> {
        parse_args(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_override_the_file_keys() {
        let a = args(&[
            "-pc",
            "rmq-proxy.json",
            "-n",
            "a:9876;b:9876",
            "--listen=127.0.0.1:0",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(a.config_file, Some(PathBuf::from("rmq-proxy.json")));
        let mut a = a;
        a.config_file = None;
        let src = config_source(&a).unwrap();
        let cfg = config::load::<ClusterConfig>(&src).unwrap().config;
        assert_eq!(cfg.namesrv_addrs, vec!["a:9876", "b:9876"]);
        assert_eq!(cfg.proxy.port, 0);
        assert_eq!(cfg.cluster_name, "DefaultCluster");
        assert!(args(&["--bogus"]).is_err());
        assert!(args(&["-h"]).unwrap().is_none());
    }

    #[test]
    fn a_local_mode_or_no_name_server_is_refused() {
        let mut src = ConfigSource::new();
        src.set("namesrvAddr", "a:9876", Origin::Program);
        src.set("proxyMode", "local", Origin::Program);
        let e = config::load::<ClusterConfig>(&src).unwrap_err().to_string();
        assert!(e.contains("tern-broker --enable-proxy"), "{e}");
        src.set("proxyMode", "CLUSTER", Origin::Program);
        src.set("namesrvAddr", "nohost", Origin::Program);
        let e = config::load::<ClusterConfig>(&src).unwrap_err().to_string();
        assert!(e.contains("not host:port"), "{e}");
    }
}
