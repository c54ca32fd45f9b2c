//! The `tern-admin` commands over the broker's inspection and maintenance codes and the
//! name server's, against the real `tern-broker --standalone`.

use crate::common;

use common::cli::{admin, json, make_group, make_topic, ok};
use common::{Broker, run};
use tern_client::{MessageQueue, PullConsumer};

#[test]
fn name_server_commands_change_kv_config_write_perm_and_settings() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    make_topic(ns, "Perm", "2");

    // updateOrderConf put/get/delete and the KV commands share ORDER_TOPIC_CONFIG.
    let put = ok(
        ns,
        &[
            "updateOrderConf",
            "-t",
            "Perm",
            "-m",
            "put",
            "-v",
            "broker-a:2",
        ],
    );
    assert!(
        put.contains("update orderConf success. topic=[Perm], orderConf=[broker-a:2]"),
        "{put}"
    );
    let got = json(ns, &["updateOrderConf", "-t", "Perm", "-m", "get"]);
    assert_eq!(got["orderConf"], "broker-a:2");
    ok(ns, &["updateOrderConf", "-t", "Perm", "-m", "delete"]);
    assert!(json(ns, &["updateOrderConf", "-t", "Perm", "-m", "get"])["orderConf"].is_null());
    let kv = ok(
        ns,
        &[
            "updateKvConfig",
            "-s",
            "ORDER_TOPIC_CONFIG",
            "-k",
            "KvT",
            "-v",
            "broker-a:1",
        ],
    );
    assert!(
        kv.contains("create or update kv config to namespace success."),
        "{kv}"
    );
    assert_eq!(
        json(ns, &["updateOrderConf", "-t", "KvT", "-m", "get"])["orderConf"],
        "broker-a:1"
    );
    let del = ok(
        ns,
        &["deleteKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "KvT"],
    );
    assert!(
        del.contains("delete kv config from namespace success."),
        "{del}"
    );
    assert!(json(ns, &["updateOrderConf", "-t", "KvT", "-m", "get"])["orderConf"].is_null());

    // wipeWritePerm leaves the broker's queues read-only in the route; addWritePerm undoes it.
    let wiped = ok(ns, &["wipeWritePerm", "-b", "broker-a"]);
    assert!(
        wiped.contains(&format!(
            "wipe write perm of broker[broker-a] in name server[{ns}] OK, "
        )),
        "{wiped}"
    );
    assert_eq!(
        json(ns, &["topicRoute", "-t", "Perm"])["queueDatas"][0]["perm"],
        4
    );
    let added = json(ns, &["addWritePerm", "-b", "broker-a"]);
    assert!(
        added["nameServers"][0]["topicCount"].as_i64().unwrap() >= 1,
        "{added}"
    );
    assert_eq!(
        json(ns, &["topicRoute", "-t", "Perm"])["queueDatas"][0]["perm"],
        6
    );

    // Settings: a run-time key changes, a start-only key and a black-listed key do not.
    let cfg = json(ns, &["getNamesrvConfig"]);
    assert_eq!(cfg[ns]["orderMessageEnable"], "false", "{cfg}");
    let up = ok(
        ns,
        &[
            "updateNamesrvConfig",
            "-k",
            "orderMessageEnable",
            "-v",
            "true",
        ],
    );
    assert!(up.contains("update name server config success!"), "{up}");
    assert!(ok(ns, &["getNamesrvConfig"]).contains("true"));
    assert_eq!(
        json(ns, &["getNamesrvConfig"])[ns]["orderMessageEnable"],
        "true"
    );
    let port = admin(ns, &["updateNamesrvConfig", "-k", "listenPort", "-v", "1"]);
    assert_eq!(port.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&port.stderr)
            .contains("listenPort cannot change while the name server runs")
    );
    let black = admin(
        ns,
        &["updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x"],
    );
    assert_eq!(black.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&black.stderr).contains("Can not update config in black list.")
    );
}

#[test]
fn group_and_queue_commands_show_producers_offsets_and_consume_queues() {
    use tern_client::MessageBuilder;
    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    make_topic(ns, "Ops", "2");
    make_group(ns, "ops-src");
    make_group(ns, "ops-dst");

    let producer = tern_client::Producer::new(
        tern_client::ProducerConfig::new("ops-pg"),
        b.client_config(),
    )
    .unwrap();
    producer.start();
    let q0 = MessageQueue {
        topic: "Ops".into(),
        broker_name: "broker-a".into(),
        queue_id: 0,
    };
    run(async {
        for tag in ["A", "B", "A"] {
            let m = tern_client::Message::new("Ops", tag.as_bytes().to_vec()).with_tags(tag);
            producer.send_to_queue(m, &q0).await.unwrap();
        }
        producer.client().send_heartbeat_to_all_brokers().await;
    });
    let pc = json(ns, &["producerConnection", "-g", "ops-pg", "-t", "Ops"]);
    assert_eq!(
        pc["connectionSet"][0]["clientId"],
        producer.client().client_id(),
        "{pc}"
    );
    assert!(ok(ns, &["producerConnection", "-g", "ops-pg", "-t", "Ops"]).contains("0001"));
    assert_eq!(
        admin(ns, &["producerConnection", "-g", "nobody", "-t", "Ops"])
            .status
            .code(),
        Some(1)
    );
    run(producer.shutdown());

    assert_eq!(
        ok(ns, &["topicClusterList", "-t", "Ops"]).trim(),
        "DefaultCluster"
    );
    let alloc = json(ns, &["allocateMQ", "-t", "Ops", "-i", "10.0.0.1,10.0.0.2"]);
    assert_eq!(alloc["result"]["10.0.0.1"][0]["queueId"], 0, "{alloc}");
    assert_eq!(alloc["result"]["10.0.0.2"][0]["queueId"], 1, "{alloc}");

    let cq = json(ns, &["queryCq", "-t", "Ops", "-q", "0", "-i", "0"]);
    assert_eq!(cq["maxQueueIndex"], 3, "{cq}");
    assert_eq!(cq["queueData"].as_array().unwrap().len(), 3);
    let text = ok(
        ns,
        &["queryCq", "-t", "Ops", "-q", "0", "-i", "1", "-c", "1"],
    );
    assert!(
        text.contains("max: 3, min: 0") && text.contains("idx: 1"),
        "{text}"
    );
    assert!(!text.contains("idx: 2"), "{text}");

    // Offsets of ops-src, cloned to ops-dst.
    let c = PullConsumer::new("ops-src", b.client_config()).unwrap();
    run(async {
        c.assign(vec![q0.clone()]).await;
        c.start().await;
        c.commit_offset(&q0, 2).await.unwrap();
        c.shutdown().await;
    });
    let cloned = ok(
        ns,
        &[
            "cloneGroupOffset",
            "-s",
            "ops-src",
            "-d",
            "ops-dst",
            "-t",
            "Ops",
            "-o",
            "true",
        ],
    );
    assert!(
        cloned.contains(
            "clone group offset success. srcGroup[ops-src], destGroup=[ops-dst], topic[Ops]"
        ),
        "{cloned}"
    );
    let p = json(ns, &["consumerProgress", "-g", "ops-dst"]);
    assert_eq!(p["queues"][0]["consumerOffset"], 2, "{p}");

    let stats = json(ns, &["brokerConsumeStats", "-b", &b.addr]);
    let groups = stats["groups"].as_array().unwrap();
    assert!(
        groups.contains(&"ops-src".into()) && groups.contains(&"ops-dst".into()),
        "{stats}"
    );
    let q = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["group"] == "ops-src")
        .expect("ops-src consumed from queue 0");
    assert_eq!(
        (q["consumerOffset"].as_i64(), q["diff"].as_i64()),
        (Some(2), Some(1)),
        "{stats}"
    );
    let table = ok(ns, &["brokerConsumeStats", "-b", &b.addr]);
    assert!(table.contains("Diff Total:"), "{table}");

    let del = ok(ns, &["deleteSubGroup", "-b", &b.addr, "-g", "ops-dst"]);
    assert!(
        del.contains(&format!(
            "delete subscription group [ops-dst] from broker [{}] success.",
            b.addr
        )),
        "{del}"
    );
    let stats = json(ns, &["brokerConsumeStats", "-b", &b.addr]);
    assert!(
        !stats["groups"]
            .as_array()
            .unwrap()
            .contains(&"ops-dst".into()),
        "{stats}"
    );
    // -r true removes the group's offsets too.
    assert_eq!(
        json(ns, &["consumerProgress", "-g", "ops-src", "-t", "Ops"])["queues"][0]["consumerOffset"],
        2
    );
    ok(
        ns,
        &[
            "deleteSubGroup",
            "-b",
            &b.addr,
            "-g",
            "ops-src",
            "-r",
            "true",
        ],
    );
    let p = json(ns, &["consumerProgress", "-g", "ops-src", "-t", "Ops"]);
    assert_eq!(p["queues"][0]["consumerOffset"], 0, "{p}");
}

#[test]
fn message_probe_and_stats_commands_print_what_was_sent() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    make_topic(ns, "Print", "1");
    for (i, tag) in ["A", "B", "A"].iter().enumerate() {
        ok(
            ns,
            &[
                "sendMessage",
                "-t",
                "Print",
                "-p",
                &format!("body{i}"),
                "-c",
                tag,
            ],
        );
    }
    let all = ok(ns, &["printMsg", "-t", "Print"]);
    assert!(all.contains("minOffset=0, maxOffset=3"), "{all}");
    assert_eq!(all.matches("MSGID: ").count(), 3, "{all}");
    assert!(all.contains("BODY: body2"), "{all}");
    let no_body = ok(ns, &["printMsg", "-t", "Print", "-d", "false", "-s", "B"]);
    assert_eq!(no_body.matches("NOT PRINT BODY").count(), 1, "{no_body}");
    let docs = json(ns, &["printMsg", "-t", "Print"]);
    assert_eq!(docs[0]["messages"].as_array().unwrap().len(), 3);

    // printMsgByQueue of Print's queue 0 on broker-a, with `more` options.
    let by_queue = |more: &[&'static str]| {
        let mut args = vec![
            "printMsgByQueue",
            "-t",
            "Print",
            "-a",
            "broker-a",
            "-i",
            "0",
        ];
        args.extend_from_slice(more);
        args
    };
    let by_tag = ok(ns, &by_queue(&["-f", "true"]));
    assert!(
        by_tag.contains("Tag: A") && by_tag.contains("Count: 2"),
        "{by_tag}"
    );
    assert!(!by_tag.contains("MSGID"), "-p defaults to false: {by_tag}");
    let shown = json(ns, &by_queue(&["-p", "true"]));
    assert_eq!(shown["messages"].as_array().unwrap().len(), 3);

    // statsAll: three messages in today, no consumer yet.
    let stats = json(ns, &["statsAll", "-t", "Print"]);
    assert_eq!(stats["stats"][0]["inMsg24Hour"], 3, "{stats}");
    assert_eq!(stats["stats"][0]["outMsg24Hour"], "NO_CONSUMER");
    assert!(ok(ns, &["statsAll", "-a"]).contains("Print"));

    let rt = ok(
        ns,
        &["checkMsgSendRT", "-t", "Print", "-a", "3", "-s", "64"],
    );
    assert_eq!(rt.matches("true").count(), 3, "{rt}");
    assert!(rt.contains("Avg RT: "), "{rt}");
    let status = ok(ns, &["sendMsgStatus", "-b", "broker-a", "-c", "2"]);
    assert_eq!(status.matches("rt=").count(), 2, "{status}");
    assert!(status.contains("sendStatus=SEND_OK"), "{status}");
    let cluster = json(ns, &["clusterRT", "-a", "2", "-c", "DefaultCluster"]);
    assert_eq!(cluster[0]["brokerName"], "broker-a", "{cluster}");
    assert_eq!(cluster[0]["successCount"], 2, "{cluster}");
    assert_eq!(cluster[0]["failCount"], 0, "{cluster}");
}

#[test]
fn maintenance_commands_clean_the_queues_of_deleted_topics() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();
    make_topic(ns, "Unused", "1");
    for i in 0..2 {
        ok(
            ns,
            &["sendMessage", "-t", "Unused", "-p", &format!("old{i}")],
        );
    }
    ok(ns, &["deleteTopic", "-t", "Unused", "-c", "DefaultCluster"]);
    assert_eq!(ok(ns, &["cleanExpiredCQ", "-b", &b.addr]).trim(), "success");
    let cleaned = json(ns, &["cleanUnusedTopic", "-c", "DefaultCluster"]);
    assert_eq!(cleaned["success"], true, "{cleaned}");
    assert_eq!(ok(ns, &["cleanUnusedTopic"]).trim(), "success");
    // Made again, the topic starts empty: none of the old messages come back.
    make_topic(ns, "Unused", "1");
    let cq = json(ns, &["queryCq", "-t", "Unused", "-q", "0", "-i", "0"]);
    assert_eq!(cq["maxQueueIndex"], 0, "{cq}");
    assert_eq!(
        ok(ns, &["printMsg", "-t", "Unused"])
            .matches("MSGID")
            .count(),
        0
    );
}
