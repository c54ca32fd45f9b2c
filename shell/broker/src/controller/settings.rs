//! The broker's controller-mode keys, with RocketMQ's names and defaults
//! (`BrokerConfig`, `MessageStoreConfig`; docs/design/controller.md §4).

use std::time::Duration;

use tern_shell::config::{ConfigError, ConfigReader, in_range};

/// What `enableControllerMode=true` and its companions say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSettings {
    /// Run in controller mode (`enableControllerMode`): the controller group assigns this
    /// broker's id and moves the master role; `brokerId` and `brokerRole` are ignored.
    pub enabled: bool,
    /// The controllers (`controllerAddr`, `;`-separated `host:port`).
    pub addrs: Vec<String>,
    /// How often the broker asks the leader for its set's master and SyncStateSet
    /// (`syncBrokerMetadataPeriod`).
    pub sync_broker_metadata_period: Duration,
    /// How often the broker looks for the controller leader again
    /// (`syncControllerMetadataPeriod`).
    pub sync_controller_metadata_period: Duration,
    /// How often a master checks which slaves are caught up (`checkSyncStateSetPeriod`).
    pub check_sync_state_set_period: Duration,
    /// Heartbeat period to every controller (`brokerHeartbeatInterval`).
    pub heartbeat_interval: Duration,
    /// How long the controllers wait for the next heartbeat
    /// (`controllerHeartBeatTimeoutMills`).
    pub heartbeat_timeout: Duration,
    /// Lower wins an election among equals (`brokerElectionPriority`).
    pub election_priority: i32,
    /// A slave not caught up for this long leaves the SyncStateSet
    /// (`haMaxTimeSlaveNotCatchup`).
    pub max_time_slave_not_catchup: Duration,
    /// A send is answered only once every member of the SyncStateSet holds it
    /// (`allAckInSyncStateSet`).
    pub all_ack_in_sync_state_set: bool,
    /// Fewer in-sync replicas than this and sends are refused (`minInSyncReplicas`).
    pub min_in_sync_replicas: usize,
    /// How long a send waits for the SyncStateSet's acknowledgements (`slaveTimeout`).
    pub slave_timeout: Duration,
}

impl ControllerSettings {
    /// Reads the keys (every one, so `-p` prints them in either mode).
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
        let ms = |r: &mut ConfigReader<'_>, key: &str, default: u64| {
            r.get_checked(key, default, in_range(10, 3_600_000))
                .map(Duration::from_millis)
        };
        let addrs: String = r.get("controllerAddr", String::new())?;
        let addrs: Vec<String> = addrs
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        for a in &addrs {
            tern_shell::config::check_host_port(a).map_err(|m| r.error("controllerAddr", m))?;
        }
        let s = ControllerSettings {
            enabled: r.get("enableControllerMode", false)?,
            addrs,
            sync_broker_metadata_period: ms(r, "syncBrokerMetadataPeriod", 5_000)?,
            sync_controller_metadata_period: ms(r, "syncControllerMetadataPeriod", 10_000)?,
            check_sync_state_set_period: ms(r, "checkSyncStateSetPeriod", 5_000)?,
            heartbeat_interval: ms(r, "brokerHeartbeatInterval", 1_000)?,
            heartbeat_timeout: ms(r, "controllerHeartBeatTimeoutMills", 10_000)?,
            election_priority: r.get("brokerElectionPriority", i32::MAX)?,
            max_time_slave_not_catchup: ms(r, "haMaxTimeSlaveNotCatchup", 15_000)?,
            all_ack_in_sync_state_set: r.get("allAckInSyncStateSet", false)?,
            min_in_sync_replicas: r.get_checked("minInSyncReplicas", 1usize, in_range(1, 32))?,
            slave_timeout: ms(r, "slaveTimeout", 3_000)?,
        };
        if s.enabled && s.addrs.is_empty() {
            return Err(r.error(
                "controllerAddr",
                "enableControllerMode=true needs the controllers' addresses".into(),
            ));
        }
        if s.enabled && r.get("enableDLegerCommitLog", false)? {
            return Err(r.error(
                "enableDLegerCommitLog",
                "controller mode and a DLedger commit log exclude each other (as in RocketMQ)"
                    .into(),
            ));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::BrokerConfig;
    use tern_shell::config::{ConfigSource, load};

    fn read(text: &str) -> Result<BrokerConfig, String> {
        load::<BrokerConfig>(&ConfigSource::parse_properties(text, "broker.conf"))
            .map(|l| l.config)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_rocketmqs_and_controller_mode_needs_addresses() {
        let c = read("").unwrap().controller;
        assert!(!c.enabled);
        assert_eq!(c.sync_broker_metadata_period.as_millis(), 5_000);
        assert_eq!(c.heartbeat_timeout.as_millis(), 10_000);
        assert_eq!(c.election_priority, i32::MAX);
        assert!(!c.all_ack_in_sync_state_set);
        let e = read("enableControllerMode=true\n").unwrap_err();
        assert!(e.contains("controllerAddr"), "{e}");
        let e = read("enableControllerMode=true\ncontrollerAddr=a:1\nenableDLegerCommitLog=true\n")
            .unwrap_err();
        assert!(e.contains("enableDLegerCommitLog"), "{e}");
        let e = read("controllerAddr=nohost\n").unwrap_err();
        assert!(e.contains("controllerAddr"), "{e}");
    }

    #[test]
    fn controller_mode_ignores_broker_id_and_role() {
        let c = read(
            "enableControllerMode=true\ncontrollerAddr=127.0.0.1:9878; 127.0.0.1:9868\n\
             brokerRole=SLAVE\nbrokerId=0\nallAckInSyncStateSet=true\n",
        )
        .unwrap();
        assert_eq!(c.controller.addrs, vec!["127.0.0.1:9878", "127.0.0.1:9868"]);
        assert!(c.controller.all_ack_in_sync_state_set);
    }
}
