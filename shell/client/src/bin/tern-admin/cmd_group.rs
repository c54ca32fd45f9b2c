//! Producer and consumer group commands, and where a topic lives.

use std::collections::BTreeMap;

use serde_json::json;
use tern_client::admin::Target;
use tern_client::consumer::AllocateStrategy;
use tern_client::{Admin, MessageQueue};

use crate::cmd_topic::{connection_table, route_queues, target};
use crate::opts::TOPIC;
use crate::out::{print_json, print_listing, to_value};
use crate::{Args, CliError, Command, val, wait};

pub const PRODUCER_CONNECTION: Command = Command {
    name: "producerConnection",
    desc: "Query producer's socket connection and client version",
    opts: &[
        val('g', "producerGroup", true, "producer group name"),
        TOPIC,
    ],
    run: producer_connection,
};

fn producer_connection(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let pc = wait(admin.producer_connection(args.req('g')?, args.req('t')?))?;
    print_listing(
        args.json,
        || to_value(&pc),
        || connection_table(&pc.connection_set, true),
    );
    Ok(())
}

pub const CLONE_GROUP_OFFSET: Command = Command {
    name: "cloneGroupOffset",
    desc: "Clone offset from other group",
    opts: &[
        val('s', "srcGroup", true, "set source consumer group"),
        val('d', "destGroup", true, "set destination consumer group"),
        val('t', "topic", true, "set the topic"),
        val('o', "offline", false, "the group or the topic is offline"),
    ],
    run: clone_group_offset,
};

fn clone_group_offset(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let (src, dest, topic) = (args.req('s')?, args.req('d')?, args.req('t')?);
    let brokers = wait(admin.clone_group_offset(src, dest, topic, args.bool('o', false)?))?;
    if args.json {
        print_json(&json!({
            "srcGroup": src, "destGroup": dest, "topic": topic, "brokers": brokers,
        }));
    } else {
        println!("clone group offset success. srcGroup[{src}], destGroup=[{dest}], topic[{topic}]");
    }
    Ok(())
}

pub const DELETE_SUB_GROUP: Command = Command {
    name: "deleteSubGroup",
    desc: "Delete subscription group from broker",
    opts: &[
        val(
            'b',
            "brokerAddr",
            false,
            "delete subscription group from which broker",
        ),
        val(
            'c',
            "clusterName",
            false,
            "delete subscription group from which cluster",
        ),
        val('g', "groupName", true, "subscription group name"),
        val('r', "removeOffset", false, "remove offset"),
    ],
    run: delete_sub_group,
};

fn delete_sub_group(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let group = args.req('g')?;
    let clean = args.bool('r', false)?;
    let target = target(args)?;
    let cluster = match &target {
        Target::Cluster(c) => Some(c.as_str()),
        Target::Broker(_) => None,
    };
    let done = wait(admin.delete_subscription_group(&target, group, clean))?;
    // mqadmin drops the group's retry and dead-letter topics with a cluster-wide delete.
    let mut dropped = Vec::new();
    if let Some(c) = cluster {
        for t in [format!("%RETRY%{group}"), format!("%DLQ%{group}")] {
            match wait(admin.delete_topic(c, &t)) {
                Ok(()) => dropped.push(t),
                Err(e) => eprintln!("deleting topic {t}: {e}"),
            }
        }
    }
    if args.json {
        print_json(&json!({ "groupName": group, "brokers": done, "deletedTopics": dropped }));
        return Ok(());
    }
    for addr in done {
        match cluster {
            Some(c) => println!(
                "delete subscription group [{group}] from broker [{addr}] in cluster [{c}] success."
            ),
            None => println!("delete subscription group [{group}] from broker [{addr}] success."),
        }
    }
    Ok(())
}

pub const TOPIC_CLUSTER_LIST: Command = Command {
    name: "topicClusterList",
    desc: "Get cluster info for topic",
    opts: &[TOPIC],
    run: topic_cluster_list,
};

fn topic_cluster_list(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let clusters = wait(admin.topic_clusters(args.req('t')?))?;
    if args.json {
        print_json(&json!({ "clusters": clusters }));
    } else {
        for c in clusters {
            println!("{c}");
        }
    }
    Ok(())
}

pub const ALLOCATE_MQ: Command = Command {
    name: "allocateMQ",
    desc: "Allocate MQ",
    opts: &[TOPIC, val('i', "ipList", true, "ipList")],
    run: allocate_mq,
};

fn allocate_mq(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let ips: Vec<String> = args.req('i')?.split(',').map(str::to_owned).collect();
    let route = wait(admin.topic_route(topic))?;
    let mut mqs = route_queues(&route, topic, false);
    mqs.sort();
    // As mqadmin: each address in the order given is a client of the averaging strategy.
    let result: BTreeMap<&str, Vec<MessageQueue>> = ips
        .iter()
        .map(|ip| {
            (
                ip.as_str(),
                AllocateStrategy::Averagely.allocate(ip, &mqs, &ips),
            )
        })
        .collect();
    let body = json!({ "result": result });
    if args.json {
        print_json(&body);
    } else {
        println!("{body}");
    }
    Ok(())
}
