//! `aclEnable=true` on a real name server process: route lookups need a permission on
//! the topic, listings a valid account, and everything that changes the tables (a
//! broker's registration, deleting a route, wiping write permission, KV config) an
//! admin account. Without it, any peer could register a broker or delete a topic.

use crate::common;

use common::*;
use tern_shell::acl::SessionCredentials;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

const RULES: &str = "\
accounts:
  - accessKey: tern_user
    secretKey: user_secret
    defaultTopicPerm: DENY
    topicPerms:
      - Mine=SUB
  - accessKey: broker_admin
    secretKey: 12345678
    admin: true
";

fn signed(mut req: RemotingCommand, who: &SessionCredentials) -> RemotingCommand {
    who.sign(&mut req);
    req
}

#[track_caller]
fn refused(resp: &RemotingCommand, why: &str) {
    assert_eq!(resp.response_code(), ResponseCode::NoPermission, "{resp:?}");
    let remark = resp.remark.clone().unwrap_or_default();
    assert!(remark.contains(why), "remark {remark:?} lacks {why:?}");
}

#[track_caller]
fn success(resp: &RemotingCommand) {
    assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");
}

#[test]
fn only_admins_change_the_tables_and_routes_need_a_permission() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("plain_acl.yml");
    std::fs::write(&rules, RULES).unwrap();
    let ns = Namesrv::with_conf(
        dir.path(),
        &format!("aclEnable=true\nplainAclFile={}\n", rules.display()),
    );
    let conn = ns.connect();
    let user = SessionCredentials::new("tern_user", "user_secret");
    let admin = SessionCredentials::new("broker_admin", "12345678");

    let reg = || {
        RemotingCommand::request(
            RequestCode::RegisterBroker,
            &register_header("broker-a", "127.0.0.1:10911", 0),
        )
        .with_body(tern_shell::body::to_json(&body(
            &[topic("Mine", 4), topic("Secret", 4)],
            1,
        )))
    };
    refused(&call(&conn, reg()), "No accessKey is configured");
    refused(
        &call(&conn, signed(reg(), &user)),
        "Need admin permission for request code=103",
    );
    success(&call(&conn, signed(reg(), &admin)));

    // Routes: some permission on the topic.
    success(&call(&conn, signed(route_request("Mine", 0), &user)));
    refused(
        &call(&conn, signed(route_request("Secret", 0), &user)),
        "No permission for topic Secret",
    );
    refused(&call(&conn, route_request("Mine", 0)), "No accessKey");
    // Listings: any valid account.
    success(&call(
        &conn,
        signed(
            RemotingCommand::request_code(RequestCode::GetBrokerClusterInfo),
            &user,
        ),
    ));

    // Changes: admin only.
    let changes = [
        RemotingCommand::request_code(RequestCode::DeleteTopicInNamesrv).with_ext("topic", "Mine"),
        RemotingCommand::request_code(RequestCode::WipeWritePermOfBroker)
            .with_ext("brokerName", "broker-a"),
        RemotingCommand::request_code(RequestCode::PutKvConfig)
            .with_ext("namespace", "NS")
            .with_ext("key", "k")
            .with_ext("value", "v"),
        RemotingCommand::request_code(RequestCode::UnregisterBroker)
            .with_ext("brokerName", "broker-a")
            .with_ext("brokerAddr", "127.0.0.1:10911")
            .with_ext("clusterName", "DefaultCluster")
            .with_ext("brokerId", "0"),
        RemotingCommand::request_code(RequestCode::GetNamesrvConfig),
    ];
    for req in changes {
        refused(&call(&conn, signed(req, &user)), "Need admin permission");
    }
    // Nothing changed: the user's route is still there.
    success(&call(&conn, signed(route_request("Mine", 0), &user)));
    let wipe = RemotingCommand::request_code(RequestCode::WipeWritePermOfBroker)
        .with_ext("brokerName", "broker-a");
    success(&call(&conn, signed(wipe, &admin)));
}
