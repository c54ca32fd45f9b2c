//! What a connection is told (its limits and timeouts) and how its calls fail.

use std::sync::Arc;
use std::time::Duration;

use crate::frame::{FrameError, FrameLimits};
use crate::tls::ClientTls;

/// Errors of remote calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemotingError {
    /// Connecting failed: `reason` says where and why; the io error underneath, when there
    /// is one, is the [`source`](std::error::Error::source), so callers can tell a refusal
    /// from a timeout without reading the text (a TLS handshake's too; a host that
    /// cannot be a certificate's name has none).
    Connect {
        reason: String,
        cause: Option<IoCause>,
    },
    /// Reading or writing the socket failed: `reason` says what (a request failed by the
    /// connection's close says so), the io error is the
    /// [`source`](std::error::Error::source), so callers can tell a reset from a refusal
    /// without reading the text.
    Io { reason: String, cause: IoCause },
    /// No response within the timeout; a late response will be dropped.
    Timeout,
    /// The connection closed before the response came.
    Closed,
    /// The peer took no byte of a write for the write timeout; the connection is closed.
    WriteTimeout,
    /// The command could not be encoded.
    Frame(FrameError),
}

impl std::fmt::Display for RemotingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect { reason, .. } => write!(f, "connect failed: {reason}"),
            Self::Io { reason, .. } => write!(f, "io error: {reason}"),
            Self::Timeout => write!(f, "request timed out"),
            Self::Closed => write!(f, "connection closed"),
            Self::WriteTimeout => write!(f, "write timed out: the peer stopped reading"),
            Self::Frame(e) => write!(f, "frame error: {e}"),
        }
    }
}

impl std::error::Error for RemotingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Connect { cause: Some(c), .. } | Self::Io { cause: c, .. } => Some(c.io()),
            _ => None,
        }
    }
}

/// An io error kept as a [`RemotingError`]'s source. Shared, so the error stays `Clone`
/// (a pool hands one connect failure to every caller waiting on it); equal when the kinds
/// are, so the error stays `Eq` (its text is in the error's own reason).
#[derive(Debug, Clone)]
pub struct IoCause(Arc<std::io::Error>);

impl IoCause {
    /// The io error.
    pub fn io(&self) -> &std::io::Error {
        &self.0
    }

    /// Its kind.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.0.kind()
    }
}

impl From<std::io::Error> for IoCause {
    fn from(e: std::io::Error) -> Self {
        Self(Arc::new(e))
    }
}

impl PartialEq for IoCause {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind()
    }
}

impl Eq for IoCause {}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Frame size limits applied to the peer's frames.
    pub limits: FrameLimits,
    /// Close after this long without traffic either way (Java servers: 120 s).
    pub idle_timeout: Option<Duration>,
    /// Requests from the peer processed at once; beyond it the answer is SYSTEM_BUSY.
    pub max_in_flight: usize,
    /// Bytes of request frames from the peer held by requests in flight; a frame that
    /// would go past it is answered SYSTEM_BUSY. Without it a peer could park
    /// `max_in_flight` frames of the largest size (16 GiB by default) on one connection.
    /// A request is always taken when none is in flight, so a budget below the frame
    /// limit slows big frames down but never refuses them all.
    pub max_in_flight_bytes: usize,
    /// Longest a write waits with the peer taking no byte (RocketMQ's send timeout is
    /// 3 s). Past it the connection closes and the write fails with
    /// [`RemotingError::WriteTimeout`], and so do writers queued behind it. Measured as
    /// no progress rather than a whole-frame deadline, so a large answer over a slow but
    /// moving link still goes out.
    pub write_timeout: Duration,
    /// How long a graceful close waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Connect with TLS (`tls.enable`); none connects in plaintext. Servers ignore it:
    /// theirs is [`crate::ServerConfig::tls`].
    pub tls: Option<ClientTls>,
}

/// Default [`ConnectionConfig::max_in_flight_bytes`]: four frames of the largest size.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Default [`ConnectionConfig::write_timeout`].
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(3);

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            limits: FrameLimits::default(),
            idle_timeout: None,
            max_in_flight: 1024,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            drain_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}
