//! The metrics keys every Tern process reads (RocketMQ 5's broker keys:
//! `metricsExporterType`, `metricsPromExporterHost`, `metricsPromExporterPort`) and the
//! Prometheus endpoint that serves a process's text on [`crate::http`].

use std::sync::Arc;

use crate::config::{ConfigError, ConfigReader};
use crate::http::{Handler, HttpServer, Response};

/// How metrics are exported (`metricsExporterType`). RocketMQ also has `OTLP_GRPC` and
/// `LOG`, which Tern refuses at start rather than ignore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExporterType {
    /// No metrics (`DISABLE`).
    Disable,
    /// Prometheus text on `metricsPromExporterHost:metricsPromExporterPort` (`PROM`).
    Prom,
}

/// Where metrics go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsSettings {
    /// `metricsExporterType` (`DISABLE`).
    pub exporter: ExporterType,
    /// `metricsPromExporterHost` (empty: every interface).
    pub host: String,
    /// `metricsPromExporterPort` (0 picks a free one).
    pub port: u16,
}

impl MetricsSettings {
    /// Reads the keys from `r`; `default_port` is the process's (the broker's is
    /// RocketMQ's 5557).
    pub fn read(r: &mut ConfigReader<'_>, default_port: u16) -> Result<Self, ConfigError> {
        let exporter: String = r.get_checked("metricsExporterType", "DISABLE".to_owned(), |s| {
            match s.to_ascii_uppercase().as_str() {
                "DISABLE" | "PROM" => Ok(()),
                "OTLP_GRPC" | "LOG" => Err(format!(
                    "{s} is not supported by Tern; use PROM (a Prometheus scrape endpoint) or \
                     DISABLE"
                )),
                other => Err(format!(
                    "unknown exporter type {other:?}: use PROM or DISABLE"
                )),
            }
        })?;
        Ok(MetricsSettings {
            exporter: if exporter.eq_ignore_ascii_case("PROM") {
                ExporterType::Prom
            } else {
                ExporterType::Disable
            },
            host: r.get("metricsPromExporterHost", String::new())?,
            port: r.port("metricsPromExporterPort", default_port)?,
        })
    }

    /// The address to serve on, when exporting.
    pub fn listen(&self) -> Option<String> {
        (self.exporter == ExporterType::Prom).then(|| {
            let host = if self.host.is_empty() {
                "0.0.0.0"
            } else {
                &self.host
            };
            format!("{host}:{}", self.port)
        })
    }
}

/// What a scrape answers: the OpenMetrics text, made anew each time.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `GET /metrics` with `render`'s text when `settings` say PROM. A port that
/// cannot be bound is logged and the process serves without metrics: metrics must not
/// keep it from its work.
pub async fn serve(
    settings: &MetricsSettings,
    render: Render,
    tls: Option<crate::tls::ServerTls>,
) -> Option<HttpServer> {
    let addr = settings.listen()?;
    let handler: Handler = Arc::new(move |req| {
        (req.path == "/metrics").then(|| match req.method.as_str() {
            "GET" | "HEAD" => Response::ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                render(),
            ),
            _ => Response::plain(405, "only GET is served\n"),
        })
    });
    match HttpServer::bind(&addr, handler, tls).await {
        Ok(s) => {
            log::info!("metrics on http://{}/metrics", s.local_addr());
            Some(s)
        }
        Err(e) => {
            log::error!("metrics endpoint {addr} unavailable ({e}); serving without metrics");
            None
        }
    }
}
