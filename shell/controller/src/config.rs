//! The controller's configuration: RocketMQ's `ControllerConfig` keys (same names and
//! defaults, docs/design/controller.md §4) and Tern's Raft timing, read from a
//! `controller.conf` properties file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tern_shell::config::{Config, ConfigError, ConfigReader, check_host_port};

use crate::raft::Timing;

/// Everything a controller node needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `controllerDLegerGroup`: the group's name, shown by getControllerMetaData.
    pub group: String,
    /// `controllerDLegerPeers`: `n0-host:port;n1-host:port;…`, the same on every node.
    /// Each address is that node's controller port: brokers, tools and the other
    /// controllers (Raft) all connect to it.
    pub peers: BTreeMap<u64, String>,
    /// `controllerDLegerSelfId`: this node (`n<k>`).
    pub self_id: u64,
    /// `controllerStorePath`: the Raft log and snapshots (`~/DLedgerController`).
    pub store_path: PathBuf,
    /// `listenPort`: a second port serving the controller's requests, when set (RocketMQ
    /// serves them on the peer address only; its `listenPort` is overwritten by DLedger).
    pub listen_port: Option<u16>,
    /// `enableElectUncleanMaster`: may elect a replica outside the SyncStateSet (loses
    /// acknowledged messages).
    pub enable_elect_unclean_master: bool,
    /// `notifyBrokerRoleChanged`: push NOTIFY_BROKER_ROLE_CHANGED after an election.
    pub notify_broker_role_changed: bool,
    /// `scanNotActiveBrokerInterval`: how often expired heartbeats are looked for.
    pub scan_not_active_broker_interval: Duration,
    /// `scanInactiveMasterInterval`: how often the leader looks for sets without a live
    /// master.
    pub scan_inactive_master_interval: Duration,
    /// `electMasterMaxRetryCount`: tries of an election the controller started.
    pub elect_master_max_retry_count: u32,
    /// `processReadEvent`: answer reads (1004, 1006, 1012) only after confirming with a
    /// quorum that this node still leads (RocketMQ sends them through DLedger).
    pub process_read_event: bool,
    /// `controllerRaftHeartbeatMs`, `controllerRaftElectionMinMs`,
    /// `controllerRaftElectionMaxMs` (Tern's).
    pub timing: Timing,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            group: "DefaultControllerGroup".into(),
            peers: BTreeMap::new(),
            self_id: 0,
            store_path: default_store_path(),
            listen_port: None,
            enable_elect_unclean_master: false,
            notify_broker_role_changed: true,
            scan_not_active_broker_interval: Duration::from_millis(5000),
            scan_inactive_master_interval: Duration::from_millis(5000),
            elect_master_max_retry_count: 3,
            process_read_event: false,
            timing: Timing {
                heartbeat: Duration::from_millis(300),
                election_min: Duration::from_millis(1500),
                election_max: Duration::from_millis(3000),
            },
        }
    }
}

/// `~/DLedgerController`, RocketMQ's default for the DLedger controller.
fn default_store_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join("DLedgerController")
}

/// `n<k>` → `k`.
pub fn parse_node_id(id: &str) -> Result<u64, String> {
    id.strip_prefix('n')
        .and_then(|k| k.parse::<u64>().ok())
        .ok_or_else(|| format!("'{id}' is not a node id of the form n0, n1, …"))
}

/// `n0-host:port;n1-host:port;…` → id → address.
pub fn parse_peers(text: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('-')
            .ok_or_else(|| format!("peer '{part}' is not id-host:port"))?;
        let id = parse_node_id(id)?;
        check_host_port(addr).map_err(|e| format!("peer '{part}': {e}"))?;
        if peers.insert(id, addr.to_owned()).is_some() {
            return Err(format!("peer n{id} is listed twice"));
        }
    }
    if peers.is_empty() {
        return Err("no peers".into());
    }
    Ok(peers)
}

fn millis(r: &mut ConfigReader<'_>, key: &str, default: Duration) -> Result<Duration, ConfigError> {
    let ms: u64 = r.get_checked(key, default.as_millis() as u64, |v| {
        if *v == 0 {
            Err("must be greater than 0".into())
        } else {
            Ok(())
        }
    })?;
    Ok(Duration::from_millis(ms))
}

impl Config for ControllerConfig {
    fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        Self::read_keys(r, false)
    }
}

impl ControllerConfig {
    /// The controller keys of a name server's file (`enableControllerInNamesrv=true`):
    /// `listenPort` there is the name server's, so it is not read.
    pub fn read_embedded(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        Self::read_keys(r, true)
    }

    fn read_keys(r: &mut ConfigReader<'_>, embedded: bool) -> Result<Self, ConfigError> {
        let d = Self::default();
        let kind: String = r.get("controllerType", "DLedger".to_string())?;
        if kind != "DLedger" {
            return Err(r.error(
                "controllerType",
                format!("'{kind}' is not served: Tern's controller is a Raft group like DLedger's (controllerType=DLedger)"),
            ));
        }
        let group = r.get("controllerDLegerGroup", d.group)?;
        let peers_text: Option<String> = r.get_opt("controllerDLegerPeers")?;
        let peers_text = peers_text.ok_or_else(|| {
            r.error(
                "controllerDLegerPeers",
                "is required (n0-host:port;n1-host:port;…)".into(),
            )
        })?;
        let peers = parse_peers(&peers_text).map_err(|e| r.error("controllerDLegerPeers", e))?;
        let self_text: Option<String> = r.get_opt("controllerDLegerSelfId")?;
        let self_text = self_text
            .ok_or_else(|| r.error("controllerDLegerSelfId", "is required (n0, n1, …)".into()))?;
        let self_id =
            parse_node_id(&self_text).map_err(|e| r.error("controllerDLegerSelfId", e))?;
        if !peers.contains_key(&self_id) {
            return Err(r.error(
                "controllerDLegerSelfId",
                format!("{self_text} is not in controllerDLegerPeers"),
            ));
        }
        let store: String = r.get("controllerStorePath", String::new())?;
        let store_path = if store.is_empty() {
            d.store_path
        } else {
            PathBuf::from(store)
        };
        let listen_port: Option<u16> = if embedded {
            None
        } else {
            r.get_opt("listenPort")?
        };
        let timing = Timing {
            heartbeat: millis(r, "controllerRaftHeartbeatMs", d.timing.heartbeat)?,
            election_min: millis(r, "controllerRaftElectionMinMs", d.timing.election_min)?,
            election_max: millis(r, "controllerRaftElectionMaxMs", d.timing.election_max)?,
        };
        if timing.election_min <= timing.heartbeat || timing.election_max <= timing.election_min {
            return Err(r.error(
                "controllerRaftElectionMinMs",
                "needs controllerRaftHeartbeatMs < controllerRaftElectionMinMs < controllerRaftElectionMaxMs".into(),
            ));
        }
        let cfg = Self {
            group,
            peers,
            self_id,
            store_path,
            listen_port,
            enable_elect_unclean_master: r
                .get("enableElectUncleanMaster", d.enable_elect_unclean_master)?,
            notify_broker_role_changed: r
                .get("notifyBrokerRoleChanged", d.notify_broker_role_changed)?,
            scan_not_active_broker_interval: millis(
                r,
                "scanNotActiveBrokerInterval",
                d.scan_not_active_broker_interval,
            )?,
            scan_inactive_master_interval: millis(
                r,
                "scanInactiveMasterInterval",
                d.scan_inactive_master_interval,
            )?,
            elect_master_max_retry_count: r
                .get("electMasterMaxRetryCount", d.elect_master_max_retry_count)?,
            process_read_event: r.get("processReadEvent", d.process_read_event)?,
            timing,
        };
        // RocketMQ keys with no meaning here (DLedger's file size, Java thread pools):
        // accepted silently so a real controller.conf loads without warnings.
        for key in [
            "rocketmqHome",
            "configStorePath",
            "configBlackList",
            "mappedFileSize",
            "controllerThreadPoolNums",
            "controllerRequestThreadPoolQueueCapacity",
        ] {
            r.ignore(key);
        }
        Ok(cfg)
    }

    /// This node's peer address.
    pub fn self_addr(&self) -> &str {
        // Checked at load: the id is one of the peers.
        self.peers.get(&self.self_id).map_or("", String::as_str)
    }

    /// The peers as DLedger writes them in GET_METADATA_INFO: `n0:host:port;…;`.
    pub fn peers_text(&self) -> String {
        self.peers
            .iter()
            .map(|(id, addr)| format!("n{id}:{addr};"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::config::{ConfigSource, load};

    fn parse(text: &str) -> Result<ControllerConfig, String> {
        let src = ConfigSource::parse_properties(text, "controller.conf");
        load::<ControllerConfig>(&src)
            .map(|l| l.config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn rocketmq_sample_config_loads() {
        let c = parse(
            "controllerDLegerGroup = group1\n\
             controllerDLegerPeers = n0-127.0.0.1:9877;n1-127.0.0.1:9878;n2-127.0.0.1:9879\n\
             controllerDLegerSelfId = n1\n\
             controllerStorePath = /tmp/rmqstore/controller\n\
             enableElectUncleanMaster = false\n\
             notifyBrokerRoleChanged = true\n",
        )
        .unwrap();
        assert_eq!(c.group, "group1");
        assert_eq!(c.self_id, 1);
        assert_eq!(c.self_addr(), "127.0.0.1:9878");
        assert_eq!(
            c.peers_text(),
            "n0:127.0.0.1:9877;n1:127.0.0.1:9878;n2:127.0.0.1:9879;"
        );
        assert_eq!(c.store_path, PathBuf::from("/tmp/rmqstore/controller"));
    }

    #[test]
    fn bad_ids_peers_and_types_are_refused_by_key() {
        let peers = "controllerDLegerPeers = n0-127.0.0.1:9877\n";
        assert!(parse(peers).unwrap_err().contains("controllerDLegerSelfId"));
        assert!(
            parse(&format!("{peers}controllerDLegerSelfId = n1\n"))
                .unwrap_err()
                .contains("not in controllerDLegerPeers")
        );
        assert!(
            parse("controllerDLegerPeers = a-127.0.0.1:1\ncontrollerDLegerSelfId = a\n")
                .unwrap_err()
                .contains("n0, n1")
        );
        assert!(
            parse(&format!(
                "{peers}controllerDLegerSelfId = n0\ncontrollerType = jRaft\n"
            ))
            .unwrap_err()
            .contains("controllerType")
        );
    }
}
