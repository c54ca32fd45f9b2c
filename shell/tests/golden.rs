//! Golden tests: frames captured from the real C++ client (rocketmq==0.4.4, Apache
//! rocketmq-client-cpp) by tests/capture/capture.py decode into the values it meant, and
//! re-encoding them gives frames that decode to the same values.

use tern_shell::body::{ConsumeFromWhere, ConsumeType, HeartbeatData, MessageModel, from_json};
use tern_shell::headers::{
    ConsumerGroupRequestHeader, GetMaxOffsetRequestHeader, GetRouteInfoRequestHeader,
    PullMessageRequestHeader, QueryConsumerOffsetRequestHeader, SendMessageRequestHeader,
    UnregisterClientRequestHeader, pull_sys_flag,
};
use tern_shell::message::{SYSFLAG_COMPRESSED, decode_batch, inflate_body, string_to_properties};
use tern_shell::{FrameLimits, LanguageCode, RemotingCommand, RequestCode, SerializeType};

fn fixture(name: &str) -> RemotingCommand {
    let path = format!("{}/tests/fixtures/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (cmd, used) = RemotingCommand::decode(&bytes, &FrameLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(used, bytes.len(), "{name}: one whole frame");
    // Whatever we decode, we can encode again and read back unchanged.
    let again = cmd.encode().unwrap();
    let (back, _) = RemotingCommand::decode(&again, &FrameLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!(back, cmd, "{name}: re-encoding keeps every value");
    cmd
}

#[test]
fn cpp_requests_are_json_with_cpp_language_and_version_63() {
    let cmd = fixture("get_routeinfo_by_topic");
    assert_eq!(cmd.serialize_type, SerializeType::Json);
    assert_eq!(cmd.language, LanguageCode::Cpp);
    assert_eq!(cmd.version, 63);
    assert_eq!(cmd.remark.as_deref(), Some(""));
    assert!(!cmd.is_response() && !cmd.is_oneway());
    assert_eq!(cmd.request_code_enum(), RequestCode::GetRouteinfoByTopic);
    let h: GetRouteInfoRequestHeader = cmd.decode_header().unwrap();
    assert_eq!(h.topic, "TernTopic");
    // Every C++ request carries these, even without credentials.
    assert_eq!(cmd.ext_fields["OnsChannel"], "ALIYUN");
    assert!(cmd.ext_fields.contains_key("Signature"));
}

#[test]
fn cpp_send_message_with_numeric_ext_values_decodes() {
    let cmd = fixture("send_message");
    assert_eq!(cmd.request_code_enum(), RequestCode::SendMessage);
    let h = SendMessageRequestHeader::from_command(&cmd).unwrap();
    assert_eq!(h.producer_group, "TernPG");
    assert_eq!(h.topic, "TernTopic");
    assert_eq!(h.default_topic, "TBW102");
    assert_eq!(h.default_topic_queue_nums, 4);
    assert_eq!(h.sys_flag, 0);
    assert_eq!(h.batch, Some(false), "\"0\" is false");
    assert_eq!(h.unit_mode, Some(false));
    assert!(h.born_timestamp > 1_600_000_000_000);
    let props = string_to_properties(h.properties.unwrap().as_bytes());
    assert_eq!(props["TAGS"], "TagA");
    assert_eq!(props["KEYS"], "key1 key2");
    assert_eq!(props["color"], "blue");
    assert_eq!(props["UNIQ_KEY"].len(), 32);
    assert_eq!(cmd.body, b"hello tern");
}

#[test]
fn cpp_batch_is_send_message_with_batch_one_and_a_batch_body() {
    let cmd = fixture("send_message_batch");
    assert_eq!(cmd.request_code_enum(), RequestCode::SendMessage);
    let h = SendMessageRequestHeader::from_command(&cmd).unwrap();
    assert!(h.is_batch());
    let items = decode_batch(&cmd.body).unwrap();
    assert_eq!(items.len(), 2);
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item.body, format!("batch-{i}").as_bytes());
        let props = item.properties_map();
        assert_eq!(props["TAGS"], "TagA");
        assert!(props.contains_key("UNIQ_KEY"));
    }
}

#[test]
fn cpp_compressed_body_is_zlib_with_sysflag_bit() {
    let cmd = fixture("send_message_compressed");
    let h = SendMessageRequestHeader::from_command(&cmd).unwrap();
    assert_eq!(h.sys_flag & SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSED);
    assert_eq!(inflate_body(&cmd.body, 1 << 20).unwrap(), vec![b'z'; 5000]);
}

#[test]
fn cpp_heartbeats_decode_with_ordinal_enums() {
    let producer: HeartbeatData = from_json(&fixture("heart_beat_producer").body).unwrap();
    assert_eq!(producer.producer_data_set[0].group_name, "TernPG");
    assert!(producer.client_id.contains("@DEFAULT"));

    let consumer: HeartbeatData = from_json(&fixture("heart_beat_consumer").body).unwrap();
    let c = &consumer.consumer_data_set[0];
    assert_eq!(c.group_name, "TernCG");
    assert_eq!(c.consume_type, ConsumeType::ConsumePassively);
    assert_eq!(c.message_model, MessageModel::Clustering);
    assert_eq!(
        c.consume_from_where,
        ConsumeFromWhere::ConsumeFromLastOffset
    );
    let sub = c
        .subscription_data_set
        .iter()
        .find(|s| s.topic == "TernTopic")
        .unwrap();
    assert_eq!(sub.tags_set, vec!["TagA", "TagB"]);
    assert_eq!(
        sub.code_set,
        vec![0, 0],
        "C++ sends atoi(tag): brokers must recompute"
    );
    assert!(sub.sub_version > 0, "subVersion arrives as a string");
    let retry = c
        .subscription_data_set
        .iter()
        .find(|s| s.topic == "%RETRY%TernCG")
        .unwrap();
    assert!(retry.tags_set.is_empty());
}

#[test]
fn cpp_pull_request_decodes() {
    let h: PullMessageRequestHeader = fixture("pull_message").decode_header().unwrap();
    assert_eq!(h.consumer_group, "TernCG");
    assert_eq!(h.max_msg_nums, 32);
    assert_eq!(
        h.sys_flag,
        pull_sys_flag::SUSPEND | pull_sys_flag::SUBSCRIPTION
    );
    assert_eq!(h.suspend_timeout_millis, 15000);
    assert_eq!(h.commit_offset, -1);
    assert_eq!(h.subscription.as_deref(), Some("*"));
    assert!(h.sub_version > 0);
}

#[test]
fn cpp_offset_and_group_requests_decode() {
    let q: QueryConsumerOffsetRequestHeader =
        fixture("query_consumer_offset").decode_header().unwrap();
    assert_eq!((q.consumer_group.as_str(), q.queue_id), ("TernCG", 1));
    let m: GetMaxOffsetRequestHeader = fixture("get_max_offset").decode_header().unwrap();
    assert_eq!((m.topic.as_str(), m.queue_id), ("TernTopic", 1));
    let g: ConsumerGroupRequestHeader = fixture("get_consumer_list_by_group")
        .decode_header()
        .unwrap();
    assert_eq!(g.consumer_group, "TernCG");
    let u: UnregisterClientRequestHeader = fixture("unregister_client").decode_header().unwrap();
    assert_eq!(u.producer_group.as_deref(), Some("TernPG"));
    assert_eq!(u.consumer_group.as_deref(), Some(""));
}
