//! The Prometheus endpoint of the real `tern-broker --standalone` process: RocketMQ 5's
//! metric names and labels, counters that match what was sent and consumed, state read
//! at scrape time, and an endpoint that answers only what it serves.

use crate::common;

use std::time::Duration;

use common::*;
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};
use tern_testkit::metrics::{http, sample};

/// The endpoint's OpenMetrics text, which must end with `# EOF`.
fn scrape(addr: &str) -> String {
    let body = tern_testkit::metrics::scrape(addr);
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    body
}

#[test]
fn metrics_count_what_was_sent_and_consumed_under_rocketmqs_names() {
    let (_dir, b) = start("");
    let addr = b
        .metrics
        .clone()
        .expect("a standalone broker serves metrics");
    b.with_client(async |c| {
        create_topic(c, "Metered", 1).await;
        let mut body_bytes = 0;
        for i in 0..40 {
            let body = vec![b'x'; 100 + i * 100];
            body_bytes += body.len();
            send_ok(c, send_v2(&msg("Metered", &body, &[("KEYS", "k")]), 0)).await;
        }
        // One big one, past the 4 KiB bucket.
        send_ok(c, send_v2(&msg("Metered", &vec![b'y'; 10_000], &[]), 0)).await;
        body_bytes += 10_000;
        let timed = msg("Metered", b"later", &[("TIMER_DELAY_SEC", "60")]);
        send_ok(c, send_v2(&timed, 0)).await;
        // A consumer group reads 41 and commits its offset at 20.
        let mut offset = 0;
        let mut read = 0;
        while read < 41 {
            let resp = c
                .call(pull_req("MeterGroup", "Metered", 0, offset, Some("*")))
                .await;
            expect_code(&resp, ResponseCode::Success);
            let got = tern_shell::message::decode_pulled(&resp.body, true).unwrap();
            read += got.len();
            offset = pull_offsets(&resp).0;
        }
        commit(c, "MeterGroup", "Metered", 0, 20).await;

        let text = scrape(&addr);
        let base = [
            "cluster=\"DefaultCluster\"",
            "node_type=\"broker\"",
            "node_id=\"broker-a\"",
        ];
        let topic = |more: &[&'static str]| {
            let mut l: Vec<&str> = base.to_vec();
            l.push("topic=\"Metered\"");
            l.extend_from_slice(more);
            l
        };
        assert_eq!(
            sample(
                &text,
                "rocketmq_messages_in_total",
                &topic(&["message_type=\"Normal\""])
            ),
            Some(41.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "rocketmq_messages_in_total",
                &topic(&["message_type=\"Delay\""])
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "rocketmq_throughput_in_total",
                &topic(&["message_type=\"Normal\""])
            ),
            Some(body_bytes as f64)
        );
        // 10 bodies of at most 1 KiB (100..=1000 bytes), 30 more up to 4 KiB, one over.
        let bucket = |le: &'static str| {
            sample(
                &text,
                "rocketmq_message_size_bucket",
                &topic(&["message_type=\"Normal\"", le]),
            )
        };
        assert_eq!(bucket("le=\"1024.0\""), Some(10.0));
        assert_eq!(bucket("le=\"4096.0\""), Some(40.0));
        assert_eq!(bucket("le=\"+Inf\""), Some(41.0));
        assert_eq!(
            sample(
                &text,
                "rocketmq_messages_out_total",
                &topic(&["consumer_group=\"MeterGroup\""])
            ),
            Some(41.0)
        );
        // 41 in Metered/0 (the timer message waits in the timer topic); the group
        // committed 20.
        assert_eq!(
            sample(
                &text,
                "rocketmq_consumer_lag_messages",
                &topic(&["consumer_group=\"MeterGroup\""])
            ),
            Some(21.0)
        );
        assert!(
            sample(
                &text,
                "rocketmq_rpc_latency_count",
                &["request_code=\"310\"", "response_code=\"0\""]
            )
            .is_some_and(|n| n >= 42.0),
            "{text}"
        );
        for gauge in [
            "rocketmq_topic_number",
            "rocketmq_consumer_group_number",
            "rocketmq_storage_size",
            "rocketmq_storage_flush_behind_bytes",
            "rocketmq_storage_dispatch_behind_bytes",
            "rocketmq_timer_enqueue_lag",
            "rocketmq_producer_connections",
        ] {
            assert!(
                sample(&text, gauge, &base).is_some(),
                "{gauge} missing:\n{text}"
            );
        }
        assert!(sample(&text, "rocketmq_storage_size", &base).unwrap() > 0.0);
        assert!(text.contains("# TYPE rocketmq_messages_in counter"));
        assert!(text.contains("# TYPE rocketmq_message_size histogram"));
    });
    let (status, _) = http(&addr, "GET /nothing HTTP/1.1\r\n\r\n");
    assert_eq!(status, 404);
    let (status, _) = http(&addr, "POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 405);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let (status, _) = http(&addr, &huge);
    assert_eq!(status, 431);
    // Still serving after all that.
    scrape(&addr);
}

/// `--standalone`'s name server serves its own families on its own port (one family
/// name, `rocketmq_rpc_latency`, is the broker's too, so they cannot share a page).
#[test]
fn the_standalone_name_server_serves_its_metrics_beside_the_brokers() {
    let (_dir, b) = start("");
    let ns = b
        .namesrv_metrics
        .clone()
        .expect("the name server serves metrics");
    assert_ne!(Some(&ns), b.metrics.as_ref());
    let mut text = String::new();
    // The broker registered: the name server counts it.
    let counted = tern_testkit::poll_until(Duration::from_secs(20), || {
        text = scrape(&ns);
        sample(&text, "tern_namesrv_brokers", &["node_type=\"namesrv\""]) == Some(1.0)
    });
    assert!(counted, "the name server never counted the broker:\n{text}");
    assert!(
        text.contains("rocketmq_rpc_latency") && text.contains("request_code=\"103\""),
        "{text}"
    );
}

#[test]
fn a_broker_without_prom_serves_no_metrics_and_unknown_exporters_are_refused() {
    let (_dir, b) = start("metricsExporterType=DISABLE\n");
    assert!(b.metrics.is_none());
    assert!(b.namesrv_metrics.is_none());
    let dir = tempfile::tempdir().unwrap();
    let conf = write_conf(dir.path(), "metricsExporterType=OTLP_GRPC\n");
    let (status, _, stderr) = run_to_exit(&BrokerProc::standalone_args(dir.path(), &conf));
    assert!(!status.success());
    assert!(
        stderr.contains("metricsExporterType") && stderr.contains("not supported by Tern"),
        "{stderr}"
    );
}

/// The value of `name` summed over every sample whose labels include all of `labels`.
fn total(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn scrapes_under_load_count_what_was_sent_and_consumed_and_consume_stats_are_measured() {
    const SENDERS: usize = 4;
    const EACH: usize = 150;
    const QUEUES: i32 = 4;
    let (_dir, b) = start("");
    let addr = b.metrics.clone().expect("standalone serves metrics");
    let topic = ["topic=\"Loaded\""];
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A scraper running through the load: every scrape parses, and the count only grows.
    let scraper = {
        let (addr, done) = (addr.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut scrapes, mut last) = (0, 0.0);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let now = total(&scrape(&addr), "rocketmq_messages_in_total", &topic);
                assert!(now >= last, "messages_in went back from {last} to {now}");
                last = now;
                scrapes += 1;
            }
            scrapes
        })
    };
    b.with_client(async |c| {
        create_topic(c, "Loaded", QUEUES).await;
        let mut senders = Vec::new();
        for s in 0..SENDERS {
            let at = b.addr.clone();
            senders.push(tern_shell::runtime::spawn(async move {
                let c = Client::connect(&at).await;
                for i in 0..EACH {
                    let m = msg("Loaded", format!("{s}-{i}").as_bytes(), &[]);
                    send_ok(&c, send_v2(&m, (i % QUEUES as usize) as i32)).await;
                }
            }));
        }
        for s in senders {
            s.await;
        }
        // The group reads every queue to its end, then commits half of each.
        let mut consumed = 0;
        let mut ends = Vec::new();
        for q in 0..QUEUES {
            let got = pull_all(c, "Loaded", q, 0).await;
            consumed += got.len();
            ends.push(got.len() as i64);
        }
        assert_eq!(consumed, SENDERS * EACH);
        // pull_all reads under the tools group; read again as LoadGroup.
        let mut read = 0;
        for q in 0..QUEUES {
            let mut offset = 0;
            while offset < ends[q as usize] {
                let resp = c
                    .call(pull_req("LoadGroup", "Loaded", q, offset, Some("*")))
                    .await;
                expect_code(&resp, ResponseCode::Success);
                read += tern_shell::message::decode_pulled(&resp.body, true)
                    .unwrap()
                    .len();
                offset = pull_offsets(&resp).0;
            }
            commit(c, "LoadGroup", "Loaded", q, ends[q as usize] / 2).await;
        }
        assert_eq!(read, SENDERS * EACH);
        // Past one ASYNC_FLUSH interval (500 ms): a flush has been timed.
        tern_shell::runtime::sleep(Duration::from_millis(700)).await;
        done.store(true, std::sync::atomic::Ordering::Release);
        let text = scrape(&addr);
        let sent = (SENDERS * EACH) as f64;
        assert_eq!(total(&text, "rocketmq_messages_in_total", &topic), sent);
        assert_eq!(
            total(
                &text,
                "rocketmq_messages_out_total",
                &["topic=\"Loaded\"", "consumer_group=\"LoadGroup\""]
            ),
            sent
        );
        let lag = sent - ends.iter().map(|e| (e / 2) as f64).sum::<f64>();
        let group = ["topic=\"Loaded\"", "consumer_group=\"LoadGroup\""];
        assert_eq!(
            sample(&text, "rocketmq_consumer_lag_messages", &group),
            Some(lag)
        );
        // Read to the end, committed half: the rest is in flight, nothing is ready.
        assert_eq!(
            sample(&text, "rocketmq_consumer_inflight_messages", &group),
            Some(lag)
        );
        assert_eq!(
            sample(&text, "rocketmq_consumer_ready_messages", &group),
            Some(0.0)
        );
        // The oldest uncommitted message was stored before the 700 ms wait.
        let latency = sample(&text, "rocketmq_consumer_lag_latency", &group).unwrap();
        assert!((700.0..60_000.0).contains(&latency), "{latency}\n{text}");
        let reserve = sample(&text, "rocketmq_storage_message_reserve_time", &[]).unwrap();
        assert!(reserve >= latency, "{reserve} < {latency}");
        assert!(sample(&text, "tern_storage_flush_latency_count", &[]).unwrap() >= 1.0);
        let used = sample(&text, "tern_storage_disk_used_ratio", &[]).unwrap();
        assert!(used > 0.0 && used <= 1.0, "{used}");
        assert!(text.contains("# TYPE tern_storage_flush_latency histogram"));

        // GET_CONSUME_STATS: a measured TPS, and each queue's last consumed store time.
        let req = RemotingCommand::request(
            RequestCode::GetConsumeStats,
            &tern_shell::headers::GetConsumeStatsRequestHeader {
                consumer_group: "LoadGroup".into(),
                topic: Some("Loaded".into()),
                topic_list: None,
            },
        );
        let resp = c.call(req).await;
        expect_code(&resp, ResponseCode::Success);
        let stats: tern_shell::body::ConsumeStats =
            tern_shell::body::from_json(&resp.body).unwrap();
        assert!(stats.consume_tps > 0.0, "{stats:?}");
        for (mq, w) in &stats.offset_table.0 {
            let got = pull_all(c, "Loaded", mq.queue_id, w.consumer_offset - 1).await;
            assert_eq!(w.last_timestamp, got[0].store_timestamp, "{mq:?}");
            assert_eq!(w.broker_offset, ends[mq.queue_id as usize]);
        }
    });
    assert!(scraper.join().unwrap() > 0);
}

/// A POP group's in-flight messages are the popped ones not acked yet.
#[test]
fn popped_and_unacked_messages_are_in_flight() {
    let (_dir, b) = start("");
    let addr = b.metrics.clone().expect("standalone serves metrics");
    b.with_client(async |c| {
        create_topic(c, "PopFlight", 1).await;
        send_bodies(c, "PopFlight", 0, &["a", "b", "c", "d", "e"]).await;
        let got = pop_until(c, "PopFlight", 5, 60_000, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 5);
        for m in &got[..2] {
            expect_code(&c.call(m.ack()).await, ResponseCode::Success);
        }
        let group = format!("consumer_group=\"{G}\"");
        let labels = ["topic=\"PopFlight\"", group.as_str()];
        let (mut text, mut n) = (String::new(), None);
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(10), async || {
                text = scrape(&addr);
                n = sample(&text, "rocketmq_consumer_inflight_messages", &labels);
                n == Some(3.0)
            })
            .await,
            "inflight {n:?}, want 3:\n{text}"
        );
    });
}

/// Half messages not committed or rolled back, by their topic, from the log.
#[test]
fn unresolved_half_messages_are_counted_by_topic() {
    use tern_shell::headers::{EndTransactionRequestHeader, transaction_state};
    use tern_shell::message::{SYSFLAG_TRANSACTION_PREPARED, decode_offset_msg_id};
    let (_dir, b) = start("transactionCheckInterval=300\n");
    let addr = b.metrics.clone().expect("standalone serves metrics");
    b.with_client(async |c| {
        create_topic(c, "TxGauge", 1).await;
        let mut sent = Vec::new();
        for uniq in ["H1", "H2"] {
            let m = msg("TxGauge", b"h", &[("UNIQ_KEY", uniq)])
                .with_property("TRAN_MSG", "true")
                .with_property("PGROUP", "PG_GAUGE");
            let mut h = send_header(&m, 0, now_ms());
            h.sys_flag = SYSFLAG_TRANSACTION_PREPARED;
            let req =
                RemotingCommand::request(RequestCode::SendMessage, &h).with_body(m.body.clone());
            sent.push(send_ok(c, req).await);
        }
        let halves = |want: f64| {
            let addr = addr.clone();
            async move {
                let mut n = None;
                assert!(
                    tern_testkit::poll_until_async(Duration::from_secs(10), async || {
                        let text = scrape(&addr);
                        n = sample(&text, "rocketmq_half_messages", &["topic=\"TxGauge\""]);
                        n == Some(want) || (want == 0.0 && n.is_none())
                    })
                    .await,
                    "halves {n:?}, want {want}"
                );
            }
        };
        halves(2.0).await;
        let end = EndTransactionRequestHeader {
            producer_group: "PG_GAUGE".into(),
            tran_state_table_offset: sent[0].queue_offset,
            commit_log_offset: decode_offset_msg_id(&sent[0].msg_id)
                .unwrap()
                .commit_log_offset,
            commit_or_rollback: transaction_state::COMMIT,
            from_transaction_check: Some(false),
            msg_id: "H1".into(),
            transaction_id: Some("H1".into()),
            topic: None,
        };
        expect_code(
            &c.call(RemotingCommand::request(RequestCode::EndTransaction, &end))
                .await,
            ResponseCode::Success,
        );
        halves(1.0).await;
    });
}
