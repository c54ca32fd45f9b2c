//! Recall (RocketMQ 5.3.2): a producer cancels a timer message before it is due with the
//! handle its send was answered with.
//!
//! The handle ([`tern_shell::recall`], shared with the client) names the message's topic,
//! broker, slot and UNIQ_KEY. RECALL_MESSAGE puts a marker,
//! itself a timer message due in the same slot, carrying `TIMER_DEL_UNIQKEY` =
//! `topic+uniqKey`; the timer task reads a slot's markers before its messages and drops
//! the messages they name. A marker that arrives after its slot was read cancels nothing,
//! as in RocketMQ.

use tern_engine::properties::key;
use tern_engine::record::MessageIn;
use tern_shell::headers::{RecallMessageRequestHeader, RecallMessageResponseHeader};
use tern_shell::recall::Handle;
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::processor::send::host;
use crate::schedule::message::with_properties;

/// The marker's tag (RocketMQ's `_RECALL_TAG_`).
const RECALL_TAG: &str = "_RECALL_TAG_";

/// RECALL_MESSAGE: RocketMQ's checks in its order, then the marker.
pub async fn recall(ctx: &BrokerCtx, conn: &ConnectionCtx, req: &RemotingCommand) -> Answer {
    let h: RecallMessageRequestHeader = req.decode_header()?;
    let refuse = |code, remark: &str| Err(Refusal::new(code, remark.to_owned()));
    if !ctx.timer.settings().recall_enabled {
        return refuse(
            ResponseCode::NoPermission,
            "recall failed, operation is forbidden",
        );
    }
    if ctx.role.get() == BrokerRole::Slave {
        return refuse(
            ResponseCode::SlaveNotAvailable,
            "recall failed, broker service not available",
        );
    }
    if ctx.topics.get(&h.topic).is_none() {
        return refuse(
            ResponseCode::TopicNotExist,
            &format!("recall failed, the topic[{}] not exist", h.topic),
        );
    }
    let Some(handle) = Handle::decode(&h.recall_handle) else {
        return refuse(ResponseCode::IllegalOperation, "recall handle is invalid");
    };
    if handle.topic != h.topic {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, topic not match",
        );
    }
    if handle.broker_name != ctx.config.broker_name {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, broker service not available",
        );
    }
    let left = handle.timestamp_ms - tern_shell::runtime::now_ms();
    if left <= 0 || left >= ctx.timer.settings().max_delay_sec.saturating_mul(1000) {
        return refuse(
            ResponseCode::IllegalOperation,
            "recall failed, timestamp invalid",
        );
    }
    let delete_key = super::message::delete_key(&handle.topic, &handle.uniq_key);
    let (deliver, born) = (
        handle.timestamp_ms.to_string(),
        tern_shell::runtime::now_ms(),
    );
    let props = with_properties(
        b"",
        &[
            (key::TAGS, RECALL_TAG),
            (key::TIMER_DEL_UNIQKEY, delete_key.as_str()),
            (key::UNIQ_KEY, handle.uniq_key.as_str()),
            (key::TIMER_DELIVER_MS, deliver.as_str()),
            ("PGROUP", h.producer_group.as_deref().unwrap_or("")),
        ],
    );
    let marker = MessageIn {
        topic: &handle.topic,
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: born,
        born_host: host(conn.peer_addr()),
        store_host: host(ctx.store_host),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: b"0",
        properties: &props,
    };
    let put = match ctx.put(&marker) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("recall of {delete_key}: {e}");
            return refuse(ResponseCode::SystemError, "recall failed, execute error");
        }
    };
    // RocketMQ answers SUCCESS for a flush or slave timeout too: the marker is stored.
    let _ = ctx.await_stored(put.end()).await;
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &RecallMessageResponseHeader {
                msg_id: handle.uniq_key,
            },
        ),
    )
}
