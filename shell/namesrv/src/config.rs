//! The name server's configuration: RocketMQ's `NamesrvConfig` and `NettyServerConfig`
//! keys we honour, read from a `namesrv.conf` properties file and flags.

use std::path::PathBuf;

use tern_shell::acl::settings::AclSettings;
use tern_shell::config::{Config, ConfigError, ConfigReader};
use tern_shell::metrics::{ExporterType, MetricsSettings};
use tern_shell::tls::ServerTlsSettings;

/// RocketMQ's name server port.
pub const DEFAULT_PORT: u16 = 9876;
/// Java's `BROKER_CHANNEL_EXPIRED_TIME`: a broker silent this long is dropped.
pub const DEFAULT_BROKER_EXPIRED_MILLIS: u64 = 120_000;
/// Java's scan period for silent brokers.
pub const DEFAULT_SCAN_INTERVAL_MILLIS: u64 = 5_000;
/// `metricsPromExporterPort` of the name server. RocketMQ's name server exports no
/// metrics; Tern reads the broker's keys, one port past the broker's 5557 so that a
/// name server and a broker on one host both serve by default ports.
pub const DEFAULT_PROM_PORT: u16 = 5558;

/// Everything the name server needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamesrvConfig {
    /// Address to bind (`bindAddress`, 5.x); `0.0.0.0` serves every interface.
    pub bind_address: String,
    /// TCP port (`listenPort`); 0 picks a free one (tests).
    pub listen_port: u16,
    /// Where KV config is persisted (`kvConfigPath`, Java default `~/namesrv/kvConfig.json`).
    pub kv_config_path: PathBuf,
    /// Broker expiry without register/heartbeat (`brokerExpiredMillis`), short in tests.
    pub broker_expired_millis: u64,
    /// How often silent brokers are looked for (`scanNotActiveBrokerInterval`).
    pub scan_not_active_broker_interval_millis: u64,
    /// Serve GET_ALL_TOPIC_LIST_FROM_NAMESERVER (`enableAllTopicList`); off hides topics.
    pub enable_all_topic_list: bool,
    /// Serve topic-by-cluster, system and unit topic lists (`enableTopicList`).
    pub enable_topic_list: bool,
    /// Put the ORDER_TOPIC_CONFIG KV entry into routes as `orderTopicConf`
    /// (`orderMessageEnable`, Java default false).
    pub order_message_enable: bool,
    /// Return the ORDER_TOPIC_CONFIG namespace to registering brokers
    /// (`returnOrderTopicConfigToBroker`, default true).
    pub return_order_topic_config_to_broker: bool,
    /// Close client connections idle this long (`serverChannelMaxIdleTimeSeconds`).
    pub server_channel_max_idle_time_seconds: u64,
    /// The Prometheus endpoint (`metricsExporterType`, `metricsPromExporterHost`,
    /// `metricsPromExporterPort`, the broker's keys; port [`DEFAULT_PROM_PORT`]).
    pub metrics: MetricsSettings,
    /// TLS on the port (`tls.server.*`, RocketMQ's keys; docs/tls.md).
    pub tls: ServerTlsSettings,
    /// Access control (`aclEnable`, `plainAclFile`, `aclReplayWindowSeconds`: the
    /// broker's keys; Tern's addition on the name server).
    pub acl: AclSettings,
    /// `enableControllerInNamesrv=true`: a controller node in this process, configured by
    /// the controller keys of the same file (RocketMQ 5's embedded controller). It serves
    /// on its peer address's port, beside the name server's.
    #[cfg(feature = "controller")]
    pub controller: Option<tern_controller::ControllerConfig>,
}

impl Default for NamesrvConfig {
    fn default() -> Self {
        Self {
            bind_address: "0.0.0.0".into(),
            listen_port: DEFAULT_PORT,
            kv_config_path: default_kv_path(),
            broker_expired_millis: DEFAULT_BROKER_EXPIRED_MILLIS,
            scan_not_active_broker_interval_millis: DEFAULT_SCAN_INTERVAL_MILLIS,
            enable_all_topic_list: true,
            enable_topic_list: true,
            order_message_enable: false,
            return_order_topic_config_to_broker: true,
            server_channel_max_idle_time_seconds: 120,
            metrics: MetricsSettings {
                exporter: ExporterType::Disable,
                host: String::new(),
                port: DEFAULT_PROM_PORT,
            },
            tls: ServerTlsSettings::default(),
            acl: AclSettings::default(),
            #[cfg(feature = "controller")]
            controller: None,
        }
    }
}

/// `$HOME/namesrv/kvConfig.json`, where Java keeps it.
fn default_kv_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join("namesrv").join("kvConfig.json")
}

/// The KV file under a `--home` directory.
pub fn kv_path_in_home(home: &std::path::Path) -> PathBuf {
    home.join("kvConfig.json")
}

fn positive(v: &u64) -> Result<(), String> {
    if *v == 0 {
        Err("must be greater than 0".into())
    } else {
        Ok(())
    }
}

impl Config for NamesrvConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let cfg = Self {
            bind_address: r.get("bindAddress", d.bind_address)?,
            listen_port: r.port("listenPort", d.listen_port)?,
            kv_config_path: r.get("kvConfigPath", d.kv_config_path)?,
            broker_expired_millis: r.get_checked(
                "brokerExpiredMillis",
                d.broker_expired_millis,
                positive,
            )?,
            scan_not_active_broker_interval_millis: r.get_checked(
                "scanNotActiveBrokerInterval",
                d.scan_not_active_broker_interval_millis,
                positive,
            )?,
            enable_all_topic_list: r.get("enableAllTopicList", d.enable_all_topic_list)?,
            enable_topic_list: r.get("enableTopicList", d.enable_topic_list)?,
            order_message_enable: r.get("orderMessageEnable", d.order_message_enable)?,
            return_order_topic_config_to_broker: r.get(
                "returnOrderTopicConfigToBroker",
                d.return_order_topic_config_to_broker,
            )?,
            server_channel_max_idle_time_seconds: r.get_checked(
                "serverChannelMaxIdleTimeSeconds",
                d.server_channel_max_idle_time_seconds,
                positive,
            )?,
            metrics: MetricsSettings::read(r, DEFAULT_PROM_PORT)?,
            tls: ServerTlsSettings::read(r)?,
            acl: AclSettings::read(r)?,
            #[cfg(feature = "controller")]
            controller: if r.get("enableControllerInNamesrv", false)? {
                Some(tern_controller::ControllerConfig::read_embedded(r)?)
            } else {
                None
            },
        };
        #[cfg(not(feature = "controller"))]
        if r.get("enableControllerInNamesrv", false)? {
            return Err(r.error(
                "enableControllerInNamesrv",
                "this tern-namesrv was built without the controller (feature `controller`)".into(),
            ));
        }
        // Java options with no effect here: accepted silently so real namesrv.conf files
        // do not produce a wall of warnings.
        for key in [
            "rocketmqHome",
            "configStorePath",
            "productEnvName",
            "clusterTest",
            "serverWorkerThreads",
            "serverCallbackExecutorThreads",
            "serverSelectorThreads",
            "serverOnewaySemaphoreValue",
            "serverAsyncSemaphoreValue",
            "serverSocketSndBufSize",
            "serverSocketRcvBufSize",
            "serverPooledByteBufAllocatorEnable",
            "useEpollNativeSelector",
            "defaultThreadPoolNums",
            "clientRequestThreadPoolNums",
            "clientRequestThreadPoolQueueCapacity",
            "defaultThreadPoolQueueCapacity",
        ] {
            r.ignore(key);
        }
        Ok(cfg)
    }
}

impl NamesrvConfig {
    /// `bindAddress:listenPort`, what the server binds.
    pub fn listen_addr(&self) -> String {
        if self.bind_address.contains(':') && !self.bind_address.starts_with('[') {
            format!("[{}]:{}", self.bind_address, self.listen_port)
        } else {
            format!("{}:{}", self.bind_address, self.listen_port)
        }
    }
}

/// Keys UPDATE_NAMESRV_CONFIG may change while the name server runs: each is read where
/// it is used, per request. The rest are read once at start (the listener, the KV file,
/// the expiry task's period, the idle timeout), so changing them means a restart.
pub const RUNTIME_KEYS: [&str; 5] = [
    "brokerExpiredMillis",
    "enableAllTopicList",
    "enableTopicList",
    "orderMessageEnable",
    "returnOrderTopicConfigToBroker",
];

/// Keys RocketMQ never lets UPDATE_NAMESRV_CONFIG touch (`configBlackList`'s defaults).
pub const BLACK_LIST: [&str; 4] = [
    "configBlackList",
    "configStorePath",
    "kvConfigPath",
    "rocketmqHome",
];

/// Why UPDATE_NAMESRV_CONFIG refused an update (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateRefused {
    /// A black-listed key (RocketMQ answers NO_PERMISSION).
    BlackListed,
    /// A value does not parse, or a key is unknown.
    Invalid(String),
    /// Keys that only take effect at start.
    NotAtRunTime(Vec<String>),
}

impl std::fmt::Display for UpdateRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // RocketMQ's remark, word for word.
            Self::BlackListed => f.write_str("Can not update config in black list."),
            Self::Invalid(why) => f.write_str(why),
            Self::NotAtRunTime(keys) => write!(
                f,
                "{} cannot change while the name server runs (keys that can: {}); set them in namesrv.conf and restart",
                keys.join(", "),
                RUNTIME_KEYS.join(", ")
            ),
        }
    }
}

impl NamesrvConfig {
    /// Every key with its value, sorted by key (GET_NAMESRV_CONFIG's `key=value` lines).
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            ("aclEnable", self.acl.enable.to_string()),
            (
                "aclReplayWindowSeconds",
                self.acl.replay_window.as_secs().to_string(),
            ),
            ("plainAclFile", self.acl.file.display().to_string()),
            ("bindAddress", self.bind_address.clone()),
            (
                "brokerExpiredMillis",
                self.broker_expired_millis.to_string(),
            ),
            ("enableAllTopicList", self.enable_all_topic_list.to_string()),
            ("enableTopicList", self.enable_topic_list.to_string()),
            ("kvConfigPath", self.kv_config_path.display().to_string()),
            ("listenPort", self.listen_port.to_string()),
            ("orderMessageEnable", self.order_message_enable.to_string()),
            (
                "returnOrderTopicConfigToBroker",
                self.return_order_topic_config_to_broker.to_string(),
            ),
            (
                "scanNotActiveBrokerInterval",
                self.scan_not_active_broker_interval_millis.to_string(),
            ),
            (
                "serverChannelMaxIdleTimeSeconds",
                self.server_channel_max_idle_time_seconds.to_string(),
            ),
        ];
        out.sort();
        out
    }

    /// The configuration after `update` (Java properties text), checked as a file would
    /// be: every key known, every value valid, and only [`RUNTIME_KEYS`] changed.
    pub fn updated(&self, update: &str) -> Result<NamesrvConfig, UpdateRefused> {
        let changes = tern_shell::config::ConfigSource::parse_properties(update, "update");
        if changes.iter().any(|(k, _)| BLACK_LIST.contains(&k)) {
            return Err(UpdateRefused::BlackListed);
        }
        let mut source = tern_shell::config::ConfigSource::new();
        for (k, v) in self.properties() {
            source.set(k, v, tern_shell::config::Origin::Program);
        }
        source.merge(changes.clone());
        let loaded = tern_shell::config::load::<NamesrvConfig>(&source)
            .map_err(|e| UpdateRefused::Invalid(e.to_string()))?;
        if let Some(w) = loaded.warnings.first() {
            return Err(UpdateRefused::Invalid(w.clone()));
        }
        let before = self.properties();
        let after = loaded.config.properties();
        let fixed: Vec<String> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b != a && !RUNTIME_KEYS.contains(&b.0))
            .map(|(b, _)| b.0.to_owned())
            .collect();
        if !fixed.is_empty() {
            return Err(UpdateRefused::NotAtRunTime(fixed));
        }
        Ok(loaded.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::config::{ConfigSource, load};

    #[test]
    fn defaults_match_rocketmq() {
        let c = load::<NamesrvConfig>(&ConfigSource::new()).unwrap().config;
        assert_eq!(c.listen_port, 9876);
        assert_eq!(c.broker_expired_millis, 120_000);
        assert_eq!(c.scan_not_active_broker_interval_millis, 5_000);
        assert_eq!(c.listen_addr(), "0.0.0.0:9876");
    }

    #[test]
    fn zero_expiry_is_rejected_with_its_key() {
        let src = ConfigSource::parse_properties("brokerExpiredMillis=0", "namesrv.conf");
        let err = load::<NamesrvConfig>(&src).unwrap_err();
        assert_eq!(
            err.to_string(),
            "namesrv.conf:1: brokerExpiredMillis: must be greater than 0"
        );
    }

    #[test]
    fn java_thread_pool_keys_are_accepted_silently() {
        let src = ConfigSource::parse_properties("serverWorkerThreads=8", "namesrv.conf");
        assert!(load::<NamesrvConfig>(&src).unwrap().warnings.is_empty());
    }

    #[test]
    fn an_update_changes_run_time_keys_and_refuses_the_rest() {
        let c = NamesrvConfig::default();
        let u = c
            .updated("enableTopicList=false\norderMessageEnable=true\n")
            .unwrap();
        assert!(!u.enable_topic_list && u.order_message_enable);
        assert_eq!(u.listen_port, c.listen_port);
        assert_eq!(
            c.updated("kvConfigPath=/tmp/x"),
            Err(UpdateRefused::BlackListed)
        );
        assert!(matches!(
            c.updated("listenPort=1234"),
            Err(UpdateRefused::NotAtRunTime(k)) if k == ["listenPort"]
        ));
        assert!(matches!(
            c.updated("brokerExpiredMillis=0"),
            Err(UpdateRefused::Invalid(_))
        ));
        assert!(matches!(
            c.updated("noSuchKey=1"),
            Err(UpdateRefused::Invalid(_))
        ));
        // Setting a start-only key to its current value changes nothing: accepted.
        assert!(c.updated("listenPort=9876").is_ok());
    }
}
