//! Why an HA connection ended: each side logs it, and a slave dials again after a pause.
//!
//! Typed so that a caller can act on the kind (the master's report reader ends quietly
//! when the slave closed the socket, [`io::ErrorKind::UnexpectedEof`]) without reading
//! the text; the text is the log line's, word for word.

use std::fmt;
use std::future::Future;
use std::io;
use std::time::Duration;

use tern_shell::runtime;

/// Why an HA connection (or its opening exchange) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaError {
    /// Connecting, reading or writing failed: the socket's kind, and the text.
    Io(io::ErrorKind, String),
    /// The peer sent nothing, or took nothing, for too long.
    Timeout(String),
    /// The peer broke the protocol, failed the sign-in, or is not the peer expected.
    Protocol(String),
    /// This broker's own side stopped: its store, its epochs, or its role.
    Local(String),
}

impl HaError {
    /// An I/O failure while doing `what`, keeping its kind.
    pub(crate) fn io(what: impl fmt::Display, e: &io::Error) -> Self {
        Self::Io(e.kind(), format!("{what}: {e}"))
    }

    /// The same error said within `context` (`"{context}: {self}"`), of the same kind.
    pub(crate) fn within(self, context: impl fmt::Display) -> Self {
        let said = |text: String| format!("{context}: {text}");
        match self {
            Self::Io(kind, t) => Self::Io(kind, said(t)),
            Self::Timeout(t) => Self::Timeout(said(t)),
            Self::Protocol(t) => Self::Protocol(said(t)),
            Self::Local(t) => Self::Local(said(t)),
        }
    }

    fn text(&self) -> &str {
        match self {
            Self::Io(_, t) | Self::Timeout(t) | Self::Protocol(t) | Self::Local(t) => t,
        }
    }
}

impl fmt::Display for HaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl std::error::Error for HaError {}

/// Runs `io` (a read or a flushed write) for at most `limit`: [`HaError::Timeout`] saying
/// `late()`, or [`HaError::Io`] saying `what` failed.
pub(crate) async fn timed<T>(
    limit: Duration,
    io: impl Future<Output = io::Result<T>>,
    late: impl FnOnce() -> String,
    what: impl fmt::Display,
) -> Result<T, HaError> {
    match runtime::timeout(limit, io).await {
        Err(_) => Err(HaError::Timeout(late())),
        Ok(Err(e)) => Err(HaError::io(what, &e)),
        Ok(Ok(v)) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_kind_and_prefixes_the_text() {
        let e = HaError::io("reading", &io::Error::from(io::ErrorKind::ConnectionReset));
        let e = e.within("signing in as k");
        assert!(matches!(e, HaError::Io(io::ErrorKind::ConnectionReset, _)));
        assert!(e.to_string().starts_with("signing in as k: reading: "));
    }
}
