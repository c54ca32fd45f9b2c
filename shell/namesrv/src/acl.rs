//! Access control on the name server (`aclEnable=true` in its config; Tern's addition:
//! RocketMQ's name server checks nothing, so anyone who reaches it can register a broker,
//! delete a topic's route or wipe a broker's write permission).
//!
//! The same `plain_acl.yml` as the brokers', authenticated the same way
//! ([`tern_shell::acl::guard`]). Route lookups need some permission (PUB or SUB) on the
//! topic; listings of clusters and topics need a valid account; everything that
//! changes the tables or reads the server's config needs an admin account: brokers
//! register with theirs (`innerClientAuthenticationCredentials`), admin tools sign.

use std::net::IpAddr;

use tern_shell::RemotingCommand;
use tern_shell::acl::AclRefusal;
use tern_shell::acl::guard::Acl;
use tern_shell::acl::rules::perm;
use tern_shell::code::RequestCode;

use crate::processor::extra_code;

/// Whether `req` from `peer` may be processed; `Err` says why it is refused.
pub fn check(acl: &Acl, req: &RemotingCommand, peer: IpAddr) -> Result<(), AclRefusal> {
    use RequestCode as C;
    let access = acl.authenticate(req, peer)?;
    match req.request_code_enum() {
        C::GetRouteinfoByTopic => match req.ext_fields.get("topic") {
            Some(topic) => access.require(topic, perm::ANY),
            // The handler answers the missing field.
            None => Ok(()),
        },
        C::GetBrokerClusterInfo
        | C::GetAllTopicListFromNameserver
        | C::GetTopicsByCluster
        | C::GetKvConfig
        | C::GetKvlistByNamespace
        | C::Other(
            extra_code::GET_SYSTEM_TOPIC_LIST_FROM_NS
            | extra_code::GET_UNIT_TOPIC_LIST
            | extra_code::GET_HAS_UNIT_SUB_TOPIC_LIST
            | extra_code::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        ) => Ok(()),
        _ => access.require_admin(req.code),
    }
}
