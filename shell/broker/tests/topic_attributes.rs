//! RocketMQ 5's topic attributes on a real broker process: UPDATE_AND_CREATE_TOPIC's
//! `+message.type=FIFO` is kept with the topic (through a restart), served by
//! GET_TOPIC_CONFIG, kept by an update that names no attributes, and bad changes are
//! refused with RocketMQ's messages, the topic unchanged.

use crate::common;

use common::*;
use tern_shell::body::{TopicConfig, from_json};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

fn with_attributes(topic: &str, attributes: &str) -> RemotingCommand {
    let mut req = create_topic_req(topic, 2);
    req.ext_fields.insert("attributes", attributes);
    req
}

async fn attributes(c: &Client, topic: &str) -> std::collections::BTreeMap<String, String> {
    let req = RemotingCommand::request_code(RequestCode::GetTopicConfig).with_ext("topic", topic);
    let resp = c.call(req).await;
    expect_code(&resp, ResponseCode::Success);
    from_json::<TopicConfig>(&resp.body).unwrap().attributes
}

#[track_caller]
fn refused(resp: &RemotingCommand, why: &str) {
    assert_eq!(resp.response_code(), ResponseCode::SystemError, "{resp:?}");
    let remark = resp.remark.clone().unwrap_or_default();
    assert!(remark.contains(why), "remark {remark:?} lacks {why:?}");
}

#[test]
fn a_topics_message_type_is_set_kept_and_checked() {
    let (dir, mut b) = start("");
    b.with_client(async |c| {
        expect_code(
            &c.call(with_attributes("Fifo", "+message.type=FIFO")).await,
            ResponseCode::Success,
        );
        assert_eq!(attributes(c, "Fifo").await["message.type"], "FIFO");
        // An update naming no attributes keeps them.
        expect_code(
            &c.call(create_topic_req("Fifo", 4)).await,
            ResponseCode::Success,
        );
        assert_eq!(attributes(c, "Fifo").await["message.type"], "FIFO");
        for (text, why) in [
            ("+message.type=QUEUE", "value is not in set"),
            ("+colour=red", "unsupported key: colour"),
            ("+queue.type=SimpleCQ", "unchangeable"),
            ("-cleanup.policy", "nonexistent key"),
        ] {
            refused(&c.call(with_attributes("Fifo", text)).await, why);
        }
        refused(
            &c.call(with_attributes("New", "-message.type")).await,
            "only add attribute is supported while creating topic",
        );
        assert_eq!(attributes(c, "Fifo").await["message.type"], "FIFO");
        expect_code(
            &c.call(with_attributes("Fifo", "+message.type=MIXED")).await,
            ResponseCode::Success,
        );
    });
    assert!(b.stop().success());
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        assert_eq!(attributes(c, "Fifo").await["message.type"], "MIXED");
        expect_code(
            &c.call(with_attributes("Fifo", "-message.type")).await,
            ResponseCode::Success,
        );
        assert!(attributes(c, "Fifo").await.is_empty());
    });
}
