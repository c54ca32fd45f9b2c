//! `grpc`: the RocketMQ 5.x gRPC endpoint beside remoting, on one Tern broker in the same
//! run: sync sends (one message per SendMessage, as the 5.x clients send) and receive +
//! ack (ReceiveMessage of up to 32, one AckMessage per message, as the 5.x simple consumer
//! does) against the 4.x remoting producer and POP simple consumer. Per load level the
//! two protocols alternate A/B.
//!
//! The gRPC side is a tonic client made from the same protos (`tern_proxy::pb`) on a
//! tokio runtime of its own; it sends the metadata the 5.x clients send.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tern_client::admin::Admin;
use tern_client::{ClientConfig, SimpleConsumer, Target, consumer::MessageSelector};
use tern_proxy::pb::messaging_service_client::MessagingServiceClient;
use tern_proxy::pb::{self, receive_message_response::Content};
use tern_shell::body::SubscriptionGroupConfig;
use tern_shell::runtime::block_on;
use tonic::transport::Channel;

use crate::load::{self, Load, Mode, stamped_body};
use crate::proc::start_tern;
use crate::suite::{SuiteParams, TERN, TOPIC, load_of, log_row, measured, tern_conf};
use crate::table::{Measure, histogram};

/// Messages each receive run drains (or as many as are there).
const DRAIN: u64 = 20_000;
/// Longest a receive run takes.
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// One 5.x-style client: a channel and the metadata every call carries.
#[derive(Clone)]
struct Grpc {
    c: MessagingServiceClient<Channel>,
    id: String,
}

impl Grpc {
    async fn connect(addr: &str, id: String) -> Result<Self, String> {
        let c = MessagingServiceClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| format!("gRPC connect {addr}: {e}"))?
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Ok(Self { c, id })
    }

    fn req<T>(&self, m: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(m);
        let md = r.metadata_mut();
        md.insert(
            "x-mq-client-id",
            self.id.parse().unwrap_or_else(|_| "bench".parse().unwrap()),
        );
        md.insert("x-mq-language", "RUST".parse().unwrap());
        md.insert("x-mq-protocol", "v2".parse().unwrap());
        md.insert("x-mq-client-version", "tern-bench".parse().unwrap());
        r
    }

    /// Telemetry settings first, as every 5.x client opens with: a producer of `TOPIC`,
    /// or a simple consumer of it in `group`. The stream stays open while `self` lives.
    async fn announce(&mut self, group: Option<&str>) -> Result<(), String> {
        let resource = |n: &str| pb::Resource {
            resource_namespace: String::new(),
            name: n.into(),
        };
        let (client_type, pub_sub) = match group {
            None => (
                pb::ClientType::Producer,
                pb::settings::PubSub::Publishing(pb::Publishing {
                    topics: vec![resource(TOPIC)],
                    max_body_size: 4 << 20,
                    validate_message_type: true,
                }),
            ),
            Some(g) => (
                pb::ClientType::SimpleConsumer,
                pb::settings::PubSub::Subscription(pb::Subscription {
                    group: Some(resource(g)),
                    subscriptions: vec![pb::SubscriptionEntry {
                        topic: Some(resource(TOPIC)),
                        expression: Some(pb::FilterExpression {
                            r#type: pb::FilterType::Tag as i32,
                            expression: "*".into(),
                        }),
                    }],
                    ..Default::default()
                }),
            ),
        };
        let settings = pb::TelemetryCommand {
            status: None,
            command: Some(pb::telemetry_command::Command::Settings(pb::Settings {
                client_type: Some(client_type as i32),
                pub_sub: Some(pub_sub),
                ..Default::default()
            })),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(settings).await.map_err(|e| e.to_string())?;
        let mut answers = self
            .c
            .telemetry(self.req(tokio_stream::wrappers::ReceiverStream::new(rx)))
            .await
            .map_err(|e| format!("telemetry: {e}"))?
            .into_inner();
        answers
            .message()
            .await
            .map_err(|e| format!("telemetry answer: {e}"))?
            .ok_or("telemetry closed before its answer")?;
        // Keep the stream (and so the settings) for the client's life.
        tokio::spawn(async move {
            let _keep = tx;
            while let Ok(Some(_)) = answers.message().await {}
        });
        Ok(())
    }
}

fn grpc_message(n: u64, client: &str, body: usize) -> pb::Message {
    pb::Message {
        topic: Some(pb::Resource {
            resource_namespace: String::new(),
            name: TOPIC.into(),
        }),
        user_properties: Default::default(),
        system_properties: Some(pb::SystemProperties {
            message_id: format!("{client}-{n:016X}"),
            message_type: pb::MessageType::Normal as i32,
            body_encoding: pb::Encoding::Identity as i32,
            ..Default::default()
        }),
        body: stamped_body(body),
    }
}

/// `n` gRPC senders for the load's duration: what [`load::run`] measures over remoting.
async fn grpc_sends(addr: &str, n: u32, load: &Load) -> Result<load::LoadResult, String> {
    let t0 = Instant::now() + load.warmup;
    let end = t0 + load.duration;
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..n {
        let mut g = Grpc::connect(addr, format!("bench-producer-{i}")).await?;
        g.announce(None).await?;
        let (errors, body) = (errors.clone(), load.body);
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let (mut msgs, mut seq) = (0u64, 0u64);
            while Instant::now() < end {
                let start = Instant::now();
                seq += 1;
                let req = g.req(pb::SendMessageRequest {
                    messages: vec![grpc_message(seq, &g.id, body)],
                });
                let ok = match g.c.send_message(req).await {
                    Ok(r) => r
                        .into_inner()
                        .status
                        .is_some_and(|s| s.code == pb::Code::Ok as i32),
                    Err(_) => false,
                };
                let done = Instant::now();
                if !ok {
                    errors.fetch_add(1, Ordering::Relaxed);
                } else if start >= t0 && done <= end {
                    msgs += 1;
                    let _ = hist.record((done - start).as_nanos() as u64);
                }
            }
            (msgs, hist)
        }));
    }
    let mut hist = histogram();
    let mut msgs = 0;
    for t in tasks {
        let (m, h) = t.await.map_err(|e| e.to_string())?;
        msgs += m;
        hist.add(&h).map_err(|e| e.to_string())?;
    }
    Ok(load::LoadResult {
        msgs,
        secs: load.duration.as_secs_f64(),
        hist,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// `n` gRPC simple consumers of a new group drain up to [`DRAIN`] messages: receive up
/// to 32, ack each. Latency is per receive call.
async fn grpc_drain(addr: &str, n: u32, group: &str) -> Result<load::LoadResult, String> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let mut g = Grpc::connect(addr, format!("bench-{group}-{i}")).await?;
        g.announce(Some(group)).await?;
        let (done, errors, group) = (done.clone(), errors.clone(), group.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let resource = |n: &str| pb::Resource {
                resource_namespace: String::new(),
                name: n.into(),
            };
            while done.load(Ordering::Relaxed) < DRAIN && start.elapsed() < DRAIN_LIMIT {
                let t = Instant::now();
                let req = g.req(pb::ReceiveMessageRequest {
                    group: Some(resource(&group)),
                    message_queue: Some(pb::MessageQueue {
                        topic: Some(resource(TOPIC)),
                        id: -1,
                        ..Default::default()
                    }),
                    filter_expression: Some(pb::FilterExpression {
                        r#type: pb::FilterType::Tag as i32,
                        expression: "*".into(),
                    }),
                    batch_size: 32,
                    invisible_duration: Some(prost_types::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    long_polling_timeout: Some(prost_types::Duration {
                        seconds: 1,
                        nanos: 0,
                    }),
                    ..Default::default()
                });
                let Ok(resp) = g.c.receive_message(req).await else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let mut frames = resp.into_inner();
                let mut got = Vec::new();
                while let Ok(Some(f)) = frames.message().await {
                    if let Some(Content::Message(m)) = f.content {
                        got.push(m);
                    }
                }
                if got.is_empty() {
                    break;
                }
                let _ = hist.record(t.elapsed().as_nanos() as u64);
                for m in got {
                    let sys = m.system_properties.unwrap_or_default();
                    let ack = g.req(pb::AckMessageRequest {
                        group: Some(resource(&group)),
                        topic: Some(resource(TOPIC)),
                        entries: vec![pb::AckMessageEntry {
                            message_id: sys.message_id,
                            receipt_handle: sys.receipt_handle.unwrap_or_default(),
                            lite_topic: None,
                        }],
                    });
                    match g.c.ack_message(ack).await {
                        Ok(r)
                            if r.get_ref()
                                .status
                                .as_ref()
                                .is_some_and(|s| s.code == pb::Code::Ok as i32) =>
                        {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            hist
        }));
    }
    let mut hist = histogram();
    for t in tasks {
        hist.add(&t.await.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    Ok(load::LoadResult {
        msgs: done.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        hist,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// The same drain over remoting: `n` POP simple consumers (tern-client).
async fn remoting_drain(namesrv: &str, n: u32, group: &str) -> Result<load::LoadResult, String> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let c =
            SimpleConsumer::with_await(group, ClientConfig::new(namesrv), Duration::from_secs(1))
                .map_err(|e| e.to_string())?;
        c.start();
        c.subscribe(TOPIC, MessageSelector::all())
            .await
            .map_err(|e| e.to_string())?;
        let (done, errors) = (done.clone(), errors.clone());
        tasks.push(tern_shell::runtime::spawn(async move {
            let mut hist = histogram();
            while done.load(Ordering::Relaxed) < DRAIN && start.elapsed() < DRAIN_LIMIT {
                let t = Instant::now();
                let Ok(got) = c.receive(32, Duration::from_secs(60)).await else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                if got.is_empty() {
                    break;
                }
                let _ = hist.record(t.elapsed().as_nanos() as u64);
                for m in &got {
                    match c.ack(m).await {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }
            c.shutdown().await;
            hist
        }));
    }
    let mut hist = histogram();
    for t in tasks {
        hist.add(&t.await).map_err(|e| e.to_string())?;
    }
    Ok(load::LoadResult {
        msgs: done.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        hist,
        errors: errors.load(Ordering::Relaxed),
    })
}

/// Runs the scenario: rows `sync remoting` / `sync gRPC` per sender count, then
/// Creates `group` and commits its offset of every queue of [`TOPIC`] at the queue's
/// first message (a reset needs the group to exist).
async fn from_first_message(namesrv: &str, group: &str) -> Result<(), String> {
    let admin = Admin::new(ClientConfig::new(namesrv)).map_err(|e| e.to_string())?;
    let reset = async {
        let cfg = SubscriptionGroupConfig {
            group_name: group.to_owned(),
            ..SubscriptionGroupConfig::default()
        };
        for (_, addr) in admin.all_masters().await.map_err(|e| e.to_string())? {
            admin
                .create_subscription_group(&Target::Broker(addr), &cfg)
                .await
                .map_err(|e| format!("creating {group}: {e}"))?;
        }
        match admin.reset_offset_by_time(TOPIC, group, 0, true).await {
            Ok(queues) if !queues.is_empty() => Ok(()),
            Ok(_) => Err(format!("resetting {group}: no queue of {TOPIC} answered")),
            Err(e) => Err(format!("resetting {group} to the first message: {e}")),
        }
    }
    .await;
    admin.shutdown().await;
    reset
}

/// `receive+ack remoting` / `receive+ack gRPC` with 1 and 4 consumers.
pub fn run(p: &SuiteParams, rows: &mut Vec<Measure>) -> Result<(), String> {
    let dir = p.dir.join("grpc");
    let broker = start_tern(&dir.join("broker"), &tern_conf(p, false))?;
    let namesrv = broker.namesrv.clone().unwrap_or_default();
    let addr = broker
        .grpc
        .clone()
        .ok_or("tern-broker announced no gRPC endpoint")?;
    block_on(load::create_topic(&namesrv, TOPIC))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    eprintln!("grpc: sync sends and receive+ack, remoting and gRPC, to one broker");
    let mut push = |case: &str, n: u32, r: &load::LoadResult| {
        let m = measured("grpc", TERN, case, n, p.body, r);
        log_row(&m);
        rows.push(m);
    };
    for (i, &n) in p.producers.iter().enumerate() {
        let load = load_of(p, namesrv.clone(), Mode::Sync, n);
        for grpc_first in [i % 2 == 1, i % 2 == 0] {
            if grpc_first {
                let r = rt.block_on(grpc_sends(&addr, n, &load))?;
                push("sync gRPC", n, &r);
            } else {
                let r = block_on(load::run(&load)).map_err(|e| format!("grpc remoting: {e}"))?;
                push("sync remoting", n, &r);
            }
        }
    }
    for (i, n) in [1u32, 4].into_iter().enumerate() {
        for grpc_first in [i % 2 == 1, i % 2 == 0] {
            if grpc_first {
                let group = format!("bench_grpc_{n}");
                // A new group a 5.x client pops starts at each queue's end (RocketMQ's
                // proxy pops with ConsumeInitMode.MAX): start it at the first message.
                block_on(from_first_message(&namesrv, &group))?;
                let r = rt.block_on(grpc_drain(&addr, n, &group))?;
                push("receive+ack gRPC", n, &r);
            } else {
                let r = block_on(remoting_drain(&namesrv, n, &format!("bench_pop_{n}")))?;
                push("receive+ack remoting", n, &r);
            }
        }
    }
    Ok(())
}
