//! END_TRANSACTION (37): the producer's verdict on a half message, sent oneway by Java
//! clients after their local transaction, or as the answer to a check-back.
//!
//! The request only names the half message (commit-log offset, queue offset, ids), so it
//! is verified before anything is written: a record must start at that offset, be a half
//! message, be the one the half queue holds at that queue offset, belong to the producer
//! group, and carry the message id given. A oneway request gets no answer either way, so
//! every refusal is also logged with its reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_engine::record::RecordView;
use tern_shell::acl::guard::Access;
use tern_shell::acl::rules::perm;
use tern_shell::headers::{EndTransactionRequestHeader, transaction_state};
use tern_shell::message::offset_msg_id;
use tern_shell::{Answer, Refusal};
use tern_shell::{ConnectionCtx, RemotingCommand, ResponseCode, runtime};

use super::half::{self, HalfInfo};
use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::store::{Durability, PutError};

/// How long a verdict waits for reput to index its half message: a client can answer
/// within microseconds of the send response, before the half queue entry exists.
const DISPATCH_WAIT: Duration = Duration::from_secs(3);

/// END_TRANSACTION.
pub async fn end_transaction(
    ctx: &Arc<BrokerCtx>,
    conn: &ConnectionCtx,
    req: &RemotingCommand,
    access: &Access,
) -> Answer {
    let h: EndTransactionRequestHeader = match req.decode_header() {
        Ok(h) => h,
        Err(e) => {
            log::warn!("END_TRANSACTION from {}: {e}", conn.peer_addr());
            return Err(e.into());
        }
    };
    match end(ctx, &h, !req.is_oneway(), access, req.code).await {
        Ok(durability) => Ok(RemotingCommand::response_to(req, durability.code())),
        Err(refusal) => {
            log::warn!(
                "END_TRANSACTION from {} (group {}, commitLogOffset {}, tranStateTableOffset {}, msgId {}) refused: {}",
                conn.peer_addr(),
                h.producer_group,
                h.commit_log_offset,
                h.tran_state_table_offset,
                h.msg_id,
                refusal.remark()
            );
            Err(refusal)
        }
    }
}

async fn end(
    ctx: &Arc<BrokerCtx>,
    h: &EndTransactionRequestHeader,
    wait: bool,
    access: &Access,
    code: i32,
) -> Result<Durability, Refusal> {
    if ctx.role.get() == BrokerRole::Slave {
        return Err(Refusal::new(
            ResponseCode::SlaveNotAvailable,
            "the broker is a slave: end transactions at its master",
        ));
    }
    let commit = match h.commit_or_rollback {
        transaction_state::COMMIT => true,
        transaction_state::ROLLBACK => false,
        transaction_state::UNKNOWN => {
            // The producer does not know yet: the check service will ask again.
            log::debug!(
                "transaction {} of group {} still unknown (from check: {})",
                h.msg_id,
                h.producer_group,
                h.from_transaction_check.unwrap_or(false)
            );
            return Ok(Durability::Durable);
        }
        other => {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("commitOrRollback {other} is none of 0, 8 (commit), 12 (rollback)"),
            ));
        }
    };
    let (Ok(offset), Ok(queue_offset)) = (
        u64::try_from(h.commit_log_offset),
        u64::try_from(h.tran_state_table_offset),
    ) else {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            "commitLogOffset and tranStateTableOffset must not be negative",
        ));
    };
    let bytes = super::read_record_at(ctx, offset).await.map_err(|e| {
        Refusal::new(
            ResponseCode::SystemError,
            format!("Find prepared transaction message failed: {e}"),
        )
    })?;
    let view = RecordView::parse(&bytes).map_err(|e| {
        Refusal::new(
            ResponseCode::SystemError,
            format!("Find prepared transaction message failed: {e}"),
        )
    })?;
    let info = half::half_info(&view).map_err(|e| {
        Refusal::new(
            ResponseCode::SystemError,
            format!("the record at commitLogOffset {offset} cannot be ended: {e}"),
        )
    })?;
    // With ACL on, ending a transaction publishes to its real topic: PUB there. An
    // offset alone must not let an account commit or roll back another's messages.
    crate::acl::require_record(access, &view, code, perm::PUB)?;
    verify(ctx, h, &view, &info, offset, queue_offset).await?;
    let end = if commit {
        // A commit first looks for an earlier commit of the same transaction, under the
        // state lock: an index query that may wait for the next dispatch, and record
        // reads. On a blocking thread, as RocketMQ runs END_TRANSACTION on an executor of
        // its own, so no request this executor thread serves waits for it.
        let ctx = ctx.clone();
        runtime::spawn_blocking(move || {
            let view = RecordView::parse(&bytes).map_err(|e| PutError::Illegal(e.to_string()))?;
            let info = half::half_info(&view).map_err(|e| PutError::Illegal(e.to_string()))?;
            let c = ctx.transactions.commit(&ctx, &view, &info)?;
            if c.stored {
                log::debug!(
                    "transaction {} committed to {}/{}",
                    info.uniq.unwrap_or("?"),
                    info.real_topic,
                    info.real_qid
                );
            }
            Ok::<_, PutError>(c.end)
        })
        .await
        .map_err(Refusal::from)?
    } else {
        log::debug!(
            "transaction {} of {} rolled back",
            info.uniq.unwrap_or("?"),
            info.real_topic
        );
        ctx.transactions
            .rollback(ctx, queue_offset)
            .map_err(Refusal::from)?
    };
    ctx.metrics.transaction_ended(commit);
    Ok(if wait {
        ctx.await_stored(end).await
    } else {
        Durability::Durable
    })
}

/// The checks of Java's `checkPrepareMessage`, plus the message id and the half queue
/// entry: a record forged inside a message body cannot pass for a half message.
async fn verify(
    ctx: &BrokerCtx,
    h: &EndTransactionRequestHeader,
    view: &RecordView<'_>,
    info: &HalfInfo<'_>,
    offset: u64,
    queue_offset: u64,
) -> Result<(), Refusal> {
    if info.group != Some(h.producer_group.as_str()) {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "The producer group wrong: the half message belongs to {:?}",
                info.group.unwrap_or("")
            ),
        ));
    }
    if view.queue_offset() != h.tran_state_table_offset {
        return Err(Refusal::new(
            ResponseCode::SystemError,
            format!(
                "The transaction state table offset wrong: the half message is at {}",
                view.queue_offset()
            ),
        ));
    }
    if let Some(uniq) = info.uniq {
        let offset_id = offset_msg_id(ctx.store_host, offset as i64);
        let named = [Some(h.msg_id.as_str()), h.transaction_id.as_deref()]
            .into_iter()
            .flatten()
            .any(|id| id == uniq || id.eq_ignore_ascii_case(&offset_id));
        if !named {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!(
                    "msgId {} does not name the half message at {offset}",
                    h.msg_id
                ),
            ));
        }
    }
    let deadline = Instant::now() + DISPATCH_WAIT;
    loop {
        if let Some(at) = super::half_entry_offset(ctx, queue_offset) {
            if at == offset {
                return Ok(());
            }
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("the half queue holds another message at offset {queue_offset}"),
            ));
        }
        let dispatched = ctx.store.dispatched_offset();
        if dispatched > offset || Instant::now() >= deadline {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("the half queue has no message at offset {queue_offset}"),
            ));
        }
        runtime::sleep(Duration::from_millis(5)).await;
    }
}
