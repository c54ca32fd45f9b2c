//! RocketMQ 5's `stateVersion` guard over the wire: a REGISTER_BROKER for an id that
//! another live address of the broker-set holds with a higher `stateVersion` (the master
//! epoch, in controller mode) is ignored (`RouteInfoManager.registerBroker`), so a
//! deposed master that wakes up cannot take id 0 back. Java answers such a registration
//! SUCCESS with neither `masterAddr` nor `haServerAddr`; the holder stays.

use crate::common;

use common::*;
use tern_shell::headers::RegisterBrokerResponseHeader;
use tern_shell::{Connection, RemotingCommand, RequestCode, ResponseCode};

const A: &str = "127.0.0.1:30911";
const B: &str = "127.0.0.1:31911";

/// A register body as a Java broker writes it (fastjson: keys sorted); `state_version`
/// `None` is a 4.x broker's data version, which has no such field.
fn java_body(state_version: Option<i64>) -> Vec<u8> {
    let sv = state_version.map_or(String::new(), |v| format!(r#","stateVersion":{v}"#));
    format!(
        r#"{{"filterServerList":[],"topicConfigSerializeWrapper":{{"dataVersion":{{"counter":1{sv},"timestamp":1700000000000}},"topicConfigTable":{{"Orders":{{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"Orders","topicSysFlag":0,"writeQueueNums":4}}}}}}}}"#
    )
    .into_bytes()
}

fn register_as(
    conn: &Connection,
    addr: &str,
    id: i64,
    state_version: Option<i64>,
) -> RemotingCommand {
    let body = java_body(state_version);
    let mut h = register_header("broker-a", addr, id);
    h.body_crc32 = Some(crc(&body));
    let resp = call(
        conn,
        RemotingCommand::request(RequestCode::RegisterBroker, &h).with_body(body),
    );
    assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");
    resp
}

fn addrs(conn: &Connection) -> Vec<(i64, String)> {
    let route = route_of(conn, "Orders");
    assert_eq!(route.broker_datas.len(), 1, "{route:?}");
    let mut v: Vec<(i64, String)> = route.broker_datas[0]
        .broker_addrs
        .0
        .iter()
        .map(|(id, a)| (*id, a.clone()))
        .collect();
    v.sort();
    v
}

fn answer(resp: &RemotingCommand) -> RegisterBrokerResponseHeader {
    resp.decode_header().unwrap()
}

#[test]
fn deposed_master_with_lower_state_version_is_ignored_and_a_newer_one_takes_id_0() {
    let ns = Namesrv::fresh();
    let (a, b, client) = (ns.connect(), ns.connect(), ns.connect());
    register_as(&a, A, 0, Some(3));
    assert_eq!(addrs(&client), vec![(0, A.to_string())]);

    // B, a master of epoch 2 woken from SIGSTOP: Java's answer is SUCCESS, empty.
    let resp = register_as(&b, B, 0, Some(2));
    let h = answer(&resp);
    assert_eq!((h.master_addr, h.ha_server_addr), (None, None));
    assert_eq!(addrs(&client), vec![(0, A.to_string())]);
    let info = cluster_info(&client);
    let listed: Vec<&String> = info.broker_addr_table["broker-a"]
        .broker_addrs
        .0
        .values()
        .collect();
    assert_eq!(listed, vec![A]);
    assert!(
        ns.stderr().contains("ignored"),
        "the refusal is logged: {}",
        ns.stderr()
    );

    // The same compressed, as 5.x brokers with compressedRegister send it.
    let mut body = body(&[topic("Orders", 4)], 1);
    body.topic_config_serialize_wrapper
        .data_version
        .state_version = 2;
    let bytes = body.encode_compressed(479);
    let mut h = register_header("broker-a", B, 0);
    h.compressed = Some(true);
    h.body_crc32 = Some(crc(&bytes));
    let resp = call(
        &b,
        RemotingCommand::request(RequestCode::RegisterBroker, &h).with_body(bytes),
    );
    assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");
    assert_eq!(addrs(&client), vec![(0, A.to_string())]);

    // Elected with epoch 4: B takes id 0, A is dropped from it.
    register_as(&b, B, 0, Some(4));
    assert_eq!(addrs(&client), vec![(0, B.to_string())]);

    // Now A (epoch 3) is the stale one; once it learns epoch 4 it registers as a slave.
    let resp = register_as(&a, A, 0, Some(3));
    assert_eq!(answer(&resp).master_addr, None);
    assert_eq!(addrs(&client), vec![(0, B.to_string())]);
    let resp = register_as(&a, A, 1, Some(4));
    assert_eq!(answer(&resp).master_addr.as_deref(), Some(B));
    assert_eq!(addrs(&client), vec![(0, B.to_string()), (1, A.to_string())]);
}

#[test]
fn equal_state_version_takes_the_id() {
    let ns = Namesrv::fresh();
    let (a, b, client) = (ns.connect(), ns.connect(), ns.connect());
    register_as(&a, A, 0, Some(3));
    register_as(&b, B, 0, Some(3));
    assert_eq!(addrs(&client), vec![(0, B.to_string())]);
}

#[test]
fn holder_that_is_gone_does_not_block_a_lower_state_version() {
    let ns = Namesrv::fresh();
    let (a, b, client) = (ns.connect(), ns.connect(), ns.connect());
    register_as(&a, A, 0, Some(3));
    a.close();
    // A's connection closed: the name server forgets it (Java's onChannelDestroy).
    assert!(poll_until(std::time::Duration::from_secs(5), || {
        route_code(&client, "Orders", 401) == ResponseCode::TopicNotExist
    }));
    register_as(&b, B, 0, Some(2));
    assert_eq!(addrs(&client), vec![(0, B.to_string())]);
}

#[test]
fn registrations_without_state_version_replace_the_holder_as_before() {
    let ns = Namesrv::fresh();
    let (a, b, c, client) = (ns.connect(), ns.connect(), ns.connect(), ns.connect());
    register_as(&a, A, 0, None);
    register_as(&b, B, 0, None);
    assert_eq!(addrs(&client), vec![(0, B.to_string())]);
    register_as(&a, A, 0, None);
    assert_eq!(addrs(&client), vec![(0, A.to_string())]);
    // A slave (another id) is never compared, whatever the versions.
    let resp = register_as(&c, "127.0.0.1:32911", 1, None);
    assert_eq!(answer(&resp).master_addr.as_deref(), Some(A));
    assert_eq!(
        addrs(&client),
        vec![(0, A.to_string()), (1, "127.0.0.1:32911".to_string())]
    );
}
