//! Plain ACL (`aclEnable=true`) on a real broker process: unsigned, unknown, badly signed
//! and tampered requests are refused; permissions per topic and group and the admin flag
//! hold; the rules file is followed when it changes, and a bad edit keeps the old rules.

use crate::common;

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use common::*;
use tern_shell::ResponseCode;
use tern_shell::acl::SessionCredentials;

const RULES: &str = "\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: tern_user
    secretKey: user_secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Allowed=PUB|SUB
      - ReadOnly=SUB
    groupPerms:
      - BannedGroup=DENY
  - accessKey: tern_admin
    secretKey: 12345678
    admin: true
";

/// The account of both RULES files (acl_resources.rs's too) that is no admin.
pub fn user() -> SessionCredentials {
    SessionCredentials::new("tern_user", "user_secret")
}

/// The admin account of both RULES files.
pub fn admin() -> SessionCredentials {
    SessionCredentials::new("tern_admin", "12345678")
}

/// A standalone broker under `dir` checking requests against `rules` (plain_acl.yml),
/// with `extra` conf lines.
pub fn start_with_rules(dir: &Path, rules: &str, extra: &str) -> BrokerProc {
    let file = dir.join("plain_acl.yml");
    std::fs::write(&file, rules).unwrap();
    let conf = write_conf(
        dir,
        &format!("aclEnable=true\nplainAclFile={}\n{extra}", file.display()),
    );
    BrokerProc::standalone(dir, &conf)
}

#[test]
fn requests_are_checked_against_accounts_signatures_and_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with_rules(dir.path(), RULES, "");
    b.with_client(async |c| {
        refused(
            &c.call(max_offset_req("Allowed", 0)).await,
            "No accessKey is configured",
        );
        let stranger = SessionCredentials::new("stranger", "whatever");
        refused(
            &c.call(signed(max_offset_req("Allowed", 0), &stranger))
                .await,
            "No acl config for stranger",
        );
        let wrong = SessionCredentials::new("tern_user", "not_the_secret");
        refused(
            &c.call(signed(max_offset_req("Allowed", 0), &wrong)).await,
            "Check signature failed for accessKey=tern_user",
        );
        // A field changed after signing breaks the signature, and so does the body.
        let mut req = signed(max_offset_req("Allowed", 0), &user());
        req.ext_fields.insert("queueId", "1");
        refused(&c.call(req).await, "Check signature failed");
        let mut req = signed(send_v2(&msg("Allowed", b"body", &[]), 0), &user());
        req.body = b"BODY".to_vec();
        refused(&c.call(req).await, "Check signature failed");

        // Creating topics is an admin request.
        refused(
            &c.call(signed(create_topic_req("Allowed", 2), &user()))
                .await,
            "Need admin permission for request code=17, but accessKey=tern_user is not admin",
        );
        for t in ["Allowed", "ReadOnly", "Other"] {
            let resp = c.call(signed(create_topic_req(t, 2), &admin())).await;
            expect_code(&resp, ResponseCode::Success);
        }

        // Topic permissions: listed, then the default (DENY).
        let m = msg("Allowed", b"hello", &[]);
        expect_code(
            &c.call(signed(send_v2(&m, 0), &user())).await,
            ResponseCode::Success,
        );
        refused(
            &c.call(signed(send_v2(&msg("ReadOnly", b"x", &[]), 0), &user()))
                .await,
            "No permission for topic ReadOnly",
        );
        refused(
            &c.call(signed(send_v1(&msg("Other", b"x", &[]), 0), &user()))
                .await,
            "No permission for topic Other",
        );
        // Pulls need SUB on the topic and on the group (default SUB, one group denied).
        let pulled = c
            .call(signed(
                pull_req("SomeGroup", "Allowed", 0, 0, Some("*")),
                &user(),
            ))
            .await;
        expect_code(&pulled, ResponseCode::Success);
        refused(
            &c.call(signed(
                pull_req("BannedGroup", "Allowed", 0, 0, Some("*")),
                &user(),
            ))
            .await,
            "No permission for group BannedGroup",
        );
        // The admin account, with no permission lists, may do everything.
        expect_code(
            &c.call(signed(send_v2(&msg("Other", b"x", &[]), 0), &admin()))
                .await,
            ResponseCode::Success,
        );
    });
}

#[test]
fn rule_changes_apply_without_a_restart_and_a_bad_edit_keeps_the_old_rules() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with_rules(dir.path(), RULES, "");
    let rules = dir.path().join("plain_acl.yml");
    b.with_client(async |c| {
        refused(&c.call(max_offset_req("T", 0)).await, "No accessKey");
        // Everybody on this host is white-listed from now on.
        std::fs::write(&rules, RULES.replace("10.10.103.*", "127.0.0.1")).unwrap();
        tern_testkit::wait_until(
            "rules never reloaded",
            Duration::from_secs(20),
            async || {
                c.call(max_offset_req("T", 0)).await.response_code() != ResponseCode::NoPermission
            },
        )
        .await;
        // A broken file is not applied: the white list stays.
        std::fs::write(&rules, "accounts: [\n").unwrap();
        assert!(
            b.wait_for_log(&["ACL rules not reloaded"], Duration::from_secs(20))
                .is_some(),
            "{}",
            b.stderr_text()
        );
        expect_code(&c.call(max_offset_req("T", 0)).await, ResponseCode::Success);
    });
}

#[test]
fn a_broker_told_to_check_access_does_not_start_without_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.yml");
    let conf = write_conf(
        dir.path(),
        &format!(
            "aclEnable=true\nplainAclFile={}\nstorePathRootDir={}\n",
            missing.display(),
            dir.path().join("store").display()
        ),
    );
    let args: Vec<OsString> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "-c".into(),
        conf.into(),
    ];
    let (status, _, err) = run_to_exit(&args);
    assert!(!status.success());
    assert!(
        err.contains("aclEnable") && err.contains("nowhere.yml"),
        "{err}"
    );
}
