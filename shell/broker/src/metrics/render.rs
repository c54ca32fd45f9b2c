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

    if let Some(halves) = ctx.transactions.half_counts(ctx) {
        let rows = halves
            .into_iter()
            .map(|(topic, n)| {
                (
                    with(base.clone(), &[("topic", &topic)]),
                    Sample::Value(n as f64),
                )
            })
            .collect();
        push(
            "rocketmq_half_messages",
            "Transaction half messages not yet committed or rolled back, by topic.",
            Kind::Gauge,
            rows,
        );
    }

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
    let Lag {
        messages: lag_messages,
        latency: lag_latency,
        inflight,
        ready,
    } = lag(ctx, &base);
    push(
        "rocketmq_consumer_lag_messages",
        "Messages stored but not yet committed as consumed, by topic and group.",
        Kind::Gauge,
        lag_messages,
    );
    push(
        "rocketmq_consumer_lag_latency",
        "Age of the oldest message not yet committed as consumed, ms, by topic and group \
         (0 when none is behind).",
        Kind::Gauge,
        lag_latency,
    );
    push(
        "rocketmq_consumer_inflight_messages",
        "Messages pulled but not yet committed as consumed, by topic and group.",
        Kind::Gauge,
        inflight,
    );
    push(
        "rocketmq_consumer_ready_messages",
        "Messages stored and not yet pulled, by topic and group.",
        Kind::Gauge,
        ready,
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
    if let Some(earliest) = earliest_store_time(ctx) {
        push(
            "rocketmq_storage_message_reserve_time",
            "Age of the oldest message the commit log holds, ms.",
            Kind::Gauge,
            gauge((tern_shell::runtime::now_ms() - earliest).max(0) as f64),
        );
    }
    push(
        "tern_storage_flush_latency",
        "Time one flush of the commit log (fdatasync of its written segments) took, ms.",
        Kind::Histogram,
        vec![(base.clone(), histogram(&ctx.store.flush_latency))],
    );
    if let Ok(u) = tern_engine_fs::disk::disk_usage(&ctx.config.store_root) {
        push(
            "tern_storage_disk_used_ratio",
            "Used share (0..1) of the file system holding the store; writes are refused \
             past diskSpaceWarningLevelRatio.",
            Kind::Gauge,
            gauge(u.used_ratio()),
        );
    }
    let mut info = std::collections::BTreeMap::new();
    ctx.store.runtime_stats(&mut info);
    ctx.timer.runtime_stats(&ctx.store, &mut info);
    let slave = ctx.role.get() == crate::config::BrokerRole::Slave;
    ctx.ha.runtime_stats(slave, &mut info);
    if let Some(behind) = ha_lag(&info, end, slave) {
        push(
            "tern_ha_lag_bytes",
            "Commit-log bytes the slave lacks: on a master, its end less the slaves' \
             acknowledged offset (while a slave is connected); on a slave, the master's \
             end less what it holds.",
            Kind::Gauge,
            gauge(behind as f64),
        );
    }
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

/// The consumer gauges, each per topic and group.
#[derive(Default)]
struct Lag {
    messages: Vec<(Labels, Sample)>,
    latency: Vec<(Labels, Sample)>,
    inflight: Vec<(Labels, Sample)>,
    ready: Vec<(Labels, Sample)>,
}

/// The consumer gauges as RocketMQ's ConsumerLagCalculator computes them, per queue and
/// summed over a group's queues of a topic: lag, the queue's max offset less the group's
/// committed one; latency, now less the store time of the oldest message not committed
/// (0 when no queue is behind); inflight, the pull offset (the next offset the last pull
/// answered with, never below the committed one) less the committed offset; ready, the
/// max offset less the pull offset.
fn lag(ctx: &BrokerCtx, base: &Labels) -> Lag {
    let now = tern_shell::runtime::now_ms();
    let mut out = Lag::default();
    for (key, queues) in ctx.offsets.snapshot() {
        let Some((topic, group)) = key.split_once('@') else {
            continue;
        };
        let pulls = ctx.metrics.out_of(topic, group);
        let (mut behind, mut inflight, mut ready) = (0u64, 0u64, 0u64);
        let mut oldest: Option<i64> = None;
        for (q, committed) in &queues {
            let (_, max) = ctx.store.queue_bounds(topic, *q);
            let committed = (*committed).max(0) as u64;
            let pulled = pulls
                .as_ref()
                .and_then(|p| p.next_pull(*q))
                .unwrap_or(0)
                .max(committed);
            inflight += pulled - committed;
            ready += max.saturating_sub(pulled);
            if committed < max {
                behind += max - committed;
                if let Some(t) = ctx.store.store_time_of(topic, *q, committed) {
                    oldest = Some(oldest.map_or(t, |o| o.min(t)));
                }
            }
        }
        // A POP group's offset moves as it pops: its in-flight messages are the popped
        // ones not acked yet.
        inflight += ctx.pop.inflight_of(topic, group);
        let l = with(base.clone(), &[("topic", topic), ("consumer_group", group)]);
        let age = oldest.map_or(0, |t| (now - t).max(0));
        out.messages.push((l.clone(), Sample::Value(behind as f64)));
        out.latency.push((l.clone(), Sample::Value(age as f64)));
        out.inflight
            .push((l.clone(), Sample::Value(inflight as f64)));
        out.ready.push((l, Sample::Value(ready as f64)));
    }
    out
}

/// Store time of the oldest record the commit log holds (RocketMQ's
/// `getEarliestMessageTime`): a segment starts with a record.
fn earliest_store_time(ctx: &BrokerCtx) -> Option<i64> {
    let (min, end, _) = ctx.store.log_span();
    if end <= min {
        return None;
    }
    let bytes = ctx.store.record_at(min).ok()?;
    let view = tern_engine::record::RecordView::parse(&bytes).ok()?;
    Some(view.store_timestamp()).filter(|t| *t > 0)
}

/// Replication lag in bytes from the HA runtime-info entries, when there is one to tell.
fn ha_lag(info: &std::collections::BTreeMap<String, String>, end: u64, slave: bool) -> Option<u64> {
    let num = |k: &str| info.get(k).and_then(|v| v.parse::<u64>().ok());
    if slave {
        Some(num("haMasterOffset")?.saturating_sub(num("haReportedOffset")?))
    } else if num("haSlaveCount")? > 0 {
        Some(end.saturating_sub(num("haSlaveAckOffset")?))
    } else {
        None
    }
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
