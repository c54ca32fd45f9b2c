//! The metrics keys of `broker.conf`: RocketMQ 5's names and defaults, read by
//! [`tern_shell::metrics`] (the name server reads the same keys).

pub use tern_shell::metrics::{ExporterType, MetricsSettings};

/// RocketMQ's `metricsPromExporterPort`.
pub const DEFAULT_PROM_PORT: u16 = 5557;
