//! ACL on a real broker process, per resource: every request that reads or changes a
//! topic, a group or a message is checked against what it touches (RocketMQ 4.9 lets
//! any valid account send most of these), broker-wide reads and unknown codes need an
//! admin, and with a replay window a captured request cannot be sent again.

use crate::acl::{admin, start_with_rules, user};
use crate::common;

use std::path::Path;

use common::*;
use tern_shell::acl::{SessionCredentials, TIMESTAMP, signature};
use tern_shell::body::{LockBatchRequestBody, MessageQueue, to_json};
use tern_shell::headers::{EndTransactionRequestHeader, SendMessageResponseHeader};
use tern_shell::message::{Message, SYSFLAG_TRANSACTION_PREPARED, decode_offset_msg_id};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

const RULES: &str = "\
accounts:
  - accessKey: tern_user
    secretKey: user_secret
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - Mine=PUB|SUB
    groupPerms:
      - MyGroup=SUB
  - accessKey: tern_admin
    secretKey: 12345678
    admin: true
";

#[track_caller]
fn allowed(resp: &RemotingCommand) {
    assert_ne!(resp.response_code(), ResponseCode::NoPermission, "{resp:?}");
}

fn start(dir: &Path, extra: &str) -> BrokerProc {
    start_with_rules(dir, RULES, extra)
}

/// Sends `req` as `who` and returns the answer's commit-log offset and header.
async fn sent_at(
    c: &Client,
    req: RemotingCommand,
    who: &SessionCredentials,
) -> (i64, SendMessageResponseHeader) {
    let resp = c.call(signed(req, who)).await;
    expect_code(&resp, ResponseCode::Success);
    let h: SendMessageResponseHeader = resp.decode_header().unwrap();
    let offset = decode_offset_msg_id(&h.msg_id).unwrap().commit_log_offset;
    (offset, h)
}

fn view(offset: i64) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::ViewMessageById)
        .with_ext("offset", offset.to_string())
}

fn half(topic: &str) -> RemotingCommand {
    let m = Message::new(topic, b"half".to_vec())
        .with_property("TRAN_MSG", "true")
        .with_property("PGROUP", "PG");
    let mut h = send_header(&m, 0, now_ms());
    h.sys_flag = SYSFLAG_TRANSACTION_PREPARED;
    RemotingCommand::request(RequestCode::SendMessage, &h).with_body(m.body.clone())
}

fn end(offset: i64, sent: &SendMessageResponseHeader) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::EndTransaction,
        &EndTransactionRequestHeader {
            producer_group: "PG".into(),
            tran_state_table_offset: sent.queue_offset,
            commit_log_offset: offset,
            commit_or_rollback: 8,
            from_transaction_check: Some(false),
            msg_id: sent.msg_id.clone(),
            transaction_id: None,
            topic: None,
        },
    )
}

fn lock(group: &str, topic: &str) -> RemotingCommand {
    let body = LockBatchRequestBody {
        consumer_group: group.into(),
        client_id: "c1".into(),
        only_this_broker: false,
        mq_set: vec![MessageQueue {
            topic: topic.into(),
            broker_name: "broker-a".into(),
            queue_id: 0,
        }],
    };
    RemotingCommand::request_code(RequestCode::LockBatchMq).with_body(to_json(&body))
}

fn consumer_offset(group: &str, topic: &str) -> RemotingCommand {
    RemotingCommand::request_code(RequestCode::QueryConsumerOffset)
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", "0")
}

#[test]
fn each_request_is_checked_against_what_it_touches() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), "");
    b.with_client(async |c| {
        for t in ["Mine", "Secret"] {
            expect_code(
                &c.call(signed(create_topic_req(t, 1), &admin())).await,
                ResponseCode::Success,
            );
        }
        let (secret_at, _) = sent_at(c, send_v2(&msg("Secret", b"s", &[]), 0), &admin()).await;
        let (mine_at, _) = sent_at(c, send_v2(&msg("Mine", b"m", &[]), 0), &user()).await;

        // A message by offset: only with SUB on its topic.
        refused(
            &c.call(signed(view(secret_at), &user())).await,
            "topic Secret",
        );
        expect_code(
            &c.call(signed(view(mine_at), &user())).await,
            ResponseCode::Success,
        );
        expect_code(
            &c.call(signed(view(secret_at), &admin())).await,
            ResponseCode::Success,
        );

        // Ending a transaction: PUB on the half's real topic, not on the half topic.
        let (secret_half, secret_sent) = sent_at(c, half("Secret"), &admin()).await;
        refused(
            &c.call(signed(end(secret_half, &secret_sent), &user()))
                .await,
            "topic Secret",
        );
        let (mine_half, mine_sent) = sent_at(c, half("Mine"), &user()).await;
        expect_code(
            &c.call(signed(end(mine_half, &mine_sent), &user())).await,
            ResponseCode::Success,
        );
        // Its half parked in the half topic is viewable as the real topic's.
        expect_code(
            &c.call(signed(view(mine_half), &user())).await,
            ResponseCode::Success,
        );

        // Offsets and locks: SUB on the group and the topic.
        refused(
            &c.call(signed(consumer_offset("OtherGroup", "Mine"), &user()))
                .await,
            "group OtherGroup",
        );
        refused(
            &c.call(signed(consumer_offset("MyGroup", "Secret"), &user()))
                .await,
            "topic Secret",
        );
        allowed(
            &c.call(signed(consumer_offset("MyGroup", "Mine"), &user()))
                .await,
        );
        refused(
            &c.call(signed(lock("OtherGroup", "Mine"), &user())).await,
            "group OtherGroup",
        );
        refused(
            &c.call(signed(lock("MyGroup", "Secret"), &user())).await,
            "topic Secret",
        );
        expect_code(
            &c.call(signed(lock("MyGroup", "Mine"), &user())).await,
            ResponseCode::Success,
        );

        // POP: SUB on both too.
        let mut pop = pop_req("Secret", 0, 1, 10_000, 0);
        pop.ext_fields.insert("consumerGroup", "MyGroup");
        refused(&c.call(signed(pop, &user())).await, "topic Secret");

        // Broker-wide reads, admin tools' codes and unknown codes: admin only.
        for code in [
            RequestCode::GetAllTopicConfig,
            RequestCode::GetAllConsumerOffset,
            RequestCode::GetBrokerConfig,
            RequestCode::GetAllSubscriptionGroupConfig,
            RequestCode::GetBrokerRuntimeInfo,
            RequestCode::Other(9999),
        ] {
            let req = RemotingCommand::request_code(code);
            refused(
                &c.call(signed(req.clone(), &user())).await,
                "Need admin permission",
            );
            allowed(&c.call(signed(req, &admin())).await);
        }

        // Without a replay window a request may be sent twice (RocketMQ's clients sign
        // no time).
        let twice = signed(max_offset_req("Mine", 0), &user());
        expect_code(&c.call(twice.clone()).await, ResponseCode::Success);
        expect_code(&c.call(twice).await, ResponseCode::Success);
    });
}

#[test]
fn with_a_replay_window_a_request_is_accepted_once_and_only_while_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), "aclReplayWindowSeconds=30\n");
    b.with_client(async |c| {
        let once = signed(max_offset_req("Mine", 0), &user());
        expect_code(&c.call(once.clone()).await, ResponseCode::Success);
        refused(&c.call(once).await, "Replayed request");
        // Signed again (new nonce): accepted.
        expect_code(
            &c.call(signed(max_offset_req("Mine", 0), &user())).await,
            ResponseCode::Success,
        );
        // Signed a minute ago: refused by its time.
        let mut stale = max_offset_req("Mine", 0);
        stale.ext_fields.insert("AccessKey", "tern_user");
        stale
            .ext_fields
            .insert(TIMESTAMP, (now_ms() - 60_000).to_string());
        let sig = signature(&stale.ext_fields, &stale.body, "user_secret");
        stale.ext_fields.insert("Signature", sig);
        refused(&c.call(stale).await, "outside the replay window");
        // Signed without a time, as RocketMQ's clients sign: refused while the window is on.
        let mut timeless = max_offset_req("Mine", 0);
        timeless.ext_fields.insert("AccessKey", "tern_user");
        let sig = signature(&timeless.ext_fields, &timeless.body, "user_secret");
        timeless.ext_fields.insert("Signature", sig);
        refused(&c.call(timeless).await, "No AclTimestamp");
    });
}
