//! Name server commands: KV config, order conf, write permissions, settings.

use serde_json::json;
use tern_client::Admin;

use crate::opts::{CONFIG_KEY, CONFIG_VALUE, TOPIC};
use crate::out::{Table, print_json};
use crate::{Args, CliError, Command, Opt, val, wait};

/// KV namespace of ordered topics' queue layout (`NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG`).
const ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// `-s` of the KV commands.
const KV_NAMESPACE: Opt = val('s', "namespace", true, "set the namespace");
/// `-k` of the KV commands.
const KV_KEY: Opt = val('k', "key", true, "set the key name");

pub const UPDATE_KV_CONFIG: Command = Command {
    name: "updateKvConfig",
    desc: "Create or update KV config",
    opts: &[
        KV_NAMESPACE,
        KV_KEY,
        val('v', "value", true, "set the key value"),
    ],
    run: update_kv_config,
};

fn update_kv_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (ns, k, v) = (args.req('s')?, args.req('k')?, args.req('v')?);
    wait(admin.put_kv_config(ns, k, v))?;
    if args.json {
        print_json(&json!({ "namespace": ns, "key": k, "value": v, "updated": true }));
    } else {
        println!("create or update kv config to namespace success.");
    }
    Ok(())
}

pub const DELETE_KV_CONFIG: Command = Command {
    name: "deleteKvConfig",
    desc: "Delete KV config",
    opts: &[KV_NAMESPACE, KV_KEY],
    run: delete_kv_config,
};

fn delete_kv_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (ns, k) = (args.req('s')?, args.req('k')?);
    wait(admin.delete_kv_config(ns, k))?;
    if args.json {
        print_json(&json!({ "namespace": ns, "key": k, "deleted": true }));
    } else {
        println!("delete kv config from namespace success.");
    }
    Ok(())
}

pub const UPDATE_ORDER_CONF: Command = Command {
    name: "updateOrderConf",
    desc: "Create or update or delete order conf",
    opts: &[
        TOPIC,
        val(
            'v',
            "orderConf",
            false,
            "set order conf [eg. brokerName1:num;brokerName2:num]",
        ),
        val('m', "method", true, "option type [eg. put|get|delete"),
    ],
    run: update_order_conf,
};

fn update_order_conf(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    match args.req('m')? {
        "get" => {
            let conf = wait(admin.get_kv_config(ORDER_TOPIC_CONFIG, topic))?;
            if args.json {
                print_json(&json!({ "topic": topic, "orderConf": conf }));
            } else {
                println!(
                    "get orderConf success. topic=[{topic}], orderConf=[{}] ",
                    conf.as_deref().unwrap_or("null")
                );
            }
        }
        "put" => {
            let conf = args.get('v').unwrap_or("");
            if conf.is_empty() {
                return Err(CliError::Usage(
                    "please set orderConf with option -v.".into(),
                ));
            }
            wait(admin.put_kv_config(ORDER_TOPIC_CONFIG, topic, conf))?;
            if args.json {
                print_json(&json!({ "topic": topic, "orderConf": conf, "updated": true }));
            } else {
                println!("update orderConf success. topic=[{topic}], orderConf=[{conf}]");
            }
        }
        "delete" => {
            wait(admin.delete_kv_config(ORDER_TOPIC_CONFIG, topic))?;
            if args.json {
                print_json(&json!({ "topic": topic, "deleted": true }));
            } else {
                println!("delete orderConf success. topic=[{topic}]");
            }
        }
        other => {
            return Err(CliError::Usage(format!(
                "method {other:?} is not put, get or delete"
            )));
        }
    }
    Ok(())
}

/// `-b` of wipeWritePerm and addWritePerm.
const PERM_BROKER: Opt = val('b', "brokerName", true, "broker name");

fn write_perm(admin: &Admin, args: &Args, writable: bool) -> Result<(), CliError> {
    let broker = args.req('b')?;
    let done = wait(admin.set_write_perm(broker, writable))?;
    if args.json {
        let rows: Vec<_> = done
            .iter()
            .map(|(ns, n)| json!({ "namesrvAddr": ns, "topicCount": n }))
            .collect();
        print_json(&json!({ "brokerName": broker, "nameServers": rows }));
        return Ok(());
    }
    let verb = if writable { "add" } else { "wipe" };
    for (ns, n) in done {
        println!("{verb} write perm of broker[{broker}] in name server[{ns}] OK, {n}");
    }
    Ok(())
}

fn wipe_write_perm(admin: &Admin, args: &Args) -> Result<(), CliError> {
    write_perm(admin, args, false)
}

fn add_write_perm(admin: &Admin, args: &Args) -> Result<(), CliError> {
    write_perm(admin, args, true)
}

pub const WIPE_WRITE_PERM: Command = Command {
    name: "wipeWritePerm",
    desc: "Wipe write perm of broker in all name server you defined in the -n param",
    opts: &[PERM_BROKER],
    run: wipe_write_perm,
};

pub const ADD_WRITE_PERM: Command = Command {
    name: "addWritePerm",
    desc: "Add write perm of broker in all name server you defined in the -n param",
    opts: &[PERM_BROKER],
    run: add_write_perm,
};

pub const GET_NAMESRV_CONFIG: Command = Command {
    name: "getNamesrvConfig",
    desc: "Get configs of name server",
    opts: &[],
    run: get_namesrv_config,
};

fn get_namesrv_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let all = wait(admin.namesrv_config())?;
    if args.json {
        let map: serde_json::Map<_, _> = all.into_iter().map(|(ns, t)| (ns, json!(t))).collect();
        print_json(&serde_json::Value::Object(map));
        return Ok(());
    }
    for (ns, table) in all {
        println!("============{ns}============");
        Table::of(&["Key", "Value"], table, |(k, v)| vec![k, v]).print();
    }
    Ok(())
}

pub const UPDATE_NAMESRV_CONFIG: Command = Command {
    name: "updateNamesrvConfig",
    desc: "Update configs of name server",
    opts: &[CONFIG_KEY, CONFIG_VALUE],
    run: update_namesrv_config,
};

fn update_namesrv_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (k, v) = (args.req('k')?, args.req('v')?);
    let done = wait(admin.update_namesrv_config(k, v))?;
    if args.json {
        print_json(&json!({ "nameServers": done, "key": k, "value": v }));
    } else {
        println!("update name server config success!{done:?}\n{k} : {v}");
    }
    Ok(())
}
