//! A broker's configuration: GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG, as mqadmin's
//! getBrokerConfig and updateBrokerConfig use them.

use std::collections::BTreeMap;

use tern_shell::config::ConfigSource;
use tern_shell::{RemotingCommand, RequestCode};

use super::Admin;
use crate::error::{ClientError, Result};

/// One broker of a cluster, master or slave.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BrokerAddr {
    /// `brokerName`.
    pub broker_name: String,
    /// `brokerId` (0 for the master).
    pub broker_id: i64,
    /// `ip:port`.
    pub addr: String,
}

impl Admin {
    /// Every broker of `cluster`, masters and slaves, sorted by name then id (mqadmin's
    /// `-c` for the broker-config commands reaches them all).
    pub async fn cluster_brokers(&self, cluster: &str) -> Result<Vec<BrokerAddr>> {
        let info = self.cluster_info().await?;
        let names = info
            .cluster_addr_table
            .get(cluster)
            .ok_or_else(|| ClientError::NotFound(format!("cluster {cluster} not found")))?;
        let mut out: Vec<BrokerAddr> = names
            .iter()
            .filter_map(|n| info.broker_addr_table.get(n))
            .flat_map(|b| {
                b.broker_addrs.0.iter().map(|(id, addr)| BrokerAddr {
                    broker_name: b.broker_name.clone(),
                    broker_id: *id,
                    addr: addr.clone(),
                })
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The broker's effective configuration, `key → value` (GET_BROKER_CONFIG; the body
    /// is Java properties text).
    pub async fn broker_config(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let cmd = RemotingCommand::request_code(RequestCode::GetBrokerConfig);
        let resp = self.client().invoke_ok(addr, cmd).await?;
        let text = String::from_utf8_lossy(&resp.body);
        Ok(ConfigSource::parse_properties(&text, addr)
            .iter()
            .map(|(k, e)| (k.to_owned(), e.value.clone()))
            .collect())
    }

    /// Sets `key=value` on the broker (UPDATE_BROKER_CONFIG). A broker refuses a key it
    /// cannot change while running, or a bad value, with a remark naming the key.
    pub async fn update_broker_config(&self, addr: &str, key: &str, value: &str) -> Result<()> {
        // The body is parsed as Java properties: escape what would change its meaning
        // (a separator in the key; a backslash or line break anywhere).
        let escape = |s: &str| s.replace('\\', "\\\\").replace('\n', "\\n");
        let key = escape(key).replace('=', "\\=").replace(':', "\\:");
        let body = format!("{key}={}\n", escape(value));
        let cmd = RemotingCommand::request_code(RequestCode::UpdateBrokerConfig).with_body(body);
        self.client().invoke_ok(addr, cmd).await?;
        Ok(())
    }
}
