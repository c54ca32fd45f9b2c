//! Request processors, one module per family, and the dispatch by request code.

use std::sync::{Arc, OnceLock};

use tern_shell::code::RequestCode;
use tern_shell::connection::not_supported;
use tern_shell::{ConnectionCtx, Processor, RemotingCommand, ResponseCode};

use crate::BrokerCtx;
use crate::config::FlushDiskType;

pub mod admin;
pub mod client;
pub mod offset;
pub mod pull;
pub mod query;
pub mod send;

/// The broker's processor: finds the family for a request code and runs it.
#[derive(Debug)]
pub struct BrokerProcessor {
    ctx: Arc<OnceLock<Arc<BrokerCtx>>>,
}

impl BrokerProcessor {
    /// A processor that serves once `ctx` is set (the listener binds before the context
    /// exists, because the context needs the bound port).
    pub fn new(ctx: Arc<OnceLock<Arc<BrokerCtx>>>) -> Self {
        Self { ctx }
    }
}

/// A bad-header answer, naming the field as Java does.
pub fn bad_header(req: &RemotingCommand, e: impl std::fmt::Display) -> RemotingCommand {
    RemotingCommand::error_response(req, ResponseCode::SystemError, e.to_string())
}

impl Processor for BrokerProcessor {
    fn is_quick(&self, req: &RemotingCommand) -> bool {
        // Sends answer as soon as the record is appended, unless they wait for a flush.
        let async_flush = self
            .ctx
            .get()
            .is_some_and(|c| c.config.flush_disk_type == FlushDiskType::Async);
        async_flush && matches!(req.request_code_enum(), RequestCode::SendBatchMessage)
    }

    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        let Some(ctx) = self.ctx.get() else {
            return Some(RemotingCommand::error_response(
                &req,
                ResponseCode::SystemBusy,
                "broker starting",
            ));
        };
        if let Some(acl) = &ctx.acl {
            if let Err(why) = acl.check(&req, conn.peer_addr().ip()) {
                log::warn!(
                    "request {} from {} refused: {why}",
                    req.code,
                    conn.peer_addr()
                );
                return Some(RemotingCommand::error_response(
                    &req,
                    ResponseCode::NoPermission,
                    why,
                ));
            }
        }
        let resp = match req.request_code_enum() {
            RequestCode::SendMessage
            | RequestCode::SendMessageV2
            | RequestCode::SendBatchMessage => send::send(ctx, conn, &req).await,
            RequestCode::ConsumerSendMsgBack => send::send_back(ctx, conn, &req).await,
            RequestCode::EndTransaction => {
                crate::transaction::end::end_transaction(ctx, conn, &req).await
            }
            RequestCode::PullMessage | RequestCode::LitePullMessage => pull::pull(ctx, &req).await,
            RequestCode::QueryConsumerOffset => offset::query_consumer_offset(ctx, &req),
            RequestCode::UpdateConsumerOffset => offset::update_consumer_offset(ctx, &req),
            RequestCode::GetMaxOffset => offset::max_offset(ctx, &req),
            RequestCode::GetMinOffset => offset::min_offset(ctx, &req),
            RequestCode::SearchOffsetByTimestamp => offset::search_by_time(ctx, &req),
            RequestCode::GetEarliestMsgStoretime => offset::earliest_time(ctx, &req),
            RequestCode::GetAllConsumerOffset => offset::all_consumer_offsets(ctx, &req),
            RequestCode::HeartBeat => client::heartbeat(ctx, conn, &req).await,
            RequestCode::UnregisterClient => client::unregister(ctx, conn, &req).await,
            RequestCode::GetConsumerListByGroup => client::consumer_list(ctx, &req),
            RequestCode::LockBatchMq => client::lock_batch(ctx, &req),
            RequestCode::UnlockBatchMq => client::unlock_batch(ctx, &req),
            RequestCode::GetConsumerConnectionList => client::consumer_connections(ctx, &req),
            RequestCode::CheckClientConfig => client::check_client_config(ctx, &req),
            RequestCode::QueryMessage => query::query_message(ctx, &req),
            RequestCode::ViewMessageById => query::view_message(ctx, &req),
            RequestCode::GetBrokerRuntimeInfo => query::runtime_info(ctx, &req),
            RequestCode::GetTopicStatsInfo => query::topic_stats(ctx, &req),
            RequestCode::GetConsumeStats => query::consume_stats(ctx, &req),
            RequestCode::UpdateAndCreateTopic => admin::create_topic(ctx, &req).await,
            RequestCode::DeleteTopicInBroker => admin::delete_topic(ctx, &req),
            RequestCode::GetAllTopicConfig => admin::all_topics(ctx, &req),
            RequestCode::UpdateAndCreateSubscriptionGroup => admin::create_group(ctx, &req),
            RequestCode::GetAllSubscriptionGroupConfig => admin::all_groups(ctx, &req),
            RequestCode::DeleteSubscriptionGroup => admin::delete_group(ctx, &req),
            RequestCode::GetBrokerConfig => admin::broker_config(ctx, &req),
            RequestCode::GetAllDelayOffset => crate::schedule::all_delay_offsets(ctx, &req),
            _ => not_supported(&req),
        };
        Some(resp)
    }
}
