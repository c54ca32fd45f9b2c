//! Producer and consumer group commands, and where a topic lives.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_client::admin::Target;
use tern_client::consumer::AllocateStrategy;
use tern_client::{Admin, MessageQueue};

use crate::out::{Table, print_json};
use crate::{Args, CliError, Command, val, wait};

pub const PRODUCER_CONNECTION: Command = Command {
    name: "producerConnection",
    desc: "Query producer's socket connection and client version",
    opts: &[
        val('g', "producerGroup", true, "producer group name"),
        val('t', "topic", true, "topic name"),
    ],
    run: producer_connection,
};

fn producer_connection(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let pc = wait(admin.producer_connection(args.req('g')?, args.req('t')?))?;
    if args.json {
        print_json(&serde_json::to_value(&pc).unwrap_or(Value::Null));
        return Ok(());
    }
    let mut t = Table::new(&["ID", "ClientId", "ClientAddr", "Language", "Version"]);
    for (i, c) in pc.connection_set.iter().enumerate() {
        t.row(vec![
            format!("{:04}", i + 1),
            c.client_id.clone(),
            c.client_addr.clone(),
            c.language.name().to_owned(),
            c.version.to_string(),
        ]);
    }
    print!("{}", t.render());
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
    let (target, cluster) = match (args.get('b'), args.get('c')) {
        (Some(b), _) => (Target::Broker(b.to_owned()), None),
        (None, Some(c)) => (Target::Cluster(c.to_owned()), Some(c)),
        (None, None) => {
            return Err(CliError::Usage(
                "give a broker address (-b) or a cluster name (-c)".into(),
            ));
        }
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
    opts: &[val('t', "topic", true, "topic name")],
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
    opts: &[
        val('t', "topic", true, "topic name"),
        val('i', "ipList", true, "ipList"),
    ],
    run: allocate_mq,
};

/// Read permission of a topic's queues.
const PERM_READ: i32 = 4;

fn allocate_mq(admin: &Admin, args: &Args) -> Result<(), CliError> {
    let topic = args.req('t')?;
    let ips: Vec<String> = args.req('i')?.split(',').map(str::to_owned).collect();
    let route = wait(admin.topic_route(topic))?;
    let mut mqs: Vec<MessageQueue> = route
        .queue_datas
        .iter()
        .filter(|q| q.perm & PERM_READ != 0)
        .flat_map(|q| {
            (0..q.read_queue_nums.max(0)).map(|id| MessageQueue {
                topic: topic.to_owned(),
                broker_name: q.broker_name.clone(),
                queue_id: id,
            })
        })
        .collect();
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
