//! GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG against the real `tern-broker` process: the
//! effective configuration with RocketMQ's key names and renderings, the keys that change
//! at run time taking effect (registration, pulls), the others refused by name, and the
//! change kept in broker.conf across a restart.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use tern_shell::body::TopicRouteData;
use tern_shell::config::ConfigSource;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

async fn broker_config(c: &Client) -> BTreeMap<String, String> {
    let resp = c
        .call(RemotingCommand::request_code(RequestCode::GetBrokerConfig))
        .await;
    expect_code(&resp, ResponseCode::Success);
    let text = String::from_utf8(resp.body.to_vec()).unwrap();
    ConfigSource::parse_properties(&text, "answer")
        .iter()
        .map(|(k, e)| (k.to_owned(), e.value.clone()))
        .collect()
}

async fn update(c: &Client, body: &str) -> RemotingCommand {
    c.call(
        RemotingCommand::request_code(RequestCode::UpdateBrokerConfig).with_body(body.as_bytes()),
    )
    .await
}

async fn route_perm(ns: &Client, topic: &str) -> i32 {
    let resp = ns.call(route_req(topic)).await;
    expect_code(&resp, ResponseCode::Success);
    let route: TopicRouteData = tern_shell::body::from_json(&resp.body).unwrap();
    route.queue_datas[0].perm
}

#[test]
fn broker_config_is_the_effective_one_and_live_keys_change_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(
        dir.path(),
        "# operator's comment\nflushDiskType=SYNC_FLUSH\nfileReservedTime=48\nbrokerClusterName=Cfg\n",
    );
    let mut b = BrokerProc::standalone(dir.path(), &conf);
    b.with_client(async |c| {
        let got = broker_config(c).await;
        for (k, v) in [
            ("brokerClusterName", "Cfg"),
            ("brokerName", "broker-a"),
            ("brokerId", "0"),
            ("brokerRole", "ASYNC_MASTER"),
            ("flushDiskType", "SYNC_FLUSH"),
            ("aclEnable", "false"),
            ("brokerPermission", "6"),
            ("fileReservedTime", "48"),
            ("deleteWhen", "04"),
            ("mapedFileSizeCommitLog", "1048576"),
            ("syncFlushTimeout", "5000"),
            ("autoCreateTopicEnable", "true"),
            ("metricsExporterType", "PROM"),
        ] {
            assert_eq!(got.get(k).map(String::as_str), Some(v), "{k} in {got:?}");
        }
        assert_eq!(
            got.get("brokerConfigPath").map(std::path::PathBuf::from),
            Some(conf.clone())
        );
        // Every key the broker reads, not a handful.
        assert!(got.len() > 60, "{} keys: {got:?}", got.len());

        let ns = Client::connect(b.namesrv.as_deref().unwrap()).await;
        create_topic(c, "Cfg", 1).await;
        send_ok(c, send_v2(&msg("Cfg", b"one", &[]), 0)).await;
        assert_eq!(route_perm(&ns, "Cfg").await, 6);

        // A key read only at start refuses the whole update, naming it.
        let resp = update(c, "fileReservedTime=12\nlistenPort=1\n").await;
        expect_code(&resp, ResponseCode::NoPermission);
        let remark = resp.remark.clone().unwrap_or_default();
        assert!(
            remark.contains("listenPort") && remark.contains("restart"),
            "{remark}"
        );
        let resp = update(c, "brokerConfigPath=/tmp/elsewhere\n").await;
        expect_code(&resp, ResponseCode::NoPermission);
        assert_eq!(
            resp.remark.as_deref(),
            Some("Can not update config in black list.")
        );
        let resp = update(c, "brokerPermission=12\n").await;
        expect_code(&resp, ResponseCode::InvalidParameter);
        assert!(
            resp.remark.unwrap_or_default().contains("brokerPermission"),
            "the remark names the key"
        );
        let resp = update(c, "noSuchKey=1\n").await;
        expect_code(&resp, ResponseCode::InvalidParameter);
        assert_eq!(
            broker_config(c).await.get("fileReservedTime").unwrap(),
            "48"
        );

        // Read only: registered at once, pulls refused as RocketMQ refuses them.
        let resp = update(c, "brokerPermission=4\nfileReservedTime=12\n").await;
        expect_code(&resp, ResponseCode::Success);
        assert_eq!(route_perm(&ns, "Cfg").await, 4);
        let now = broker_config(c).await;
        assert_eq!(now["brokerPermission"], "4");
        assert_eq!(now["fileReservedTime"], "12");
        // Write only: pulls refused with RocketMQ's code and remark.
        expect_code(
            &update(c, "brokerPermission=2\n").await,
            ResponseCode::Success,
        );
        let resp = c.call(pull_req("cfg-g", "Cfg", 0, 0, Some("*"))).await;
        expect_code(&resp, ResponseCode::NoPermission);
        assert_eq!(
            resp.remark.as_deref(),
            Some("the broker[127.0.0.1] pulling message is forbidden")
        );
        assert_eq!(route_perm(&ns, "Cfg").await, 2);
    });
    // Written into the operator's file, which keeps its other lines.
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(text.contains("# operator's comment\n"), "{text}");
    assert!(text.contains("\nfileReservedTime=12\n"), "{text}");
    assert!(text.contains("\nbrokerPermission=2\n"), "{text}");
    assert!(!text.contains("fileReservedTime=48"), "{text}");

    b.stop();
    let b = BrokerProc::standalone(dir.path(), &conf);
    b.with_client(async |c| {
        let got = broker_config(c).await;
        assert_eq!(got["brokerPermission"], "2");
        assert_eq!(got["fileReservedTime"], "12");
        let resp = c.call(pull_req("cfg-g", "Cfg", 0, 0, Some("*"))).await;
        expect_code(&resp, ResponseCode::NoPermission);
        expect_code(
            &update(c, "brokerPermission=6\n").await,
            ResponseCode::Success,
        );
        let resp = c.call(pull_req("cfg-g", "Cfg", 0, 0, Some("*"))).await;
        expect_code(&resp, ResponseCode::Success);
    });
}

#[test]
fn groups_with_consume_off_are_refused_as_rocketmq_refuses_them() {
    with_client("", async |c| {
        create_topic(c, "Guarded", 1).await;
        send_ok(c, send_v2(&msg("Guarded", b"m", &[]), 0)).await;
        create_group(
            c,
            &tern_shell::body::SubscriptionGroupConfig {
                group_name: "off-g".into(),
                consume_enable: false,
                ..Default::default()
            },
        )
        .await;
        let resp = c.call(pull_req("off-g", "Guarded", 0, 0, Some("*"))).await;
        expect_code(&resp, ResponseCode::NoPermission);
        assert_eq!(
            resp.remark.as_deref(),
            Some("subscription group no permission, off-g")
        );
        assert_eq!(resp.ext_fields.get("forbiddenType"), Some("2"));
        let pop = RemotingCommand::request_code(RequestCode::PopMessage)
            .with_ext("consumerGroup", "off-g")
            .with_ext("topic", "Guarded")
            .with_ext("queueId", "0")
            .with_ext("maxMsgNums", "1")
            .with_ext("invisibleTime", "60000")
            .with_ext("pollTime", "0")
            .with_ext("bornTime", now_ms().to_string())
            .with_ext("initMode", "0")
            .with_ext("expType", "TAG")
            .with_ext("exp", "*");
        let resp = c.call(pop).await;
        expect_code(&resp, ResponseCode::NoPermission);
        assert_eq!(
            resp.remark.as_deref(),
            Some("subscription group no permission, off-g")
        );

        // Broadcasting off: a broadcasting member's pull by its heartbeat's
        // subscription is refused; a clustering group of the same settings is served.
        create_group(
            c,
            &tern_shell::body::SubscriptionGroupConfig {
                group_name: "nobcast-g".into(),
                consume_broadcast_enable: false,
                ..Default::default()
            },
        )
        .await;
        let hb = heartbeat("cid-1", "nobcast-g", "Guarded", "*", vec![]);
        let mut data: tern_shell::body::HeartbeatData =
            tern_shell::body::from_json(&hb.body).unwrap();
        data.consumer_data_set[0].message_model = tern_shell::body::MessageModel::Broadcasting;
        let hb = RemotingCommand::request_code(RequestCode::HeartBeat)
            .with_body(tern_shell::body::to_json(&data));
        expect_code(&c.call(hb).await, ResponseCode::Success);
        let resp = c.call(pull_req("nobcast-g", "Guarded", 0, 0, None)).await;
        expect_code(&resp, ResponseCode::NoPermission);
        assert_eq!(
            resp.remark.as_deref(),
            Some("the consumer group[nobcast-g] can not consume by broadcast way")
        );
        assert_eq!(resp.ext_fields.get("forbiddenType"), Some("4"));
        let hb = heartbeat("cid-1", "nobcast-g", "Guarded", "*", vec![]);
        expect_code(&c.call(hb).await, ResponseCode::Success);
        let resp = c.call(pull_req("nobcast-g", "Guarded", 0, 0, None)).await;
        expect_code(&resp, ResponseCode::Success);
    });
}

#[test]
fn store_paths_under_the_root_are_accepted_elsewhere_refused_and_trace_topic_made() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data").join("store");
    let conf = write_conf(
        dir.path(),
        &format!(
            "storePathCommitLog={}\nstoreCheckpoint={}\ntraceTopicEnable=true\nbrokerIP2=127.0.0.2\n",
            root.join("commitlog").display(),
            root.join("checkpoint").display()
        ),
    );
    let b = BrokerProc::standalone(dir.path(), &conf);
    b.with_client(async |c| {
        let got = broker_config(c).await;
        assert_eq!(
            got["storePathConsumeQueue"],
            root.join("consumequeue").display().to_string()
        );
        assert_eq!(got["abortFile"], root.join("abort").display().to_string());
        assert_eq!(got["brokerIP2"], "127.0.0.2");
        assert_eq!(got["brokerIP1"], "127.0.0.1", "the address it is bound to");
        assert_eq!(got["traceTopicEnable"], "true");
        let resp = c
            .call(RemotingCommand::request_code(
                RequestCode::GetAllTopicConfig,
            ))
            .await;
        let all: tern_shell::body::TopicConfigSerializeWrapper =
            tern_shell::body::from_json(&resp.body).unwrap();
        let trace = &all.topic_config_table["RMQ_SYS_TRACE_TOPIC"];
        assert_eq!((trace.read_queue_nums, trace.perm), (1, 6));
    });
    drop(b);
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "storePathIndex=/var/elsewhere/index\n");
    let (status, _, stderr) = run_to_exit(&BrokerProc::standalone_args(dir.path(), &conf));
    assert!(!status.success());
    assert!(
        stderr.contains("storePathIndex")
            && stderr.contains("/var/elsewhere/index")
            && stderr.contains("storePathRootDir"),
        "{stderr}"
    );
}
