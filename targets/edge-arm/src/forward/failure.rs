//! How the forwarder tells failures apart (see the module docs of [`super`]).

use tern_client::ClientError;
use tern_shell::ResponseCode;

/// Why a send failed, as the forwarder acts on it.
#[derive(Debug)]
pub enum Failure {
    /// May pass by itself: retried in place.
    Passing(String),
    /// The topic is refused until an operator acts: parked. `state` names the refusal
    /// (logged once per change), `detail` says the rest.
    Blocked {
        /// NO_PERMISSION, TOPIC_NOT_EXIST, ...
        state: &'static str,
        /// The cluster's words.
        detail: String,
    },
    /// This message will never be taken: a dead letter.
    ForGood(String),
}

impl Failure {
    /// Classifies a client error.
    pub fn of(e: &ClientError) -> Failure {
        match e {
            ClientError::MessageTooLarge { .. } | ClientError::InvalidMessage(_) => {
                Failure::ForGood(e.to_string())
            }
            ClientError::Broker { code, .. } if *code == ResponseCode::MessageIllegal.raw() => {
                Failure::ForGood(e.to_string())
            }
            ClientError::Broker { code, .. } if *code == ResponseCode::NoPermission.raw() => {
                Failure::Blocked {
                    state: "NO_PERMISSION",
                    detail: e.to_string(),
                }
            }
            ClientError::Broker { code, .. } if *code == ResponseCode::TopicNotExist.raw() => {
                Failure::Blocked {
                    state: "TOPIC_NOT_EXIST",
                    detail: e.to_string(),
                }
            }
            ClientError::TopicNotExist { .. } => Failure::Blocked {
                state: "TOPIC_NOT_EXIST",
                detail: e.to_string(),
            },
            // The name servers answered and know no route (nor TBW102 to create one):
            // the topic does not exist centrally and may not be auto-created.
            ClientError::NoRoute { .. } => Failure::Blocked {
                state: "TOPIC_NOT_EXIST",
                detail: e.to_string(),
            },
            _ => Failure::Passing(e.to_string()),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Passing(s) | Self::ForGood(s) => f.write_str(s),
            Self::Blocked { state, detail } => write!(f, "{state}: {detail}"),
        }
    }
}
