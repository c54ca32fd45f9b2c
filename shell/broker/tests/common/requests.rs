//! Requests as a Java client builds them (sends, pulls, heartbeats, topic and offset
//! admin) and the checks the process tests make on the answers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tern_shell::body::{
    ConsumeType, ConsumerData, HeartbeatData, MessageModel, SubscriptionData,
    SubscriptionGroupWrapper, TopicConfigSerializeWrapper, from_json, to_json,
};
use tern_shell::headers::{
    CreateTopicRequestHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader,
    OffsetResponseHeader, PullMessageRequestHeader, QueryConsumerOffsetRequestHeader,
    SendMessageRequestHeader, SendMessageRequestHeaderV2, SendMessageResponseHeader,
    TopicQueueRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use tern_shell::message::{Message, MessageExt, decode_pulled};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use super::{BrokerProc, Client, now_ms};

/// A message to send: topic, body, flag, properties.
pub fn msg(topic: &str, body: &[u8], props: &[(&str, &str)]) -> Message {
    let mut m = Message::new(topic, body.to_vec());
    for (k, v) in props {
        m = m.with_property(*k, *v);
    }
    m
}

/// The long-name send header for `m` to `queue_id`.
pub fn send_header(m: &Message, queue_id: i32, born: i64) -> SendMessageRequestHeader {
    SendMessageRequestHeader {
        producer_group: "PG_TEST".into(),
        topic: m.topic.clone(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: born,
        flag: m.flag,
        properties: Some(m.properties_string()),
        reconsume_times: Some(0),
        unit_mode: Some(false),
        batch: Some(false),
        max_reconsume_times: None,
    }
}

/// The born timestamp every test send carries (checked on pull).
pub const BORN: i64 = 1_700_000_000_123;

/// SEND_MESSAGE (10).
pub fn send_v1(m: &Message, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(RequestCode::SendMessage, &send_header(m, queue_id, BORN))
        .with_body(m.body.clone())
}

/// QUERY_MESSAGE (12) for `topic#key` over all time, at most `max_num` messages.
pub fn query_req(topic: &str, key: &str, max_num: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::QueryMessage,
        &tern_shell::headers::QueryMessageRequestHeader {
            topic: topic.into(),
            key: key.into(),
            max_num,
            begin_timestamp: 0,
            end_timestamp: i64::MAX,
            unique_key_query: None,
        },
    )
}

/// SEND_MESSAGE_V2 (310).
pub fn send_v2(m: &Message, queue_id: i32) -> RemotingCommand {
    let v2: SendMessageRequestHeaderV2 = send_header(m, queue_id, BORN).into();
    RemotingCommand::request(RequestCode::SendMessageV2, &v2).with_body(m.body.clone())
}

/// SEND_BATCH_MESSAGE (320) of `ms` (all to `ms[0].topic`).
pub fn send_batch(ms: &[Message], queue_id: i32) -> RemotingCommand {
    let mut h = send_header(&ms[0], queue_id, BORN);
    h.properties = None;
    h.batch = Some(true);
    let v2: SendMessageRequestHeaderV2 = h.into();
    let body = tern_shell::message::encode_batch(ms).unwrap();
    RemotingCommand::request(RequestCode::SendBatchMessage, &v2).with_body(body)
}

/// A pull request for up to 32 messages, no flags. `sub` set ⇒ the SUBSCRIPTION flag
/// with that expression.
pub fn pull_req(
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    sub: Option<&str>,
) -> RemotingCommand {
    let h = PullMessageRequestHeader::new(group, topic, queue_id, offset, 32).filter(
        sub.map(str::to_owned),
        "TAG",
        0,
    );
    RemotingCommand::request(RequestCode::PullMessage, &h)
}

/// `req` with `maxMsgNums`, extra sysFlag bits and `suspendTimeoutMillis` set.
pub fn pull_with(
    mut req: RemotingCommand,
    max: i32,
    flags: i32,
    suspend_ms: i64,
) -> RemotingCommand {
    let ext = &mut req.ext_fields;
    let old: i32 = ext["sysFlag"].parse().unwrap();
    ext.insert("sysFlag", (old | flags).to_string());
    ext.insert("maxMsgNums", max.to_string());
    ext.insert("suspendTimeoutMillis", suspend_ms.to_string());
    req
}

/// The pull answer's header offsets: (nextBeginOffset, minOffset, maxOffset).
pub fn pull_offsets(resp: &RemotingCommand) -> (i64, i64, i64) {
    let get = |k: &str| -> i64 {
        resp.ext_fields
            .get(k)
            .unwrap_or_else(|| panic!("pull answer lacks {k}: {resp:?}"))
            .parse()
            .unwrap()
    };
    assert!(resp.ext_fields.contains_key("suggestWhichBrokerId"));
    (get("nextBeginOffset"), get("minOffset"), get("maxOffset"))
}

/// Pulls everything from `offset` to the queue's end (SUBSCRIPTION "*"), CRC-checked.
pub async fn pull_all(c: &Client, topic: &str, queue_id: i32, mut offset: i64) -> Vec<MessageExt> {
    let mut out = Vec::new();
    loop {
        let resp = c
            .call(pull_req("PULL_ALL", topic, queue_id, offset, Some("*")))
            .await;
        match resp.response_code() {
            ResponseCode::Success => {
                let got = decode_pulled(&resp.body, true).expect("pulled records decode");
                assert!(!got.is_empty(), "SUCCESS with no records");
                out.extend(got);
                offset = pull_offsets(&resp).0;
            }
            ResponseCode::PullNotFound => return out,
            // A slave following a live master has nothing more: "ask the master"
            // (suggestWhichBrokerId 0), RocketMQ's answer there for PULL_NOT_FOUND.
            ResponseCode::PullRetryImmediately if pull_offsets(&resp).0 == offset => return out,
            other => panic!(
                "pull {topic}/{queue_id}@{offset}: {other:?} {:?}",
                resp.remark
            ),
        }
    }
}

/// A HEART_BEAT from `client_id` for one consumer group subscribed to `topic` with `expr`.
/// `code_set` is sent as given (the C++ client sends zeros).
pub fn heartbeat(
    client_id: &str,
    group: &str,
    topic: &str,
    expr: &str,
    code_set: Vec<i32>,
) -> RemotingCommand {
    let sub = SubscriptionData {
        topic: topic.into(),
        sub_string: expr.into(),
        tags_set: SubscriptionData::parse_tags(expr),
        code_set,
        sub_version: 1,
        expression_type: "TAG".into(),
        class_filter_mode: false,
    };
    heartbeat_for(client_id, group, sub)
}

/// A HEART_BEAT from `client_id` for one consumer group with the one subscription `sub`.
pub fn heartbeat_for(client_id: &str, group: &str, sub: SubscriptionData) -> RemotingCommand {
    let hb = HeartbeatData {
        client_id: client_id.into(),
        consumer_data_set: vec![ConsumerData {
            group_name: group.into(),
            consume_type: ConsumeType::ConsumePassively,
            message_model: MessageModel::Clustering,
            subscription_data_set: vec![sub],
            ..Default::default()
        }],
        ..Default::default()
    };
    RemotingCommand::request_code(RequestCode::HeartBeat).with_body(to_json(&hb))
}

/// Properties a stored message should carry: what was sent plus the broker's CLUSTER.
pub fn stored_props(m: &Message) -> BTreeMap<String, String> {
    let mut p = m.properties.clone();
    p.insert("CLUSTER".into(), "DefaultCluster".into());
    p
}

/// Asserts a response code, printing the remark otherwise.
#[track_caller]
pub fn expect_code(resp: &RemotingCommand, code: ResponseCode) {
    assert_eq!(
        resp.response_code(),
        code,
        "code {} remark {:?} ext {:?}",
        resp.code,
        resp.remark,
        resp.ext_fields
    );
}

/// GET_ROUTEINFO_BY_TOPIC.
pub fn route_req(topic: &str) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GetRouteinfoByTopic,
        &GetRouteInfoRequestHeader {
            topic: topic.into(),
            accept_standard_json_only: None,
        },
    )
}

/// UPDATE_AND_CREATE_TOPIC with `queues` read and write queues, perm 6.
pub fn create_topic_req(topic: &str, queues: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::UpdateAndCreateTopic,
        &CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: queues,
            write_queue_nums: queues,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            order: false,
            ..Default::default()
        },
    )
}

/// The `offset` of a SUCCESS answer.
#[track_caller]
pub fn offset_of(resp: &RemotingCommand) -> i64 {
    expect_code(resp, ResponseCode::Success);
    resp.decode_header::<OffsetResponseHeader>().unwrap().offset
}

/// A request naming a topic and queue (GET_MIN_OFFSET, GET_EARLIEST_MSG_STORETIME).
pub fn topic_queue(code: RequestCode, topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        code,
        &TopicQueueRequestHeader {
            topic: topic.into(),
            queue_id,
        },
    )
}

/// GET_MAX_OFFSET.
pub fn max_offset_req(topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GetMaxOffset,
        &GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            committed: None,
        },
    )
}

/// GET_BROKER_RUNTIME_INFO's table.
pub async fn runtime_info(c: &Client) -> BTreeMap<String, String> {
    let resp = c
        .call(RemotingCommand::request_code(
            RequestCode::GetBrokerRuntimeInfo,
        ))
        .await;
    expect_code(&resp, ResponseCode::Success);
    tern_shell::body::from_json::<tern_shell::body::KvTable>(&resp.body)
        .unwrap()
        .table
}

/// Creates `topic` with `queues` queues on the broker `c` is connected to.
pub async fn create_topic(c: &Client, topic: &str, queues: i32) {
    expect_code(
        &c.call(create_topic_req(topic, queues)).await,
        ResponseCode::Success,
    );
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with `g`; panics unless the broker answers SUCCESS.
pub async fn create_group(c: &Client, g: &tern_shell::body::SubscriptionGroupConfig) {
    let req = RemotingCommand::request_code(RequestCode::UpdateAndCreateSubscriptionGroup)
        .with_body(tern_shell::body::to_json(g));
    expect_code(&c.call(req).await, ResponseCode::Success);
}

/// Sends one message; returns the decoded send response header.
pub async fn send_ok(c: &Client, req: RemotingCommand) -> SendMessageResponseHeader {
    let resp = c.call(req).await;
    expect_code(&resp, ResponseCode::Success);
    assert_eq!(resp.ext_fields.get("MSG_REGION"), Some("DefaultRegion"));
    resp.decode_header().unwrap()
}

/// Checks a pulled record against what was sent.
#[track_caller]
pub fn check_record(got: &MessageExt, sent: &Message, queue_id: i32, b: &BrokerProc, c: &Client) {
    assert_eq!(got.topic, sent.topic);
    assert_eq!(got.queue_id, queue_id);
    assert_eq!(got.body, sent.body);
    assert_eq!(got.flag, sent.flag);
    assert_eq!(got.properties, stored_props(sent));
    assert_eq!(got.born_host, c.conn.local_addr());
    assert_eq!(got.store_host.to_string(), b.addr);
    assert_eq!(got.sys_flag, 0);
    assert_eq!(got.reconsume_times, 0);
    assert_eq!(got.prepared_transaction_offset, 0);
    assert_eq!(got.born_timestamp, BORN);
    let age = now_ms() - got.store_timestamp;
    assert!(
        (0..60_000).contains(&age),
        "store timestamp {}",
        got.store_timestamp
    );
}

/// One message as it arrived: the record and the wall-clock ms it was first seen.
pub type Arrival = (MessageExt, i64);

/// Polls `topic`/`queue_id` from offset 0 until `n` messages are there, noting when each
/// was first seen. Panics after `within`.
pub async fn arrivals(
    c: &Client,
    topic: &str,
    queue_id: i32,
    n: usize,
    within: Duration,
) -> Vec<Arrival> {
    let deadline = Instant::now() + within;
    let mut got: Vec<Arrival> = Vec::new();
    while got.len() < n {
        let found = pull_all(c, topic, queue_id, got.len() as i64).await;
        // Read after the pull: never earlier than the delivery (a lower bound is checked).
        let now = now_ms();
        got.extend(found.into_iter().map(|m| (m, now)));
        assert!(
            Instant::now() < deadline,
            "{topic}/{queue_id}: {} of {n} messages after {within:?}",
            got.len()
        );
        tern_shell::runtime::sleep(Duration::from_millis(25)).await;
    }
    got
}

/// `req` signed by `who` (ACL tests).
pub fn signed(
    mut req: RemotingCommand,
    who: &tern_shell::acl::SessionCredentials,
) -> RemotingCommand {
    who.sign(&mut req);
    req
}

/// Asserts a NO_PERMISSION answer whose remark mentions `why`.
#[track_caller]
pub fn refused(resp: &RemotingCommand, why: &str) {
    assert_eq!(resp.response_code(), ResponseCode::NoPermission, "{resp:?}");
    let remark = resp.remark.clone().unwrap_or_default();
    assert!(remark.contains(why), "remark {remark:?} lacks {why:?}");
}

/// UPDATE_CONSUMER_OFFSET of `group` on `topic`'s queue `queue_id` to `offset`.
pub fn commit_req(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let h = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
    };
    RemotingCommand::request(RequestCode::UpdateConsumerOffset, &h)
}

/// Commits `offset` for `group` ([`commit_req`]), which must answer SUCCESS.
pub async fn commit(c: &Client, group: &str, topic: &str, queue_id: i32, offset: i64) {
    let resp = c.call(commit_req(group, topic, queue_id, offset)).await;
    expect_code(&resp, ResponseCode::Success);
}

/// QUERY_CONSUMER_OFFSET without the zero fallback: an absent offset answers
/// QUERY_NOT_FOUND instead of 0.
pub fn stored_offset_req(group: &str, topic: &str, queue_id: i32) -> RemotingCommand {
    let h = QueryConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        set_zero_if_not_found: Some(false),
    };
    RemotingCommand::request(RequestCode::QueryConsumerOffset, &h)
}

/// The JSON body of the answer to `req`, which must be SUCCESS.
pub async fn ok_body<T: serde::de::DeserializeOwned>(c: &Client, req: RemotingCommand) -> T {
    let resp = c.call(req).await;
    expect_code(&resp, ResponseCode::Success);
    from_json(&resp.body).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&resp.body));
    })
}

/// Every topic's config (GET_ALL_TOPIC_CONFIG).
pub async fn all_topics(c: &Client) -> TopicConfigSerializeWrapper {
    ok_body(
        c,
        RemotingCommand::request_code(RequestCode::GetAllTopicConfig),
    )
    .await
}

/// Every subscription group's config (GET_ALL_SUBSCRIPTIONGROUP_CONFIG).
pub async fn all_groups(c: &Client) -> SubscriptionGroupWrapper {
    let req = RemotingCommand::request_code(RequestCode::GetAllSubscriptionGroupConfig);
    ok_body(c, req).await
}
