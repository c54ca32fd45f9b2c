//! What operators see of the forwarder: entries of the local broker's
//! GET_BROKER_RUNTIME_INFO, registered by the gateway through
//! `tern_broker::status::ExtraStats`.

use std::collections::BTreeMap;

use super::Stats;

/// What operators see of the forwarder (GET_BROKER_RUNTIME_INFO of the local broker).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Counters.
    pub stats: Stats,
    /// The main pass's log offset.
    pub forwarded_offset: u64,
    /// The oldest record forwarding still needs (a parked topic's, or the main pass's).
    pub oldest_unsent: u64,
    /// The oldest record the local broker still needs, described.
    pub oldest_pending: Option<String>,
    /// Parked topic → `STATE since <ms> at <offset>: <detail>`.
    pub blocked: BTreeMap<String, String>,
    /// The last passing failure, cleared by the next success.
    pub last_failure: Option<String>,
}

impl Report {
    /// The runtime-info entries (`edge*` keys).
    pub fn entries(&self, dead_letters: usize, out: &mut BTreeMap<String, String>) {
        out.insert(
            "edgeForwardedOffset".into(),
            self.forwarded_offset.to_string(),
        );
        out.insert(
            "edgeOldestUnsentOffset".into(),
            self.oldest_unsent.to_string(),
        );
        out.insert(
            "edgeForwardedMessages".into(),
            self.stats.forwarded.to_string(),
        );
        out.insert("edgeFailedAttempts".into(), self.stats.failures.to_string());
        out.insert("edgeDeadLetters".into(), dead_letters.to_string());
        out.insert(
            "edgeOldestPending".into(),
            self.oldest_pending.clone().unwrap_or_default(),
        );
        out.insert(
            "edgeBlockedTopicCount".into(),
            self.blocked.len().to_string(),
        );
        out.insert(
            "edgeBlockedTopics".into(),
            self.blocked
                .iter()
                .map(|(t, s)| format!("{t}: {s}"))
                .collect::<Vec<_>>()
                .join("; "),
        );
        out.insert(
            "edgeUplink".into(),
            self.last_failure
                .as_ref()
                .map_or_else(|| "ok".to_owned(), |f| format!("failing: {f}")),
        );
    }
}
