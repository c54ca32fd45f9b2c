//! One scrape: the request-path counters and the broker's state read now, encoded as
//! OpenMetrics text by `prometheus-client`.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::{Buckets, MessageType};
use crate::BrokerCtx;

/// Labels of one sample.
type Labels = Vec<(&'static str, String)>;

/// One metric family: name (without `_total` for counters, which the encoder adds),
/// help, kind, samples.
#[derive(Debug)]
struct Family {
    name: Cow<'static, str>,
    help: &'static str,
    kind: Kind,
    samples: Vec<(Labels, Sample)>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug)]
enum Sample {
    Value(f64),
    Histogram(f64, u64, Vec<(f64, u64)>),
}

/// Everything one scrape reports.
#[derive(Debug)]
struct Snapshot(Vec<Family>);

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            let kind = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut family = encoder.encode_descriptor(&f.name, f.help, None, kind)?;
            for (labels, sample) in &f.samples {
                let m = family.encode_family(labels)?;
                match (f.kind, sample) {
                    // Every counter counts whole things (messages, bytes).
                    (Kind::Counter, Sample::Value(v)) => ConstCounter::new(*v as u64).encode(m)?,
                    (Kind::Gauge, Sample::Value(v)) => ConstGauge::new(*v).encode(m)?,
                    (Kind::Histogram, Sample::Histogram(sum, count, buckets)) => {
                        let mut m = m;
                        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                            *sum, *count, buckets, None,
                        )?
                    }
                    _ => unreachable!("samples are built to match their family"),
                }
            }
        }
        Ok(())
    }
}

/// The labels every sample carries: RocketMQ's cluster, node type and node id.
fn base(ctx: &BrokerCtx) -> Labels {
    vec![
        ("cluster", ctx.config.cluster_name.clone()),
        ("node_type", "broker".to_owned()),
        ("node_id", ctx.config.broker_name.clone()),
    ]
}

fn with(mut labels: Labels, more: &[(&'static str, &str)]) -> Labels {
    labels.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    labels
}

fn histogram<const N: usize>(b: &Buckets<N>) -> Sample {
    let (sum, count, buckets) = b.snapshot();
    Sample::Histogram(sum, count, buckets)
}

/// The scrape's text.
pub fn render(ctx: &BrokerCtx) -> String {
    let m = &ctx.metrics;
    let base = base(ctx);
    let mut fams = Vec::new();
    let mut push = |name: &'static str, help, kind, samples| {
        fams.push(Family {
            name: Cow::Borrowed(name),
            help,
            kind,
            samples,
        })
    };

    let (mut msgs_in, mut bytes_in, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    for kind in [
        MessageType::Normal,
        MessageType::Transaction,
        MessageType::Delay,
    ] {
        let mut rows = m.messages_in[kind as usize].snapshot();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for (topic, c) in rows {
            let l = with(
                base.clone(),
                &[("topic", &topic), ("message_type", kind.label())],
            );
            msgs_in.push((
                l.clone(),
                Sample::Value(c.messages.load(Ordering::Relaxed) as f64),
            ));
            bytes_in.push((
                l.clone(),
                Sample::Value(c.bytes.load(Ordering::Relaxed) as f64),
            ));
            sizes.push((l, histogram(&c.sizes)));
        }
    }
    push(
        "rocketmq_messages_in",
        "Messages stored, by topic and message type.",
        Kind::Counter,
        msgs_in,
    );
    push(
        "rocketmq_throughput_in",
        "Body bytes stored, by topic and message type.",
        Kind::Counter,
        bytes_in,
    );
    push(
        "rocketmq_message_size",
        "Body sizes of stored messages, bytes.",
        Kind::Histogram,
        sizes,
    );

    let (mut msgs_out, mut bytes_out) = (Vec::new(), Vec::new());
    let mut rows = m.messages_out.snapshot();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for ((topic, group), c) in rows {
        let l = with(
            base.clone(),
            &[("topic", &topic), ("consumer_group", &group)],
        );
        msgs_out.push((
            l.clone(),
            Sample::Value(c.messages.load(Ordering::Relaxed) as f64),
        ));
        bytes_out.push((l, Sample::Value(c.bytes.load(Ordering::Relaxed) as f64)));
    }
    push(
        "rocketmq_messages_out",
        "Messages handed to consumers, by topic and group.",
        Kind::Counter,
        msgs_out,
    );
    push(
        "rocketmq_throughput_out",
        "Bytes handed to consumers, by topic and group.",
        Kind::Counter,
        bytes_out,
    );

    let mut rows = m.dlq.snapshot();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let dlq = rows
        .into_iter()
        .map(|((topic, group), c)| {
            (
                with(
                    base.clone(),
                    &[("topic", &topic), ("consumer_group", &group)],
                ),
                Sample::Value(c.load(Ordering::Relaxed) as f64),
            )
        })
        .collect();
    push(
        "rocketmq_send_to_dlq_messages",
        "Messages sent to a group's dead-letter queue.",
        Kind::Counter,
        dlq,
    );
    push(
        "rocketmq_commit_messages",
        "Transaction messages committed.",
        Kind::Counter,
        vec![(
            base.clone(),
            Sample::Value(m.commits.load(Ordering::Relaxed) as f64),
        )],
    );
    push(
        "rocketmq_rollback_messages",
        "Transaction messages rolled back.",
        Kind::Counter,
        vec![(
            base.clone(),
            Sample::Value(m.rollbacks.load(Ordering::Relaxed) as f64),
        )],
    );

    let mut rows = m.rpc.snapshot();
    rows.sort_by_key(|r| r.0);
    let rpc = rows
        .into_iter()
        .map(|((code, resp), b)| {
            let l = with(
                base.clone(),
                &[
                    ("protocol_type", "remoting"),
                    ("request_code", &code.to_string()),
                    ("response_code", &resp.to_string()),
                ],
            );
            (l, histogram(&b))
        })
        .collect();
    push(
        "rocketmq_rpc_latency",
        "Time from a request's arrival to its answer, ms.",
        Kind::Histogram,
        rpc,
    );

    // The broker's state, now.
    let gauge = |v: f64| vec![(base.clone(), Sample::Value(v))];
    let (producers, consumers) = ctx.clients.connection_counts();
    push(
        "rocketmq_producer_connections",
        "Producer connections.",
        Kind::Gauge,
        gauge(producers as f64),
    );
    push(
        "rocketmq_consumer_connections",
        "Consumer connections.",
        Kind::Gauge,
        gauge(consumers as f64),
    );
    push(
        "rocketmq_topic_number",
        "Topics.",
        Kind::Gauge,
        gauge(ctx.topics.names().len() as f64),
    );
    push(
        "rocketmq_consumer_group_number",
        "Subscription groups.",
        Kind::Gauge,
        gauge(ctx.groups.wrapper().subscription_group_table.len() as f64),
    );
    push(
        "rocketmq_consumer_lag_messages",
        "Messages stored but not yet committed as consumed, by topic and group.",
        Kind::Gauge,
        lag(ctx, &base),
    );
    let (end, durable, dispatched) = (
        ctx.store.log_end(),
        ctx.store.durable_end(),
        ctx.store.dispatched_offset(),
    );
    push(
        "rocketmq_storage_size",
        "Bytes the store's files take on disk.",
        Kind::Gauge,
        gauge(allocated(&ctx.config.store_root) as f64),
    );
    push(
        "rocketmq_storage_flush_behind_bytes",
        "Commit-log bytes written but not yet durable.",
        Kind::Gauge,
        gauge(end.saturating_sub(durable) as f64),
    );
    push(
        "rocketmq_storage_dispatch_behind_bytes",
        "Commit-log bytes not yet dispatched to consume queues and the index.",
        Kind::Gauge,
        gauge(end.saturating_sub(dispatched) as f64),
    );
    let mut info = std::collections::BTreeMap::new();
    ctx.store.runtime_stats(&mut info);
    ctx.timer.runtime_stats(&ctx.store, &mut info);
    for (name, help, key) in [
        (
            "tern_reput_errors",
            "Dispatch (reput) failures since start.",
            "reputErrors",
        ),
        (
            "rocketmq_timer_enqueue_lag",
            "Timer-topic entries not yet filed in the wheel.",
            "timerOffsetBehind",
        ),
        (
            "rocketmq_timer_dequeue_lag",
            "Seconds the timer's reading is behind the clock.",
            "timerReadBehind",
        ),
    ] {
        if let Some(v) = info.get(key).and_then(|v| v.parse::<f64>().ok()) {
            push(name, help, Kind::Gauge, gauge(v));
        }
    }
    // What the embedding process adds (the edge gateway's forwarder: forwarded messages,
    // dead letters, failed attempts ...), each numeric entry as a gauge named after its
    // runtime-info key: `edgeDeadLetters` → `tern_edge_dead_letters`.
    let mut extra = std::collections::BTreeMap::new();
    ctx.extra_stats.fill(&mut extra);
    for (key, value) in extra {
        if let Ok(v) = value.parse::<f64>() {
            fams.push(Family {
                name: Cow::Owned(format!("tern_{}", snake(&key))),
                help: "From the embedding process's runtime info (see GET_BROKER_RUNTIME_INFO).",
                kind: Kind::Gauge,
                samples: vec![(base.clone(), Sample::Value(v))],
            });
        }
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(fams)));
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}

/// `edgeDeadLetters` → `edge_dead_letters`.
fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// Consumer lag per topic and group: each queue's max offset less the group's committed
/// one, summed over the queues.
fn lag(ctx: &BrokerCtx, base: &Labels) -> Vec<(Labels, Sample)> {
    let mut out = Vec::new();
    for (key, queues) in ctx.offsets.snapshot() {
        let Some((topic, group)) = key.split_once('@') else {
            continue;
        };
        let behind: u64 = queues
            .iter()
            .map(|(q, committed)| {
                let (_, max) = ctx.store.queue_bounds(topic, *q);
                max.saturating_sub((*committed).max(0) as u64)
            })
            .sum();
        out.push((
            with(base.clone(), &[("topic", topic), ("consumer_group", group)]),
            Sample::Value(behind as f64),
        ));
    }
    out
}

/// Bytes the files under `path` take on disk (blocks, not lengths: segments are
/// preallocated). Bounded by the store's file count.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return m.blocks() * 512;
    }
    std::fs::read_dir(path).map_or(0, |rd| rd.flatten().map(|e| allocated(&e.path())).sum())
}
