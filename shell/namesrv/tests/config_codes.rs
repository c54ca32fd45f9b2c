//! GET_NAMESRV_CONFIG (319) and UPDATE_NAMESRV_CONFIG (318) against the real
//! `tern-namesrv` process: run-time keys change at once and take effect, the rest are
//! refused with RocketMQ's codes, and a refused update changes nothing.

use crate::common;

use common::*;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

fn settings(conn: &tern_shell::Connection) -> String {
    let r = call(
        conn,
        RemotingCommand::request_code(RequestCode::GetNamesrvConfig),
    );
    assert_eq!(r.response_code(), ResponseCode::Success);
    String::from_utf8(r.body.to_vec()).unwrap()
}

fn update(conn: &tern_shell::Connection, body: &str) -> RemotingCommand {
    call(
        conn,
        RemotingCommand::request_code(RequestCode::UpdateNamesrvConfig)
            .with_body(body.as_bytes().to_vec()),
    )
}

#[test]
fn run_time_keys_change_at_once_and_the_rest_are_refused_whole() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let text = settings(&conn);
    for line in [
        "enableAllTopicList=true",
        "enableTopicList=true",
        "brokerExpiredMillis=120000",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let all_topics = || {
        call(
            &conn,
            RemotingCommand::request_code(RequestCode::GetAllTopicListFromNameserver),
        )
    };
    assert_eq!(all_topics().response_code(), ResponseCode::Success);

    let r = update(&conn, "enableAllTopicList=false\n");
    assert_eq!(r.response_code(), ResponseCode::Success, "{:?}", r.remark);
    assert!(
        settings(&conn)
            .lines()
            .any(|l| l == "enableAllTopicList=false")
    );
    let off = all_topics();
    assert_eq!(off.response_code(), ResponseCode::SystemError);
    assert_eq!(off.remark.as_deref(), Some("disable"));

    // A start-only key in the update refuses all of it.
    let r = update(&conn, "enableTopicList=false\nlistenPort=1\n");
    assert_eq!(r.response_code(), ResponseCode::InvalidParameter);
    assert!(
        r.remark
            .as_deref()
            .unwrap()
            .starts_with("listenPort cannot change while the name server runs"),
        "{:?}",
        r.remark
    );
    assert!(settings(&conn).lines().any(|l| l == "enableTopicList=true"));

    let r = update(&conn, "rocketmqHome=/tmp/x\n");
    assert_eq!(r.response_code(), ResponseCode::NoPermission);
    assert_eq!(
        r.remark.as_deref(),
        Some("Can not update config in black list.")
    );
    let r = update(&conn, "brokerExpiredMillis=soon\n");
    assert_eq!(r.response_code(), ResponseCode::InvalidParameter);
    assert!(
        r.remark.as_deref().unwrap().contains("brokerExpiredMillis"),
        "{:?}",
        r.remark
    );
    let r = update(&conn, "noSuchKey=1\n");
    assert_eq!(r.response_code(), ResponseCode::InvalidParameter);
    assert!(
        r.remark.as_deref().unwrap().contains("noSuchKey"),
        "{:?}",
        r.remark
    );

    let r = update(&conn, "enableAllTopicList=true\n");
    assert_eq!(r.response_code(), ResponseCode::Success);
    assert_eq!(all_topics().response_code(), ResponseCode::Success);
}
