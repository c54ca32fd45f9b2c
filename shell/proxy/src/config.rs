//! The endpoint's keys, named as RocketMQ's proxy names them (`rmq-proxy.json`), read from
//! the broker's configuration in LOCAL mode.

use std::time::Duration;

use tern_shell::config::{ConfigError, ConfigReader, ConfigValue, check_host_port, in_range};

/// What the gRPC endpoint is told.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxySettings {
    /// Listen port (`grpcServerPort`, 8081 as the proxy's; 0 picks a free one).
    pub port: u16,
    /// Largest request the endpoint decodes (`grpcMaxInboundMessageSize`, 130 MiB).
    pub max_inbound_bytes: usize,
    /// Threads of the endpoint's own runtime (`grpcWorkerThreads`, Tern's key; the proxy's
    /// `grpcWorkerLoopNum`).
    pub worker_threads: usize,
    /// Largest body a client may send (`maxMessageSize`, the broker's 4 MiB); also told
    /// to producers as `publishing.max_body_size`.
    pub max_message_size: usize,
    /// Bounds of a receive's long poll (`grpcClientConsumerMinLongPollingTimeoutMillis`
    /// 5 s, `...Max...` 20 s).
    pub min_long_polling: Duration,
    /// See `min_long_polling`; also told to consumers.
    pub max_long_polling: Duration,
    /// Told to consumers as `receive_batch_size` (`grpcClientConsumerLongPollingBatchSize`).
    pub receive_batch_size: i32,
    /// A receive with `auto_renew` hides its messages this long
    /// (`defaultInvisibleTimeMills`, 60 s).
    pub default_invisible: Duration,
    /// Bounds of a receive's invisible duration (`minInvisibleTimeMillsForRecv` 10 s,
    /// `maxInvisibleTimeMills` 12 h).
    pub min_invisible: Duration,
    /// See `min_invisible`; also the bound of ChangeInvisibleDuration.
    pub max_invisible: Duration,
    /// Farthest a delivery time may be ahead (`maxDelayTimeMills`, 1 day).
    pub max_delay: Duration,
    /// Longest message group (`maxMessageGroupSize`, 64 bytes).
    pub max_message_group: usize,
    /// Most user properties (`userPropertyMaxNum`, 128) and their bytes with tag and keys
    /// (`maxUserPropertySize`, 16 KiB).
    pub max_user_properties: usize,
    /// See `max_user_properties`.
    pub max_user_property_bytes: usize,
    /// Sends must match the topic's `message.type` (`enableTopicMessageTypeCheck`).
    pub topic_message_type_check: bool,
    /// Producers' retry policy (`grpcClientProducerMaxAttempts` 3,
    /// `grpcClientProducerBackoffInitialMillis` 10, `...MaxMillis` 1000,
    /// `...Multiplier` 2).
    pub producer_max_attempts: i32,
    /// See `producer_max_attempts`.
    pub producer_backoff_initial: Duration,
    /// See `producer_max_attempts`.
    pub producer_backoff_max: Duration,
    /// See `producer_max_attempts`.
    pub producer_backoff_multiplier: f32,
    /// A client silent this long is forgotten (`grpcClientIdleTimeMills`, 120 s).
    pub client_idle: Duration,
}

impl Default for ProxySettings {
    fn default() -> Self {
        Self {
            port: 8081,
            max_inbound_bytes: 130 << 20,
            worker_threads: 2,
            max_message_size: 4 << 20,
            min_long_polling: Duration::from_secs(5),
            max_long_polling: Duration::from_secs(20),
            receive_batch_size: 32,
            default_invisible: Duration::from_secs(60),
            min_invisible: Duration::from_secs(10),
            max_invisible: Duration::from_secs(12 * 3600),
            max_delay: Duration::from_secs(86_400),
            max_message_group: 64,
            max_user_properties: 128,
            max_user_property_bytes: 16 * 1024,
            topic_message_type_check: true,
            producer_max_attempts: 3,
            producer_backoff_initial: Duration::from_millis(10),
            producer_backoff_max: Duration::from_millis(1000),
            producer_backoff_multiplier: 2.0,
            client_idle: Duration::from_secs(120),
        }
    }
}

impl ProxySettings {
    /// Reads the keys; `max_message_size` is the caller's (the broker's `maxMessageSize`).
    pub fn read(r: &mut ConfigReader<'_>, max_message_size: usize) -> Result<Self, ConfigError> {
        let d = Self::default();
        let ms = |r: &mut ConfigReader<'_>, key: &str, default: Duration, lo: u64, hi: u64| {
            r.get_checked(key, default.as_millis() as u64, in_range(lo, hi))
                .map(Duration::from_millis)
        };
        let min_long_polling = ms(
            r,
            "grpcClientConsumerMinLongPollingTimeoutMillis",
            d.min_long_polling,
            0,
            300_000,
        )?;
        let max_long_polling = ms(
            r,
            "grpcClientConsumerMaxLongPollingTimeoutMillis",
            d.max_long_polling,
            1,
            300_000,
        )?;
        if min_long_polling > max_long_polling {
            return Err(r.error(
                "grpcClientConsumerMinLongPollingTimeoutMillis",
                "must not exceed grpcClientConsumerMaxLongPollingTimeoutMillis".into(),
            ));
        }
        Ok(Self {
            port: r.port("grpcServerPort", d.port)?,
            max_inbound_bytes: r.get_checked(
                "grpcMaxInboundMessageSize",
                d.max_inbound_bytes,
                in_range(1 << 20, 1 << 30),
            )?,
            worker_threads: r.get_checked(
                "grpcWorkerThreads",
                d.worker_threads,
                in_range(1, 64),
            )?,
            max_message_size,
            min_long_polling,
            max_long_polling,
            receive_batch_size: r.get_checked(
                "grpcClientConsumerLongPollingBatchSize",
                d.receive_batch_size,
                in_range(1, 32),
            )?,
            default_invisible: ms(
                r,
                "defaultInvisibleTimeMills",
                d.default_invisible,
                1_000,
                43_200_000,
            )?,
            min_invisible: ms(
                r,
                "minInvisibleTimeMillsForRecv",
                d.min_invisible,
                0,
                43_200_000,
            )?,
            max_invisible: ms(
                r,
                "maxInvisibleTimeMills",
                d.max_invisible,
                1_000,
                7 * 86_400_000,
            )?,
            max_delay: ms(r, "maxDelayTimeMills", d.max_delay, 0, 400 * 86_400_000)?,
            max_message_group: r.get_checked(
                "maxMessageGroupSize",
                d.max_message_group,
                in_range(1, 4096),
            )?,
            max_user_properties: r.get_checked(
                "userPropertyMaxNum",
                d.max_user_properties,
                in_range(1, 4096),
            )?,
            max_user_property_bytes: r.get_checked(
                "maxUserPropertySize",
                d.max_user_property_bytes,
                in_range(1, 32 * 1024),
            )?,
            topic_message_type_check: r
                .get("enableTopicMessageTypeCheck", d.topic_message_type_check)?,
            producer_max_attempts: r.get_checked(
                "grpcClientProducerMaxAttempts",
                d.producer_max_attempts,
                in_range(1, 100),
            )?,
            producer_backoff_initial: ms(
                r,
                "grpcClientProducerBackoffInitialMillis",
                d.producer_backoff_initial,
                1,
                3_600_000,
            )?,
            producer_backoff_max: ms(
                r,
                "grpcClientProducerBackoffMaxMillis",
                d.producer_backoff_max,
                1,
                3_600_000,
            )?,
            producer_backoff_multiplier: r.get_checked(
                "grpcClientProducerBackoffMultiplier",
                2u32,
                in_range(1, 100),
            )? as f32,
            client_idle: ms(
                r,
                "grpcClientIdleTimeMills",
                d.client_idle,
                10_000,
                3_600_000,
            )?,
        })
    }
}

/// The `tern-proxy` binary's configuration (CLUSTER mode): RocketMQ's `rmq-proxy.json` keys
/// where they exist, the broker's for ACL, TLS and credentials.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The endpoint's keys.
    pub proxy: ProxySettings,
    /// The name servers (`namesrvAddr`, `;`-separated; RocketMQ's default is the
    /// `NAMESRV_ADDR` environment variable).
    pub namesrv_addrs: Vec<String>,
    /// The cluster whose brokers hold the groups (`rocketMQClusterName`, DefaultCluster).
    pub cluster_name: String,
    /// Address the gRPC port binds (`listenAddr`, Tern's broker key; 0.0.0.0).
    pub listen_ip: std::net::IpAddr,
    /// The metadata cache.
    pub cache: crate::cluster::CacheSettings,
    /// Access control of the 5.x clients' calls (`aclEnable`, `plainAclFile`).
    pub acl: tern_shell::acl::settings::AclSettings,
    /// TLS of the gRPC port (`tls.server.*`) and to the brokers (`tls.enable`, `tls.client.*`).
    pub tls: tern_shell::tls::TlsSettings,
    /// How the proxy signs its requests to the brokers
    /// (`innerClientAuthenticationCredentials`).
    pub credentials: Option<tern_shell::acl::SessionCredentials>,
}

impl tern_shell::config::Config for ClusterConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let mode: String = r.get("proxyMode", "cluster".to_owned())?;
        if !mode.eq_ignore_ascii_case("cluster") {
            return Err(r.error(
                "proxyMode",
                format!(
                    "tern-proxy runs in CLUSTER mode, not {mode}: LOCAL mode is \
                     `tern-broker --enable-proxy`"
                ),
            ));
        }
        let from_env: Vec<String> = std::env::var("NAMESRV_ADDR")
            .ok()
            .and_then(|v| <Vec<String> as ConfigValue>::parse_value(&v).ok())
            .unwrap_or_default();
        let namesrv_addrs: Vec<String> =
            r.get_checked("namesrvAddr", from_env, |v: &Vec<String>| {
                v.iter().try_for_each(|a| check_host_port(a))
            })?;
        if namesrv_addrs.is_empty() {
            return Err(r.error(
                "namesrvAddr",
                "no name server: set namesrvAddr, -n, or NAMESRV_ADDR".into(),
            ));
        }
        let listen: String = r.get_checked("listenAddr", "0.0.0.0".to_owned(), |s| {
            s.parse::<std::net::IpAddr>()
                .map(drop)
                .map_err(|_| format!("invalid IP address '{s}'"))
        })?;
        let max_message_size =
            r.get_checked("maxMessageSize", 4usize << 20, in_range(1, 1 << 30))?;
        Ok(Self {
            proxy: ProxySettings::read(r, max_message_size)?,
            namesrv_addrs,
            cluster_name: r.get_checked(
                "rocketMQClusterName",
                "DefaultCluster".to_owned(),
                |s| {
                    if s.trim().is_empty() {
                        Err("must not be empty".into())
                    } else {
                        Ok(())
                    }
                },
            )?,
            listen_ip: listen.parse().unwrap_or(std::net::IpAddr::V4(0.into())),
            cache: crate::cluster::CacheSettings::read(r)?,
            acl: tern_shell::acl::settings::AclSettings::read(r)?,
            tls: tern_shell::tls::TlsSettings::read(r)?,
            credentials: tern_shell::acl::settings::inner_credentials(r)?,
        })
    }
}
