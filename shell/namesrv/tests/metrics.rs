//! The name server's Prometheus endpoint (`metricsExporterType=PROM` in namesrv.conf):
//! request latencies under RocketMQ's `rocketmq_rpc_latency`, counted per request and
//! response code, and the route table's size now.

use crate::common;

use std::time::Duration;

use common::*;
use tern_shell::ResponseCode;
use tern_testkit::metrics::{sample, scrape};

#[test]
fn metrics_count_requests_by_code_and_show_the_route_table() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Namesrv::with_conf(
        dir.path(),
        "metricsExporterType=PROM\nmetricsPromExporterPort=0\n",
    );
    let mut addr = None;
    assert!(poll_until(Duration::from_secs(5), || {
        addr = ns
            .stderr()
            .split("metrics on http://")
            .nth(1)
            .and_then(|rest| rest.split("/metrics").next())
            .map(str::to_owned);
        addr.is_some()
    }));
    let addr = addr.unwrap();
    let conn = ns.connect();
    for (name, at) in [("b1", "127.0.0.1:10911"), ("b2", "127.0.0.1:10921")] {
        let r = register(&conn, name, at, 0, &[topic("T1", 4), topic("T2", 4)]);
        assert_eq!(r.response_code(), ResponseCode::Success);
    }
    for _ in 0..3 {
        assert_eq!(route_code(&conn, "T1", 400), ResponseCode::Success);
    }
    assert_eq!(
        route_code(&conn, "NoSuchTopic", 400),
        ResponseCode::TopicNotExist
    );
    let text = scrape(&addr);
    assert!(text.ends_with("# EOF\n"), "{text}");
    let node = ["node_type=\"namesrv\"", "node_id=\"127.0.0.1:"];
    let rpc = |code: &'static str, resp: &'static str| {
        let (req, resp) = (
            format!("request_code=\"{code}\""),
            format!("response_code=\"{resp}\""),
        );
        let mut l: Vec<&str> = node.to_vec();
        l.extend(["protocol_type=\"remoting\"", req.as_str(), resp.as_str()]);
        sample(&text, "rocketmq_rpc_latency_count", &l)
    };
    assert_eq!(rpc("105", "0"), Some(3.0), "{text}");
    assert_eq!(rpc("105", "17"), Some(1.0), "{text}");
    assert_eq!(rpc("103", "0"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "tern_namesrv_brokers", &node), Some(2.0));
    assert_eq!(sample(&text, "tern_namesrv_clusters", &node), Some(1.0));
    assert_eq!(sample(&text, "tern_namesrv_topics", &node), Some(2.0));
    assert!(text.contains("# TYPE rocketmq_rpc_latency histogram"));
}

#[test]
fn without_prom_the_name_server_serves_no_metrics() {
    let ns = Namesrv::fresh();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ns.stderr().contains("metrics on http://"));
}
