//! The metrics keys of `broker.conf`: RocketMQ 5's names and defaults.

use tern_shell::config::{ConfigError, ConfigReader};

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
    /// `metricsPromExporterPort` (5557; 0 picks a free one).
    pub port: u16,
}

impl MetricsSettings {
    /// Reads the keys from `r`.
    pub fn read(r: &mut ConfigReader<'_>) -> Result<Self, ConfigError> {
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
            port: r.port("metricsPromExporterPort", 5557)?,
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
