//! What the forwarder saves: how far it has read the local log, and where each parked
//! topic's unsent records begin. Kept in `config/edgeForwardProgress.tern` (postcard
//! inside the checked, atomically replaced metadata file `tern_engine_fs::meta` writes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::EdgeConfig;

/// The saved state.
///
/// Every record below `forwarded` was acknowledged centrally, set aside as a dead
/// letter, or belongs to a parked topic at or past that topic's `parked` offset. The
/// records to keep are therefore those at or past the lowest of `forwarded` and the
/// parked offsets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Log offset the main pass continues at.
    pub forwarded: u64,
    /// Topic → log offset of its first record not yet sent: the cluster refused the
    /// topic with an error an operator must fix (NO_PERMISSION, TOPIC_NOT_EXIST), so
    /// its records wait while other topics move on.
    pub parked: BTreeMap<String, u64>,
    /// Topic → the central queues its local queues map to ([`super::route`]).
    pub routes: BTreeMap<String, Vec<super::route::QueueRef>>,
}

impl Progress {
    /// The lowest log offset still needed by forwarding.
    pub fn oldest_unsent(&self) -> u64 {
        self.parked.values().copied().fold(self.forwarded, u64::min)
    }
}

/// The first version's file: only the offset.
#[derive(Deserialize)]
struct ProgressV1 {
    forwarded: u64,
}

/// Where the progress lives.
pub fn path(cfg: &EdgeConfig) -> PathBuf {
    cfg.broker
        .store_root
        .join("config")
        .join("edgeForwardProgress.tern")
}

/// The first version's file, read once if the current one is missing.
fn v1_path(cfg: &EdgeConfig) -> PathBuf {
    cfg.broker
        .store_root
        .join("config")
        .join("edgeForward.tern")
}

/// Loads the saved progress (none saved: the log's start).
pub fn load(cfg: &EdgeConfig) -> Result<Progress, String> {
    let p = path(cfg);
    if let Some(progress) = load_at::<Progress>(&p)? {
        return Ok(progress);
    }
    Ok(load_at::<ProgressV1>(&v1_path(cfg))?
        .map(|v1| Progress {
            forwarded: v1.forwarded,
            parked: BTreeMap::new(),
            routes: BTreeMap::new(),
        })
        .unwrap_or_default())
}

fn load_at<T: serde::de::DeserializeOwned>(p: &Path) -> Result<Option<T>, String> {
    tern_engine_fs::meta::load(p).map_err(|e| format!("forwarding progress {}: {e}", p.display()))
}

/// Saves `progress` atomically and durably.
pub fn save(cfg: &EdgeConfig, progress: &Progress) -> Result<(), String> {
    tern_engine_fs::meta::save(&path(cfg), progress).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unsent_record_is_the_lowest_of_the_main_pass_and_the_parked_topics() {
        let mut p = Progress {
            forwarded: 5_000,
            ..Progress::default()
        };
        assert_eq!(p.oldest_unsent(), 5_000);
        p.parked.insert("A".into(), 1_200);
        p.parked.insert("B".into(), 3_000);
        assert_eq!(p.oldest_unsent(), 1_200);
    }

    #[test]
    fn a_first_version_file_is_read_as_the_main_pass_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = crate::config::source(None, dir.path()).unwrap();
        src.set(
            "edgeUpstreamNamesrv",
            "127.0.0.1:9876",
            tern_shell::config::Origin::Program,
        );
        let cfg = tern_shell::config::load::<EdgeConfig>(&src).unwrap().config;
        std::fs::create_dir_all(cfg.broker.store_root.join("config")).unwrap();
        #[derive(Serialize)]
        struct V1 {
            forwarded: u64,
        }
        tern_engine_fs::meta::save(&v1_path(&cfg), &V1 { forwarded: 777 }).unwrap();
        assert_eq!(load(&cfg).unwrap().forwarded, 777);
        let mut p = load(&cfg).unwrap();
        p.parked.insert("T".into(), 10);
        save(&cfg, &p).unwrap();
        assert_eq!(load(&cfg).unwrap(), p, "the current file wins");
    }
}
