//! Why an ACL check refused a request. One enum for the broker, the name server and the
//! proxy: its Display is the remark the client gets and the text the server logs,
//! worded as RocketMQ's exceptions are, so each server maps it to its response code
//! (NO_PERMISSION on the remoting port, UNAUTHORIZED over gRPC) and prints `{e}` once.

use std::fmt;

use super::replay::MAX_REMEMBERED;
use super::rules::GROUP_PREFIX;
use crate::answer::Refusal;
use crate::body::BodyError;
use crate::code::ResponseCode;

/// Why a request was refused by the ACL rules; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclRefusal {
    /// The request names no account (no `AccessKey`) and comes from no white address.
    NoAccessKey,
    /// No account has this access key.
    NoAccount(String),
    /// The signature does not match the account's secret (the access key).
    BadSignature(String),
    /// The request code needs an admin account and this one is not.
    NotAdmin {
        /// The request code refused.
        code: i32,
        /// The account that sent it.
        access_key: String,
    },
    /// The account lacks the permission needed on a resource.
    NoPermission {
        /// A topic, or a group as its retry topic (`%RETRY%group`).
        resource: String,
        /// The account that sent it.
        access_key: String,
    },
    /// The replay window needs a signing time and the request carries none.
    NoSignedTime,
    /// The signing time is not a number of milliseconds (the field as sent).
    BadSignedTime(String),
    /// The request was signed too long before or after now.
    OutsideReplayWindow {
        /// When the request says it was signed (ms since the epoch).
        signed_ms: u64,
        /// How far either side of now a signing time may be.
        window_ms: u64,
        /// Now, as the server saw it.
        now_ms: u64,
    },
    /// The replay window remembers as many signatures as it may; the request may be sent
    /// again once the oldest second leaves the window.
    ReplayWindowFull,
    /// This signature was already used within the window.
    Replayed,
    /// The body that names the request's topics and groups cannot be read.
    UnreadableBody {
        /// Which body (`heartbeat`, `lock` …), as the remark names it.
        body: &'static str,
        /// Why it cannot be read.
        error: BodyError,
    },
}

impl fmt::Display for AclRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAccessKey => f.write_str("No accessKey is configured"),
            Self::NoAccount(ak) => write!(f, "No acl config for {ak}"),
            Self::BadSignature(ak) => write!(f, "Check signature failed for accessKey={ak}"),
            Self::NotAdmin { code, access_key } => write!(
                f,
                "Need admin permission for request code={code}, but accessKey={access_key} is not admin"
            ),
            Self::NoPermission {
                resource,
                access_key,
            } => match resource.strip_prefix(GROUP_PREFIX) {
                Some(g) => write!(f, "No permission for group {g} (accessKey={access_key})"),
                None => write!(
                    f,
                    "No permission for topic {resource} (accessKey={access_key})"
                ),
            },
            Self::NoSignedTime => write!(
                f,
                "No {} in the request: this server's replay window requires signed times",
                super::TIMESTAMP
            ),
            Self::BadSignedTime(ts) => write!(f, "Bad {} {ts:?}", super::TIMESTAMP),
            Self::OutsideReplayWindow {
                signed_ms,
                window_ms,
                now_ms,
            } => write!(
                f,
                "Request signed at {signed_ms} is outside the replay window of {window_ms} ms (now {now_ms})"
            ),
            Self::ReplayWindowFull => write!(
                f,
                "Too many signed requests in the replay window ({MAX_REMEMBERED} remembered); try again"
            ),
            Self::Replayed => f.write_str("Replayed request: this signature was already used"),
            Self::UnreadableBody { body, error } => write!(f, "{body} body: {error}"),
        }
    }
}

impl std::error::Error for AclRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::UnreadableBody { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A refusal on the remoting port: NO_PERMISSION (16) with the refusal as its remark
/// (RocketMQ 4.x answers SYSTEM_ERROR).
impl From<AclRefusal> for Refusal {
    fn from(why: AclRefusal) -> Self {
        Refusal::new(ResponseCode::NoPermission, why.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients and tests match these remarks: every one, byte for byte.
    #[test]
    fn every_refusal_says_what_it_said_as_a_string() {
        let ak = || "tern_user".to_owned();
        for (why, text) in [
            (AclRefusal::NoAccessKey, "No accessKey is configured"),
            (
                AclRefusal::NoAccount("stranger".into()),
                "No acl config for stranger",
            ),
            (
                AclRefusal::BadSignature(ak()),
                "Check signature failed for accessKey=tern_user",
            ),
            (
                AclRefusal::NotAdmin {
                    code: 17,
                    access_key: ak(),
                },
                "Need admin permission for request code=17, but accessKey=tern_user is not admin",
            ),
            (
                AclRefusal::NoPermission {
                    resource: "ReadOnly".into(),
                    access_key: ak(),
                },
                "No permission for topic ReadOnly (accessKey=tern_user)",
            ),
            (
                AclRefusal::NoPermission {
                    resource: "%RETRY%BannedGroup".into(),
                    access_key: ak(),
                },
                "No permission for group BannedGroup (accessKey=tern_user)",
            ),
            (
                AclRefusal::NoSignedTime,
                "No AclTimestamp in the request: this server's replay window requires signed times",
            ),
            (
                AclRefusal::BadSignedTime("soon".into()),
                "Bad AclTimestamp \"soon\"",
            ),
            (
                AclRefusal::OutsideReplayWindow {
                    signed_ms: 1,
                    window_ms: 60_000,
                    now_ms: 70_000,
                },
                "Request signed at 1 is outside the replay window of 60000 ms (now 70000)",
            ),
            (
                AclRefusal::ReplayWindowFull,
                "Too many signed requests in the replay window (4194304 remembered); try again",
            ),
            (
                AclRefusal::Replayed,
                "Replayed request: this signature was already used",
            ),
            (
                AclRefusal::UnreadableBody {
                    body: "heartbeat",
                    error: BodyError::Binary("cut"),
                },
                "heartbeat body: bad binary body: cut",
            ),
        ] {
            assert_eq!(why.to_string(), text);
            let refusal = Refusal::from(why);
            assert_eq!(
                (refusal.code(), refusal.remark()),
                (ResponseCode::NoPermission, text)
            );
        }
    }
}
