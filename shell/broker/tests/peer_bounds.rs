//! What a peer may make the broker keep is bounded: the real `tern-broker --standalone`
//! process refuses to auto-create a subscription group whose name RocketMQ's rules reject,
//! with a clear answer, and registers nothing for it.

use crate::common;

use common::*;
use tern_shell::ResponseCode;

#[test]
fn heartbeats_naming_groups_rocketmq_rejects_create_nothing() {
    with_client("", async |c| {
        create_topic(c, "Bounds", 1).await;
        let long = "g".repeat(256);
        for (group, why) in [
            ("bad group", "illegal characters"),
            ("g/../x", "illegal characters"),
            (long.as_str(), "longer than group max length 255"),
        ] {
            let resp = c
                .call(heartbeat("10.0.0.1@B", group, "Bounds", "*", vec![]))
                .await;
            expect_code(&resp, ResponseCode::SubscriptionGroupNotExist);
            let remark = resp.remark.unwrap_or_default();
            assert!(remark.contains(why), "{group:?}: {remark}");
            assert!(
                !all_groups(c)
                    .await
                    .subscription_group_table
                    .contains_key(group),
                "{group:?} was created"
            );
        }
        // A valid name is still auto-created, with its retry topic.
        let resp = c
            .call(heartbeat("10.0.0.1@B", "CID_ok-1", "Bounds", "*", vec![]))
            .await;
        expect_code(&resp, ResponseCode::Success);
        assert!(
            all_groups(c)
                .await
                .subscription_group_table
                .contains_key("CID_ok-1")
        );
    });
}
