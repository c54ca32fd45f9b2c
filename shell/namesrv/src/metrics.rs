//! The name server's Prometheus endpoint (`metricsExporterType=PROM` in namesrv.conf,
//! port [`crate::config::DEFAULT_PROM_PORT`]). RocketMQ's name server exports no
//! metrics; these follow the broker's: `rocketmq_rpc_latency` by request and response
//! code (RocketMQ's RemotingMetricsConstant), and what the route table holds now.
//! Every sample carries `node_type="namesrv"` and `node_id` (the bound address).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;
use tern_shell::sync::RwLockExt;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tern_shell::{ConnectionCtx, Processor, RemotingCommand};

use crate::processor::{NamesrvProcessor, State};

/// Upper bounds of `rocketmq_rpc_latency`'s buckets, ms (RocketMQ's, as the broker's).
const LATENCY_BUCKETS_MS: [f64; 6] = [1.0, 3.0, 5.0, 10.0, 100.0, 1_000.0];

type RpcLabels = Vec<(&'static str, String)>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_MS)
}

/// What the request path counts.
#[derive(Debug)]
pub(crate) struct NamesrvMetrics {
    rpc: Family<RpcLabels, Histogram, fn() -> Histogram>,
}

impl Default for NamesrvMetrics {
    fn default() -> Self {
        Self {
            rpc: Family::new_with_constructor(latency_histogram),
        }
    }
}

/// The name server's processor, timing each request.
#[derive(Debug)]
pub(crate) struct Measured {
    inner: NamesrvProcessor,
    metrics: Arc<NamesrvMetrics>,
}

impl Measured {
    /// Times `inner`'s answers into `metrics`.
    pub(crate) fn new(inner: NamesrvProcessor, metrics: Arc<NamesrvMetrics>) -> Self {
        Self { inner, metrics }
    }
}

impl Processor for Measured {
    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        let (started, code) = (Instant::now(), req.code);
        let resp = self.inner.process(conn, req).await;
        let answered = resp
            .as_ref()
            .map_or_else(|| "none".to_owned(), |r| r.code.to_string());
        let labels = vec![
            ("protocol_type", "remoting".to_owned()),
            ("request_code", code.to_string()),
            ("response_code", answered),
        ];
        self.metrics
            .rpc
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64() * 1000.0);
        resp
    }

    fn is_quick(&self, req: &RemotingCommand) -> bool {
        self.inner.is_quick(req)
    }
}

/// One scrape's text.
pub(crate) fn render(state: &State, metrics: &NamesrvMetrics, node_id: &str) -> String {
    let mut registry = Registry::with_labels(
        [
            (Cow::Borrowed("node_type"), Cow::Borrowed("namesrv")),
            (Cow::Borrowed("node_id"), Cow::Owned(node_id.to_owned())),
        ]
        .into_iter(),
    );
    registry.register(
        "rocketmq_rpc_latency",
        "Time from a request's arrival to its answer, ms.",
        metrics.rpc.clone(),
    );
    let (brokers, clusters, topics) = {
        let routes = state.routes.read_guard();
        let info = routes.cluster_info();
        let brokers: usize = info
            .broker_addr_table
            .values()
            .map(|b| b.broker_addrs.0.len())
            .sum();
        (
            brokers,
            info.cluster_addr_table.len(),
            routes.all_topics().topic_list.len(),
        )
    };
    for (name, help, value) in [
        (
            "tern_namesrv_brokers",
            "Brokers registered and not expired (masters and slaves).",
            brokers,
        ),
        (
            "tern_namesrv_clusters",
            "Clusters with a broker registered.",
            clusters,
        ),
        ("tern_namesrv_topics", "Topics in the route table.", topics),
    ] {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(name, help, g);
    }
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
    out
}
