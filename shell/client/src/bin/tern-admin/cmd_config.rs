//! Broker configuration commands: getBrokerConfig, updateBrokerConfig.

use serde_json::{Map, Value, json};
use tern_client::Admin;
use tern_client::admin::{BrokerAddr, Target};

use crate::cmd_topic::target;
use crate::opts::{CONFIG_KEY, CONFIG_VALUE, UPDATE_BROKER, UPDATE_CLUSTER};
use crate::out::print_json;
use crate::{Args, CliError, Command, val, wait};

pub const GET_BROKER_CONFIG: Command = Command {
    name: "getBrokerConfig",
    desc: "Get broker config by cluster or special broker",
    opts: &[
        val('b', "brokerAddr", false, "get which broker"),
        val('c', "clusterName", false, "get which cluster"),
    ],
    run: get_broker_config,
};

/// The brokers `-b` or `-c` name, each with mqadmin's heading line; `all` includes the
/// slaves of a cluster.
fn brokers(admin: &Admin, args: &Args, all: bool) -> Result<Vec<(String, String)>, CliError> {
    let cluster = match target(args)? {
        Target::Broker(b) => return Ok(vec![(b.clone(), format!("============{b}============"))]),
        Target::Cluster(c) => c,
    };
    let list: Vec<BrokerAddr> = wait(admin.cluster_brokers(&cluster))?;
    let master_of = |name: &str| {
        list.iter()
            .find(|b| b.broker_name == name && b.broker_id == 0)
            .map(|b| b.addr.clone())
    };
    Ok(list
        .iter()
        .filter(|b| all || b.broker_id == 0)
        .map(|b| {
            let heading = match (b.broker_id, master_of(&b.broker_name)) {
                (0, _) => format!("============Master: {}============", b.addr),
                (_, Some(m)) => format!(
                    "============My Master: {m}=====Slave: {}============",
                    b.addr
                ),
                (_, None) => format!("============Slave: {}============", b.addr),
            };
            (b.addr.clone(), heading)
        })
        .collect())
}

fn get_broker_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let mut all = Map::new();
    for (addr, heading) in brokers(admin, args, true)? {
        let config = wait(admin.broker_config(&addr))?;
        if args.json {
            all.insert(addr, json!(config));
            continue;
        }
        println!("{heading}");
        for (k, v) in &config {
            println!("{k:<50}=  {v}");
        }
        println!();
    }
    if args.json {
        print_json(&Value::Object(all));
    }
    Ok(())
}

pub const UPDATE_BROKER_CONFIG: Command = Command {
    name: "updateBrokerConfig",
    desc: "Update broker's config",
    opts: &[
        UPDATE_BROKER,
        UPDATE_CLUSTER,
        val(
            'a',
            "updateAllBroker",
            false,
            "update all brokers include slave (with -c)",
        ),
        CONFIG_KEY,
        CONFIG_VALUE,
    ],
    run: update_broker_config,
};

/// Each broker is tried; one that refuses does not stop the others (as mqadmin), and
/// the command fails when any did.
fn update_broker_config(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (key, value) = (args.req('k')?, args.req('v')?);
    let mut updated = Vec::new();
    let mut failed = Map::new();
    let mut first_error = None;
    for (addr, _) in brokers(admin, args, args.has('a'))? {
        match wait(admin.update_broker_config(&addr, key, value)) {
            Ok(()) => {
                if !args.json {
                    println!("update broker config success, {addr}");
                }
                updated.push(addr);
            }
            Err(e) => {
                if !args.json {
                    eprintln!("update broker config failed, {addr}: {e}");
                }
                failed.insert(addr, json!(e.to_string()));
                first_error.get_or_insert(e);
            }
        }
    }
    if args.json {
        print_json(&json!({ "key": key, "value": value, "updated": updated, "failed": failed }));
    }
    match first_error {
        Some(e) => Err(CliError::Client(e)),
        None => Ok(()),
    }
}
