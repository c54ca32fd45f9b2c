//! Access control on the broker (`aclEnable=true`): RocketMQ 4.x's plain ACL
//! ([`tern_shell::acl::guard`] authenticates), and what each request code may touch.
//!
//! Every code is in one of three families ([`rule`]):
//! - a client request names its topics and groups in its header or body, and each needs
//!   the permission the family needs (sends PUB the topic, pulls and POPs SUB the topic
//!   and the group, offsets and locks SUB the group and its topics …);
//! - a request that names a record by offset (VIEW_MESSAGE_BY_ID, END_TRANSACTION) is
//!   checked by its processor against the record's topic, once the record is read
//!   ([`record_topics`]);
//! - every other code, known or not, needs an admin account: broker-wide reads
//!   (all offsets, all topics, the config), admin tools' codes and anything new.
//!
//! RocketMQ 4.9 checks only a few codes and lets any valid account send the rest, so an
//! account with SUB on one topic could walk the whole log by offset or lock another
//! group's queues; Tern closes those (issue 14). A refusal answers NO_PERMISSION (16)
//! with a remark worded as RocketMQ's exceptions are (RocketMQ 4.x answers SYSTEM_ERROR).

use std::net::IpAddr;

use tern_engine::delay::SCHEDULE_TOPIC;
use tern_engine::properties::{self, key};
use tern_engine::record::RecordView;
use tern_engine::timer::rule::TIMER_TOPIC;
use tern_shell::RemotingCommand;
use tern_shell::acl::AclRefusal;
use tern_shell::acl::guard::{Access, Acl, group};
use tern_shell::acl::rules::{GROUP_PREFIX, perm};
use tern_shell::body::{
    BatchAckMessageRequestBody, BodyError, CheckClientRequestBody, HeartbeatData,
    LockBatchRequestBody, QueryAssignmentRequestBody, from_json,
};
use tern_shell::code::RequestCode;

use crate::transaction::half::HALF_TOPIC;

pub mod edit;

/// What a request code needs.
enum Rule {
    /// These resources with these permissions.
    Resources(Vec<(String, u8)>),
    /// The record it names, checked by the processor.
    ByRecord,
    /// An admin account.
    Admin,
}

/// Whether `req` from `peer` may be processed: the account's [`Access`] (the processor
/// asks it about records), or why it is refused.
pub fn check(acl: &Acl, req: &RemotingCommand, peer: IpAddr) -> Result<Access, AclRefusal> {
    let access = acl.authenticate(req, peer)?;
    match rule(req)? {
        Rule::Admin => access.require_admin(req.code)?,
        Rule::ByRecord => {}
        Rule::Resources(needed) => {
            for (resource, need) in needed {
                access.require(&resource, need)?;
            }
        }
    }
    Ok(access)
}

/// System topics where the broker parks a message bound for another topic, named in
/// its REAL_TOPIC: a half message, a delayed one, a timed one.
const PARKING_TOPICS: [&str; 3] = [HALF_TOPIC, SCHEDULE_TOPIC, TIMER_TOPIC];

/// The topic a stored record belongs to, for a request that names it by offset: its
/// topic or, parked in a system topic, the real topic it is bound for (`None` when that
/// cannot be read). REAL_TOPIC counts only there: a producer could set it on any message.
pub fn record_topic<'a>(view: &RecordView<'a>) -> Option<&'a str> {
    let topic = view.topic_str()?;
    if PARKING_TOPICS.contains(&topic) {
        return properties::get(view.properties(), key::REAL_TOPIC);
    }
    Some(topic)
}

/// Checks `access` for `need` on the topic of `view` ([`record_topic`]); a record whose
/// topic cannot be read needs an admin.
pub fn require_record(
    access: &Access,
    view: &RecordView<'_>,
    code: i32,
    need: u8,
) -> Result<(), AclRefusal> {
    match record_topic(view) {
        Some(t) => access.require(t, need),
        None => access.require_admin(code),
    }
}

/// The refusal for a body that names resources and cannot be read.
fn unreadable(body: &'static str) -> impl FnOnce(BodyError) -> AclRefusal {
    move |error| AclRefusal::UnreadableBody { body, error }
}

/// A topic sent to: a retry topic is its group's (SUB), any other is PUB.
fn sent_to(topic: &str) -> (String, u8) {
    if topic.starts_with(GROUP_PREFIX) {
        (topic.to_owned(), perm::SUB)
    } else {
        (topic.to_owned(), perm::PUB)
    }
}

/// What `req` touches (RocketMQ's `PlainAccessResource.parse`, widened to every code a
/// client sends).
fn rule(req: &RemotingCommand) -> Result<Rule, AclRefusal> {
    use RequestCode as C;
    let get = |k: &str| req.ext_fields.get(k);
    let sub_topic = |k: &str| get(k).map(|t| (t.to_owned(), perm::SUB));
    let sub_group = |k: &str| get(k).map(|g| (group(g), perm::SUB));
    let mut out = Vec::new();
    match req.request_code_enum() {
        C::SendMessage => out.extend(get("topic").map(sent_to)),
        C::SendMessageV2 | C::SendBatchMessage | C::SendReplyMessage | C::SendReplyMessageV2 => {
            out.extend(get("b").or(get("topic")).map(sent_to))
        }
        C::RecallMessage => out.extend(get("topic").map(|t| (t.to_owned(), perm::PUB))),
        C::ConsumerSendMsgBack => {
            // The consumer read the message: SUB on where it came from, not PUB.
            out.extend(sub_group("group"));
            out.extend(sub_topic("originTopic"));
        }
        C::PullMessage
        | C::LitePullMessage
        | C::PopMessage
        | C::PeekMessage
        | C::Notification
        | C::PollingInfo
        | C::PopRollback
        | C::AckMessage
        | C::ChangeMessageInvisibletime
        | C::QueryConsumerOffset
        | C::UpdateConsumerOffset => {
            out.extend(sub_topic("topic"));
            out.extend(sub_group("consumerGroup"));
        }
        C::QueryMessage
        | C::GetMaxOffset
        | C::GetMinOffset
        | C::SearchOffsetByTimestamp
        | C::GetEarliestMsgStoretime => out.extend(sub_topic("topic")),
        C::UnregisterClient | C::GetConsumerListByGroup => out.extend(sub_group("consumerGroup")),
        C::HeartBeat => {
            let hb: HeartbeatData = from_json(&req.body).map_err(unreadable("heartbeat"))?;
            for c in hb.consumer_data_set {
                out.push((group(&c.group_name), perm::SUB));
                for s in c.subscription_data_set {
                    out.push((s.topic, perm::SUB));
                }
            }
        }
        C::LockBatchMq | C::UnlockBatchMq => {
            let b: LockBatchRequestBody = from_json(&req.body).map_err(unreadable("lock"))?;
            out.push((group(&b.consumer_group), perm::SUB));
            out.extend(b.mq_set.into_iter().map(|q| (q.topic, perm::SUB)));
        }
        C::BatchAckMessage => {
            let b: BatchAckMessageRequestBody =
                from_json(&req.body).map_err(unreadable("batch ack"))?;
            for a in b.acks {
                out.push((group(&a.consumer_group), perm::SUB));
                out.push((a.topic, perm::SUB));
            }
        }
        C::QueryAssignment => {
            let b: QueryAssignmentRequestBody =
                from_json(&req.body).map_err(unreadable("assignment"))?;
            out.push((group(&b.consumer_group), perm::SUB));
            out.push((b.topic, perm::SUB));
        }
        C::CheckClientConfig => {
            let b: CheckClientRequestBody =
                from_json(&req.body).map_err(unreadable("check client"))?;
            out.push((group(&b.group), perm::SUB));
            out.extend(b.subscription_data.map(|s| (s.topic, perm::SUB)));
        }
        C::ViewMessageById | C::EndTransaction => return Ok(Rule::ByRecord),
        _ => return Ok(Rule::Admin),
    }
    Ok(Rule::Resources(out))
}
