//! Entries other parts of a process add to GET_BROKER_RUNTIME_INFO: the edge gateway
//! registers its forwarder's state here, so `tern-admin brokerStatus` on the gateway's
//! local broker shows it without the broker knowing what an edge gateway is.

use std::collections::BTreeMap;
use std::sync::RwLock;
use tern_shell::sync::RwLockExt;

/// Writes some `key → value` entries of the runtime info table.
pub type StatsProvider = Box<dyn Fn(&mut BTreeMap<String, String>) + Send + Sync>;

/// The registered providers, asked in order at each GET_BROKER_RUNTIME_INFO.
#[derive(Default)]
pub struct ExtraStats {
    providers: RwLock<Vec<StatsProvider>>,
}

impl std::fmt::Debug for ExtraStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.providers.read().map_or(0, |p| p.len());
        write!(f, "ExtraStats({n} provider(s))")
    }
}

impl ExtraStats {
    /// Adds a provider; its entries overwrite the broker's own of the same key.
    pub fn register(
        &self,
        provider: impl Fn(&mut BTreeMap<String, String>) + Send + Sync + 'static,
    ) {
        self.providers.write_guard().push(Box::new(provider));
    }

    /// Lets every provider add its entries to `out`.
    pub fn fill(&self, out: &mut BTreeMap<String, String>) {
        for p in self.providers.read_guard().iter() {
            p(out);
        }
    }
}
