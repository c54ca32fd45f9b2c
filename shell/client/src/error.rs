//! One error type for every client operation, with the cases a caller acts on kept apart:
//! "no route" (create the topic), "busy" (back off), "too large" (split), "timeout" (retry
//! or give up), and the broker's own code + remark for everything else.

use std::fmt;

use tern_shell::{RemotingCommand, RemotingError, ResponseCode};

/// Result of client operations.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Why a client operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// No name server answered: each address with the reason it failed.
    NameServerUnreachable {
        /// `addr: reason` for every name server tried.
        reasons: Vec<String>,
    },
    /// The name servers know no route for the topic (and TBW102 could not stand in).
    NoRoute {
        /// The topic asked for.
        topic: String,
    },
    /// The broker answered TOPIC_NOT_EXIST (17).
    TopicNotExist {
        /// The topic.
        topic: String,
        /// The broker's remark.
        remark: String,
    },
    /// The broker is overloaded (SYSTEM_BUSY 2, FLOW_CONTROL 215); back off and retry.
    BrokerBusy {
        /// The broker's remark.
        remark: String,
    },
    /// The message is larger than the client's limit; nothing was sent.
    MessageTooLarge {
        /// Body (or batch) bytes.
        size: usize,
        /// The limit (4 MiB by default).
        max: usize,
    },
    /// The message is malformed (empty body, bad topic, mixed batch...); nothing was sent.
    InvalidMessage(String),
    /// No answer in time.
    Timeout {
        /// What timed out ("send to 1.2.3.4:10911", ...).
        what: String,
        /// The budget in ms.
        timeout_ms: u64,
    },
    /// A broker could not be reached or the connection broke.
    Network {
        /// The address.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// The broker (or name server) answered with an error code.
    Broker {
        /// Response code.
        code: i32,
        /// The remark (may be empty).
        remark: String,
    },
    /// The answer could not be decoded.
    Protocol(String),
    /// Something the caller asked for is not known (broker name, cluster, consumer...).
    NotFound(String),
    /// The client was shut down.
    Shutdown,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NameServerUnreachable { reasons } => {
                write!(f, "cannot reach name server {}", reasons.join("; "))
            }
            Self::NoRoute { topic } => write!(
                f,
                "no route for topic {topic}: the topic does not exist on any name server"
            ),
            Self::TopicNotExist { topic, remark } => {
                write!(f, "topic {topic} does not exist: {remark}")
            }
            Self::BrokerBusy { remark } => write!(f, "broker busy: {remark}"),
            Self::MessageTooLarge { size, max } => {
                write!(f, "message too large: {size} bytes, the maximum is {max}")
            }
            Self::InvalidMessage(e) => write!(f, "invalid message: {e}"),
            Self::Timeout { what, timeout_ms } => {
                write!(f, "{what} timed out after {timeout_ms} ms")
            }
            Self::Network { addr, reason } => write!(f, "cannot reach {addr}: {reason}"),
            Self::Broker { code, remark } => {
                write!(f, "broker error code {code}")?;
                if !remark.is_empty() {
                    write!(f, ": {remark}")?;
                }
                Ok(())
            }
            Self::Protocol(e) => write!(f, "bad answer: {e}"),
            Self::NotFound(e) => write!(f, "{e}"),
            Self::Shutdown => write!(f, "client is shut down"),
        }
    }
}

impl std::error::Error for ClientError {}

impl ClientError {
    /// The error for a remoting failure talking to `addr` within `timeout_ms`.
    pub fn remoting(addr: &str, e: RemotingError, timeout_ms: u64) -> Self {
        match e {
            RemotingError::Timeout => Self::Timeout {
                what: format!("request to {addr}"),
                timeout_ms,
            },
            RemotingError::Connect { reason, .. } => Self::Network {
                addr: addr.to_owned(),
                reason: tidy_reason(addr, &reason),
            },
            other => Self::Network {
                addr: addr.to_owned(),
                reason: other.to_string(),
            },
        }
    }

    /// The error for a non-success response.
    pub fn from_response(resp: &RemotingCommand) -> Self {
        let remark = resp.remark.clone().unwrap_or_default();
        match resp.response_code() {
            ResponseCode::SystemBusy | ResponseCode::FlowControl => Self::BrokerBusy { remark },
            code => Self::Broker {
                code: code.raw(),
                remark,
            },
        }
    }

    /// True when another broker or queue might succeed (Java's retry rule for sends).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Network { .. } | Self::Timeout { .. } | Self::BrokerBusy { .. } => true,
            Self::TopicNotExist { .. } => true,
            Self::Broker { code, .. } => matches!(
                ResponseCode::from_raw(*code),
                ResponseCode::SystemError
                    | ResponseCode::ServiceNotAvailable
                    | ResponseCode::NoPermission
                    | ResponseCode::TopicNotExist
            ),
            _ => false,
        }
    }
}

/// Turns `"1.2.3.4:1: Connection refused (os error 111)"` into `"connection refused"`.
pub fn tidy_reason(addr: &str, reason: &str) -> String {
    let r = reason.strip_prefix(addr).unwrap_or(reason);
    let r = r.trim_start_matches(':').trim();
    let r = match r.find(" (os error") {
        Some(i) => &r[..i],
        None => r,
    };
    let mut chars = r.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => "unknown error".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_reasons_read_like_a_sentence() {
        assert_eq!(
            tidy_reason(
                "127.0.0.1:1",
                "127.0.0.1:1: Connection refused (os error 111)"
            ),
            "connection refused"
        );
        let e = ClientError::NameServerUnreachable {
            reasons: vec!["127.0.0.1:1: connection refused".into()],
        };
        assert_eq!(
            e.to_string(),
            "cannot reach name server 127.0.0.1:1: connection refused"
        );
    }
}
