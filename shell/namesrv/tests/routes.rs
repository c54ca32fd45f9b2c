//! The name server binary driven over the wire: registration, routes, topic lists,
//! broker removal.

use crate::common;

use std::time::Duration;

use common::*;
use tern_shell::body::{
    ClusterInfo, DataVersion, KvTable, TopicList, TopicRouteData, from_json, to_json,
};
use tern_shell::headers::{
    BrokerIdentityRequestHeader, BrokerNameRequestHeader, DeleteTopicFromNamesrvRequestHeader,
    GetTopicsByClusterRequestHeader, PutKvConfigRequestHeader, RegisterBrokerResponseHeader,
};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

fn identity(name: &str, addr: &str, id: i64) -> BrokerIdentityRequestHeader {
    BrokerIdentityRequestHeader {
        broker_name: name.into(),
        broker_addr: addr.into(),
        cluster_name: "DefaultCluster".into(),
        broker_id: id,
    }
}

#[test]
fn registered_topic_route_quotes_keys_for_new_clients_and_not_for_the_cpp_client() {
    let ns = Namesrv::fresh();
    let broker = ns.connect();
    let resp = register(
        &broker,
        "broker-a",
        "127.0.0.1:10911",
        0,
        &[topic("TopicA", 4)],
    );
    assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");

    let client = ns.connect();
    let new = call(&client, route_request("TopicA", 401));
    assert_eq!(new.response_code(), ResponseCode::Success);
    let text = String::from_utf8(new.body.clone()).unwrap();
    assert!(
        text.contains(r#""brokerAddrs":{"0":"127.0.0.1:10911"}"#),
        "{text}"
    );
    assert!(text.contains(r#""filterServerTable":{}"#), "{text}");
    let route: TopicRouteData = from_json(&new.body).unwrap();
    assert_eq!(route.queue_datas[0].write_queue_nums, 4);
    assert_eq!(route.queue_datas[0].perm, 6);
    assert_eq!(route.broker_datas[0].cluster, "DefaultCluster");

    let cpp = call(&client, route_request("TopicA", 63));
    let text = String::from_utf8(cpp.body).unwrap();
    assert!(
        text.contains(r#""brokerAddrs":{0:"127.0.0.1:10911"}"#),
        "{text}"
    );

    let missing = call(&client, route_request("Nope", 401));
    assert_eq!(missing.response_code(), ResponseCode::TopicNotExist);
    assert!(missing.remark.unwrap_or_default().contains("Nope"));
}

#[test]
fn compressed_register_body_with_crc_creates_routes() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let bytes = body(&[topic("Zipped", 8)], 1).encode_compressed(479);
    let mut h = register_header("broker-z", "127.0.0.1:20911", 0);
    h.compressed = Some(true);
    h.body_crc32 = Some(crc(&bytes));
    let resp = call(
        &conn,
        RemotingCommand::request(RequestCode::RegisterBroker, &h).with_body(bytes),
    );
    assert_eq!(resp.response_code(), ResponseCode::Success, "{resp:?}");
    let route: TopicRouteData = from_json(&call(&conn, route_request("Zipped", 479)).body).unwrap();
    assert_eq!(route.queue_datas[0].read_queue_nums, 8);
    assert_eq!(route.broker_datas[0].master_addr(), Some("127.0.0.1:20911"));
}

#[test]
fn register_with_wrong_body_crc_is_refused() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let bytes = to_json(&body(&[topic("T", 4)], 1));
    let mut h = register_header("b", "127.0.0.1:10911", 0);
    h.body_crc32 = Some(crc(&bytes) ^ 1);
    let resp = call(
        &conn,
        RemotingCommand::request(RequestCode::RegisterBroker, &h).with_body(bytes),
    );
    assert_eq!(resp.response_code(), ResponseCode::SystemError);
    assert_eq!(resp.remark.as_deref(), Some("crc32 not match"));
    assert_eq!(route_code(&conn, "T", 401), ResponseCode::TopicNotExist);
}

#[test]
fn slave_learns_master_address_and_gets_order_topic_config() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let put = PutKvConfigRequestHeader {
        namespace: "ORDER_TOPIC_CONFIG".into(),
        key: "Ordered".into(),
        value: "b:4".into(),
    };
    let r = call(
        &conn,
        RemotingCommand::request(RequestCode::PutKvConfig, &put),
    );
    assert_eq!(r.response_code(), ResponseCode::Success);
    register(&conn, "b", "127.0.0.1:10911", 0, &[topic("T", 4)]);
    let resp = register(&conn, "b", "127.0.0.2:10911", 1, &[]);
    assert_eq!(resp.response_code(), ResponseCode::Success);
    let h: RegisterBrokerResponseHeader = resp.decode_header().unwrap();
    assert_eq!(h.master_addr.as_deref(), Some("127.0.0.1:10911"));
    assert_eq!(h.ha_server_addr.as_deref(), Some("127.0.0.1:10912"));
    let kv: KvTable = from_json(&resp.body).unwrap();
    assert_eq!(kv.table["Ordered"], "b:4");
}

#[test]
fn cluster_info_topic_lists_and_delete_topic() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    register(
        &conn,
        "b1",
        "127.0.0.1:10911",
        0,
        &[topic("T1", 4), topic("T2", 2)],
    );

    let resp = call(
        &conn,
        RemotingCommand::request_code(RequestCode::GetBrokerClusterInfo),
    );
    let text = String::from_utf8(resp.body.clone()).unwrap();
    assert!(
        text.contains(r#"{0:"127.0.0.1:10911"}"#),
        "fastjson keys: {text}"
    );
    let info: ClusterInfo = from_json(&resp.body).unwrap();
    assert_eq!(
        info.cluster_addr_table["DefaultCluster"],
        vec!["b1".to_string()]
    );

    let all = call(
        &conn,
        RemotingCommand::request_code(RequestCode::GetAllTopicListFromNameserver),
    );
    let list: TopicList = from_json(&all.body).unwrap();
    assert_eq!(list.topic_list, vec!["T1".to_string(), "T2".to_string()]);

    let by_cluster = call(
        &conn,
        RemotingCommand::request(
            RequestCode::GetTopicsByCluster,
            &GetTopicsByClusterRequestHeader {
                cluster: "DefaultCluster".into(),
            },
        ),
    );
    let list: TopicList = from_json(&by_cluster.body).unwrap();
    assert_eq!(list.topic_list.len(), 2);

    let mut system = RemotingCommand::request_code(RequestCode::Other(304));
    system.version = 401;
    let list: TopicList = from_json(&call(&conn, system).body).unwrap();
    assert!(list.topic_list.contains(&"DefaultCluster".to_string()));

    let del = DeleteTopicFromNamesrvRequestHeader {
        topic: "T1".into(),
        cluster_name: None,
    };
    let r = call(
        &conn,
        RemotingCommand::request(RequestCode::DeleteTopicInNamesrv, &del),
    );
    assert_eq!(r.response_code(), ResponseCode::Success);
    assert_eq!(route_code(&conn, "T1", 401), ResponseCode::TopicNotExist);
    assert_eq!(route_code(&conn, "T2", 401), ResponseCode::Success);
}

#[test]
fn wipe_and_add_write_perm_change_route_perm() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    register(&conn, "b1", "127.0.0.1:10911", 0, &[topic("T", 4)]);
    let h = BrokerNameRequestHeader {
        broker_name: "b1".into(),
    };
    let r = call(
        &conn,
        RemotingCommand::request(RequestCode::WipeWritePermOfBroker, &h),
    );
    assert_eq!(r.ext_fields.get("wipeTopicCount"), Some("1"));
    let route = route_of(&conn, "T");
    assert_eq!(route.queue_datas[0].perm, 4);
    call(
        &conn,
        RemotingCommand::request(RequestCode::AddWritePermOfBroker, &h),
    );
    let route = route_of(&conn, "T");
    assert_eq!(route.queue_datas[0].perm, 6);
}

#[test]
fn query_data_version_reports_whether_topics_changed() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    register(&conn, "b1", "127.0.0.1:10911", 0, &[topic("T", 4)]);
    let same = body(&[], 1).topic_config_serialize_wrapper.data_version;
    let query = |v: &DataVersion| {
        call(
            &conn,
            RemotingCommand::request(
                RequestCode::QueryDataVersion,
                &identity("b1", "127.0.0.1:10911", 0),
            )
            .with_body(to_json(v)),
        )
    };
    let r = query(&same);
    assert_eq!(r.ext_fields.get("changed"), Some("false"));
    assert_eq!(from_json::<DataVersion>(&r.body).unwrap(), same);
    let newer = DataVersion { counter: 2, ..same };
    let r = query(&newer);
    assert_eq!(r.ext_fields.get("changed"), Some("true"));
}

#[test]
fn unregistered_broker_loses_its_routes() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    register(&conn, "b1", "127.0.0.1:10911", 0, &[topic("T", 4)]);
    let r = call(
        &conn,
        RemotingCommand::request(
            RequestCode::UnregisterBroker,
            &identity("b1", "127.0.0.1:10911", 0),
        ),
    );
    assert_eq!(r.response_code(), ResponseCode::Success);
    assert_eq!(route_code(&conn, "T", 401), ResponseCode::TopicNotExist);
    let info = cluster_info(&conn);
    assert!(info.broker_addr_table.is_empty());
}

#[test]
fn broker_is_removed_when_its_connection_closes() {
    let ns = Namesrv::fresh();
    let broker = ns.connect();
    register(&broker, "b1", "127.0.0.1:10911", 0, &[topic("T", 4)]);
    let client = ns.connect();
    assert_eq!(route_code(&client, "T", 401), ResponseCode::Success);
    broker.close();
    assert!(poll_until(Duration::from_secs(5), || {
        route_code(&client, "T", 401) == ResponseCode::TopicNotExist
    }));
}

#[test]
fn silent_broker_expires_while_a_heartbeating_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namesrv::with_conf(
        dir.path(),
        "brokerExpiredMillis=800\nscanNotActiveBrokerInterval=100\n",
    );
    let silent = ns.connect();
    register(&silent, "quiet", "127.0.0.1:10911", 0, &[topic("Q", 4)]);
    let alive = ns.connect();
    register(&alive, "busy", "127.0.0.1:10921", 0, &[topic("B", 4)]);
    let client = ns.connect();
    let hb = tern_shell::headers::BrokerHeartbeatRequestHeader {
        cluster_name: "DefaultCluster".into(),
        broker_addr: "127.0.0.1:10921".into(),
        broker_name: "busy".into(),
        broker_id: Some(0),
        ..Default::default()
    };
    let expired = poll_until(Duration::from_secs(5), || {
        tern_shell::runtime::block_on(
            alive.oneway(RemotingCommand::request(RequestCode::BrokerHeartbeat, &hb)),
        )
        .unwrap();
        route_code(&client, "Q", 401) == ResponseCode::TopicNotExist
    });
    assert!(
        expired,
        "silent broker still routed; stderr: {}",
        ns.stderr()
    );
    assert_eq!(route_code(&client, "B", 401), ResponseCode::Success);
    assert!(
        !silent.is_closed(),
        "expiry is by silence, not by connection"
    );
}

#[test]
fn unknown_request_code_is_answered_not_supported() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let r = call(
        &conn,
        RemotingCommand::request_code(RequestCode::Other(9999)),
    );
    assert_eq!(r.response_code(), ResponseCode::RequestCodeNotSupported);
}

#[test]
fn request_missing_a_required_field_gets_system_error_naming_it() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    let r = call(
        &conn,
        RemotingCommand::request_code(RequestCode::GetRouteinfoByTopic),
    );
    assert_eq!(r.response_code(), ResponseCode::SystemError);
    assert!(r.remark.unwrap_or_default().contains("topic"));
}

#[test]
fn admin_registered_topic_is_routed_to_a_known_broker_only() {
    let ns = Namesrv::fresh();
    let conn = ns.connect();
    register(&conn, "b1", "127.0.0.1:10911", 0, &[]);
    let queue = |broker: &str| tern_shell::body::QueueData {
        broker_name: broker.into(),
        read_queue_nums: 2,
        write_queue_nums: 2,
        perm: 6,
        topic_sys_flag: 0,
    };
    let route = TopicRouteData {
        queue_datas: vec![queue("b1"), queue("unknown")],
        ..Default::default()
    };
    let r = call(
        &conn,
        RemotingCommand::request_code(RequestCode::RegisterTopicInNamesrv)
            .with_ext("topic", "Admin")
            .with_body(route.encode_for(479, false)),
    );
    assert_eq!(r.response_code(), ResponseCode::Success, "{r:?}");
    let got = route_of(&conn, "Admin");
    assert_eq!(got.queue_datas.len(), 1);
    assert_eq!(got.queue_datas[0].broker_name, "b1");
}
