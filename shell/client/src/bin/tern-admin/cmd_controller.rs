//! Controller-mode commands (RocketMQ 5): getControllerMetaData, getSyncStateSet,
//! electMaster, cleanBrokerMetadata, with mqadmin's options and output.

use serde_json::json;
use tern_client::Admin;
use tern_shell::body::ReplicaIdentity;

use crate::out::print_json;
use crate::{Args, CliError, Command, flag, val, val_alias, wait};

/// Whether `command` with `args` needs a name server: the controller commands talk to the
/// controller named by `-a`, except getSyncStateSet of a whole cluster (`-c`), whose
/// broker names come from the name servers.
pub fn needs_name_server(command: &str, args: &Args) -> bool {
    match command {
        "getControllerMetaData" | "electMaster" | "cleanBrokerMetadata" => false,
        "getSyncStateSet" => !args.has('b'),
        _ => true,
    }
}

pub const GET_CONTROLLER_META_DATA: Command = Command {
    name: "getControllerMetaData",
    desc: "get controller cluster's metadata",
    opts: &[val(
        'a',
        "controllerAddress",
        true,
        "the address of controller",
    )],
    run: get_controller_metadata,
};

fn get_controller_metadata(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let addr = args.req('a')?;
    let m = wait(admin.controller_metadata(addr))?;
    if args.json {
        print_json(&json!({
            "group": m.group,
            "controllerLeaderId": m.leader_id,
            "controllerLeaderAddress": m.leader_addr,
            "isLeader": m.is_leader,
            "peers": m.peers,
        }));
        return Ok(());
    }
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".into());
    print!("\n#ControllerGroup\t{}", shown(&m.group));
    print!("\n#ControllerLeaderId\t{}", shown(&m.leader_id));
    print!("\n#ControllerLeaderAddress\t{}", shown(&m.leader_addr));
    for p in &m.peers {
        print!("\n#Peer:\t{p}");
    }
    println!();
    Ok(())
}

pub const GET_SYNC_STATE_SET: Command = Command {
    name: "getSyncStateSet",
    desc: "Fetch syncStateSet for target brokers",
    opts: &[
        val('a', "controllerAddress", true, "the address of controller"),
        val('c', "clusterName", false, "which cluster"),
        val('b', "brokerName", false, "which broker to fetch"),
    ],
    run: get_sync_state_set,
};

fn replica(r: &ReplicaIdentity) -> String {
    format!(
        "ReplicaIdentity{{brokerName='{}', brokerId={}, brokerAddress='{}', alive={}}}",
        r.broker_name, r.broker_id, r.broker_address, r.alive
    )
}

fn get_sync_state_set(admin: &Admin, args: &Args) -> Result<(), CliError> {
    // mqadmin asks the first of a `;` list.
    let controller = args.req('a')?.split(';').next().unwrap_or_default().trim();
    let names: Vec<String> = if let Some(b) = args.get('b') {
        vec![b.to_owned()]
    } else if let Some(c) = args.get('c') {
        let info = wait(admin.cluster_info())?;
        info.cluster_addr_table
            .get(c)
            .map(|names| names.to_vec())
            .ok_or_else(|| CliError::Usage(format!("cluster {c} not found")))?
    } else {
        return Err(CliError::Usage(
            "give a broker name (-b) or a cluster name (-c)".into(),
        ));
    };
    let info = wait(admin.sync_state_data(controller, &names))?;
    if args.json {
        print_json(&serde_json::to_value(&info).unwrap_or_default());
        return Ok(());
    }
    for (name, r) in &info.replicas_info_table {
        print!(
            "\n#brokerName\t{name}\n#MasterAddr\t{}\n#MasterEpoch\t{}\n#SyncStateSetEpoch\t{}\n#SyncStateSetNums\t{}\n",
            r.master_address,
            r.master_epoch,
            r.sync_state_set_epoch,
            r.in_sync_replicas.len()
        );
        for m in &r.in_sync_replicas {
            print!("\n InSyncReplica:\t{}\n", replica(m));
        }
        for m in &r.not_in_sync_replicas {
            print!("\n NotInSyncReplica:\t{}\n", replica(m));
        }
    }
    Ok(())
}

pub const ELECT_MASTER: Command = Command {
    name: "electMaster",
    desc: "Re-elect the specified broker as master",
    opts: &[
        val('a', "controllerAddress", true, "The address of controller"),
        val(
            'b',
            "brokerId",
            true,
            "The id of the broker which requires to become master",
        ),
        val_alias(
            "bn",
            'β',
            "brokerName",
            true,
            "The broker name of the replicas that require to be manipulated",
        ),
        val('c', "clusterName", true, "the clusterName of broker"),
    ],
    run: elect_master,
};

fn elect_master(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let controller = args.req('a')?;
    let cluster = args.req('c')?;
    let name = args.req('β')?;
    let id: i64 = args
        .req('b')?
        .parse()
        .map_err(|_| CliError::Usage("-b takes the broker's controller id (a number)".into()))?;
    let e = wait(admin.elect_master(controller, cluster, name, id))?;
    if args.json {
        print_json(&json!({
            "clusterName": cluster,
            "brokerName": name,
            "masterBrokerId": e.header.master_broker_id,
            "masterAddress": e.header.master_address,
            "masterEpoch": e.header.master_epoch,
            "syncStateSetEpoch": e.header.sync_state_set_epoch,
            "brokerAddrs": e.body.broker_member_group.as_ref().map(|g| g.broker_addrs.0.clone()),
        }));
        return Ok(());
    }
    let shown = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    print!("\n#ClusterName\t{cluster}");
    print!("\n#BrokerName\t{name}");
    print!("\n#BrokerMasterAddr\t{}", shown(e.header.master_address));
    print!(
        "\n#MasterEpoch\t{}",
        shown(e.header.master_epoch.map(|v| v.to_string()))
    );
    println!(
        "\n#SyncStateSetEpoch\t{}",
        shown(e.header.sync_state_set_epoch.map(|v| v.to_string()))
    );
    if let Some(g) = &e.body.broker_member_group {
        for (id, addr) in &g.broker_addrs.0 {
            println!("\t#Broker\t{id}\t{addr}");
        }
    }
    Ok(())
}

pub const CLEAN_BROKER_METADATA: Command = Command {
    name: "cleanBrokerMetadata",
    desc: "clean metadata of broker on controller",
    opts: &[
        val('a', "controllerAddress", true, "The address of controller"),
        val(
            'b',
            "brokerControllerIdsToClean",
            false,
            "The brokerController id list which requires to clean metadata. eg: 1;2;3, means that clean broker-1, broker-2 and broker-3",
        ),
        val_alias(
            "bn",
            'β',
            "brokerName",
            true,
            "The broker name of the replicas that require to be manipulated",
        ),
        val('c', "clusterName", false, "the clusterName of broker"),
        flag(
            'l',
            "cleanLivingBroker",
            "whether clean up living brokers,default value is false",
        ),
    ],
    run: clean_broker_metadata,
};

fn clean_broker_metadata(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let controller = args.req('a')?;
    let name = args.req('β')?;
    let ids = args.get('b');
    if let Some(ids) = ids {
        if ids.split(';').any(|i| i.trim().parse::<i64>().is_err()) {
            return Err(CliError::Usage(
                "please set the option <brokerControllerIdsToClean> according to the format".into(),
            ));
        }
    }
    let living = args.has('l');
    let cluster = args.get('c');
    if !living && cluster.is_none_or(str::is_empty) {
        return Err(CliError::Usage(
            "cleanLivingBroker option is false, clusterName option can not be empty.".into(),
        ));
    }
    wait(admin.clean_broker_metadata(controller, cluster, name, ids, living))?;
    println!("clear broker {name} metadata from controller success! ");
    Ok(())
}
