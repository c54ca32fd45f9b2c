//! Client settings, with Java's `ClientConfig` defaults (wire-protocol.md §6.10).

use std::net::IpAddr;
use std::time::Duration;

use tern_shell::acl::SessionCredentials;
use tern_shell::tls::ClientTls;

/// Settings shared by every producer, consumer and admin on one [`crate::ClientInstance`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Name servers, tried in order; the next one is used when one cannot be reached.
    pub namesrv_addrs: Vec<String>,
    /// Second half of the client id (`ip@instance`); defaults to the process id plus a
    /// per-process counter, so two instances in one process do not share an id.
    pub instance_name: Option<String>,
    /// The address put in the client id and message ids; defaults to the local address
    /// used to reach the first name server.
    pub client_ip: Option<IpAddr>,
    /// Budget of one request to a name server or broker (admin calls, offsets...).
    pub rpc_timeout: Duration,
    /// Budget of one TCP connect.
    pub connect_timeout: Duration,
    /// How often heartbeats go to every broker in the routes (Java: 30 s).
    pub heartbeat_interval: Duration,
    /// How often cached routes are refreshed from the name servers (Java: 30 s).
    pub poll_name_server_interval: Duration,
    /// ACL account: every request is signed with it (Java's `AclClientRPCHook`).
    pub credentials: Option<SessionCredentials>,
    /// TLS to name servers and brokers (`tls.enable`, `tls.client.*`;
    /// [`crate::ClientTls::new`]). None connects in plaintext.
    pub tls: Option<ClientTls>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            namesrv_addrs: Vec::new(),
            instance_name: None,
            client_ip: None,
            rpc_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            heartbeat_interval: Duration::from_secs(30),
            poll_name_server_interval: Duration::from_secs(30),
            credentials: None,
            tls: None,
        }
    }
}

impl ClientConfig {
    /// A config for the name servers in `addrs` (`"host:port;host:port"`, as
    /// `namesrvAddr` and mqadmin's `-n` take them; commas work too).
    pub fn new(addrs: &str) -> Self {
        Self {
            namesrv_addrs: split_addrs(addrs),
            ..Self::default()
        }
    }
}

/// Splits `"a:1;b:2"` (or commas) into trimmed, non-empty addresses.
pub fn split_addrs(addrs: &str) -> Vec<String> {
    addrs
        .split([';', ','])
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Producer settings, with `DefaultMQProducer`'s defaults.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Producer group (transaction check-backs go to it; heartbeats announce it).
    pub group: String,
    /// Budget of one send including its retries (Java: 3000 ms).
    pub send_timeout: Duration,
    /// Extra attempts of a sync or async send on another broker/queue (Java: 2).
    pub retry_times_when_send_failed: u32,
    /// Bodies at least this long are compressed (Java: 4096).
    pub compress_over_bytes: usize,
    /// How (RocketMQ 5's `compressType`: ZLIB, the default and the only one 4.x
    /// consumers read, LZ4 or ZSTD).
    pub compress_type: tern_shell::message::Compression,
    /// Level for zlib (0-9) and ZSTD (1-22); LZ4 ignores it (RocketMQ 5's
    /// `compressLevel`, default 5).
    pub compress_level: i32,
    /// Largest body (or batch body) sent; larger is refused before sending (4 MiB).
    pub max_message_bytes: usize,
    /// Queues of a topic auto-created from TBW102 (Java: 4).
    pub default_topic_queue_nums: i32,
    /// The template topic for auto-creation (Java: `TBW102`).
    pub create_topic_key: String,
    /// Avoid brokers whose sends were slow or failed, for a time growing with the
    /// latency (Java's `sendLatencyFaultEnable`, default false; see
    /// [`crate::producer::fault`]).
    pub send_latency_fault_enable: bool,
}

impl ProducerConfig {
    /// Defaults for `group`.
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            send_timeout: Duration::from_millis(3000),
            retry_times_when_send_failed: 2,
            compress_over_bytes: tern_shell::message::COMPRESS_OVER_BYTES,
            compress_type: tern_shell::message::Compression::Zlib,
            compress_level: tern_shell::message::DEFAULT_COMPRESS_LEVEL,
            max_message_bytes: 4 * 1024 * 1024,
            default_topic_queue_nums: 4,
            create_topic_key: AUTO_CREATE_TOPIC_KEY.to_owned(),
            send_latency_fault_enable: false,
        }
    }
}

/// The topic whose route stands in for topics not created yet.
pub const AUTO_CREATE_TOPIC_KEY: &str = "TBW102";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namesrv_lists_split_on_semicolons_and_commas() {
        assert_eq!(split_addrs(" a:1; b:2,c:3;"), vec!["a:1", "b:2", "c:3"]);
    }
}
