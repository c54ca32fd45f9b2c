//! Controller-mode commands (RocketMQ 5): getControllerMetaData, getSyncStateSet,
//! getBrokerEpoch, electMaster, cleanBrokerMetadata, with mqadmin's options and output.

use std::time::Duration;

use serde_json::json;
use tern_client::admin::{BrokerEpochs, BrokerSets};
use tern_client::{Admin, ClientError};
use tern_shell::body::{EpochEntryCache, ReplicaIdentity};

use crate::opts::CLUSTER_NAME;
use crate::out::{print_json, to_value};
use crate::{Args, CliError, Command, Opt, flag, val, val_alias, wait};

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

/// `-a` of the two queries (mqadmin's lower-case help).
const CONTROLLER: Opt = val('a', "controllerAddress", true, "the address of controller");
/// `-a` of the two changes (electMaster, cleanBrokerMetadata).
const TO_CONTROLLER: Opt = val('a', "controllerAddress", true, "The address of controller");
/// `-b` of getSyncStateSet and getBrokerEpoch: the broker set, by name (see [`broker_sets`]).
const BROKER_SET: Opt = val('b', "brokerName", false, "which broker to fetch");
/// `-bn` of the two changes: the broker set they act on.
const REPLICAS_BROKER_NAME: Opt = val_alias(
    "bn",
    'β',
    "brokerName",
    true,
    "The broker name of the replicas that require to be manipulated",
);

pub const GET_CONTROLLER_META_DATA: Command = Command {
    name: "getControllerMetaData",
    desc: "get controller cluster's metadata",
    opts: &[CONTROLLER],
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
    print!("\n#ControllerGroup\t{}", or_null(m.group.as_ref()));
    print!("\n#ControllerLeaderId\t{}", or_null(m.leader_id.as_ref()));
    print!(
        "\n#ControllerLeaderAddress\t{}",
        or_null(m.leader_addr.as_ref())
    );
    for p in &m.peers {
        print!("\n#Peer:\t{p}");
    }
    println!();
    Ok(())
}

pub const GET_SYNC_STATE_SET: Command = Command {
    name: "getSyncStateSet",
    desc: "Fetch syncStateSet for target brokers",
    opts: &[CONTROLLER, CLUSTER_NAME, BROKER_SET],
    run: get_sync_state_set,
};

/// A value as Java's `String.valueOf` prints it: `null` when absent.
fn or_null<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "null".into(), |v| v.to_string())
}

fn replica(r: &ReplicaIdentity) -> String {
    format!(
        "ReplicaIdentity{{brokerName='{}', brokerId={}, brokerAddress='{}', alive={}}}",
        r.broker_name, r.broker_id, r.broker_address, r.alive
    )
}

/// The broker set `-b` names, else every set of cluster `-c` (getSyncStateSet,
/// getBrokerEpoch); one of them is needed.
fn broker_sets(args: &Args) -> Result<BrokerSets, CliError> {
    if let Some(b) = args.get('b') {
        Ok(BrokerSets::Named(b.to_owned()))
    } else if let Some(c) = args.get('c') {
        Ok(BrokerSets::Cluster(c.to_owned()))
    } else {
        Err(CliError::Usage(
            "give a broker name (-b) or a cluster name (-c)".into(),
        ))
    }
}

fn get_sync_state_set(admin: &Admin, args: &Args) -> Result<(), CliError> {
    // mqadmin asks the first of a `;` list.
    let controller = args.req('a')?.split(';').next().unwrap_or_default().trim();
    let names: Vec<String> = match broker_sets(args)? {
        BrokerSets::Named(b) => vec![b],
        BrokerSets::Cluster(c) => {
            let info = wait(admin.cluster_info())?;
            info.cluster_addr_table
                .get(&c)
                .map(|names| names.to_vec())
                .ok_or_else(|| CliError::Usage(format!("cluster {c} not found")))?
        }
    };
    let info = wait(admin.sync_state_data(controller, &names))?;
    if args.json {
        print_json(&to_value(&info));
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

pub const GET_BROKER_EPOCH: Command = Command {
    name: "getBrokerEpoch",
    desc: "Fetch broker epoch entries",
    opts: &[
        CLUSTER_NAME,
        BROKER_SET,
        val('i', "interval", false, "the interval(second) of get info"),
    ],
    run: get_broker_epoch,
};

/// mqadmin's period when `-i` is given without a number.
const EPOCH_INTERVAL_DEFAULT_S: u64 = 3;

/// GET_BROKER_EPOCH_CACHE to every master and slave of `-b` (or of every set of `-c`),
/// once, or a round every `-i` seconds until interrupted (with `--json`, one round).
/// A replica that fails gets a line on stderr and the others are still printed; the
/// command fails only when none answered.
fn get_broker_epoch(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let sets = broker_sets(args)?;
    let interval_s = match args.get('i') {
        None => None,
        Some("") => Some(EPOCH_INTERVAL_DEFAULT_S),
        Some(v) => match v.parse::<u64>() {
            Ok(s) if s >= 1 => Some(s),
            _ => {
                return Err(CliError::Usage(format!(
                    "option -i: {v:?} is not a number of seconds (at least 1)"
                )));
            }
        },
    };
    loop {
        let round = wait(admin.broker_epochs(&sets))?;
        print_epoch_round(&round, args.json)?;
        match interval_s {
            Some(s) if !args.json => std::thread::sleep(Duration::from_secs(s)),
            _ => return Ok(()),
        }
    }
}

/// Prints one round: each answer as mqadmin does (or, with `--json`, one object of
/// EpochEntryCache bodies keyed by the address asked), each failure as a line on stderr.
fn print_epoch_round(round: &[BrokerEpochs], as_json: bool) -> Result<(), CliError> {
    let mut answered = serde_json::Map::new();
    for b in round {
        let r = &b.replica;
        match &b.cache {
            Ok(cache) => {
                if !as_json {
                    print!("{}", epoch_text(&r.addr, cache));
                }
                answered.insert(r.addr.clone(), to_value(cache));
            }
            Err(e) => eprintln!(
                "tern-admin getBrokerEpoch: {} ({}, brokerId {}): {e}",
                r.addr, r.broker_name, r.broker_id
            ),
        }
    }
    if answered.is_empty() {
        return Err(CliError::Client(ClientError::NotFound(format!(
            "no broker answered GET_BROKER_EPOCH_CACHE ({} asked)",
            round.len()
        ))));
    }
    if as_json {
        print_json(&serde_json::Value::Object(answered));
    }
    Ok(())
}

/// One broker's block as mqadmin prints it: the last entry's end shown as the broker's
/// max offset (mqadmin overwrites it so).
fn epoch_text(addr: &str, c: &EpochEntryCache) -> String {
    let mut s = format!(
        "\n#clusterName\t{}\n#brokerName\t{}\n#brokerAddr\t{addr}\n#brokerId\t{}",
        c.cluster_name, c.broker_name, c.broker_id
    );
    let last = c.epoch_list.len().saturating_sub(1);
    for (i, e) in c.epoch_list.iter().enumerate() {
        let end = if i == last {
            c.max_offset
        } else {
            e.end_offset
        };
        s.push_str(&format!(
            "\n#Epoch: EpochEntry{{epoch={}, startOffset={}, endOffset={end}}}",
            e.epoch, e.start_offset
        ));
    }
    s.push('\n');
    s
}

pub const ELECT_MASTER: Command = Command {
    name: "electMaster",
    desc: "Re-elect the specified broker as master",
    opts: &[
        TO_CONTROLLER,
        val(
            'b',
            "brokerId",
            true,
            "The id of the broker which requires to become master",
        ),
        REPLICAS_BROKER_NAME,
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
    print!("\n#ClusterName\t{cluster}");
    print!("\n#BrokerName\t{name}");
    print!("\n#BrokerMasterAddr\t{}", or_null(e.header.master_address));
    print!("\n#MasterEpoch\t{}", or_null(e.header.master_epoch));
    println!(
        "\n#SyncStateSetEpoch\t{}",
        or_null(e.header.sync_state_set_epoch)
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
        TO_CONTROLLER,
        val(
            'b',
            "brokerControllerIdsToClean",
            false,
            "The brokerController id list which requires to clean metadata. eg: 1;2;3, means that clean broker-1, broker-2 and broker-3",
        ),
        REPLICAS_BROKER_NAME,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tern_shell::body::EpochEntryBody;

    #[test]
    fn epoch_text_prints_each_entry_and_the_max_offset_as_the_last_end() {
        let cache = EpochEntryCache {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 2,
            epoch_list: vec![
                EpochEntryBody {
                    epoch: 1,
                    start_offset: 0,
                    end_offset: 4096,
                },
                EpochEntryBody {
                    epoch: 3,
                    start_offset: 4096,
                    // Java brokers send Long.MAX_VALUE for the open term.
                    end_offset: i64::MAX,
                },
            ],
            max_offset: 10240,
        };
        assert_eq!(
            epoch_text("127.0.0.1:10911", &cache),
            "\n#clusterName\tDefaultCluster\n#brokerName\tbroker-a\n#brokerAddr\t127.0.0.1:10911\
             \n#brokerId\t2\
             \n#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=4096}\
             \n#Epoch: EpochEntry{epoch=3, startOffset=4096, endOffset=10240}\n"
        );
    }

    #[test]
    fn epoch_text_of_a_broker_without_terms_is_its_header() {
        let cache = EpochEntryCache {
            cluster_name: "c".into(),
            broker_name: "b".into(),
            ..EpochEntryCache::default()
        };
        assert_eq!(
            epoch_text("h:1", &cache),
            "\n#clusterName\tc\n#brokerName\tb\n#brokerAddr\th:1\n#brokerId\t0\n"
        );
    }
}
