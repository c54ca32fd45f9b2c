//! `tern-admin`'s ACL commands against a real broker with `aclEnable=true`: an admin
//! creates an account that can then send, changes it, reads the rules and their version,
//! deletes it (its sends are refused from then on), and opens a global white address;
//! an account that is not admin may change nothing.

use crate::common;

use std::process::{Command, Output};

use common::cli::succeeded;
use common::{Broker, acl_conf, run, write_acl};
use tern_client::{
    ClientConfig, ClientError, Message, Producer, ProducerConfig, SessionCredentials,
};

/// Two accounts: an admin and a publisher (also the console's ACL test's rules).
pub(crate) const RULES: &str = "\
accounts:
  - accessKey: ops_admin
    secretKey: ops_secret
    admin: true
  - accessKey: app_user
    secretKey: app_secret
    defaultTopicPerm: PUB
";

fn tern_admin(b: &Broker, creds: Option<(&str, &str)>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-admin"));
    cmd.args(args)
        .args(["-n", &b.namesrv])
        .env_remove("TERN_ACCESS_KEY")
        .env_remove("TERN_SECRET_KEY");
    if let Some((ak, sk)) = creds {
        cmd.env("TERN_ACCESS_KEY", ak).env("TERN_SECRET_KEY", sk);
    }
    cmd.output().expect("run tern-admin")
}

fn with(b: &Broker, creds: Option<(&str, &str)>) -> ClientConfig {
    let mut c = b.client_config();
    c.credentials = creds.map(|(ak, sk)| SessionCredentials::new(ak, sk));
    c
}

async fn send(b: &Broker, creds: Option<(&str, &str)>, topic: &str) -> Result<(), ClientError> {
    let p = Producer::new(ProducerConfig::new("acladm-pg"), with(b, creds)).unwrap();
    p.start();
    let r = p.send(Message::new(topic, "x")).await.map(drop);
    p.shutdown().await;
    r
}

#[test]
fn an_admin_manages_accounts_and_white_addresses_through_tern_admin() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_acl(dir.path(), RULES);
    let b = Broker::start(&acl_conf(&file));
    let adm = Some(("ops_admin", "ops_secret"));
    let new = Some(("newuser1", "newsecret1"));
    run(async {
        succeeded(&tern_admin(
            &b,
            adm,
            &[
                "updateTopic",
                "-c",
                "DefaultCluster",
                "-t",
                "AclAdm",
                "-r",
                "1",
                "-w",
                "1",
            ],
        ));
        let e = send(&b, new, "AclAdm").await.unwrap_err();
        assert!(e.to_string().contains("No acl config for newuser1"), "{e}");
        // updateAclConfig of newuser1 as `who`, with `more` options.
        let update_new_user = |who, more: &[&str]| {
            let mut args = vec![
                "updateAclConfig",
                "-c",
                "DefaultCluster",
                "-a",
                "newuser1",
                "-s",
                "newsecret1",
            ];
            args.extend_from_slice(more);
            tern_admin(&b, who, &args)
        };
        let acl_version = || -> serde_json::Value {
            let out = succeeded(&tern_admin(
                &b,
                adm,
                &["clusterAclConfigVersion", "-c", "DefaultCluster", "--json"],
            ));
            serde_json::from_str(&out).unwrap()
        };
        // Not admin: refused, and the file is unchanged.
        let before = std::fs::read_to_string(&file).unwrap();
        let out = update_new_user(Some(("app_user", "app_secret")), &[]);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("Need admin permission"));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
        let v0 = acl_version();
        let counter = |v: &serde_json::Value| v[0]["version"]["counter"].as_i64().unwrap();
        // Created by the admin: the new account sends at once.
        let out = succeeded(&update_new_user(adm, &["-i", "DENY", "-t", "AclAdm=PUB"]));
        assert!(
            out.contains("create or update plain access config to"),
            "{out}"
        );
        send(&b, new, "AclAdm").await.unwrap();
        // Changed: its topic permission goes; the default DENY applies.
        succeeded(&update_new_user(adm, &["-t", "Other=PUB"]));
        let e = send(&b, new, "AclAdm").await.unwrap_err();
        assert!(matches!(&e, ClientError::Broker { code: 16, .. }), "{e}");
        let v1 = acl_version();
        assert_eq!(counter(&v1), counter(&v0) + 2, "{v1}");
        let cfg = succeeded(&tern_admin(
            &b,
            adm,
            &["getAclConfig", "-c", "DefaultCluster", "--json"],
        ));
        let cfg: serde_json::Value = serde_json::from_str(&cfg).unwrap();
        let accounts = cfg[&b.addr]["plainAccessConfigs"]
            .as_array()
            .unwrap()
            .clone();
        let mine = accounts
            .iter()
            .find(|a| a["accessKey"] == "newuser1")
            .unwrap();
        assert_eq!(mine["topicPerms"], serde_json::json!(["Other=PUB"]));
        assert_eq!(mine["defaultTopicPerm"], "DENY");
        // Deleted: refused again.
        let out = succeeded(&tern_admin(
            &b,
            adm,
            &["deleteAclConfig", "-c", "DefaultCluster", "-a", "newuser1"],
        ));
        assert!(out.contains("account's accesskey is:newuser1"), "{out}");
        let e = send(&b, new, "AclAdm").await.unwrap_err();
        assert!(e.to_string().contains("No acl config for newuser1"), "{e}");
        let out = tern_admin(
            &b,
            adm,
            &["deleteAclConfig", "-c", "DefaultCluster", "-a", "newuser1"],
        );
        assert_eq!(out.status.code(), Some(1), "deleting twice");
        // A global white address needs no account at all.
        assert!(send(&b, None, "AclAdm").await.is_err());
        succeeded(&tern_admin(
            &b,
            adm,
            &[
                "updateGlobalWhiteAddr",
                "-c",
                "DefaultCluster",
                "-g",
                "127.0.0.*",
            ],
        ));
        send(&b, None, "AclAdm").await.unwrap();
        // The file the broker wrote is one it loads at start.
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("127.0.0.*")
        );
    });
    drop(b);
    let b = Broker::start(&acl_conf(&file));
    run(async { send(&b, None, "AclAdm").await.unwrap() });
}
