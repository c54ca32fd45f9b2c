use proptest::prelude::*;

use super::*;

fn apply_id(m: &mut Metadata, name: &str, id: i64, code: &str) -> Outcome {
    m.apply(&Command::ApplyBrokerId {
        cluster: "c".into(),
        name: name.into(),
        id,
        addr: format!("127.0.0.1:{id}"),
        check_code: code.into(),
    })
}

fn code_of(o: &Outcome) -> Option<ResponseCode> {
    match o {
        Outcome::Done => None,
        Outcome::Refused { code, .. } => Some(ResponseCode::from_raw(*code)),
    }
}

#[test]
fn ids_are_handed_out_from_one_and_kept_by_their_check_code() {
    let mut m = Metadata::default();
    assert_eq!(m.next_broker_id("b"), 1);
    assert_eq!(
        code_of(&apply_id(&mut m, "b", 3, "x")),
        Some(ResponseCode::ControllerBrokerIdInvalid)
    );
    assert_eq!(apply_id(&mut m, "b", 1, "a"), Outcome::Done);
    assert_eq!(m.next_broker_id("b"), 2);
    assert_eq!(
        apply_id(&mut m, "b", 1, "a"),
        Outcome::Done,
        "a retry by the same broker"
    );
    assert_eq!(
        code_of(&apply_id(&mut m, "b", 1, "other")),
        Some(ResponseCode::ControllerBrokerIdInvalid)
    );
    assert_eq!(apply_id(&mut m, "b", 2, "b"), Outcome::Done);
    assert_eq!(m.next_broker_id("b"), 3);
}

#[test]
fn stale_elections_and_set_changes_are_refused_with_rocketmqs_codes() {
    let mut m = Metadata::default();
    for id in 1..=3 {
        assert_eq!(apply_id(&mut m, "b", id, &id.to_string()), Outcome::Done);
    }
    let elect = |master, epoch| Command::Elect {
        name: "b".into(),
        master: Some(master),
        expect_master_epoch: epoch,
    };
    assert_eq!(m.apply(&elect(1, 0)), Outcome::Done);
    assert_eq!(
        code_of(&m.apply(&elect(2, 0))),
        Some(ResponseCode::ControllerFencedMasterEpoch)
    );
    let s = m.set("b").unwrap();
    assert_eq!(
        (s.master, s.master_epoch, s.sync_state_set_epoch),
        (Some(1), 1, 1)
    );
    let alter = |members: &[i64], master, me, se| Command::AlterSyncStateSet {
        name: "b".into(),
        members: members.iter().copied().collect(),
        master,
        master_epoch: me,
        sync_state_set_epoch: se,
    };
    assert_eq!(
        code_of(&m.apply(&alter(&[1, 2], 2, 1, 1))),
        Some(ResponseCode::ControllerInvalidMaster)
    );
    assert_eq!(
        code_of(&m.apply(&alter(&[1, 2], 1, 0, 1))),
        Some(ResponseCode::ControllerFencedMasterEpoch)
    );
    assert_eq!(
        code_of(&m.apply(&alter(&[1, 2], 1, 1, 0))),
        Some(ResponseCode::ControllerFencedSyncStateSetEpoch)
    );
    assert_eq!(
        code_of(&m.apply(&alter(&[1, 9], 1, 1, 1))),
        Some(ResponseCode::ControllerInvalidReplicas)
    );
    assert_eq!(
        code_of(&m.apply(&alter(&[2, 3], 1, 1, 1))),
        Some(ResponseCode::ControllerAlterSyncStateSetFailed)
    );
    assert_eq!(m.apply(&alter(&[1, 2, 3], 1, 1, 1)), Outcome::Done);
    assert_eq!(m.set("b").unwrap().sync_state_set_epoch, 2);
    // Nobody to elect: no master, the epoch moves, the set is kept.
    let none = Command::Elect {
        name: "b".into(),
        master: None,
        expect_master_epoch: 1,
    };
    assert_eq!(m.apply(&none), Outcome::Done);
    let s = m.set("b").unwrap();
    assert_eq!(
        (s.master, s.master_epoch, s.sync_state_set.len()),
        (None, 2, 3)
    );
}

#[test]
fn a_forgotten_set_comes_back_above_its_old_epochs() {
    let mut m = Metadata::default();
    assert_eq!(apply_id(&mut m, "b", 1, "a"), Outcome::Done);
    let elect = Command::Elect {
        name: "b".into(),
        master: Some(1),
        expect_master_epoch: 0,
    };
    assert_eq!(m.apply(&elect), Outcome::Done);
    assert_eq!(
        m.apply(&Command::Clean {
            name: "b".into(),
            ids: None
        }),
        Outcome::Done
    );
    assert!(m.set("b").is_none());
    assert_eq!(apply_id(&mut m, "b", 1, "a2"), Outcome::Done);
    let s = m.set("b").unwrap();
    assert_eq!((s.master_epoch, s.sync_state_set_epoch), (1, 1));
    // Cleaning the last replica forgets the set too.
    assert_eq!(
        m.apply(&Command::Clean {
            name: "b".into(),
            ids: Some(vec![1])
        }),
        Outcome::Done
    );
    assert!(m.set("b").is_none());
}

fn command() -> impl Strategy<Value = Command> {
    let name = prop_oneof![Just("a".to_string()), Just("b".to_string())];
    let id = 0i64..5;
    prop_oneof![
        (name.clone(), id.clone(), 0u8..3).prop_map(|(name, id, code)| Command::ApplyBrokerId {
            cluster: "c".into(),
            name,
            id,
            addr: "x".into(),
            check_code: code.to_string(),
        }),
        (name.clone(), proptest::option::of(id.clone()), 0i32..6).prop_map(|(name, master, e)| {
            Command::Elect {
                name,
                master,
                expect_master_epoch: e,
            }
        }),
        (
            name.clone(),
            proptest::collection::btree_set(id.clone(), 0..4),
            id.clone(),
            0i32..6,
            0i32..6
        )
            .prop_map(
                |(name, members, master, me, se)| Command::AlterSyncStateSet {
                    name,
                    members,
                    master,
                    master_epoch: me,
                    sync_state_set_epoch: se,
                }
            ),
        (
            name.clone(),
            proptest::option::of(proptest::collection::vec(id, 0..3))
        )
            .prop_map(|(name, ids)| Command::Clean { name, ids }),
    ]
}

proptest! {
    /// Whatever commands arrive, in whatever order: epochs never go back (while a set
    /// lives, and across its removal), the master is a replica and in the SyncStateSet,
    /// the set holds only replicas, a refused command changes nothing, and replaying the
    /// same commands gives the same state (what every controller relies on).
    #[test]
    fn invariants_hold_for_any_command_sequence(cmds in proptest::collection::vec(command(), 0..60)) {
        let mut m = Metadata::default();
        let mut seen: BTreeMap<String, (i32, i32)> = BTreeMap::new();
        for cmd in &cmds {
            let before = m.clone();
            let outcome = m.apply(cmd);
            if outcome != Outcome::Done {
                prop_assert_eq!(&m, &before);
            }
            for (name, s) in m.sets() {
                let (me, se) = seen.get(name).copied().unwrap_or((0, 0));
                prop_assert!(s.master_epoch >= me && s.sync_state_set_epoch >= se);
                seen.insert(name.to_owned(), (s.master_epoch, s.sync_state_set_epoch));
                if let Some(master) = s.master {
                    prop_assert!(s.replicas.contains_key(&master));
                    prop_assert!(s.sync_state_set.contains(&master));
                }
                prop_assert!(s.sync_state_set.iter().all(|id| s.replicas.contains_key(id)));
                prop_assert!(s.replicas.keys().all(|&id| id < s.next_id));
            }
        }
        let mut again = Metadata::default();
        for cmd in &cmds {
            again.apply(cmd);
        }
        prop_assert_eq!(again, m);
    }
}
