//! Tern's client and `tern-admin` against a broker with `aclEnable=true`: requests are
//! signed with the configured account, refusals come back as NO_PERMISSION errors.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Broker, acl_conf, run, write_acl};
use tern_client::{
    ClientConfig, ClientError, ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message,
    MessageExt, Producer, ProducerConfig, PushConsumer, PushConsumerConfig, SessionCredentials,
};

const RULES: &str = "\
accounts:
  - accessKey: app_user
    secretKey: app_secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - AclTopic=PUB|SUB
  - accessKey: ops_admin
    secretKey: ops_secret
    admin: true
";

fn with(b: &Broker, creds: Option<(&str, &str)>) -> ClientConfig {
    let mut c = b.client_config();
    c.credentials = creds.map(|(ak, sk)| SessionCredentials::new(ak, sk));
    c
}

fn no_permission(e: &ClientError, what: &str) -> bool {
    matches!(e, ClientError::Broker { code: 16, remark } if remark.contains(what))
}

#[test]
fn signed_clients_pass_and_unsigned_or_unpermitted_ones_are_refused() {
    let rules = tempfile::tempdir().unwrap();
    let file = write_acl(rules.path(), RULES);
    let b = Broker::start(&acl_conf(&file));
    let admin = |args: &[&str], creds: Option<(&str, &str)>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern-admin"));
        cmd.args(args).args(["-n", &b.namesrv]);
        cmd.env_remove("TERN_ACCESS_KEY")
            .env_remove("TERN_SECRET_KEY");
        if let Some((ak, sk)) = creds {
            cmd.env("TERN_ACCESS_KEY", ak).env("TERN_SECRET_KEY", sk);
        }
        cmd.output().expect("run tern-admin")
    };
    // Creating a topic is an admin request.
    let create = [
        "updateTopic",
        "-c",
        "DefaultCluster",
        "-t",
        "AclTopic",
        "-r",
        "2",
        "-w",
        "2",
    ];
    let out = admin(&create, Some(("app_user", "app_secret")));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Need admin permission"), "{err}");
    let out = admin(&create, Some(("ops_admin", "ops_secret")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    run(async {
        let p = Producer::new(
            ProducerConfig::new("acl-pg"),
            with(&b, Some(("app_user", "app_secret"))),
        )
        .unwrap();
        p.start();
        let mut sent = BTreeSet::new();
        for i in 0..20 {
            let r = p
                .send(Message::new("AclTopic", format!("m{i}")))
                .await
                .unwrap();
            sent.insert(r.msg_id);
        }
        let e = p.send(Message::new("ElseTopic", "x")).await.unwrap_err();
        assert!(
            no_permission(&e, "ElseTopic") || matches!(e, ClientError::NoRoute { .. }),
            "{e}"
        );
        p.shutdown().await;

        let anon = Producer::new(ProducerConfig::new("acl-anon"), with(&b, None)).unwrap();
        anon.start();
        let e = anon.send(Message::new("AclTopic", "x")).await.unwrap_err();
        assert!(no_permission(&e, "No accessKey"), "{e}");
        anon.shutdown().await;
        let wrong = Producer::new(
            ProducerConfig::new("acl-wrong"),
            with(&b, Some(("app_user", "not_it"))),
        )
        .unwrap();
        wrong.start();
        let e = wrong.send(Message::new("AclTopic", "x")).await.unwrap_err();
        assert!(no_permission(&e, "Check signature failed"), "{e}");
        wrong.shutdown().await;

        let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let mut cfg = PushConsumerConfig::new("acl-cg");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let c = PushConsumer::new(cfg, with(&b, Some(("app_user", "app_secret")))).unwrap();
        c.subscribe("AclTopic", "*").unwrap();
        let log = seen.clone();
        c.register_concurrent(move |msgs: &[MessageExt], _: &mut ConsumeContext| {
            log.lock()
                .unwrap()
                .extend(msgs.iter().map(|m| m.msg_id().to_owned()));
            ConsumeStatus::Success
        });
        c.start().await.unwrap();
        tern_testkit::wait_until(
            "signed consumer did not get every message",
            Duration::from_secs(30),
            async || sent.is_subset(&seen.lock().unwrap()),
        )
        .await;
        c.shutdown().await;
    });
}
