//! The plain ACL's admin operations (RocketMQ 4.x's `updateAclConfig` family): accounts
//! and global white addresses in each broker's `plain_acl.yml`, and its version.

use serde_json::Value;
pub use tern_shell::acl::AccessConfig;
use tern_shell::headers::{
    CreateAccessConfigRequestHeader, DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader, UpdateGlobalWhiteAddrsConfigRequestHeader,
};
use tern_shell::{RemotingCommand, RequestCode};

use super::{Admin, Target, decode};
use crate::error::{ClientError, Result};

impl Admin {
    /// UPDATE_AND_CREATE_ACL_CONFIG on each broker of `target`.
    pub async fn update_acl_account(
        &self,
        target: &Target,
        c: &AccessConfig,
    ) -> Result<Vec<String>> {
        let h = CreateAccessConfigRequestHeader {
            access_key: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            white_remote_address: c.white_remote_address.clone(),
            admin: Some(c.admin),
            default_topic_perm: c.default_topic_perm.clone(),
            default_group_perm: c.default_group_perm.clone(),
            topic_perms: c.topic_perms.as_ref().map(|v| v.join(",")),
            group_perms: c.group_perms.as_ref().map(|v| v.join(",")),
        };
        let addrs = self.target_addrs(target).await?;
        self.request_each(addrs, RequestCode::UpdateAndCreateAclConfig, &h)
            .await
    }

    /// DELETE_ACL_CONFIG on each broker of `target`.
    pub async fn delete_acl_account(
        &self,
        target: &Target,
        access_key: &str,
    ) -> Result<Vec<String>> {
        let h = DeleteAccessConfigRequestHeader {
            access_key: access_key.to_owned(),
        };
        let addrs = self.target_addrs(target).await?;
        self.request_each(addrs, RequestCode::DeleteAclConfig, &h)
            .await
    }

    /// UPDATE_GLOBAL_WHITE_ADDRS_CONFIG on each broker of `target`: these address
    /// patterns need no account at all.
    pub async fn update_global_white_addrs(
        &self,
        target: &Target,
        addrs: &[String],
    ) -> Result<Vec<String>> {
        let h = UpdateGlobalWhiteAddrsConfigRequestHeader {
            global_white_addrs: Some(addrs.join(",")),
            acl_file_full_path: None,
        };
        let addrs = self.target_addrs(target).await?;
        self.request_each(addrs, RequestCode::UpdateGlobalWhiteAddrsConfig, &h)
            .await
    }

    /// GET_BROKER_CLUSTER_ACL_INFO of each broker of `target`.
    pub async fn acl_versions(
        &self,
        target: &Target,
    ) -> Result<Vec<(String, GetBrokerAclConfigResponseHeader)>> {
        let addrs = self.target_addrs(target).await?;
        let answers = self
            .invoke_each(addrs, || {
                RemotingCommand::request_code(RequestCode::GetBrokerClusterAclInfo)
            })
            .await?;
        answers
            .into_iter()
            .map(|(addr, resp)| {
                let h = resp
                    .decode_header()
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                Ok((addr, h))
            })
            .collect()
    }

    /// GET_BROKER_CLUSTER_ACL_CONFIG of each broker of `target`: RocketMQ's `AclConfig`
    /// JSON (`globalWhiteAddrs`, `plainAccessConfigs`).
    pub async fn acl_configs(&self, target: &Target) -> Result<Vec<(String, Value)>> {
        let addrs = self.target_addrs(target).await?;
        let answers = self
            .invoke_each(addrs, || {
                RemotingCommand::request_code(RequestCode::GetBrokerClusterAclConfig)
            })
            .await?;
        answers
            .into_iter()
            .map(|(addr, resp)| Ok((addr, decode(&resp.body)?)))
            .collect()
    }
}
