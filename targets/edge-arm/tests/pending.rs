//! Records still pending on the gateway survive the early deletion of forwarded
//! segments: a delayed message outlives several 1 MiB segments of other traffic and is
//! forwarded when due; a transaction committed after several segment rolls is forwarded
//! once committed, and a rolled-back one never is; a `%RETRY%` message its local group
//! has not consumed stays readable until the group's offset passes it.

use crate::common;

use std::time::Duration;

use common::{Central, Edge, filler, with_gateway};
use tern_client::{
    Admin, ClientConfig, ListenerResult, LocalTransactionState, Message, MessageExt,
    ProducerConfig, PullConsumer, TransactionListener, TransactionProducer, TransactionSendResult,
};
use tern_shell::RemotingCommand;
use tern_shell::code::RequestCode;
use tern_shell::headers::{EndTransactionRequestHeader, transaction_state};
use tern_shell::message::decode_offset_msg_id;
use tern_testkit::wait_until;

/// Waits until `log` says forwarded segments were deleted while `pending` held some back.
async fn deleted_while_pending(edge: &Edge, pending: &str) {
    wait_until(
        "forwarded segments deleted up to the pending record",
        Duration::from_secs(120),
        async || {
            edge.log()
                .lines()
                .any(|l| l.contains("segment(s) below") && l.contains(pending))
        },
    )
    .await;
}

async fn central_has(central: &Central, topic: &str, id: &str, within: Duration) -> MessageExt {
    let mut found = None;
    wait_until("the message stored centrally", within, async || {
        found = central.messages(topic).await.0.remove(id);
        found.is_some()
    })
    .await;
    found.unwrap()
}

#[test]
fn a_delayed_message_outlives_several_segments_of_other_traffic_and_is_forwarded_when_due() {
    with_gateway("", async |central, edge| {
        let p = edge.producer("sensors");
        // Segments before the delayed message's may go while it waits; its own not.
        filler(&p, "Bulk", 2).await;
        // Level 4: 30 s with RocketMQ's default levels.
        let delayed = Message::new("Alarms", "late alarm").with_property("DELAY", "4");
        let sent = p.send(delayed).await.unwrap();
        filler(&p, "Bulk", 4).await;
        deleted_while_pending(edge, "delayed message (level 4)").await;
        let (early, _) = central.messages("Alarms").await;
        assert!(early.is_empty(), "forwarded before its delay");
        let got = central_has(central, "Alarms", &sent.msg_id, Duration::from_secs(150)).await;
        assert_eq!(got.body, b"late alarm");
        assert!(
            !edge.log().contains("is gone (retention)"),
            "{}",
            edge.log()
        );
        p.shutdown().await;
    });
}

/// Leaves every transaction open: the test ends them itself, late.
struct Undecided;

impl TransactionListener for Undecided {
    type Arg = ();
    fn execute_local(&self, _: &Message, _: &()) -> ListenerResult {
        Ok(LocalTransactionState::Unknown)
    }
    fn check_local(&self, _: &MessageExt) -> ListenerResult {
        Ok(LocalTransactionState::Unknown)
    }
}

/// END_TRANSACTION for `half`, sent to the gateway's broker as a producer would.
async fn end(edge: &Edge, group: &str, topic: &str, half: &TransactionSendResult, commit: bool) {
    let id = decode_offset_msg_id(&half.send.offset_msg_id).unwrap();
    let header = EndTransactionRequestHeader {
        producer_group: group.into(),
        tran_state_table_offset: half.send.queue_offset,
        commit_log_offset: id.commit_log_offset,
        commit_or_rollback: if commit {
            transaction_state::COMMIT
        } else {
            transaction_state::ROLLBACK
        },
        from_transaction_check: Some(false),
        msg_id: half.send.msg_id.clone(),
        transaction_id: half.send.transaction_id.clone(),
        topic: Some(topic.into()),
    };
    let conn = common::connect(&edge.broker).await;
    let resp = common::call(
        &conn,
        RemotingCommand::request(RequestCode::EndTransaction, &header),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(resp.code, 0, "END_TRANSACTION: {:?}", resp.remark);
}

#[test]
fn a_transaction_committed_after_several_segment_rolls_is_forwarded_and_a_rolled_back_one_never() {
    // No check-back meanwhile: it would store the halves again at the log's end.
    let conf = "transactionCheckInterval=3600000\ntransactionTimeOut=3600000\n";
    with_gateway(conf, async |central, edge| {
        let group = "payments";
        let tp = TransactionProducer::new(
            ProducerConfig::new(group),
            ClientConfig::new(&edge.namesrv),
            Undecided,
        )
        .unwrap();
        tp.start().await.unwrap();
        let p = edge.producer("bulk");
        filler(&p, "Bulk", 2).await;
        let commit = tp
            .send_in_transaction(Message::new("Payments", "paid"), &())
            .await
            .unwrap();
        let rollback = tp
            .send_in_transaction(Message::new("Payments", "cancelled"), &())
            .await
            .unwrap();
        assert_eq!(commit.local_state, LocalTransactionState::Unknown);
        filler(&p, "Bulk", 4).await;
        deleted_while_pending(edge, "unresolved transaction half").await;
        end(edge, group, "Payments", &rollback, false).await;
        end(edge, group, "Payments", &commit, true).await;
        let got = central_has(
            central,
            "Payments",
            &commit.send.msg_id,
            Duration::from_secs(90),
        )
        .await;
        assert_eq!(got.body, b"paid");
        // The commit came after the rollback in the local log: it is forwarded, so the
        // rollback was passed over.
        let (all, _) = central.messages("Payments").await;
        assert_eq!(all.len(), 1, "only the committed one: {:?}", all.keys());
        p.shutdown().await;
        tp.shutdown().await;
    });
}

#[test]
fn a_retry_message_its_group_has_not_consumed_stays_until_the_group_passes_it() {
    with_gateway("", async |_, edge| {
        let p = edge.producer("sensors");
        filler(&p, "Bulk", 2).await;
        // A consumer's send-back lands in its group's one-queue retry topic.
        let retry_queue = tern_client::MessageQueue {
            topic: "%RETRY%alerts".into(),
            broker_name: "tern-edge".into(),
            queue_id: 0,
        };
        p.send_to_queue(Message::new("%RETRY%alerts", "retry me"), &retry_queue)
            .await
            .unwrap();
        filler(&p, "Bulk", 4).await;
        deleted_while_pending(edge, "retry message of group alerts").await;

        let c = PullConsumer::new("alerts", edge.client_config()).unwrap();
        c.start().await;
        let queues = c.fetch_queues("%RETRY%alerts").await.unwrap();
        let mut found = None;
        for q in &queues {
            let r = c.pull(q, 0, 8).await.unwrap();
            if let Some(m) = r.messages.into_iter().next() {
                found = Some((q.clone(), m));
            }
        }
        let (q, m) = found.expect("the retry message still readable");
        assert_eq!(m.body, b"retry me");
        // Consumed: it no longer holds the log.
        c.commit_offset(&q, 1).await.unwrap();
        wait_until(
            "the retry message released",
            Duration::from_secs(60),
            async || {
                filler(&p, "Bulk", 1).await;
                let admin = Admin::new(ClientConfig::new(&edge.broker)).unwrap();
                let info = admin.broker_runtime_info(&edge.broker).await.unwrap();
                admin.shutdown().await;
                !info
                    .get("edgeOldestPending")
                    .is_some_and(|s| s.contains("retry message"))
            },
        )
        .await;
        c.shutdown().await;
        p.shutdown().await;
    });
}
