//! The `tern-admin` binary against the real `tern-broker --standalone`.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::{admin, json, make_group, make_topic, ok};
use common::{Broker, run};
use tern_client::{MessageQueue, PullConsumer};

#[test]
fn topic_lifecycle_send_consume_and_queries_through_the_cli() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();

    let out = make_topic(ns, "CliTopic", "2");
    assert!(
        out.contains(&format!("create topic to {} success.", b.addr)),
        "{out}"
    );
    let route = ok(ns, &["topicRoute", "-t", "CliTopic"]);
    assert!(
        route.contains("broker-a") && route.contains(&b.addr),
        "{route}"
    );
    // RocketMQ 5's topic attributes (`-a`), checked by the broker.
    let fifo = ["updateTopic", "-c", "DefaultCluster", "-t", "CliFifo", "-a"];
    let out = ok(ns, &[&fifo[..], &["+message.type=FIFO"]].concat());
    assert!(out.contains("attributes={+message.type=FIFO}"), "{out}");
    let bad = admin(ns, &[&fifo[..], &["+message.type=QUEUE"]].concat());
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("value is not in set"), "{err}");
    let route = json(ns, &["topicRoute", "-t", "CliTopic"]);
    assert_eq!(route["queueDatas"][0]["writeQueueNums"], 2);
    assert!(ok(ns, &["topicList"]).lines().any(|l| l == "CliTopic"));

    // sendMessage: mqadmin's flags (-p body, -k keys, -c tags).
    let sent = json(
        ns,
        &[
            "sendMessage",
            "-t",
            "CliTopic",
            "-p",
            "hello from the cli",
            "-k",
            "cli-key",
            "-c",
            "TagCli",
        ],
    );
    assert_eq!(sent["status"], "SEND_OK");
    let uniq = sent["msgId"].as_str().unwrap().to_owned();
    let offset_id = sent["offsetMsgId"].as_str().unwrap().to_owned();
    let table = ok(
        ns,
        &[
            "sendMessage",
            "-t",
            "CliTopic",
            "-p",
            "second",
            "-b",
            "broker-a",
            "-i",
            "1",
        ],
    );
    assert!(table.starts_with("#Broker Name"), "{table}");
    assert!(table.contains("SEND_OK"), "{table}");

    let consumed = ok(ns, &["consumeMessage", "-t", "CliTopic"]);
    assert!(consumed.contains("BODY: hello from the cli"), "{consumed}");
    assert!(consumed.contains(&format!("MSGID: {uniq}")), "{consumed}");
    assert!(consumed.contains("BODY: second"), "{consumed}");
    let one = json(
        ns,
        &[
            "consumeMessage",
            "-t",
            "CliTopic",
            "-b",
            "broker-a",
            "-i",
            "1",
            "-o",
            "0",
        ],
    );
    // The first message went to a queue picked round-robin: maybe queue 1 too.
    let one = one.as_array().unwrap();
    assert!(one.iter().all(|m| m["queueId"] == 1), "{one:?}");
    assert_eq!(one.last().unwrap()["body"], "second");

    let by_id = ok(ns, &["queryMsgById", "-i", &offset_id]);
    assert!(
        by_id.contains("hello from the cli") && by_id.contains("TagCli"),
        "{by_id}"
    );
    let by_uniq = json(ns, &["queryMsgById", "-i", &uniq, "-t", "CliTopic"]);
    assert_eq!(by_uniq[0]["offsetMsgId"], offset_id.as_str());
    let by_key = json(ns, &["queryMsgByKey", "-t", "CliTopic", "-k", "cli-key"]);
    assert_eq!(by_key.as_array().unwrap().len(), 1, "{by_key}");
    assert_eq!(by_key[0]["msgId"], uniq.as_str());
    let q = by_key[0]["queueId"].as_i64().unwrap().to_string();
    let by_offset = ok(
        ns,
        &[
            "queryMsgByOffset",
            "-t",
            "CliTopic",
            "-b",
            "broker-a",
            "-i",
            &q,
            "-o",
            "0",
        ],
    );
    assert!(by_offset.contains("hello from the cli"), "{by_offset}");

    let status = json(ns, &["topicStatus", "-t", "CliTopic"]);
    let total: i64 = status
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["maxOffset"].as_i64().unwrap())
        .sum();
    assert_eq!(total, 2);

    ok(
        ns,
        &["deleteTopic", "-t", "CliTopic", "-c", "DefaultCluster"],
    );
    let gone = admin(ns, &["topicRoute", "-t", "CliTopic"]);
    assert_eq!(gone.status.code(), Some(1));
}

#[test]
fn consumer_progress_shows_lag_and_connections_list_the_client() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    make_topic(ns, "Lag", "1");
    make_group(ns, "lag-cg");
    for i in 0..5 {
        ok(ns, &["sendMessage", "-t", "Lag", "-p", &format!("m{i}")]);
    }
    let c = PullConsumer::new("lag-cg", b.client_config()).unwrap();
    let q = MessageQueue {
        topic: "Lag".into(),
        broker_name: "broker-a".into(),
        queue_id: 0,
    };
    run(async {
        c.assign(vec![q.clone()]).await;
        c.start().await;
        c.commit_offset(&q, 2).await.unwrap();
    });
    let p = json(ns, &["consumerProgress", "-g", "lag-cg"]);
    assert_eq!(p["diffTotal"], 3, "{p}");
    assert_eq!(p["queues"][0]["brokerOffset"], 5);
    assert_eq!(p["queues"][0]["consumerOffset"], 2);
    let table = ok(ns, &["consumerProgress", "-g", "lag-cg", "-t", "Lag"]);
    assert!(table.contains("Diff Total: 3"), "{table}");

    let conns = ok(ns, &["consumerConnection", "-g", "lag-cg"]);
    assert!(conns.contains(c.client().client_id()), "{conns}");
    assert!(conns.contains("CONSUME_ACTIVELY"), "{conns}");
    run(c.shutdown());

    for args in [
        &["clusterList"][..],
        &["brokerStatus", "-b", &b.addr],
        &["topicList", "-c"],
    ] {
        json(ns, args);
    }
    assert!(ok(ns, &["clusterList"]).contains(&b.addr));
}

#[test]
fn broker_config_is_read_and_changed_with_mqadmins_commands_and_kept_across_a_restart() {
    let mut b = Broker::start("fileReservedTime=48\nflushDiskType=SYNC_FLUSH\n");
    let ns = b.namesrv.clone();
    let ns = ns.as_str();
    let addr = b.addr.clone();
    let all = json(ns, &["getBrokerConfig", "-b", &addr]);
    let cfg = &all[&addr];
    for (k, v) in [
        ("brokerRole", "ASYNC_MASTER"),
        ("brokerId", "0"),
        ("aclEnable", "false"),
        ("flushDiskType", "SYNC_FLUSH"),
        ("fileReservedTime", "48"),
        ("brokerPermission", "6"),
    ] {
        assert_eq!(cfg[k], v, "{k}: {cfg}");
    }
    let table = ok(ns, &["getBrokerConfig", "-c", "DefaultCluster"]);
    assert!(
        table.starts_with(&format!("============Master: {addr}============\n")),
        "{table}"
    );
    assert!(
        table.contains(&format!("{:<50}=  ASYNC_MASTER\n", "brokerRole")),
        "{table}"
    );

    make_topic(ns, "CfgTopic", "1");
    // updateBrokerConfig of the broker at `addr`: `key` set to `value`.
    let set_on_broker =
        |key, value| -> [&str; 7] { ["updateBrokerConfig", "-b", &addr, "-k", key, "-v", value] };
    let out = ok(ns, &set_on_broker("fileReservedTime", "12"));
    assert_eq!(out, format!("update broker config success, {addr}\n"));
    let out = json(
        ns,
        &[
            "updateBrokerConfig",
            "-c",
            "DefaultCluster",
            "-k",
            "brokerPermission",
            "-v",
            "4",
        ],
    );
    assert_eq!(out["updated"][0], addr.as_str(), "{out}");
    let route = json(ns, &["topicRoute", "-t", "CfgTopic"]);
    assert_eq!(route["queueDatas"][0]["perm"], 4, "{route}");

    // Keys Tern reads only at start, and bad values, are refused by name.
    let out = admin(ns, &set_on_broker("listenPort", "1"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("listenPort") && err.contains("restart"),
        "{err}"
    );
    let out = admin(ns, &set_on_broker("brokerPermission", "x"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("brokerPermission"));
    let out = admin(
        ns,
        &["updateBrokerConfig", "-b", &addr, "-k", "fileReservedTime"],
    );
    assert_eq!(out.status.code(), Some(2), "missing -v is a usage error");

    b.restart();
    let cfg = json(ns, &["getBrokerConfig", "-b", &addr]);
    assert_eq!(cfg[&addr]["fileReservedTime"], "12", "{cfg}");
    assert_eq!(cfg[&addr]["brokerPermission"], "4", "{cfg}");
    let route = json(ns, &["topicRoute", "-t", "CfgTopic"]);
    assert_eq!(route["queueDatas"][0]["perm"], 4, "{route}");
}

#[test]
fn failures_exit_non_zero_with_a_clear_message() {
    let t = Instant::now();
    let out = admin("127.0.0.1:1", &["topicList"]);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach name server 127.0.0.1:1: connection refused"),
        "{err}"
    );

    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    let out = admin(ns, &["topicRoute", "-t", "NoSuchTopic"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no route for topic NoSuchTopic"));

    let out = admin(ns, &["sendMessage", "-t", "T"]);
    assert_eq!(out.status.code(), Some(2), "missing -p is a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("-p,--body"));
    let out = admin(ns, &["noSuchCommand"]);
    assert_eq!(out.status.code(), Some(2));
    let out = admin(
        ns,
        &["queryMsgById", "-i", "00000000000000000000000000000000"],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(env!("CARGO_BIN_EXE_tern-admin"))
        .args(["topicList"])
        .env_remove("NAMESRV_ADDR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NAMESRV_ADDR"));
}
