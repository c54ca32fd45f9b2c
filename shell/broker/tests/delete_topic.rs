//! DELETE_TOPIC_IN_BROKER against the real `tern-broker`: the topic's consume queues go
//! with it, so a topic made again under the name serves only what is sent after, by
//! pull and by key, and still so after a restart.

use crate::common;

use common::*;
use tern_shell::headers::{QueryMessageRequestHeader, TopicRequestHeader};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

fn query_by_key(key: &str) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::QueryMessage,
        &QueryMessageRequestHeader {
            topic: "Reborn".into(),
            key: key.into(),
            max_num: 32,
            begin_timestamp: 0,
            end_timestamp: i64::MAX,
            unique_key_query: None,
        },
    )
}

async fn bodies(c: &Client) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for q in 0..2 {
        out.extend(
            pull_all(c, "Reborn", q, 0)
                .await
                .into_iter()
                .map(|m| m.body),
        );
    }
    out.sort();
    out
}

#[test]
fn a_topic_made_again_after_delete_serves_only_new_messages() {
    let (dir, mut b) = start("");
    b.with_client(async |c| {
        create_topic(c, "Reborn", 2).await;
        for i in 0..6 {
            let m = msg("Reborn", format!("old-{i}").as_bytes(), &[("KEYS", "k1")]);
            send_ok(c, send_v2(&m, i % 2)).await;
        }
        assert_eq!(bodies(c).await.len(), 6);
        expect_code(&c.call(query_by_key("k1")).await, ResponseCode::Success);

        let delete = RemotingCommand::request(
            RequestCode::DeleteTopicInBroker,
            &TopicRequestHeader {
                topic: "Reborn".into(),
            },
        );
        expect_code(&c.call(delete).await, ResponseCode::Success);
        assert!(
            !dir.path().join("data/store/consumequeue/Reborn").exists(),
            "the queue folders are gone"
        );
        create_topic(c, "Reborn", 2).await;
        let resp = c.call(max_offset_req("Reborn", 0)).await;
        assert_eq!(offset_of(&resp), 0, "the new topic starts empty");
        expect_code(
            &c.call(query_by_key("k1")).await,
            ResponseCode::QueryNotFound,
        );

        let m = msg("Reborn", b"new-0", &[("KEYS", "k1")]);
        let sent = send_ok(c, send_v2(&m, 0)).await;
        assert_eq!(sent.queue_offset, 0);
        assert_eq!(bodies(c).await, vec![b"new-0".to_vec()]);
        let resp = c.call(query_by_key("k1")).await;
        expect_code(&resp, ResponseCode::Success);
        let found = tern_shell::message::decode_pulled(&resp.body, true).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].body, b"new-0");
    });
    b.stop();
    let b = BrokerProc::again(dir.path());
    b.with_client(async |c| {
        assert_eq!(bodies(c).await, vec![b"new-0".to_vec()]);
    });
}
