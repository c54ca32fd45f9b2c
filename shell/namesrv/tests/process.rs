//! The binary as an operator sees it: KV persistence across restarts, config files, -p,
//! signals.

use crate::common;

use common::*;
use tern_shell::headers::{KvConfigKeyRequestHeader, PutKvConfigRequestHeader};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

/// A KV request (`code`: get or delete) for `key` of the namespace "ns", and its answer.
fn kv_call(conn: &tern_shell::Connection, code: RequestCode, key: &str) -> RemotingCommand {
    let header = KvConfigKeyRequestHeader {
        namespace: "ns".into(),
        key: key.into(),
    };
    call(conn, RemotingCommand::request(code, &header))
}

#[test]
fn kv_config_put_get_delete_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    {
        let ns = Namesrv::start(&home, &[]);
        let conn = ns.connect();
        for (k, v) in [("a", "1"), ("b", "2")] {
            let put = PutKvConfigRequestHeader {
                namespace: "ns".into(),
                key: k.into(),
                value: v.into(),
            };
            let r = call(
                &conn,
                RemotingCommand::request(RequestCode::PutKvConfig, &put),
            );
            assert_eq!(r.response_code(), ResponseCode::Success);
        }
        let r = kv_call(&conn, RequestCode::GetKvConfig, "a");
        assert_eq!(r.ext_fields.get("value"), Some("1"));
        let r = kv_call(&conn, RequestCode::DeleteKvConfig, "b");
        assert_eq!(r.response_code(), ResponseCode::Success);
        assert_eq!(ns.signal_and_wait("TERM").code(), Some(0));
    }
    let text = std::fs::read_to_string(home.join("kvConfig.json")).unwrap();
    assert_eq!(text, r#"{"configTable":{"ns":{"a":"1"}}}"#);
    let ns = Namesrv::start(&home, &[]);
    let conn = ns.connect();
    let r = kv_call(&conn, RequestCode::GetKvConfig, "a");
    assert_eq!(r.ext_fields.get("value"), Some("1"));
    let r = kv_call(&conn, RequestCode::GetKvConfig, "b");
    assert_eq!(r.response_code(), ResponseCode::QueryNotFound);
}

#[test]
fn print_config_prints_sorted_effective_values_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("namesrv.conf");
    std::fs::write(
        &conf,
        "# test\nlistenPort = 19876\nenableAllTopicList:false\n",
    )
    .unwrap();
    let out = run(&[
        "-c",
        conf.to_str().unwrap(),
        "-p",
        "--home",
        "/tmp/tern-home",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted);
    assert!(lines.contains(&"listenPort=19876"), "{text}");
    assert!(lines.contains(&"enableAllTopicList=false"), "{text}");
    assert!(lines.contains(&"brokerExpiredMillis=120000"), "{text}");
    assert!(
        lines.contains(&"kvConfigPath=/tmp/tern-home/kvConfig.json"),
        "{text}"
    );
}

#[test]
fn unknown_config_key_is_a_warning_and_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namesrv::with_conf(dir.path(), "listenPort=9876\nnoSuchOption=1\n");
    let err = ns.stderr();
    assert!(err.contains("WARN"), "{err}");
    assert!(
        err.contains("namesrv.conf:2: unknown key 'noSuchOption' ignored"),
        "{err}"
    );
    // --listen overrode the file's port.
    assert!(!ns.addr.ends_with(":9876"));
}

#[test]
fn invalid_config_value_exits_non_zero_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("namesrv.conf");
    std::fs::write(&conf, "# port\nlistenPort=abc\n").unwrap();
    let out = run(&["-c", conf.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("namesrv.conf:2: listenPort: invalid port 'abc'"),
        "{err}"
    );
}

#[test]
fn missing_config_file_and_bad_flags_exit_non_zero() {
    let out = run(&["-c", "/nonexistent/namesrv.conf"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/namesrv.conf"));
    let out = run(&["--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["--listen", "127.0.0.1:notaport", "-p"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("flag --listen: listenPort"));
}

#[test]
fn sigterm_and_sigint_shut_down_cleanly() {
    for sig in ["TERM", "INT"] {
        // The folder outlives the process: its log is read after the exit.
        let dir = tempfile::tempdir().unwrap();
        let ns = Namesrv::start(&dir.path().join("home"), &[]);
        let conn = ns.connect();
        let r = call(
            &conn,
            RemotingCommand::request_code(RequestCode::GetBrokerClusterInfo),
        );
        assert_eq!(r.response_code(), ResponseCode::Success);
        let stderr_path = ns.stderr_path.clone();
        let status = ns.signal_and_wait(sig);
        assert_eq!(status.code(), Some(0), "SIG{sig}: {status:?}");
        let log = std::fs::read_to_string(stderr_path).unwrap();
        assert!(log.contains("name server stopped"), "{log}");
    }
}

/// `enableControllerInNamesrv=true`: a controller node runs in the name server's process
/// on its own peer port (a group of one here, so it leads), configured by the controller
/// keys of the name server's file; the name server serves as before.
#[test]
fn an_embedded_controller_serves_beside_the_name_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = tern_testkit::free_port();
    let ns = Namesrv::with_conf(
        dir.path(),
        &format!(
            "enableControllerInNamesrv = true\n\
             controllerDLegerGroup = embedded\n\
             controllerDLegerPeers = n0-127.0.0.1:{port}\n\
             controllerDLegerSelfId = n0\n\
             controllerStorePath = {}\n",
            dir.path().join("controller").display()
        ),
    );
    let controller = format!("127.0.0.1:{port}");
    let led = poll_until(std::time::Duration::from_secs(10), || {
        let c = tern_shell::runtime::block_on(tern_shell::Connection::connect(
            &controller,
            tern_shell::ConnectionConfig::default(),
            TIMEOUT,
        ));
        let Ok(c) = c else { return false };
        let r = call(
            &c,
            RemotingCommand::request_code(RequestCode::ControllerGetMetadataInfo),
        );
        r.ext_fields.get("isLeader") == Some("true")
            && r.ext_fields.get("group") == Some("embedded")
    });
    assert!(
        led,
        "no leading embedded controller; stderr: {}",
        ns.stderr()
    );
    let r = call(
        &ns.connect(),
        RemotingCommand::request(
            RequestCode::GetRouteinfoByTopic,
            &tern_shell::headers::GetRouteInfoRequestHeader {
                topic: "NoSuchTopic".into(),
                accept_standard_json_only: None,
            },
        ),
    );
    assert_eq!(r.response_code(), ResponseCode::TopicNotExist);
}
