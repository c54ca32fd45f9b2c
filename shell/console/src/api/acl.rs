//! The ACL page's routes: accounts without their secrets, and (with admin credentials)
//! create, update and delete on every broker.

use serde_json::{Value, json};
use tern_client::admin::AccessConfig;
use tern_client::{Admin, Target};
use tern_shell::acl::split_list;

use super::{Answer, field};

/// ACL accounts of every master, secret keys removed.
pub(super) async fn acl(a: &Admin, editable: bool) -> Answer {
    let info = a.cluster_info().await?;
    let mut out = Vec::new();
    for cluster in info.cluster_addr_table.keys() {
        for (addr, mut cfg) in a.acl_configs(&Target::Cluster(cluster.clone())).await? {
            strip_secrets(&mut cfg);
            out.push(json!({"broker": addr, "config": cfg}));
        }
    }
    Ok(json!({"editable": editable, "brokers": out}))
}

/// Creates or updates an account on every master (UPDATE_AND_CREATE_ACL_CONFIG).
pub(super) async fn update_account(a: &Admin, body: &Value) -> Answer {
    let text = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let list = |k: &str| text(k).map(|v| split_list(&v));
    let account = AccessConfig {
        access_key: field(body, "accessKey")?.to_owned(),
        secret_key: text("secretKey"),
        white_remote_address: text("whiteRemoteAddress"),
        admin: body.get("admin").and_then(Value::as_bool).unwrap_or(false),
        default_topic_perm: text("defaultTopicPerm"),
        default_group_perm: text("defaultGroupPerm"),
        topic_perms: list("topicPerms"),
        group_perms: list("groupPerms"),
    };
    let mut done = Vec::new();
    for cluster in a.cluster_info().await?.cluster_addr_table.keys() {
        done.extend(
            a.update_acl_account(&Target::Cluster(cluster.clone()), &account)
                .await?,
        );
    }
    Ok(json!({"accessKey": account.access_key, "brokers": done}))
}

/// Removes every `secretKey` (any case) anywhere in `v`.
fn strip_secrets(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.eq_ignore_ascii_case("secretKey"));
            m.values_mut().for_each(strip_secrets);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_secrets),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_leave() {
        let mut v = json!({"accounts": [{"accessKey": "a", "secretKey": "s", "admin": true}],
                           "nested": {"SecretKey": "t"}});
        strip_secrets(&mut v);
        let text = v.to_string();
        assert!(!text.contains("\"s\"") && !text.contains("\"t\""), "{text}");
        assert!(text.contains("accessKey"));
    }
}
