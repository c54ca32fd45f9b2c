//! `tern-proxy`: the RocketMQ 5.x gRPC endpoint in CLUSTER mode (RocketMQ's
//! `mqproxy -pm cluster`), in front of the brokers its name servers list. Flags, config
//! file and logging here; the endpoint is [`tern_proxy::Endpoint`], the cluster
//! [`tern_proxy::cluster::Cluster`].

use std::process::ExitCode;
use std::sync::Arc;

use tern_proxy::cluster::Cluster;
use tern_proxy::config::ClusterConfig;
use tern_proxy::{Endpoint, Upstream};
use tern_shell::cli::{self, Args};
use tern_shell::config::{ConfigSource, Origin};
use tern_shell::runtime::{self, Shutdown};

const NAME: &str = "tern-proxy";

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

/// The proxy's own flags.
#[derive(Debug, Default)]
struct Own {
    namesrv: Option<String>,
    listen: Option<String>,
}

fn parse_args(it: impl IntoIterator<Item = String>) -> Result<Option<Args<Own>>, String> {
    cli::parse(it, ["-pc", "--proxy-config"], |a: &mut Own, flag, f| {
        match flag {
            "-n" | "--namesrv-addr" => a.namesrv = Some(f.value(flag)?),
            "--listen" => a.listen = Some(f.value(flag)?),
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// File first, then flags over it.
fn config_source(args: &Args<Own>) -> Result<ConfigSource, String> {
    let mut src = args.common.file_source(ConfigSource::load_json_file)?;
    if let Some(n) = &args.own.namesrv {
        src.set("namesrvAddr", n.clone(), Origin::Flag("-n".into()));
    }
    if let Some(listen) = &args.own.listen {
        cli::set_host_port(
            &mut src,
            "--listen",
            listen,
            ["listenAddr", "grpcServerPort"],
        )?;
    }
    Ok(src)
}

fn main() -> ExitCode {
    let parsed = parse_args(std::env::args().skip(1));
    let serve = async |cfg: ClusterConfig, mut signals| {
        let stop = Shutdown::new();
        let (endpoint, cluster) = cli::or_exit(NAME, start(&cfg, &stop))?;
        cli::announce(format_args!(
            "tern-proxy gRPC endpoint on {} (CLUSTER mode, name servers {})",
            endpoint.local_addr(),
            cfg.namesrv_addrs.join(";")
        ));
        cli::announce("ready");
        cli::until_signal(&mut signals).await;
        stop.trigger();
        // The endpoint's shutdown joins its own runtime's thread: not on this executor.
        let _ = runtime::spawn_blocking(move || endpoint.shutdown()).await;
        cluster.shutdown().await;
        Ok(())
    };
    cli::serve(NAME, USAGE, parsed, config_source, serve)
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
    use std::path::PathBuf;
    use tern_shell::config;

    fn args(v: &[&str]) -> Result<Option<Args<Own>>, String> {
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
        assert_eq!(a.common.config_file, Some(PathBuf::from("rmq-proxy.json")));
        let mut a = a;
        a.common.config_file = None;
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
