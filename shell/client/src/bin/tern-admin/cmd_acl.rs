//! The plain ACL's commands: updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr,
//! clusterAclConfigVersion, getAclConfig.

use serde_json::{Value, json};
use tern_client::Admin;
use tern_client::admin::AccessConfig;
use tern_shell::acl::split_list;

use crate::cmd_topic::target;
use crate::opts::{UPDATE_BROKER, UPDATE_CLUSTER};
use crate::out::{Table, fmt_time, print_json, print_listing};
use crate::{Args, CliError, Command, Opt, val, wait};

pub const UPDATE_ACL_CONFIG: Command = Command {
    name: "updateAclConfig",
    desc: "Update acl config yaml file in broker",
    opts: &[
        UPDATE_BROKER,
        UPDATE_CLUSTER,
        val('a', "accessKey", true, "set accessKey in acl config file"),
        val('s', "secretKey", true, "set secretKey in acl config file"),
        val(
            'w',
            "whiteRemoteAddress",
            false,
            "set white ip Address for account in acl config file",
        ),
        val(
            'i',
            "defaultTopicPerm",
            false,
            "set default topicPerm in acl config file",
        ),
        val(
            'u',
            "defaultGroupPerm",
            false,
            "set default GroupPerm in acl config file",
        ),
        val(
            't',
            "topicPerms",
            false,
            "set topicPerms list,eg: topicA=DENY,topicD=SUB",
        ),
        val(
            'g',
            "groupPerms",
            false,
            "set groupPerms list,eg: groupD=DENY,groupD=SUB",
        ),
        val('m', "admin", false, "set admin flag in acl config file"),
    ],
    run: update_acl_config,
};

fn update_acl_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let t = target(args)?;
    let c = AccessConfig {
        access_key: args.req('a')?.to_owned(),
        secret_key: Some(args.req('s')?.to_owned()),
        white_remote_address: args.get('w').map(str::to_owned),
        admin: args.bool('m', false)?,
        default_topic_perm: args.get('i').map(str::to_owned),
        default_group_perm: args.get('u').map(str::to_owned),
        topic_perms: args.get('t').map(split_list),
        group_perms: args.get('g').map(split_list),
    };
    let done = wait(admin.update_acl_account(&t, &c))?;
    if args.json {
        print_json(&json!({"brokers": done, "accessKey": c.access_key}));
        return Ok(());
    }
    for addr in &done {
        println!("create or update plain access config to {addr} success.");
    }
    println!("accessKey={} admin={}", c.access_key, c.admin);
    Ok(())
}

pub const DELETE_ACL_CONFIG: Command = Command {
    name: "deleteAclConfig",
    desc: "Delete Acl Config Account in broker",
    opts: &[
        val(
            'b',
            "brokerAddr",
            false,
            "delete acl config account from which broker",
        ),
        val(
            'c',
            "clusterName",
            false,
            "delete acl config account from which cluster",
        ),
        val(
            'a',
            "accessKey",
            true,
            "set accessKey in acl config file for deleting which account",
        ),
    ],
    run: delete_acl_config,
};

fn delete_acl_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let ak = args.req('a')?;
    let done = wait(admin.delete_acl_account(&target(args)?, ak))?;
    if args.json {
        print_json(&json!({"brokers": done, "accessKey": ak}));
        return Ok(());
    }
    for addr in &done {
        println!("delete plain access config account from {addr} success.");
    }
    println!("account's accesskey is:{ak}");
    Ok(())
}

pub const UPDATE_GLOBAL_WHITE_ADDR: Command = Command {
    name: "updateGlobalWhiteAddr",
    desc: "Update global white address for acl Config File in broker",
    opts: &[
        UPDATE_BROKER,
        UPDATE_CLUSTER,
        val(
            'g',
            "globalWhiteRemoteAddresses",
            true,
            "set globalWhiteRemoteAddress list,eg: 10.10.103.*,192.168.0.*",
        ),
    ],
    run: update_global_white_addr,
};

fn update_global_white_addr(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let addrs = split_list(args.req('g')?);
    let done = wait(admin.update_global_white_addrs(&target(args)?, &addrs))?;
    if args.json {
        print_json(&json!({"brokers": done, "globalWhiteAddrs": addrs}));
        return Ok(());
    }
    for addr in &done {
        println!("update global white remote addresses to {addr} success.");
    }
    Ok(())
}

/// Where the ACL queries ask (mqadmin gives both commands these options, help included).
const ACL_QUERY_TARGET: [Opt; 2] = [
    val(
        'b',
        "brokerAddr",
        false,
        "query acl config version for which broker",
    ),
    val(
        'c',
        "clusterName",
        false,
        "query acl config version for specified cluster",
    ),
];

pub const CLUSTER_ACL_CONFIG_VERSION: Command = Command {
    name: "clusterAclConfigVersion",
    desc: "List all of acl config version information in cluster",
    opts: &ACL_QUERY_TARGET,
    run: cluster_acl_config_version,
};

fn cluster_acl_config_version(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let versions = wait(admin.acl_versions(&target(args)?))?;
    let parsed: Vec<(String, Value, Value)> = versions
        .into_iter()
        .map(|(addr, h)| {
            let v: Value = serde_json::from_str(&h.version).unwrap_or(Value::Null);
            let row = json!({
                "clusterName": h.cluster_name,
                "brokerName": h.broker_name,
                "brokerAddr": addr,
                "version": v,
            });
            (addr, v, row)
        })
        .collect();
    let head = [
        "Cluster Name",
        "Broker Name",
        "Broker Addr",
        "AclConfigVersionNum",
        "AclLastUpdateTime",
    ];
    print_listing(
        args.json,
        || Value::Array(parsed.iter().map(|p| p.2.clone()).collect()),
        || {
            Table::of(&head, &parsed, |(addr, v, row)| {
                vec![
                    row["clusterName"].as_str().unwrap_or_default().to_owned(),
                    row["brokerName"].as_str().unwrap_or_default().to_owned(),
                    addr.clone(),
                    v["counter"].as_i64().unwrap_or(0).to_string(),
                    fmt_time(v["timestamp"].as_i64().unwrap_or(0)),
                ]
            })
        },
    );
    Ok(())
}

pub const GET_ACL_CONFIG: Command = Command {
    name: "getAclConfig",
    desc: "List all of acl config information in cluster",
    opts: &ACL_QUERY_TARGET,
    run: get_acl_config,
};

fn get_acl_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let configs = wait(admin.acl_configs(&target(args)?))?;
    if args.json {
        let all: serde_json::Map<String, Value> = configs.into_iter().collect();
        print_json(&Value::Object(all));
        return Ok(());
    }
    for (addr, c) in &configs {
        println!("\n\n===={addr}====");
        println!("globalWhiteRemoteAddresses: {}", c["globalWhiteAddrs"]);
        for a in c["plainAccessConfigs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            println!("accounts:");
            for k in [
                "accessKey",
                "secretKey",
                "whiteRemoteAddress",
                "admin",
                "defaultTopicPerm",
                "defaultGroupPerm",
                "topicPerms",
                "groupPerms",
            ] {
                println!("    {k:<20}: {}", a[k]);
            }
        }
    }
    Ok(())
}
