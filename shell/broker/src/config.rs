//! The broker's configuration, as RocketMQ users write it in `broker.conf`.
//!
//! Keys and defaults are RocketMQ's (`BrokerConfig`, `MessageStoreConfig`,
//! `NettyServerConfig`), read through [`tern_shell::config`]: unknown keys are warnings, a
//! known key with a bad value is fatal and the error names it and its line.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use tern_engine::delay::{DEFAULT_DELAY_LEVELS, DelayLevels};
use tern_shell::config::{Config, ConfigError, ConfigReader, in_range};
use tern_shell::config_enum;

pub mod live;

config_enum! {
    /// How appends are made durable before the producer is answered.
    pub enum FlushDiskType {
        /// Answer once the record is in the page cache; the group-commit thread syncs
        /// periodically.
        Async = "ASYNC_FLUSH",
        /// Answer once the record is on disk; one fdatasync serves every waiting sender.
        Sync = "SYNC_FLUSH",
    }
}

config_enum! {
    /// Role of this broker in a replica set.
    pub enum BrokerRole {
        /// Master that answers without waiting for slaves.
        AsyncMaster = "ASYNC_MASTER",
        /// Master that waits for a slave's acknowledgement.
        SyncMaster = "SYNC_MASTER",
        /// Read-only replica.
        Slave = "SLAVE",
    }
}

/// Everything the broker reads from its config file and flags.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    /// Cluster this broker belongs to (`brokerClusterName`).
    pub cluster_name: String,
    /// Name shared by a master and its slaves (`brokerName`).
    pub broker_name: String,
    /// 0 for a master, > 0 for slaves (`brokerId`).
    pub broker_id: i64,
    /// Name servers to register with (`namesrvAddr`, `;`-separated).
    pub namesrv_addrs: Vec<String>,
    /// Address clients should dial, advertised in routes and message ids (`brokerIP1`).
    /// Unset: `listenAddr` when that names one address, else the address this host
    /// reaches the network from ([`default_broker_ip`]), as RocketMQ picks a non-loopback
    /// one.
    pub broker_ip1: IpAddr,
    /// Address slaves dial for replication, advertised as `haServerAddr` (`brokerIP2`;
    /// `brokerIP1` when unset).
    pub broker_ip2: IpAddr,
    /// Address to bind (`listenAddr`, Tern's own; all interfaces by default).
    pub listen_ip: IpAddr,
    /// Remoting port (`listenPort`); the VIP port is this minus 2.
    pub listen_port: u16,
    /// Store root (`storePathRootDir`).
    pub store_root: PathBuf,
    /// Role (`brokerRole`).
    pub role: BrokerRole,
    /// Flush policy (`flushDiskType`).
    pub flush_disk_type: FlushDiskType,
    /// Under SYNC_FLUSH, write zeros into the log's blocks a window ahead of the
    /// appender (`warmMapedFileEnable`, RocketMQ's name for pre-writing mapped files;
    /// Tern's default `true`, and a rolling 1 MiB window rather than whole files).
    pub warm_mapped_file: bool,
    /// Commit-log segment size (`mapedFileSizeCommitLog`).
    pub commit_log_segment_bytes: u64,
    /// Entries per consume-queue file (`mapedFileSizeConsumeQueue` / 20).
    pub consume_queue_entries: u64,
    /// Index slots per file (`maxHashSlotNum`).
    pub index_slots: u32,
    /// Index entries per file (`maxIndexNum`).
    pub index_entries: u32,
    /// Hours a commit-log segment is kept (`fileReservedTime`).
    pub file_reserved_hours: u64,
    /// Hours of the day deletion runs (`deleteWhen`, e.g. "04" or "04;16").
    pub delete_when: Vec<u8>,
    /// Disk use (percent) past which expired segments are deleted at any hour, not only
    /// at `deleteWhen` (`diskMaxUsedSpaceRatio`).
    pub disk_max_used_ratio: u8,
    /// Disk use (percent) past which the oldest segment is deleted even if it has not
    /// expired (`diskSpaceCleanForciblyRatio`).
    pub disk_clean_forcibly_ratio: u8,
    /// Disk use (percent) past which writes are refused (`diskSpaceWarningLevelRatio`).
    pub disk_refuse_ratio: u8,
    /// Create topics on first send from the TBW102 template (`autoCreateTopicEnable`).
    pub auto_create_topic: bool,
    /// Create subscription groups on first heartbeat (`autoCreateSubscriptionGroup`).
    pub auto_create_subscription_group: bool,
    /// Queues of the TBW102 template (`defaultTopicQueueNums`).
    pub default_topic_queue_nums: i32,
    /// Largest message body accepted (`maxMessageSize`).
    pub max_message_size: usize,
    /// How long a SYNC_FLUSH sender waits for the disk (`syncFlushTimeout`).
    pub sync_flush_timeout: Duration,
    /// Period of the ASYNC_FLUSH flush (`flushIntervalCommitLog`).
    pub flush_interval: Duration,
    /// Hold pulls until messages arrive (`longPollingEnable`).
    pub long_polling: bool,
    /// Hold time when long polling is off (`shortPollingTimeMills`).
    pub short_polling: Duration,
    /// Pulls may be sent to a slave: a master whose reader is far behind suggests one
    /// (`slaveReadEnable`, RocketMQ's default false).
    pub slave_read_enable: bool,
    /// A reader is "far behind" when the log past what it read exceeds this percentage
    /// of the machine's memory (`accessMessageInMemoryMaxRatio`, 0–100, default 40).
    pub access_message_in_memory_max_ratio: u32,
    /// Serve SQL92 subscriptions (`enablePropertyFilter`; on by default in Tern, off in
    /// RocketMQ).
    pub enable_property_filter: bool,
    /// Period of registration with the name servers (`registerNameServerPeriod`, 10–60 s).
    pub register_period: Duration,
    /// Clients silent this long are dropped (`channelExpiredTimeout`).
    pub client_expiry: Duration,
    /// How often disk use and segment ages are checked (`cleanResourceInterval`).
    pub clean_interval: Duration,
    /// Delay of each level a producer or a retry may ask for (`messageDelayLevel`).
    pub delay_levels: DelayLevels,
    /// Refuse half messages with NO_PERMISSION (`rejectTransactionMessage`).
    pub reject_transaction_message: bool,
    /// Period of the transaction check-back scan (`transactionCheckInterval`).
    pub transaction_check_interval: Duration,
    /// Age past which an unresolved half message is checked back (`transactionTimeOut`).
    pub transaction_timeout: Duration,
    /// Check-backs before a half message is given up (`transactionCheckMax`).
    pub transaction_check_max: u32,
    /// Timer messages and recall (`timer*`, `recallMessageEnable`).
    pub timer: crate::timer::TimerSettings,
    /// Controller mode (`enableControllerMode`, `controllerAddr`, ...).
    pub controller: crate::controller::ControllerSettings,
    /// Where metrics go (`metricsExporterType`, `metricsPromExporter*`).
    pub metrics: crate::metrics::MetricsSettings,
    /// Replication port a master listens on for slaves (`haListenPort`; the remoting
    /// port plus one when absent).
    pub ha_listen_port: Option<u16>,
    /// A slave's fixed master HA address (`haMasterAddress`); when absent it follows
    /// what the name servers answer to its registration.
    pub ha_master_address: Option<String>,
    /// Idle time after which a slave reports its offset and a master sends an empty
    /// frame (`haSendHeartbeatInterval`).
    pub ha_heartbeat_interval: Duration,
    /// Silence after which either side drops the replication connection
    /// (`haHousekeepingInterval`).
    pub ha_housekeeping_interval: Duration,
    /// Most connections the HA port holds at once, signed in or not
    /// (`haMaxSlaveConnections`, Tern's key; RocketMQ has no limit): a broker group has
    /// a few slaves, and a peer that floods the port must not take the master's memory.
    pub ha_max_slave_connections: usize,
    /// Most log bytes a master sends in one frame (`haTransferBatchSize`).
    pub ha_transfer_batch_size: usize,
    /// A slave further behind than this does not count for SYNC_MASTER
    /// (`haMaxGapNotInSync`).
    pub ha_max_gap_not_in_sync: u64,
    /// How long a UNIQ_KEY stored in a topic makes a send with the same key a duplicate,
    /// answered with the first copy and not stored (`duplicateCheckWindowSeconds`, Tern's
    /// key; zero, the default, is off).
    pub duplicate_check_window: Duration,
    /// Most keys that window holds; past it the oldest go early (`duplicateCheckMaxKeys`,
    /// Tern's key).
    pub duplicate_check_max_keys: usize,
    /// Access control (`aclEnable`, `plainAclFile`, `aclReplayWindowSeconds`).
    pub acl: tern_shell::acl::settings::AclSettings,
    /// The account this broker signs its own requests with: registration at name
    /// servers, a slave's sync and HA link to its master
    /// (`innerClientAuthenticationCredentials`, RocketMQ 5's key:
    /// `{"accessKey":"…","secretKey":"…"}`).
    pub inner_credentials: Option<tern_shell::acl::SessionCredentials>,
    /// POP consumption's keys ([`crate::pop::PopConfig`]).
    pub pop: crate::pop::PopConfig,
    /// TLS: the `tls.server.*` keys for the remoting, VIP and HA ports, `tls.enable` and
    /// `tls.client.*` for the broker's own connections (name servers, its master).
    pub tls: tern_shell::tls::TlsSettings,
    /// The RocketMQ 5.x gRPC endpoint (RocketMQ's proxy in LOCAL mode, docs/grpc.md),
    /// when `enableProxy` (Tern's key; `tern-broker --enable-proxy`, and on with
    /// `--standalone`): its keys (`grpcServerPort`...).
    #[cfg(feature = "grpc")]
    pub proxy: Option<tern_proxy::ProxySettings>,
    /// What this broker lets clients do, as a topic's `perm` (`brokerPermission`, 6 =
    /// read and write): topics are registered with their perm ANDed with it, pulls are
    /// refused when it lacks read. Changed at run time through UPDATE_BROKER_CONFIG;
    /// this is the value at start, [`live::LiveConfig`] holds the current one.
    pub broker_permission: i32,
    /// The file UPDATE_BROKER_CONFIG writes changed keys back to (`brokerConfigPath`;
    /// `tern-broker` sets it to the `-c` file): none means changes last until restart.
    pub config_path: Option<PathBuf>,
    /// The message-trace topic made at start when `traceTopicEnable` is set
    /// (`msgTraceTopicName`, `RMQ_SYS_TRACE_TOPIC`), as RocketMQ's TopicConfigManager.
    pub trace_topic: Option<String>,
    /// Every key read above with its effective value, as `-p` prints it: what
    /// GET_BROKER_CONFIG answers (with the live values over it).
    pub effective: BTreeMap<String, String>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        let source = tern_shell::config::ConfigSource::new();
        // Every default is declared once, in `read`.
        match tern_shell::config::load::<BrokerConfig>(&source) {
            Ok(l) => l.config,
            Err(e) => unreachable!("defaults are valid: {e}"),
        }
    }
}

fn ip(r: &mut ConfigReader<'_>, key: &str, default: &str) -> Result<IpAddr, ConfigError> {
    let s: String = r.get_checked(key, default.to_owned(), |s| {
        s.parse::<IpAddr>()
            .map(|_| ())
            .map_err(|_| format!("invalid IP address '{s}'"))
    })?;
    Ok(s.parse().unwrap_or_else(|_| unreachable!("checked")))
}

/// `brokerIP1` when unset. RocketMQ takes the host's first non-loopback IPv4 address;
/// here the address this host sends from towards the network (a UDP socket connected
/// to a documentation address: a route lookup, no packet), loopback when there is no
/// route. A broker bound to one address (`listenAddr`) advertises that one.
pub fn default_broker_ip(listen: IpAddr) -> IpAddr {
    if !listen.is_unspecified() {
        return listen;
    }
    let loopback = IpAddr::from([127, 0, 0, 1]);
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
        .unwrap_or(loopback)
}

/// The store files RocketMQ lets a broker.conf place apart from `storePathRootDir`, and
/// where under it Tern keeps each (also RocketMQ's defaults).
const STORE_PATHS: [(&str, &str); 5] = [
    ("storePathCommitLog", "commitlog"),
    ("storePathConsumeQueue", "consumequeue"),
    ("storePathIndex", "index"),
    ("storeCheckpoint", "checkpoint"),
    ("abortFile", "abort"),
];

impl Config for BrokerConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        let addrs: Vec<String> = r.get_checked("namesrvAddr", Vec::new(), |v: &Vec<String>| {
            v.iter()
                .try_for_each(|a| tern_shell::config::check_host_port(a))
        })?;
        let ms = |r: &mut ConfigReader<'_>,
                  key: &str,
                  default: u64,
                  lo: u64,
                  hi: u64|
         -> Result<Duration, ConfigError> {
            Ok(Duration::from_millis(r.get_checked(
                key,
                default,
                in_range(lo, hi),
            )?))
        };
        let delete_when: String = r.get_checked("deleteWhen", "04".to_owned(), |s| {
            parse_hours(s).map(|_| ())
        })?;
        let delay_levels: String =
            r.get_checked("messageDelayLevel", DEFAULT_DELAY_LEVELS.to_owned(), |s| {
                DelayLevels::parse(s).map(drop).map_err(|e| e.to_string())
            })?;
        let cq_bytes: u64 = r.get_checked("mapedFileSizeConsumeQueue", 300_000 * 20, |n| {
            if *n >= 20 * 64 && n % 20 == 0 {
                Ok(())
            } else {
                Err(format!("{n} is not a multiple of 20 of at least 1280"))
            }
        })?;
        let listen_ip = ip(r, "listenAddr", "0.0.0.0")?;
        let broker_ip1 = match r.get_opt::<String>("brokerIP1")? {
            Some(s) => ip(r, "brokerIP1", &s)?,
            None => default_broker_ip(listen_ip),
        };
        r.record("brokerIP1", &broker_ip1.to_string());
        let broker_ip2 = ip(r, "brokerIP2", &broker_ip1.to_string())?;
        let cfg = Self {
            cluster_name: r.get_checked("brokerClusterName", "DefaultCluster".to_owned(), |s| {
                non_empty(s)
            })?,
            broker_name: r.get_checked("brokerName", "broker-a".to_owned(), |s| non_empty(s))?,
            broker_id: r.get_checked("brokerId", 0i64, in_range(0, i64::MAX))?,
            namesrv_addrs: addrs,
            broker_ip1,
            broker_ip2,
            listen_ip,
            listen_port: r.port("listenPort", 10911)?,
            store_root: r.get("storePathRootDir", home.join("store"))?,
            role: r.get("brokerRole", BrokerRole::AsyncMaster)?,
            flush_disk_type: r.get("flushDiskType", FlushDiskType::Async)?,
            warm_mapped_file: r.get("warmMapedFileEnable", true)?,
            commit_log_segment_bytes: r.get_checked(
                "mapedFileSizeCommitLog",
                1u64 << 30,
                in_range(64 * 1024, 1u64 << 40),
            )?,
            consume_queue_entries: cq_bytes / 20,
            index_slots: r.get_checked("maxHashSlotNum", 5_000_000u32, in_range(1, u32::MAX))?,
            index_entries: r.get_checked("maxIndexNum", 20_000_000u32, in_range(2, u32::MAX))?,
            file_reserved_hours: r.get("fileReservedTime", 72u64)?,
            delete_when: parse_hours(&delete_when).unwrap_or_default(),
            disk_max_used_ratio: r.get_checked("diskMaxUsedSpaceRatio", 75u32, in_range(10, 95))?
                as u8,
            disk_clean_forcibly_ratio: r.get_checked(
                "diskSpaceCleanForciblyRatio",
                85u32,
                in_range(10, 99),
            )? as u8,
            disk_refuse_ratio: r.get_checked(
                "diskSpaceWarningLevelRatio",
                90u32,
                in_range(10, 99),
            )? as u8,
            auto_create_topic: r.get("autoCreateTopicEnable", true)?,
            auto_create_subscription_group: r.get("autoCreateSubscriptionGroup", true)?,
            default_topic_queue_nums: r.get_checked(
                "defaultTopicQueueNums",
                8i32,
                in_range(1, 1024),
            )?,
            max_message_size: r.get_checked(
                "maxMessageSize",
                4usize * 1024 * 1024,
                in_range(1, 64 * 1024 * 1024),
            )?,
            sync_flush_timeout: ms(r, "syncFlushTimeout", 5_000, 1, 600_000)?,
            flush_interval: ms(r, "flushIntervalCommitLog", 500, 1, 60_000)?,
            long_polling: r.get("longPollingEnable", true)?,
            short_polling: ms(r, "shortPollingTimeMills", 1_000, 0, 60_000)?,
            slave_read_enable: r.get("slaveReadEnable", false)?,
            access_message_in_memory_max_ratio: r.get_checked(
                "accessMessageInMemoryMaxRatio",
                40u32,
                in_range(0, 100),
            )?,
            enable_property_filter: r.get("enablePropertyFilter", true)?,
            register_period: ms(r, "registerNameServerPeriod", 30_000, 0, u64::MAX)?
                .clamp(Duration::from_secs(10), Duration::from_secs(60)),
            client_expiry: ms(r, "channelExpiredTimeout", 120_000, 1_000, 3_600_000)?,
            clean_interval: ms(r, "cleanResourceInterval", 10_000, 10, 3_600_000)?,
            delay_levels: DelayLevels::parse(&delay_levels).unwrap_or_default(),
            reject_transaction_message: r.get("rejectTransactionMessage", false)?,
            // RocketMQ 4.9's defaults (5.x checks every 30 s).
            transaction_check_interval: ms(r, "transactionCheckInterval", 60_000, 10, 86_400_000)?,
            transaction_timeout: ms(r, "transactionTimeOut", 6_000, 0, 86_400_000)?,
            transaction_check_max: r.get_checked(
                "transactionCheckMax",
                15u32,
                in_range(1, 10_000),
            )?,
            timer: crate::timer::TimerSettings::read(r)?,
            controller: crate::controller::ControllerSettings::read(r)?,
            metrics: crate::metrics::MetricsSettings::read(
                r,
                crate::metrics::settings::DEFAULT_PROM_PORT,
            )?,
            ha_listen_port: r.get_opt("haListenPort")?,
            ha_master_address: r.get_opt::<String>("haMasterAddress")?,
            ha_heartbeat_interval: ms(r, "haSendHeartbeatInterval", 5_000, 10, 600_000)?,
            ha_housekeeping_interval: ms(r, "haHousekeepingInterval", 20_000, 100, 3_600_000)?,
            ha_max_slave_connections: r.get_checked(
                "haMaxSlaveConnections",
                16usize,
                in_range(1, 1024),
            )?,
            ha_transfer_batch_size: r.get_checked(
                "haTransferBatchSize",
                32usize * 1024,
                in_range(1024, 16 * 1024 * 1024),
            )?,
            ha_max_gap_not_in_sync: r.get_checked(
                "haMaxGapNotInSync",
                256u64 * 1024 * 1024,
                in_range(0, u64::MAX),
            )?,
            duplicate_check_window: Duration::from_secs(r.get_checked(
                "duplicateCheckWindowSeconds",
                0u64,
                in_range(0, 86_400),
            )?),
            duplicate_check_max_keys: r.get_checked(
                "duplicateCheckMaxKeys",
                1_000_000usize,
                in_range(1, 100_000_000),
            )?,
            acl: tern_shell::acl::settings::AclSettings::read(r)?,
            inner_credentials: tern_shell::acl::settings::inner_credentials(r)?,
            pop: crate::pop::PopConfig::read(r)?,
            tls: tern_shell::tls::TlsSettings::read(r)?,
            broker_permission: r.get_checked(
                "brokerPermission",
                crate::topics::PERM_READ | crate::topics::PERM_WRITE,
                check_permission,
            )?,
            config_path: r.get_opt("brokerConfigPath")?,
            trace_topic: None,
            #[cfg(feature = "grpc")]
            proxy: None,
            effective: BTreeMap::new(),
        };
        let trace_topic_name: String =
            r.get_checked("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC".to_owned(), |s| {
                crate::topics::validate_topic(s).map_err(|e| e.to_string())
            })?;
        let cfg = BrokerConfig {
            trace_topic: r
                .get("traceTopicEnable", false)?
                .then_some(trace_topic_name),
            #[cfg(feature = "grpc")]
            proxy: {
                let s = tern_proxy::ProxySettings::read(r, cfg.max_message_size)?;
                r.get("enableProxy", false)?.then_some(s)
            },
            ..cfg
        };
        if let Some(a) = &cfg.ha_master_address {
            tern_shell::config::check_host_port(a)
                .map_err(|message| r.error("haMasterAddress", message))?;
        }
        // In controller mode the controller assigns the id and the role; the broker
        // starts fenced, as a slave that follows nobody until it is told.
        let cfg = if cfg.controller.enabled {
            BrokerConfig {
                role: BrokerRole::Slave,
                ..cfg
            }
        } else {
            cfg
        };
        match (cfg.role, cfg.broker_id) {
            _ if cfg.controller.enabled => {}
            (BrokerRole::Slave, 0) => {
                return Err(r.error("brokerId", "a slave's brokerId must be > 0".into()));
            }
            (BrokerRole::AsyncMaster | BrokerRole::SyncMaster, id) if id != 0 => {
                return Err(r.error("brokerId", format!("a master's brokerId is 0, not {id}")));
            }
            _ => {}
        }
        // Tern keeps its store files under one root; RocketMQ's keys that move one
        // elsewhere are honoured only when they name that place.
        for (key, sub) in STORE_PATHS {
            let at = cfg.store_root.join(sub);
            let given: PathBuf = r.get(key, at.clone())?;
            if given != at {
                return Err(r.error(
                    key,
                    format!(
                        "Tern keeps this at storePathRootDir/{sub} ({}), not {}: set \
                         storePathRootDir instead, or leave {key} out",
                        at.display(),
                        given.display()
                    ),
                ));
            }
        }
        // RocketMQ options with no effect here: accepted quietly so real broker.conf files
        // do not produce a wall of warnings.
        for key in [
            "rocketmqHome",
            "sendMessageThreadPoolNums",
            "pullMessageThreadPoolNums",
            "useEpollNativeSelector",
            "serverWorkerThreads",
            "serverSelectorThreads",
            "transientStorePoolEnable",
        ] {
            r.ignore(key);
        }
        Ok(BrokerConfig {
            effective: r.effective().clone(),
            ..cfg
        })
    }
}

/// `brokerPermission`: RocketMQ's perm bits, read (4), write (2), inherit (1).
fn check_permission(p: &i32) -> Result<(), String> {
    if (0..=7).contains(p) {
        Ok(())
    } else {
        Err(format!(
            "{p} is not a permission: read 4, write 2, both 6 (RocketMQ's PermName)"
        ))
    }
}

fn non_empty(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(())
    }
}

fn parse_hours(s: &str) -> Result<Vec<u8>, String> {
    s.split(';')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| match h.parse::<u8>() {
            Ok(n) if n < 24 => Ok(n),
            _ => Err(format!("'{h}' is not an hour 0..23")),
        })
        .collect()
}

impl BrokerConfig {
    /// The address this broker advertises: `brokerIP1:port`.
    pub fn advertised_addr(&self, bound_port: u16) -> SocketAddr {
        SocketAddr::new(self.broker_ip1, bound_port)
    }

    /// The configuration read at start as `key=value` lines, sorted, keys without a
    /// value left out (Java omits its null fields): [`live::LiveConfig::render`] is
    /// what a running broker answers.
    pub fn render(&self) -> String {
        live::render(&self.effective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::config::{ConfigSource, load};

    #[test]
    fn file_sets_known_keys_and_warns_about_unknown_ones() {
        let src = ConfigSource::parse_properties(
            "# comment\nbrokerClusterName = C1\nbrokerName=b1\nlistenPort=10999\nflushDiskType=SYNC_FLUSH\nnamesrvAddr=a:9876;b:9876\nsomeJavaOnlyKey=1\n",
            "broker.conf",
        );
        let l = load::<BrokerConfig>(&src).unwrap();
        let c = l.config;
        assert_eq!(c.cluster_name, "C1");
        assert_eq!(c.listen_port, 10999);
        assert_eq!(c.flush_disk_type, FlushDiskType::Sync);
        assert_eq!(c.namesrv_addrs, vec!["a:9876", "b:9876"]);
        assert_eq!(l.warnings.len(), 1);
        assert!(
            l.warnings[0].contains("someJavaOnlyKey"),
            "{:?}",
            l.warnings
        );
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let src = ConfigSource::parse_properties("\nlistenPort=abc\n", "broker.conf");
        let e = load::<BrokerConfig>(&src).unwrap_err().to_string();
        assert!(
            e.contains("broker.conf:2") && e.contains("listenPort"),
            "{e}"
        );
        let src = ConfigSource::parse_properties("namesrvAddr=nohost\n", "broker.conf");
        assert!(
            load::<BrokerConfig>(&src)
                .unwrap_err()
                .to_string()
                .contains("namesrvAddr")
        );
        let src = ConfigSource::parse_properties("flushDiskType=SOMETIMES\n", "broker.conf");
        assert!(
            load::<BrokerConfig>(&src)
                .unwrap_err()
                .to_string()
                .contains("flushDiskType")
        );
        let src = ConfigSource::parse_properties("\n\nmessageDelayLevel=1s 5x\n", "broker.conf");
        let e = load::<BrokerConfig>(&src).unwrap_err().to_string();
        assert!(
            e.contains("broker.conf:3") && e.contains("messageDelayLevel") && e.contains("level 2"),
            "{e}"
        );
    }

    #[test]
    fn broker_ips_default_to_the_bound_address_or_a_routable_one() {
        let c = load::<BrokerConfig>(&ConfigSource::parse_properties(
            "listenAddr=127.0.0.3\n",
            "broker.conf",
        ))
        .unwrap()
        .config;
        assert_eq!(c.broker_ip1, IpAddr::from([127, 0, 0, 3]));
        assert_eq!(c.broker_ip2, c.broker_ip1);
        assert!(c.render().contains("brokerIP1=127.0.0.3\n"));
        // Bound to every interface: never the unspecified address.
        assert!(!default_broker_ip(IpAddr::from([0, 0, 0, 0])).is_unspecified());
        let c = load::<BrokerConfig>(&ConfigSource::parse_properties(
            "brokerIP1=10.0.0.1\nbrokerIP2=10.0.0.2\n",
            "broker.conf",
        ))
        .unwrap()
        .config;
        assert_eq!(
            (c.broker_ip1, c.broker_ip2),
            (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]))
        );
    }

    #[test]
    fn store_paths_elsewhere_than_under_the_root_are_refused_by_name() {
        let ok = "storePathRootDir=/data/s\nstorePathCommitLog=/data/s/commitlog/\n";
        let c = load::<BrokerConfig>(&ConfigSource::parse_properties(ok, "broker.conf")).unwrap();
        assert_eq!(c.config.effective["storePathIndex"], "/data/s/index");
        let bad = "storePathRootDir=/data/s\n\nabortFile=/tmp/abort\n";
        let e = load::<BrokerConfig>(&ConfigSource::parse_properties(bad, "broker.conf"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("broker.conf:3") && e.contains("abortFile") && e.contains("/data/s/abort"),
            "{e}"
        );
    }

    #[test]
    fn delay_levels_default_to_rocketmqs_and_are_configurable() {
        assert_eq!(BrokerConfig::default().delay_levels, DelayLevels::ROCKETMQ);
        let src = ConfigSource::parse_properties("messageDelayLevel=1s 2s 3m\n", "broker.conf");
        let c = load::<BrokerConfig>(&src).unwrap().config;
        assert_eq!(c.delay_levels.len(), 3);
        assert_eq!(c.delay_levels.delay_ms(3), Some(180_000));
        assert!(
            c.render().contains("messageDelayLevel=1s 2s 3m"),
            "{}",
            c.render()
        );
    }
}
