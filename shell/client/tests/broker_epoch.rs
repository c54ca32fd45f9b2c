//! `tern-admin getBrokerEpoch` against real brokers that are not in controller mode: a
//! master and its slave registered with a `tern-namesrv`. Each answers
//! GET_BROKER_EPOCH_CACHE with SYSTEM_ERROR, so the command names both on stderr and
//! fails; the answers of controller-mode brokers are checked in the broker's failover
//! tests.

use crate::common;

use common::cli::admin;
use common::{Broker, NameSrv};

/// The stderr lines of the per-broker failures.
fn failures(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.contains("not in controller mode"))
        .collect()
}

#[test]
fn get_broker_epoch_names_every_replica_not_in_controller_mode_and_fails() {
    let ns = NameSrv::start();
    let master = Broker::with_namesrv(&ns.addr, "brokerRole=SYNC_MASTER\nhaListenPort=0\n");
    let slave = Broker::with_namesrv(&ns.addr, "brokerRole=SLAVE\nbrokerId=1\n");

    for (sets, json) in [
        (["-b", "broker-a"], false),
        (["-c", "DefaultCluster"], false),
        (["-b", "broker-a"], true),
    ] {
        let mut args = vec!["getBrokerEpoch", sets[0], sets[1]];
        if json {
            args.push("--json");
        }
        let out = admin(&ns.addr, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}\n{stdout}\n{stderr}");
        // Nothing answered, so nothing is printed as an answer.
        assert!(stdout.trim().is_empty(), "{args:?}: {stdout}");
        let lines = failures(&stderr);
        assert_eq!(lines.len(), 2, "{args:?}: {stderr}");
        assert!(
            lines[0].starts_with(&format!(
                "tern-admin getBrokerEpoch: {} (broker-a, brokerId 0): broker error code 1:",
                master.addr
            )),
            "{stderr}"
        );
        assert!(
            lines[1].starts_with(&format!(
                "tern-admin getBrokerEpoch: {} (broker-a, brokerId 1): broker error code 1:",
                slave.addr
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("no broker answered GET_BROKER_EPOCH_CACHE (2 asked)"),
            "{stderr}"
        );
    }
}

#[test]
fn get_broker_epoch_needs_a_known_broker_or_cluster() {
    let b = Broker::start("");
    let ns = b.namesrv.as_str();

    let out = admin(ns, &["getBrokerEpoch"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("give a broker name (-b) or a cluster name (-c)"),
        "{err}"
    );

    let out = admin(ns, &["getBrokerEpoch", "-b", "no-such-broker"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("broker no-such-broker not found"), "{err}");

    let out = admin(ns, &["getBrokerEpoch", "-c", "NoSuchCluster"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster NoSuchCluster not found"), "{err}");

    let out = admin(ns, &["getBrokerEpoch", "-b", "broker-a", "-i", "0"]);
    assert_eq!(out.status.code(), Some(2));

    // The standalone broker alone: one failure line, exit 1.
    let out = admin(ns, &["getBrokerEpoch", "-b", "broker-a"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(failures(&err).len(), 1, "{err}");
    assert!(err.contains(&b.addr), "{err}");
}
