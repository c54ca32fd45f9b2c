//! The broker's read-only and maintenance admin codes (204, 300, 303, 305, 306, 314-317,
//! 321, 351), each driven over raw remoting frames against the real `tern-broker`
//! process: answers, codes and remarks as RocketMQ's AdminBrokerProcessor gives them.

use crate::common;

use std::time::Duration;

use common::*;
use tern_engine::hash::java_string_hash;
use tern_shell::body::{
    BrokerStatsData, ConsumeStatsList, GroupList, HeartbeatData, ProducerConnection, ProducerData,
    QueryConsumeQueueResponseBody, QueryConsumeTimeSpanBody, SubscriptionGroupConfig, TopicConfig,
    TopicList, to_json,
};
use tern_shell::headers::{
    CloneGroupOffsetRequestHeader, GetConsumeStatsInBrokerHeader,
    GetProducerConnectionListRequestHeader, GetSubscriptionGroupConfigRequestHeader,
    GetTopicConfigRequestHeader, QueryConsumeQueueRequestHeader, QueryConsumeTimeSpanRequestHeader,
    TopicRequestHeader, ViewBrokerStatsDataRequestHeader,
};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

async fn committed(c: &Client, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
    let resp = c.call(stored_offset_req(group, topic, queue_id)).await;
    (resp.response_code() == ResponseCode::Success).then(|| offset_of(&resp))
}

async fn send_n(c: &Client, topic: &str, queue_id: i32, tags: &[&str]) {
    for (i, tag) in tags.iter().enumerate() {
        let m = msg(topic, format!("m{i}").as_bytes(), &[("TAGS", tag)]);
        send_ok(c, send_v2(&m, queue_id)).await;
    }
}

async fn max_offset(c: &Client, topic: &str, queue_id: i32) -> i64 {
    offset_of(&c.call(max_offset_req(topic, queue_id)).await)
}

#[track_caller]
fn expect_error(resp: &RemotingCommand, code: ResponseCode, remark: &str) {
    expect_code(resp, code);
    assert_eq!(resp.remark.as_deref(), Some(remark));
}

#[test]
fn producer_connections_list_the_members_of_a_group() {
    with_client("", async |c| {
        let hb = HeartbeatData {
            client_id: "10.0.0.1@producer-1".into(),
            producer_data_set: vec![ProducerData {
                group_name: "PG_CONN".into(),
            }],
            ..Default::default()
        };
        expect_code(
            &c.call(RemotingCommand::request_code(RequestCode::HeartBeat).with_body(to_json(&hb)))
                .await,
            ResponseCode::Success,
        );
        let req = |g: &str| {
            RemotingCommand::request(
                RequestCode::GetProducerConnectionList,
                &GetProducerConnectionListRequestHeader {
                    producer_group: g.into(),
                },
            )
        };
        let body: ProducerConnection = ok_body(c, req("PG_CONN")).await;
        assert_eq!(body.connection_set.len(), 1);
        let conn = &body.connection_set[0];
        assert_eq!(conn.client_id, "10.0.0.1@producer-1");
        assert!(
            conn.client_addr.starts_with("127.0.0.1:"),
            "{}",
            conn.client_addr
        );
        expect_error(
            &c.call(req("PG_NONE")).await,
            ResponseCode::SystemError,
            "the producer group[PG_NONE] not exist",
        );
    });
}

#[test]
fn consumers_of_a_topic_their_time_spans_and_the_broker_wide_consume_stats() {
    with_broker("", async |b, c| {
        create_topic(c, "Spans", 2).await;
        send_n(c, "Spans", 0, &["a", "b", "c"]).await;
        let stored = pull_all(c, "Spans", 0, 0).await;
        assert_eq!(stored.len(), 3);
        commit(c, "G_OFFSETS", "Spans", 0, 1).await;
        expect_code(
            &c.call(heartbeat("cid-online", "G_ONLINE", "Spans", "*", vec![]))
                .await,
            ResponseCode::Success,
        );

        // QUERY_TOPIC_CONSUME_BY_WHO: the online subscriber and the group with offsets.
        let who: GroupList = ok_body(
            c,
            RemotingCommand::request(
                RequestCode::QueryTopicConsumeByWho,
                &TopicRequestHeader {
                    topic: "Spans".into(),
                },
            ),
        )
        .await;
        let mut groups = who.group_list.clone();
        groups.sort();
        assert_eq!(groups, ["G_OFFSETS", "G_ONLINE"]);

        // QUERY_CONSUME_TIME_SPAN: one entry per write queue.
        let span_req = |topic: &str| {
            RemotingCommand::request(
                RequestCode::QueryConsumeTimeSpan,
                &QueryConsumeTimeSpanRequestHeader {
                    topic: topic.into(),
                    group: "G_OFFSETS".into(),
                },
            )
        };
        let spans: QueryConsumeTimeSpanBody = ok_body(c, span_req("Spans")).await;
        let set = &spans.consume_time_span_set;
        assert_eq!(set.len(), 2);
        assert_eq!(set[0].message_queue.queue_id, 0);
        assert_eq!(set[0].min_time_stamp, stored[0].store_timestamp);
        assert_eq!(set[0].max_time_stamp, stored[2].store_timestamp);
        assert_eq!(set[0].consume_time_stamp, stored[0].store_timestamp);
        assert!(set[0].delay_time >= 0 && set[0].delay_time < 60_000);
        assert_eq!(
            (
                set[1].min_time_stamp,
                set[1].max_time_stamp,
                set[1].delay_time
            ),
            (-1, -1, 0),
            "an empty queue has no times"
        );
        expect_error(
            &c.call(span_req("NoSuchTopic")).await,
            ResponseCode::TopicNotExist,
            "topic[NoSuchTopic] not exist",
        );

        // GET_BROKER_CONSUME_STATS covers subscription groups with offsets.
        let group = SubscriptionGroupConfig {
            group_name: "G_OFFSETS".into(),
            ..Default::default()
        };
        create_group(c, &group).await;
        let stats_req = |is_order| {
            RemotingCommand::request(
                RequestCode::GetBrokerConsumeStats,
                &GetConsumeStatsInBrokerHeader { is_order },
            )
        };
        let all: ConsumeStatsList = ok_body(c, stats_req(false)).await;
        assert_eq!(all.broker_addr, b.addr);
        let mine = all
            .consume_stats_list
            .iter()
            .find_map(|m| m.get("G_OFFSETS"))
            .expect("the group is listed");
        assert_eq!(mine.len(), 1, "one topic with offsets");
        let q0 = mine[0]
            .offset_table
            .0
            .iter()
            .find(|(mq, _)| mq.topic == "Spans" && mq.queue_id == 0)
            .map(|(_, o)| o.clone())
            .unwrap();
        assert_eq!((q0.broker_offset, q0.consumer_offset), (3, 1));
        assert_eq!(q0.last_timestamp, stored[0].store_timestamp);
        assert!(all.total_diff >= 2, "{}", all.total_diff);
        // Only ordered topics: Spans is not one.
        let ordered: ConsumeStatsList = ok_body(c, stats_req(true)).await;
        let mine = ordered
            .consume_stats_list
            .iter()
            .find_map(|m| m.get("G_OFFSETS"))
            .unwrap();
        assert!(mine.is_empty());
    });
}

#[test]
fn system_topics_and_one_topics_and_groups_config() {
    with_client("", async |c| {
        create_topic(c, "Configured", 3).await;
        let list: TopicList = ok_body(
            c,
            RemotingCommand::request_code(RequestCode::GetSystemTopicListFromBroker),
        )
        .await;
        for t in [
            "SCHEDULE_TOPIC_XXXX",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "OFFSET_MOVED_EVENT",
            "DefaultCluster",
        ] {
            assert!(list.topic_list.iter().any(|x| x == t), "{t} in {list:?}");
        }
        assert!(!list.topic_list.iter().any(|x| x == "Configured"));

        let req = |t: &str| {
            RemotingCommand::request(
                RequestCode::GetTopicConfig,
                &GetTopicConfigRequestHeader {
                    topic: t.into(),
                    lo: None,
                },
            )
        };
        let cfg: TopicConfig = ok_body(c, req("Configured")).await;
        assert_eq!(cfg.topic_name, "Configured");
        assert_eq!(
            (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm),
            (3, 3, 6)
        );
        expect_error(
            &c.call(req("Unknown")).await,
            ResponseCode::TopicNotExist,
            "No topic in this broker. topic: Unknown",
        );

        // GET_SUBSCRIPTIONGROUP_CONFIG: what a CLUSTER-mode proxy reads of a group.
        let group = SubscriptionGroupConfig {
            group_name: "G_CONFIGURED".into(),
            consume_message_orderly: true,
            retry_max_times: 3,
            ..Default::default()
        };
        create_group(c, &group).await;
        let req = |g: &str| {
            RemotingCommand::request(
                RequestCode::GetSubscriptionGroupConfig,
                &GetSubscriptionGroupConfigRequestHeader { group: g.into() },
            )
        };
        let got: SubscriptionGroupConfig = ok_body(c, req("G_CONFIGURED")).await;
        assert_eq!(
            (
                got.group_name.as_str(),
                got.consume_message_orderly,
                got.retry_max_times
            ),
            ("G_CONFIGURED", true, 3)
        );
        expect_error(
            &c.call(req("G_UNKNOWN")).await,
            ResponseCode::SystemError,
            "No group in this broker: G_UNKNOWN",
        );
    });
}

#[test]
fn broker_stats_count_what_was_put_and_got() {
    with_client("", async |c| {
        create_topic(c, "Stats", 1).await;
        send_n(c, "Stats", 0, &["x"; 5]).await;
        // A send is answered once appended; its queue entry comes with reput's next pass,
        // which a loaded machine may run after the pull below: all five must be in it.
        tern_testkit::wait_until(
            "the five sends dispatched",
            Duration::from_secs(10),
            async || max_offset(c, "Stats", 0).await == 5,
        )
        .await;
        let resp = c.call(pull_req("SG", "Stats", 0, 0, Some("*"))).await;
        expect_code(&resp, ResponseCode::Success);
        let view = |name: &str, key: &str| {
            RemotingCommand::request(
                RequestCode::ViewBrokerStatsData,
                &ViewBrokerStatsDataRequestHeader {
                    stats_name: name.into(),
                    stats_key: key.into(),
                },
            )
        };
        let put: BrokerStatsData = ok_body(c, view("TOPIC_PUT_NUMS", "Stats")).await;
        assert_eq!(put.stats_minute.sum, 5);
        assert_eq!(put.stats_hour.sum, 5);
        assert_eq!(put.stats_day.sum, 5);
        assert!(put.stats_minute.tps > 0.0);
        let size: BrokerStatsData = ok_body(c, view("TOPIC_PUT_SIZE", "Stats")).await;
        assert_eq!(size.stats_minute.sum, 10, "five 2-byte bodies");
        assert!((size.stats_minute.avgpt - 2.0).abs() < 1e-9);
        let got: BrokerStatsData = ok_body(c, view("GROUP_GET_NUMS", "Stats@SG")).await;
        assert_eq!(got.stats_minute.sum, 5);
        assert!(
            (got.stats_minute.avgpt - 5.0).abs() < 1e-9,
            "5 messages in one pull"
        );
        let broker: BrokerStatsData = ok_body(c, view("BROKER_PUT_NUMS", "DefaultCluster")).await;
        assert!(broker.stats_day.sum >= 5);
        expect_error(
            &c.call(view("TOPIC_PUT_NUMS", "NoSuchTopic")).await,
            ResponseCode::SystemError,
            "The stats <TOPIC_PUT_NUMS> <NoSuchTopic> not exist",
        );
        expect_error(
            &c.call(view("SNDBCK_PUT_NUMS", "Stats")).await,
            ResponseCode::SystemError,
            "The stats <SNDBCK_PUT_NUMS> <Stats> not exist",
        );
    });
}

#[test]
fn consume_queue_entries_are_listed_and_evaluated_against_the_subscription() {
    with_client("", async |c| {
        create_topic(c, "Cq", 1).await;
        send_n(c, "Cq", 0, &["A", "B", "A"]).await;
        let stored = pull_all(c, "Cq", 0, 0).await;
        expect_code(
            &c.call(heartbeat("cid-cq", "CQ_GROUP", "Cq", "A", vec![]))
                .await,
            ResponseCode::Success,
        );
        let req = |topic: &str, index: i64, group: Option<&str>| {
            RemotingCommand::request(
                RequestCode::QueryConsumeQueue,
                &QueryConsumeQueueRequestHeader {
                    topic: topic.into(),
                    queue_id: 0,
                    index,
                    count: 10,
                    consumer_group: group.map(str::to_owned),
                },
            )
        };
        let body: QueryConsumeQueueResponseBody = ok_body(c, req("Cq", 0, Some("CQ_GROUP"))).await;
        assert_eq!((body.min_queue_index, body.max_queue_index), (0, 3));
        assert_eq!(body.queue_data.len(), 3);
        for (entry, m) in body.queue_data.iter().zip(&stored) {
            assert_eq!(entry.physic_offset, m.commit_log_offset);
            let tag = m.properties.get("TAGS").unwrap();
            assert_eq!(entry.tags_code, i64::from(java_string_hash(tag)));
            assert_eq!(entry.eval, tag == "A", "{tag}");
        }
        assert_eq!(body.subscription_data.unwrap().sub_string, "A");

        let from_one: QueryConsumeQueueResponseBody = ok_body(c, req("Cq", 1, None)).await;
        assert_eq!(from_one.queue_data.len(), 2);
        assert!(from_one.subscription_data.is_none() && from_one.filter_data.is_none());

        let offline: QueryConsumeQueueResponseBody = ok_body(c, req("Cq", 0, Some("NOBODY"))).await;
        assert_eq!(
            offline.filter_data.as_deref(),
            Some("NOBODY@Cq is not online!")
        );

        let past = c.call(req("Cq", 5, None)).await;
        expect_error(
            &past,
            ResponseCode::Success,
            "Index 5 of 0@Cq is not exist!",
        );
        assert!(past.body.is_empty());
        expect_error(
            &c.call(req("NoQueue", 0, None)).await,
            ResponseCode::SystemError,
            "0@NoQueue is not exist!",
        );
    });
}

#[test]
fn clone_group_offset_copies_every_topic_or_the_one_named() {
    with_client("", async |c| {
        create_topic(c, "CloneA", 2).await;
        create_topic(c, "CloneB", 1).await;
        commit(c, "SRC", "CloneA", 0, 2).await;
        commit(c, "SRC", "CloneA", 1, 1).await;
        commit(c, "SRC", "CloneB", 0, 7).await;
        let clone = |dest: &str, topic: Option<&str>| {
            RemotingCommand::request(
                RequestCode::CloneGroupOffset,
                &CloneGroupOffsetRequestHeader {
                    src_group: "SRC".into(),
                    dest_group: dest.into(),
                    topic: topic.map(str::to_owned),
                    offline: Some(true),
                },
            )
        };
        expect_code(
            &c.call(clone("DEST_ALL", None)).await,
            ResponseCode::Success,
        );
        assert_eq!(committed(c, "DEST_ALL", "CloneA", 0).await, Some(2));
        assert_eq!(committed(c, "DEST_ALL", "CloneA", 1).await, Some(1));
        assert_eq!(committed(c, "DEST_ALL", "CloneB", 0).await, Some(7));

        expect_code(
            &c.call(clone("DEST_ONE", Some("CloneB"))).await,
            ResponseCode::Success,
        );
        assert_eq!(committed(c, "DEST_ONE", "CloneB", 0).await, Some(7));
        assert_eq!(committed(c, "DEST_ONE", "CloneA", 0).await, None);
    });
}

#[test]
fn clean_unused_topic_removes_the_queues_of_deleted_topics_only() {
    let (dir, mut b) = start("");
    let cq = dir.path().join("data/store/consumequeue");
    b.with_client(async |c| {
        create_topic(c, "Gone", 1).await;
        create_topic(c, "Kept", 1).await;
        send_n(c, "Gone", 0, &["x", "y"]).await;
        send_n(c, "Kept", 0, &["z"]).await;
        assert_eq!(pull_all(c, "Gone", 0, 0).await.len(), 2);
    });
    // DELETE_TOPIC_IN_BROKER removes its queues itself; queues outlive their topic when
    // the topic table is lost (restored from an old copy, a slave's table...): here
    // the table goes across a restart and only Kept is made again.
    b.stop();
    let config = dir.path().join("data/store/config");
    for f in std::fs::read_dir(&config).unwrap().filter_map(Result::ok) {
        if f.file_name().to_string_lossy().starts_with("topics") {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    let b = BrokerProc::standalone(dir.path(), &dir.path().join("broker.conf"));
    b.with_client(async |c| {
        create_topic(c, "Kept", 1).await;
        assert!(cq.join("Gone/0").exists(), "the orphaned queue is there");
        expect_code(
            &c.call(RemotingCommand::request_code(RequestCode::CleanUnusedTopic))
                .await,
            ResponseCode::Success,
        );
        assert!(
            !cq.join("Gone").exists(),
            "the deleted topic's queues are gone"
        );
        assert!(cq.join("Kept/0").exists());
        assert!(
            !dir.path()
                .join("data/store/consumequeue.removed")
                .read_dir()
                .unwrap()
                .any(|_| true),
            "removed folders are deleted"
        );
        assert_eq!(max_offset(c, "Kept", 0).await, 1);
        // Made again, the topic starts empty: none of the old messages come back.
        create_topic(c, "Gone", 1).await;
        assert_eq!(max_offset(c, "Gone", 0).await, 0);
        assert!(pull_all(c, "Gone", 0, 0).await.is_empty());
        let h = send_ok(c, send_v2(&msg("Gone", b"new", &[]), 0)).await;
        assert_eq!(h.queue_offset, 0);
        let after = pull_all(c, "Gone", 0, 0).await;
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].body, b"new");
    });
}

#[test]
fn clean_expired_consume_queue_drops_queues_whose_records_left_the_log() {
    let every_hour: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let (dir, b) = start(&format!(
        "cleanResourceInterval=100\nfileReservedTime=0\ndeleteWhen={}\n",
        every_hour.join(";")
    ));
    let cq = dir.path().join("data/store/consumequeue");
    b.with_client(async |c| {
        create_topic(c, "Old", 1).await;
        create_topic(c, "Filler", 1).await;
        send_n(c, "Old", 0, &["o", "o"]).await;
        // 12 × 300 KiB fills four 1 MiB segments; retention deletes all but the active.
        for i in 0..12u8 {
            send_ok(c, send_v2(&msg("Filler", &vec![i; 300 * 1024], &[]), 0)).await;
        }
        tern_testkit::wait_until(
            "Old's records never left the log",
            Duration::from_secs(20),
            async || {
                offset_of(
                    &c.call(topic_queue(RequestCode::GetMinOffset, "Old", 0))
                        .await,
                ) == 2
            },
        )
        .await;
        assert!(
            cq.join("Old/0").exists(),
            "retention keeps a queue's last file"
        );
        expect_code(
            &c.call(RemotingCommand::request_code(
                RequestCode::CleanExpiredConsumequeue,
            ))
            .await,
            ResponseCode::Success,
        );
        assert!(
            !cq.join("Old").exists(),
            "a queue pointing at nothing is removed"
        );
        assert!(cq.join("Filler/0").exists(), "a queue with records stays");
        assert_eq!(max_offset(c, "Old", 0).await, 0);
        assert_eq!(max_offset(c, "Filler", 0).await, 12);
    });
}
