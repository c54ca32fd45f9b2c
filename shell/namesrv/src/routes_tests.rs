use super::*;

fn reg(name: &str, addr: &str, id: i64, topics: &[&str], counter: i64) -> Registration {
    Registration {
        cluster: "c".into(),
        addr: addr.into(),
        broker_name: name.into(),
        broker_id: id,
        ha_server_addr: format!("{addr}-ha"),
        topics: topics
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    TopicConfig {
                        topic_name: t.to_string(),
                        read_queue_nums: 4,
                        write_queue_nums: 4,
                        ..Default::default()
                    },
                )
            })
            .collect(),
        data_version: DataVersion {
            counter,
            ..Default::default()
        },
        filter_servers: Vec::new(),
        timeout: Duration::from_secs(120),
        conn_id: Some(7),
    }
}

#[test]
fn master_registration_creates_routes_for_its_topics() {
    let mut t = RouteTable::new();
    t.register(reg("b", "1.1.1.1:10911", 0, &["T"], 1), Instant::now());
    let r = t.route("T").unwrap();
    assert_eq!(r.queue_datas[0].write_queue_nums, 4);
    assert_eq!(r.broker_datas[0].master_addr(), Some("1.1.1.1:10911"));
    assert!(t.route("U").is_none());
    assert_eq!(
        t.cluster_info().cluster_addr_table["c"],
        vec!["b".to_string()]
    );
}

#[test]
fn slave_is_told_the_live_master_and_does_not_change_topics() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    let slave = t.register(reg("b", "1.1.1.2:10911", 1, &["S"], 1), now);
    assert_eq!(slave, RegisterResult::default());
    assert!(t.route("S").is_none());
    t.register(reg("b", "1.1.1.1:10911", 0, &["T"], 1), now);
    let slave = t.register(reg("b", "1.1.1.2:10911", 1, &["S"], 1), now);
    assert_eq!(slave.master_addr.as_deref(), Some("1.1.1.1:10911"));
    assert_eq!(slave.ha_server_addr.as_deref(), Some("1.1.1.1:10911-ha"));
}

#[test]
fn unchanged_data_version_does_not_reapply_topics() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(reg("b", "a:1", 0, &["T"], 1), now);
    assert_eq!(t.set_write_perm("b", false), 1);
    t.register(reg("b", "a:1", 0, &["T"], 1), now);
    assert_eq!(t.route("T").unwrap().queue_datas[0].perm, 4);
    t.register(reg("b", "a:1", 0, &["T"], 2), now);
    assert_eq!(t.route("T").unwrap().queue_datas[0].perm, 6);
}

#[test]
fn promoted_slave_address_is_listed_once() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(reg("b", "a:1", 1, &[], 1), now);
    t.register(reg("b", "a:1", 0, &["T"], 1), now);
    let bd = &t.route("T").unwrap().broker_datas[0];
    assert_eq!(bd.broker_addrs.0.len(), 1);
    assert_eq!(bd.master_addr(), Some("a:1"));
}

#[test]
fn expiry_and_closed_connection_remove_brokers_and_their_topics() {
    let mut t = RouteTable::new();
    let start = Instant::now();
    let mut r = reg("b1", "a:1", 0, &["T", "X"], 1);
    r.timeout = Duration::from_millis(100);
    t.register(r, start);
    let mut r = reg("b2", "a:2", 0, &["T"], 1);
    r.conn_id = Some(9);
    t.register(r, start);
    assert_eq!(t.expire(start + Duration::from_millis(50)), 0);
    assert_eq!(t.expire(start + Duration::from_millis(150)), 1);
    assert!(t.route("X").is_none());
    assert_eq!(t.route("T").unwrap().broker_datas.len(), 1);
    assert_eq!(t.connection_closed(9), 1);
    assert!(t.route("T").is_none());
    assert!(t.cluster_info().cluster_addr_table.is_empty());
}

#[test]
fn delete_topic_in_one_cluster_keeps_other_clusters() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(reg("b1", "a:1", 0, &["T"], 1), now);
    let mut r = reg("b2", "a:2", 0, &["T"], 1);
    r.cluster = "d".into();
    t.register(r, now);
    assert_eq!(t.topics_of_cluster("d").topic_list, vec!["T".to_string()]);
    t.delete_topic("T", Some("c"));
    assert_eq!(t.route("T").unwrap().queue_datas[0].broker_name, "b2");
    t.delete_topic("T", None);
    assert!(t.all_topics().topic_list.is_empty());
}

#[test]
fn system_topics_are_cluster_and_broker_names() {
    let mut t = RouteTable::new();
    t.register(reg("b1", "a:1", 0, &[], 1), Instant::now());
    let l = t.system_topics();
    assert_eq!(l.topic_list, vec!["b1".to_string(), "c".to_string()]);
    assert_eq!(l.broker_addr.as_deref(), Some("a:1"));
}

#[test]
fn unit_topic_queries_filter_by_sys_flag() {
    let mut t = RouteTable::new();
    let mut r = reg("b", "a:1", 0, &["plain", "unit", "sub"], 1);
    r.topics.get_mut("unit").unwrap().topic_sys_flag = FLAG_UNIT;
    r.topics.get_mut("sub").unwrap().topic_sys_flag = FLAG_UNIT_SUB;
    t.register(r, Instant::now());
    assert_eq!(t.unit_topics().topic_list, vec!["unit".to_string()]);
    assert_eq!(t.unit_sub_topics().topic_list, vec!["sub".to_string()]);
    assert_eq!(
        t.unit_sub_non_unit_topics().topic_list,
        vec!["sub".to_string()]
    );
}

fn versioned(addr: &str, id: i64, state_version: i64, conn: u64) -> Registration {
    let mut r = reg("b", addr, id, &["T"], 1);
    r.data_version.state_version = state_version;
    r.conn_id = Some(conn);
    r
}

#[test]
fn lower_state_version_cannot_take_an_id_a_live_address_holds() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    assert!(!t.register(versioned("a:1", 0, 3, 1), now).refused);
    // The deposed one was a slave here before: Java drops it from its old id first.
    t.register(versioned("b:1", 1, 3, 2), now);
    let r = t.register(versioned("b:1", 0, 2, 2), now);
    assert!(r.refused);
    assert_eq!(r.master_addr, None);
    let bd = &t.route("T").unwrap().broker_datas[0];
    assert_eq!(bd.master_addr(), Some("a:1"));
    assert_eq!(bd.broker_addrs.0.len(), 1, "{bd:?}");
    // No longer live: nothing of it is kept.
    let b_key = BrokerAddrInfo {
        cluster: "c".into(),
        addr: "b:1".into(),
    };
    assert!(t.data_version(&b_key).is_none());
    assert!(!t.touch(&b_key, now));
}

#[test]
fn equal_or_higher_state_version_takes_the_id() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(versioned("a:1", 0, 3, 1), now);
    assert!(!t.register(versioned("b:1", 0, 3, 2), now).refused);
    assert_eq!(
        t.route("T").unwrap().broker_datas[0].master_addr(),
        Some("b:1")
    );
    assert!(!t.register(versioned("a:1", 0, 4, 1), now).refused);
    assert_eq!(
        t.route("T").unwrap().broker_datas[0].master_addr(),
        Some("a:1")
    );
}

#[test]
fn state_version_of_a_gone_holder_does_not_count() {
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(versioned("a:1", 0, 3, 1), now);
    assert_eq!(t.connection_closed(1), 1);
    assert!(!t.register(versioned("b:1", 0, 2, 2), now).refused);
    assert_eq!(
        t.route("T").unwrap().broker_datas[0].master_addr(),
        Some("b:1")
    );
}

#[test]
fn same_address_re_registering_with_a_lower_state_version_is_accepted() {
    // Java compares only against a *different* address holding the id.
    let mut t = RouteTable::new();
    let now = Instant::now();
    t.register(versioned("a:1", 0, 3, 1), now);
    assert!(!t.register(versioned("a:1", 0, 1, 1), now).refused);
    let key = BrokerAddrInfo {
        cluster: "c".into(),
        addr: "a:1".into(),
    };
    assert_eq!(t.data_version(&key).unwrap().state_version, 1);
}
