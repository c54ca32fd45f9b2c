//! A slave copies its master's metadata (`slave_sync`): two in-process brokers on
//! 127.0.0.1 with ephemeral ports and temp dirs, a master and a SLAVE of the same
//! `brokerName`, driven over their remoting ports. Topics, consumer offsets,
//! subscription groups and delay progress set on the master reach the slave's tables and
//! files; later changes arrive on the next sync; a master that is down is an error that
//! leaves the slave as it was; a slave's pulls never store offsets.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use tern_broker::config::BrokerConfig;
use tern_broker::{Broker, slave_sync};
use tern_shell::body::{DelayOffsetSerializeWrapper, SubscriptionGroupConfig};
use tern_shell::config::ConfigSource;
use tern_shell::headers::PullMessageRequestHeader;
use tern_shell::runtime;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

/// Level n waits n seconds, so a delayed message is delivered within the test.
const LEVELS: &str = "messageDelayLevel=1s 2s 3s\n";
const SLAVE: &str = "brokerRole=SLAVE\nbrokerId=1\n";

/// A master and its slave, each with its own store.
struct Pair {
    master_dir: tempfile::TempDir,
    slave_dir: tempfile::TempDir,
    master: Broker,
    slave: Broker,
}

impl Pair {
    async fn start() -> Pair {
        let master_dir = tempfile::tempdir().unwrap();
        let slave_dir = tempfile::tempdir().unwrap();
        let master = start_broker(master_dir.path(), "").await;
        let slave = start_broker(slave_dir.path(), SLAVE).await;
        Pair {
            master_dir,
            slave_dir,
            master,
            slave,
        }
    }

    fn master_addr(&self) -> String {
        self.master.local_addr().to_string()
    }

    async fn clients(&self) -> (Client, Client) {
        (
            Client::connect(&self.master_addr()).await,
            Client::connect(&self.slave.local_addr().to_string()).await,
        )
    }

    async fn sync(&self) -> Result<(), slave_sync::SyncError> {
        slave_sync::sync_once(self.slave.ctx(), &self.master_addr()).await
    }

    async fn shutdown(self) {
        self.slave.shutdown().await.unwrap();
        self.master.shutdown().await.unwrap();
    }

    /// Runs `f` with a started pair and a client of its master and of its slave, then
    /// shuts the pair down.
    fn with(f: impl AsyncFnOnce(&Pair, &Client, &Client)) {
        run(async {
            let p = Pair::start().await;
            let (master, slave) = p.clients().await;
            f(&p, &master, &slave).await;
            p.shutdown().await;
        })
    }
}

/// A broker of `broker-a` on 127.0.0.1, ephemeral port, no name server, store in `dir`.
async fn start_broker(dir: &Path, extra: &str) -> Broker {
    let text = format!(
        "{GEOMETRY}{LEVELS}listenAddr=127.0.0.1\nlistenPort=0\nstorePathRootDir={}\n{extra}",
        dir.display()
    );
    let src = ConfigSource::parse_properties(&text, "test.conf");
    let config: BrokerConfig = tern_shell::config::load(&src).unwrap().config;
    Broker::start(config).await.unwrap()
}

async fn delay_offsets(c: &Client) -> DelayOffsetSerializeWrapper {
    ok_body(
        c,
        RemotingCommand::request_code(RequestCode::GetAllDelayOffset),
    )
    .await
}

/// QUERY_CONSUMER_OFFSET without the zero fallback: `None` when nothing is stored.
async fn stored_offset(c: &Client, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
    let resp = c.call(stored_offset_req(group, topic, queue_id)).await;
    match resp.response_code() {
        ResponseCode::QueryNotFound => None,
        _ => Some(offset_of(&resp)),
    }
}

async fn create_group_retrying(c: &Client, group: &str, retry_max_times: i32) {
    let g = SubscriptionGroupConfig {
        group_name: group.into(),
        retry_max_times,
        ..SubscriptionGroupConfig::default()
    };
    create_group(c, &g).await;
}

/// Sends a level-1 delayed message to `topic` and waits until the master delivered it
/// (its level-1 offset is past it).
async fn deliver_one_delayed(c: &Client, topic: &str) {
    let m = msg(topic, b"later", &[("DELAY", "1")]);
    send_ok(c, send_v1(&m, 0)).await;
    tern_testkit::wait_until(
        "the delayed message never left",
        Duration::from_secs(30),
        async || delay_offsets(c).await.offset_table.0.get(&1) == Some(&1),
    )
    .await;
}

#[test]
fn a_sync_copies_topics_offsets_groups_and_delay_progress_and_persists_them() {
    Pair::with(async |p, master, slave| {
        create_topic(master, "SyncTopic", 4).await;
        commit(master, "GroupA", "SyncTopic", 2, 17).await;
        create_group_retrying(master, "GroupA", 7).await;
        deliver_one_delayed(master, "SyncTopic").await;
        assert!(
            !all_topics(slave)
                .await
                .topic_config_table
                .contains_key("SyncTopic")
        );

        p.sync().await.unwrap();

        let (m, s) = (all_topics(master).await, all_topics(slave).await);
        assert_eq!(s.data_version, m.data_version);
        assert_eq!(s.topic_config_table, m.topic_config_table);
        assert_eq!(
            stored_offset(slave, "GroupA", "SyncTopic", 2).await,
            Some(17)
        );
        let (mg, sg) = (all_groups(master).await, all_groups(slave).await);
        assert_eq!(sg, mg);
        assert_eq!(sg.subscription_group_table["GroupA"].retry_max_times, 7);
        assert_eq!(delay_offsets(slave).await.offset_table.0.get(&1), Some(&1));

        // On disk already, not only at the slave's shutdown.
        let dir = p.slave_dir.path();
        let topics =
            tern_broker::topics::Topics::load(dir, "DefaultCluster", "broker-a", true, 8, None);
        assert_eq!(topics.get("SyncTopic").unwrap().write_queue_nums, 4);
        let offsets = tern_broker::offsets::Offsets::load(dir);
        assert_eq!(offsets.query("GroupA", "SyncTopic", 2), Some(17));
        let groups = tern_broker::groups::Groups::load(dir, false);
        assert_eq!(groups.get("GroupA").unwrap().retry_max_times, 7);
        let delay = tern_broker::schedule::offsets::DelayOffsets::load(dir);
        assert_eq!(delay.get(1), Some(1));
    });
}

#[test]
fn changes_on_the_master_arrive_on_the_next_sync() {
    Pair::with(async |p, master, slave| {
        create_topic(master, "First", 2).await;
        commit(master, "GroupB", "First", 0, 5).await;
        create_group_retrying(master, "GroupB", 3).await;
        p.sync().await.unwrap();
        // A topic made on the slave alone moves its version: the master's table replaces
        // it at the next sync, as in RocketMQ.
        create_topic(slave, "SlaveOnly", 1).await;
        // An offset only the slave has (UPDATE_CONSUMER_OFFSET is accepted on a slave)
        // is kept: the master's keys replace the slave's, nothing is removed.
        commit(slave, "LocalGroup", "First", 0, 1).await;

        create_topic(master, "Second", 3).await;
        commit(master, "GroupB", "First", 0, 42).await;
        create_group_retrying(master, "GroupB", 9).await;
        p.sync().await.unwrap();

        let s = all_topics(slave).await;
        assert_eq!(s.topic_config_table["Second"].write_queue_nums, 3);
        assert!(!s.topic_config_table.contains_key("SlaveOnly"));
        assert_eq!(s.data_version, all_topics(master).await.data_version);
        assert_eq!(stored_offset(slave, "GroupB", "First", 0).await, Some(42));
        assert_eq!(
            stored_offset(slave, "LocalGroup", "First", 0).await,
            Some(1)
        );
        let sg = all_groups(slave).await;
        assert_eq!(sg.subscription_group_table["GroupB"].retry_max_times, 9);
        assert_eq!(sg.data_version, all_groups(master).await.data_version);
    });
}

#[test]
fn a_master_that_is_down_is_an_error_and_leaves_the_slave_unchanged() {
    run(async {
        let p = Pair::start().await;
        let (master, slave) = p.clients().await;
        create_topic(&master, "Kept", 2).await;
        commit(&master, "GroupC", "Kept", 1, 8).await;
        create_group_retrying(&master, "GroupC", 4).await;
        p.sync().await.unwrap();
        let before = (
            all_topics(&slave).await,
            all_groups(&slave).await,
            delay_offsets(&slave).await,
        );

        let Pair {
            master_dir: _master_dir,
            slave_dir: _slave_dir,
            master: master_broker,
            slave: slave_broker,
        } = p;
        let master_addr = master_broker.local_addr().to_string();
        master_broker.shutdown().await.unwrap();
        let e = slave_sync::sync_once(slave_broker.ctx(), &master_addr)
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("GetAllTopicConfig"),
            "the first failure: {e}"
        );
        let never_up = format!("127.0.0.1:{}", tern_testkit::free_port());
        assert!(
            slave_sync::sync_once(slave_broker.ctx(), &never_up)
                .await
                .is_err()
        );

        let after = (
            all_topics(&slave).await,
            all_groups(&slave).await,
            delay_offsets(&slave).await,
        );
        assert_eq!(after, before);
        assert_eq!(stored_offset(&slave, "GroupC", "Kept", 1).await, Some(8));
        slave_broker.shutdown().await.unwrap();
    });
}

/// A pull of `topic`/0 from offset 0 that asks the broker to store `commit_offset`.
fn pull_committing(group: &str, topic: &str, commit_offset: i64) -> RemotingCommand {
    let h = PullMessageRequestHeader::new(group, topic, 0, 0, 32)
        .commit(Some(commit_offset))
        .filter(Some("*".into()), "TAG", 0);
    RemotingCommand::request(RequestCode::PullMessage, &h)
}

#[test]
fn a_pull_with_the_commit_offset_flag_does_not_store_the_offset_on_a_slave() {
    Pair::with(async |p, master, slave| {
        create_topic(master, "PullTopic", 1).await;
        commit(master, "GroupD", "PullTopic", 0, 2).await;
        p.sync().await.unwrap();

        let resp = slave.call(pull_committing("GroupD", "PullTopic", 5)).await;
        expect_code(&resp, ResponseCode::PullNotFound);
        assert_eq!(
            stored_offset(slave, "GroupD", "PullTopic", 0).await,
            Some(2)
        );

        // The same pull on the master stores it: the flag is what the slave ignores.
        let resp = master.call(pull_committing("GroupD", "PullTopic", 5)).await;
        expect_code(&resp, ResponseCode::PullNotFound);
        assert_eq!(
            stored_offset(master, "GroupD", "PullTopic", 0).await,
            Some(5)
        );

        // An explicit commit is still stored on a slave, as in RocketMQ.
        commit(slave, "GroupD", "PullTopic", 0, 4).await;
        assert_eq!(
            stored_offset(slave, "GroupD", "PullTopic", 0).await,
            Some(4)
        );
    });
}

#[test]
fn the_task_syncs_a_slave_at_start_and_returns_at_shutdown_and_at_once_on_a_master() {
    run(async {
        let p = Pair::start().await;
        let (master, slave) = p.clients().await;
        create_topic(&master, "ByTask", 2).await;

        // On a master the task has nothing to do.
        let addr = p.master_addr();
        runtime::timeout(
            Duration::from_secs(5),
            slave_sync::run(p.master.ctx().clone(), move || Some(addr.clone())),
        )
        .await
        .expect("returns at once on a master");

        let addr = p.master_addr();
        let task = runtime::spawn(slave_sync::run(p.slave.ctx().clone(), move || {
            Some(addr.clone())
        }));
        tern_testkit::wait_until("no sync at start", Duration::from_secs(10), async || {
            all_topics(&slave)
                .await
                .topic_config_table
                .contains_key("ByTask")
        })
        .await;
        p.shutdown().await;
        runtime::timeout(Duration::from_secs(5), task)
            .await
            .expect("the task stops at shutdown");
    });
}
