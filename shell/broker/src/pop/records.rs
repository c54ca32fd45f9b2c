//! The records POP writes to its revive topic: checkpoints (tag `ck`), acks (`ack`) and
//! batch acks (`bAck`), each a JSON body with RocketMQ's short names and a readable
//! UNIQ_KEY, born and stored by this broker.
//!
//! They are appended with `StoreService::put`, not `BrokerCtx::put`: bookkeeping is
//! never delayed, timed or checked for duplicates, and carries no `TIMER_DELIVER_MS`
//! (see the module docs of [`crate::pop`]).

use tern_engine::properties::key;
use tern_engine::store::Stored;
use tern_shell::body::to_json;
use tern_shell::pop::{ACK_TAG, AckMsg, BATCH_ACK_TAG, CK_TAG, PopCheckPoint};

use crate::BrokerCtx;
use crate::schedule::message::with_properties;
use crate::store::PutError;

/// The revive topic of this broker's cluster.
pub fn revive_topic(ctx: &BrokerCtx) -> String {
    tern_shell::pop::revive_topic(&ctx.config.cluster_name)
}

/// Creates the revive topic (a system topic with `reviveQueueNum` queues) if missing.
pub fn ensure_revive_topic(ctx: &BrokerCtx) {
    let topic = revive_topic(ctx);
    if ctx.topics.get(&topic).is_none() {
        ctx.topics
            .ensure(&topic, ctx.config.pop.revive_queue_num, 6);
        ctx.request_registration();
    }
}

fn append(
    ctx: &BrokerCtx,
    revive_qid: i32,
    tag: &str,
    uniq: &str,
    body: &[u8],
) -> Result<Stored, PutError> {
    let topic = revive_topic(ctx);
    let props = with_properties(&[], &[(key::TAGS, tag), (key::UNIQ_KEY, uniq)]);
    ctx.store
        .put(&ctx.own_record(&topic, revive_qid, body, &props))
}

/// Appends a checkpoint to revive queue `revive_qid`.
pub fn append_ck(ctx: &BrokerCtx, revive_qid: i32, ck: &PopCheckPoint) -> Result<Stored, PutError> {
    append(ctx, revive_qid, CK_TAG, &ck.uniq_key(), &to_json(ck))
}

/// Appends an ack (or, with `ack_offset_list`, a batch ack) to revive queue `revive_qid`.
pub fn append_ack(ctx: &BrokerCtx, revive_qid: i32, ack: &AckMsg) -> Result<Stored, PutError> {
    let tag = if ack.ack_offset_list.is_some() {
        BATCH_ACK_TAG
    } else {
        ACK_TAG
    };
    append(ctx, revive_qid, tag, &ack.uniq_key(), &to_json(ack))
}
