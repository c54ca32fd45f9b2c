//! The plain ACL's admin requests (RocketMQ 4.x, codes 50–54): UPDATE_AND_CREATE_ACL_CONFIG,
//! DELETE_ACL_CONFIG, UPDATE_GLOBAL_WHITE_ADDRS_CONFIG change `plain_acl.yml` (see
//! [`crate::acl::edit`]); GET_BROKER_CLUSTER_ACL_INFO answers the file's version,
//! GET_BROKER_CLUSTER_ACL_CONFIG its accounts and global white addresses. Unlike RocketMQ
//! 4.x, whose ACL lets any account make these changes, all but the version need an
//! admin account. A broker without `aclEnable` refuses them.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_shell::headers::{
    CreateAccessConfigRequestHeader, DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader, UpdateGlobalWhiteAddrsConfigRequestHeader,
};
use tern_shell::runtime::now_ms;
use tern_shell::{Answer, Refusal};
use tern_shell::{RemotingCommand, ResponseCode};
use yaml_rust2::Yaml;

use crate::BrokerCtx;
use crate::acl::edit::{self, AclEditError};
use tern_shell::acl::AccessConfig;
use tern_shell::acl::guard::Acl;
use tern_shell::acl::split_list;

fn acl(ctx: &BrokerCtx) -> Result<&Acl, Refusal> {
    ctx.acl
        .as_deref()
        .ok_or_else(|| Refusal::new(ResponseCode::SystemError, "The broker does not enable acl."))
}

fn answer(req: &RemotingCommand, done: Result<(), AclEditError>) -> Answer {
    match done {
        Ok(()) => Ok(RemotingCommand::response_to(req, ResponseCode::Success)),
        Err(why) => Err(why.into()),
    }
}

/// UPDATE_AND_CREATE_ACL_CONFIG.
pub fn update_account(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let acl = acl(ctx)?;
    let h: CreateAccessConfigRequestHeader = req.decode_header()?;
    let u = AccessConfig {
        access_key: h.access_key,
        secret_key: h.secret_key,
        white_remote_address: h.white_remote_address,
        admin: h.admin.unwrap_or(false),
        default_topic_perm: h.default_topic_perm,
        default_group_perm: h.default_group_perm,
        topic_perms: h.topic_perms.as_deref().map(split_list),
        group_perms: h.group_perms.as_deref().map(split_list),
    };
    answer(
        req,
        edit::change(acl, |path| edit::update_account(path, &u, now_ms())),
    )
}

/// DELETE_ACL_CONFIG.
pub fn delete_account(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let acl = acl(ctx)?;
    let h: DeleteAccessConfigRequestHeader = req.decode_header()?;
    answer(
        req,
        edit::change(acl, |path| {
            edit::delete_account(path, &h.access_key, now_ms())
        }),
    )
}

/// UPDATE_GLOBAL_WHITE_ADDRS_CONFIG.
pub fn update_global_white(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let acl = acl(ctx)?;
    let h: UpdateGlobalWhiteAddrsConfigRequestHeader = req.decode_header()?;
    let addrs = split_list(h.global_white_addrs.as_deref().unwrap_or_default());
    answer(
        req,
        edit::change(acl, |path| edit::set_global_white(path, &addrs, now_ms())),
    )
}

fn read_doc(acl: &Acl) -> Result<Yaml, Refusal> {
    edit::read(acl.path())
        .map(Yaml::Hash)
        .map_err(Refusal::from)
}

/// GET_BROKER_CLUSTER_ACL_INFO: the file's version, as RocketMQ's `DataVersion` JSON.
pub fn acl_version(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let acl = acl(ctx)?;
    let doc = read_doc(acl)?;
    let (counter, timestamp) = edit::data_version(&doc);
    let version = json!({"counter": counter, "stateVersion": 0, "timestamp": timestamp});
    let all: BTreeMap<String, Value> =
        BTreeMap::from([(acl.path().display().to_string(), version.clone())]);
    Ok(
        RemotingCommand::response_to(req, ResponseCode::Success).with_header(
            &GetBrokerAclConfigResponseHeader {
                version: version.to_string(),
                all_acl_file_version: Some(json!(all).to_string()),
                broker_name: ctx.config.broker_name.clone(),
                broker_addr: ctx.store_host.to_string(),
                cluster_name: ctx.config.cluster_name.clone(),
            },
        ),
    )
}

/// A YAML scalar or list as JSON strings, the way the file wrote it.
fn text(y: &Yaml) -> Value {
    match y {
        Yaml::String(s) | Yaml::Real(s) => json!(s),
        Yaml::Integer(i) => json!(i.to_string()),
        Yaml::Boolean(b) => json!(b),
        Yaml::Array(a) => Value::Array(a.iter().map(text).collect()),
        _ => Value::Null,
    }
}

/// GET_BROKER_CLUSTER_ACL_CONFIG: RocketMQ's `AclConfig` JSON (`globalWhiteAddrs`,
/// `plainAccessConfigs`), secrets included as RocketMQ answers them (admin only).
pub fn acl_config(ctx: &BrokerCtx, req: &RemotingCommand) -> Answer {
    let acl = acl(ctx)?;
    let doc = read_doc(acl)?;
    let accounts: Vec<Value> = doc["accounts"]
        .as_vec()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|a| {
            json!({
                "accessKey": text(&a["accessKey"]),
                "secretKey": text(&a["secretKey"]),
                "whiteRemoteAddress": text(&a["whiteRemoteAddress"]),
                "admin": a["admin"].as_bool().unwrap_or(false),
                "defaultTopicPerm": text(&a["defaultTopicPerm"]),
                "defaultGroupPerm": text(&a["defaultGroupPerm"]),
                "topicPerms": text(&a["topicPerms"]),
                "groupPerms": text(&a["groupPerms"]),
            })
        })
        .collect();
    let body = json!({
        "globalWhiteAddrs": text(&doc["globalWhiteRemoteAddresses"]),
        "plainAccessConfigs": accounts,
    });
    Ok(RemotingCommand::response_to(req, ResponseCode::Success)
        .with_body(body.to_string().into_bytes()))
}
