use super::*;

fn e(epoch: i32, start_offset: i64) -> EpochEntry {
    EpochEntry {
        epoch,
        start_offset,
    }
}

#[test]
fn rocketmqs_sample_parses_and_renders_byte_for_byte() {
    let text = "2\n447245663\n1-0\n2-1048576\n";
    let entries = parse(text).unwrap();
    assert_eq!(entries, vec![e(1, 0), e(2, 1048576)]);
    assert_eq!(render(&entries), text);
    // 0 in the CRC line means unchecked.
    assert_eq!(parse("1\n0\n3-42\n").unwrap(), vec![e(3, 42)]);
}

#[test]
fn damaged_files_are_refused_with_the_reason() {
    assert!(
        parse("2\n447245663\n1-0\n2-1048577\n")
            .unwrap_err()
            .contains("CRC")
    );
    assert!(
        parse("3\n0\n1-0\n2-5\n")
            .unwrap_err()
            .contains("expected 3")
    );
    assert!(
        parse("1\n0\n1:0\n")
            .unwrap_err()
            .contains("epoch-startOffset")
    );
    assert!(parse("2\n0\n2-0\n1-5\n").unwrap_err().contains("ascend"));
    assert!(parse("").is_err());
}

#[test]
fn the_backup_is_used_when_the_file_is_damaged_and_saves_keep_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = EpochFile::open(dir.path()).unwrap();
    assert!(f.entries().is_empty());
    f.save().unwrap();
    assert!(
        !dir.path().join(FILE_NAME).exists(),
        "an empty list is not written"
    );
    f.begin(1, 0).unwrap();
    f.save().unwrap();
    f.begin(2, 100).unwrap();
    f.save().unwrap();
    let main = dir.path().join(FILE_NAME);
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        render(&[e(1, 0), e(2, 100)])
    );
    std::fs::write(&main, "2\n12345\n1-0\n2-100\n").unwrap();
    let f = EpochFile::open(dir.path()).unwrap();
    assert_eq!(f.entries(), &[e(1, 0)], "the previous version, from .bak");
}

#[test]
fn a_term_replaces_those_starting_at_or_after_it_and_epochs_only_grow() {
    let mut f = EpochFile {
        path: PathBuf::from("unused"),
        entries: vec![e(1, 0), e(2, 100)],
    };
    // Elected again before anything was written at 100: the empty term goes.
    f.begin(3, 100).unwrap();
    assert_eq!(f.entries(), &[e(1, 0), e(3, 100)]);
    assert!(matches!(
        f.begin(3, 200),
        Err(EpochError::NotAfterLast { .. })
    ));
    assert!(matches!(
        f.begin(2, 300),
        Err(EpochError::NotAfterLast { .. })
    ));
    f.truncate_suffix(50);
    assert_eq!(f.entries(), &[e(1, 0)]);
    f.begin(4, 60).unwrap();
    f.begin(5, 90).unwrap();
    f.truncate_prefix(70);
    assert_eq!(
        f.entries(),
        &[e(4, 60), e(5, 90)],
        "the term holding offset 70 stays"
    );
    f.truncate_prefix(1000);
    assert_eq!(f.entries(), &[e(5, 90)], "the newest always stays");
}

#[test]
fn consistent_points_follow_rocketmqs_rules() {
    // Same terms: the shorter log's end.
    let shared = [e(1, 0), e(2, 100)];
    assert_eq!(consistent_point(&shared, 150, &shared, 180), Some(150));
    assert_eq!(consistent_point(&shared, 180, &shared, 150), Some(150));
    // The replica was master of epoch 3 (a tail nobody acknowledged); the new master
    // took epoch 3 elsewhere at another start: they agree up to epoch 2's end.
    let local = [e(1, 0), e(2, 100), e(3, 200)];
    let master = [e(1, 0), e(2, 100), e(3, 180), e(4, 300)];
    assert_eq!(consistent_point(&local, 260, &master, 400), Some(180));
    // A replica ahead of its master within a shared term: cut to the master's end.
    assert_eq!(
        consistent_point(&[e(1, 0)], 500, &[e(1, 0)], 300),
        Some(300)
    );
    // Nothing shared.
    assert_eq!(consistent_point(&[e(7, 0)], 10, &[e(1, 0)], 10), None);
    assert_eq!(consistent_point(&[], 0, &[e(1, 0)], 10), None);
}

proptest::proptest! {
    /// Any text parses or is refused, never panics; rendered entries parse back.
    #[test]
    fn any_text_parses_or_is_refused_and_rendered_entries_round_trip(
        text in "[0-9\\-\n]{0,80}",
        steps in proptest::collection::vec((1i32..5, 0i64..1000), 0..20),
    ) {
        let _ = parse(&text);
        let mut entries = Vec::new();
        let (mut epoch, mut start) = (0i32, 0i64);
        for (de, ds) in steps {
            epoch += de;
            start += ds;
            entries.push(e(epoch, start));
        }
        proptest::prop_assert_eq!(parse(&render(&entries)).unwrap(), entries);
    }
}
