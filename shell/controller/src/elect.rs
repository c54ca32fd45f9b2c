//! Who becomes master (RocketMQ's `DefaultElectPolicy`, docs/design/controller.md §5.3):
//! the SyncStateSet's live members first, all live replicas only with
//! `enableElectUncleanMaster`; a live old master stays; a designated broker (mqadmin
//! electMaster) or nobody; otherwise the highest (epoch, max offset), then the lowest
//! `brokerElectionPriority`, then the lowest id. Offsets compare as `i64` (RocketMQ
//! subtracts and casts to `int`, wrong for gaps past 2 GiB).

use std::cmp::Reverse;
use std::time::Instant;

use crate::heartbeat::Heartbeats;
use crate::state::BrokerSet;

/// Picks the master of `set` named `name`.
pub fn elect(
    name: &str,
    set: &BrokerSet,
    live: &Heartbeats,
    unclean: bool,
    designated: Option<i64>,
    now: Instant,
) -> Option<i64> {
    let sss: Vec<i64> = set.sync_state_set.iter().copied().collect();
    if let Some(m) = try_elect(name, &sss, set.master, live, designated, now) {
        return Some(m);
    }
    if unclean {
        let all: Vec<i64> = set.replicas.keys().copied().collect();
        return try_elect(name, &all, set.master, live, designated, now);
    }
    None
}

fn try_elect(
    name: &str,
    candidates: &[i64],
    old_master: Option<i64>,
    live: &Heartbeats,
    designated: Option<i64>,
    now: Instant,
) -> Option<i64> {
    let alive: Vec<(i64, crate::heartbeat::LiveInfo)> = candidates
        .iter()
        .filter_map(|&id| live.alive(name, id, now).map(|i| (id, i)))
        .collect();
    if let Some(d) = designated {
        return alive.iter().any(|(id, _)| *id == d).then_some(d);
    }
    if let Some(m) = old_master.filter(|m| alive.iter().any(|(id, _)| id == m)) {
        return Some(m);
    }
    alive
        .into_iter()
        .min_by_key(|(id, i)| (Reverse(i.epoch), Reverse(i.max_offset), i.priority, *id))
        .map(|(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Command, Metadata, Outcome};
    use tern_shell::headers::BrokerHeartbeatRequestHeader;

    fn set_of(ids: &[i64], sss: &[i64]) -> BrokerSet {
        let mut m = Metadata::default();
        for &id in ids {
            let cmd = Command::ApplyBrokerId {
                cluster: "c".into(),
                name: "b".into(),
                id,
                addr: format!("127.0.0.1:{id}"),
                check_code: format!("{id}"),
            };
            assert_eq!(m.apply(&cmd), Outcome::Done);
        }
        let mut set = m.set("b").unwrap().clone();
        set.sync_state_set = sss.iter().copied().collect();
        set
    }

    fn beat(hb: &Heartbeats, id: i64, epoch: i32, offset: i64, priority: i32, now: Instant) {
        let h = BrokerHeartbeatRequestHeader {
            cluster_name: "c".into(),
            broker_addr: format!("127.0.0.1:{id}"),
            broker_name: "b".into(),
            broker_id: Some(id),
            epoch: Some(epoch),
            max_offset: Some(offset),
            election_priority: Some(priority),
            ..Default::default()
        };
        assert!(hb.beat(&h, id, id as u64, now));
    }

    #[test]
    fn the_most_advanced_live_member_of_the_set_wins() {
        let now = Instant::now();
        let hb = Heartbeats::default();
        let set = set_of(&[1, 2, 3], &[2, 3]);
        beat(&hb, 1, 9, 9 << 40, 1, now); // not in the set: never without unclean
        beat(&hb, 2, 3, 100, 5, now);
        beat(&hb, 3, 3, (3 << 31) + 1, 5, now); // a gap past 2 GiB still compares right
        assert_eq!(elect("b", &set, &hb, false, None, now), Some(3));
        assert_eq!(elect("b", &set, &hb, true, None, now), Some(3));
        let lone = set_of(&[1, 2, 3], &[]);
        assert_eq!(elect("b", &lone, &hb, false, None, now), None);
        assert_eq!(elect("b", &lone, &hb, true, None, now), Some(1));
    }

    #[test]
    fn priority_then_id_break_ties_and_a_designated_broker_must_be_alive() {
        let now = Instant::now();
        let hb = Heartbeats::default();
        let set = set_of(&[1, 2, 3], &[1, 2, 3]);
        beat(&hb, 2, 1, 50, 7, now);
        beat(&hb, 3, 1, 50, 2, now);
        assert_eq!(elect("b", &set, &hb, false, None, now), Some(3));
        assert_eq!(elect("b", &set, &hb, false, Some(2), now), Some(2));
        assert_eq!(elect("b", &set, &hb, false, Some(1), now), None);
        let mut with_master = set.clone();
        with_master.master = Some(2);
        assert_eq!(elect("b", &with_master, &hb, false, None, now), Some(2));
    }
}
