//! The gateway's settings: the local broker's (`broker.conf` keys, with edge-sized
//! defaults) plus the forwarder's `edge*` keys, read from one `key=value` file and flags.

use std::path::Path;
use std::time::Duration;

use tern_broker::config::BrokerConfig;
use tern_shell::config::{Config, ConfigError, ConfigReader, ConfigSource, Origin, in_range};
use tern_shell::runtime;

/// Defaults that differ from a server broker's: small files (a device has little disk and
/// a 1 GiB segment would be most of it), SYNC_FLUSH (a device loses power; an
/// acknowledged message must survive it), and no zeros written ahead of the log
/// (`warmMapedFileEnable=false`: it writes each log byte twice, and flash wears).
pub const EDGE_DEFAULTS: &[(&str, &str)] = &[
    ("mapedFileSizeCommitLog", "16777216"),
    ("mapedFileSizeConsumeQueue", "120000"),
    ("maxHashSlotNum", "20000"),
    ("maxIndexNum", "80000"),
    ("flushDiskType", "SYNC_FLUSH"),
    ("warmMapedFileEnable", "false"),
    ("brokerName", "tern-edge"),
    ("brokerClusterName", "TernEdge"),
    ("defaultTopicQueueNums", "4"),
];

/// Everything the gateway reads.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// The local broker.
    pub broker: BrokerConfig,
    /// The central cluster's name servers (`edgeUpstreamNamesrv`, `;`-separated).
    pub upstream: String,
    /// Bytes stored but not yet forwarded past which local sends are refused
    /// (`edgeBacklogBudget`).
    pub backlog_budget: u64,
    /// Most messages per forwarded batch (`edgeForwardBatch`).
    pub batch_messages: usize,
    /// About the most bytes per forwarded batch (`edgeForwardBatchBytes`).
    pub batch_bytes: usize,
    /// Producer group of the forwarder on the central cluster (`edgeProducerGroup`).
    pub producer_group: String,
    /// Longest pause between attempts while the uplink is down (`edgeRetryMaxMs`).
    pub retry_max: Duration,
    /// First pause before a topic the cluster refused with an error an operator must fix
    /// (NO_PERMISSION, TOPIC_NOT_EXIST, no route) is tried again (`edgeBlockedRetryMs`);
    /// doubled up to `edgeBlockedRetryMaxMs`.
    pub blocked_retry: Duration,
    /// Longest pause between two tries of a blocked topic (`edgeBlockedRetryMaxMs`).
    pub blocked_retry_max: Duration,
    /// Longest a topic waits for a missing central broker its keys map to before they
    /// are mapped anew over the queues left (`edgeRouteHoldMs`).
    pub route_hold: Duration,
    /// Keep forwarded segments for local consumers instead of deleting them at once
    /// (`edgeKeepForwarded`; retention by `fileReservedTime` then applies).
    pub keep_forwarded: bool,
    /// Threads of the smol executor the gateway's tasks run on (`edgeExecutorThreads`):
    /// one keeps a small device's memory and context switches down; with two, the
    /// forwarder and the local broker can run at once on a multi-core device.
    pub executor_threads: usize,
}

impl Config for EdgeConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let mut broker = BrokerConfig::read(r)?;
        // Timer messages are timed by the central cluster (see `TimerSettings::pass_through`).
        broker.timer.pass_through = true;
        let upstream: String = r.get_checked("edgeUpstreamNamesrv", String::new(), |s| {
            if s.split([';', ','])
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .all(|a| {
                    a.rsplit_once(':')
                        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                })
                && !s.trim().is_empty()
            {
                Ok(())
            } else {
                Err(format!(
                    "'{s}' is not host:port[;host:port]: the gateway needs the central name servers"
                ))
            }
        })?;
        Ok(EdgeConfig {
            broker,
            upstream,
            backlog_budget: r.get_checked("edgeBacklogBudget", 256u64 << 20, |n| {
                if *n >= 1 << 20 {
                    Ok(())
                } else {
                    Err("must be at least 1048576 (1 MiB)".into())
                }
            })?,
            batch_messages: r.get_checked("edgeForwardBatch", 128usize, in_range(1, 1024))?,
            batch_bytes: r.get_checked(
                "edgeForwardBatchBytes",
                1usize << 20,
                in_range(1024, 3 << 20),
            )?,
            producer_group: r.get("edgeProducerGroup", "TERN_EDGE_FORWARDER".to_owned())?,
            retry_max: Duration::from_millis(r.get_checked(
                "edgeRetryMaxMs",
                5_000u64,
                in_range(100, 600_000),
            )?),
            blocked_retry: Duration::from_millis(r.get_checked(
                "edgeBlockedRetryMs",
                60_000u64,
                in_range(100, 3_600_000),
            )?),
            blocked_retry_max: Duration::from_millis(r.get_checked(
                "edgeBlockedRetryMaxMs",
                600_000u64,
                in_range(100, 3_600_000),
            )?),
            route_hold: Duration::from_millis(r.get_checked(
                "edgeRouteHoldMs",
                600_000u64,
                in_range(1_000, 86_400_000),
            )?),
            keep_forwarded: r.get("edgeKeepForwarded", false)?,
            executor_threads: r.get_checked(
                "edgeExecutorThreads",
                1usize,
                in_range(1, runtime::MAX_THREADS),
            )?,
        })
    }
}

impl EdgeConfig {
    /// The client settings for the central cluster: its name servers, with TLS when
    /// `tls.enable` is set (`tls.client.*`; the files are read here), signed with
    /// `innerClientAuthenticationCredentials` when given (a central cluster with ACL).
    pub fn upstream_client(&self) -> Result<tern_client::ClientConfig, String> {
        let mut client = tern_client::ClientConfig::new(&self.upstream);
        client.tls = tern_client::ClientTls::new(&self.broker.tls.client)?;
        client.credentials = self.broker.inner_credentials.clone();
        Ok(client)
    }
}

/// The source for a gateway: edge defaults, then the file, then flags (set by the
/// caller afterwards). `data_dir` holds the store unless the file names one.
pub fn source(file: Option<&Path>, data_dir: &Path) -> Result<ConfigSource, ConfigError> {
    let mut src = match file {
        Some(path) => ConfigSource::load_file(path)?,
        None => ConfigSource::new(),
    };
    for (k, v) in EDGE_DEFAULTS {
        if src.get(k).is_none() {
            src.set(*k, *v, Origin::Program);
        }
    }
    if src.get("storePathRootDir").is_none() {
        src.set(
            "storePathRootDir",
            data_dir.join("store").display().to_string(),
            Origin::Program,
        );
    }
    Ok(src)
}
