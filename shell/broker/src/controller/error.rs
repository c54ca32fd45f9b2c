//! Why a call to the controllers, or the step it was for, did not go through. Each is
//! logged by the role loop, which tries again; the text is the log line's, word for word.

use std::fmt;

use tern_shell::body::BodyError;
use tern_shell::headers::HeaderError;
use tern_shell::{RemotingCommand, RemotingError};

use crate::register::ErrorAnswer;

/// Why a controller-mode step failed.
#[derive(Debug)]
pub enum ControllerError {
    /// No controller named a leader: why, per controller asked.
    NoLeader(Vec<String>),
    /// The controller asked (by address) answered that it no longer leads.
    NotLeader(String),
    /// The call to the controller at this address failed on its connection.
    Remoting(String, RemotingError),
    /// The controller answered a request (named as RocketMQ names it) with an error.
    Refused(String, ErrorAnswer),
    /// An answer's header did not decode.
    Header(HeaderError),
    /// An answer's body did not decode.
    Body(BodyError),
    /// An answer this broker cannot act on.
    Unusable(String),
    /// This replica's own files (identity, epochs) could not be read or written.
    Replica(String),
}

impl ControllerError {
    /// `resp`, an error answer to `request`.
    pub(crate) fn refused(request: impl Into<String>, resp: &RemotingCommand) -> Self {
        Self::Refused(request.into(), ErrorAnswer::of(resp))
    }
}

impl fmt::Display for ControllerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLeader(why) => write!(f, "no controller leader: {}", why.join("; ")),
            Self::NotLeader(addr) => write!(f, "{addr} no longer leads"),
            Self::Remoting(addr, e) => write!(f, "{addr}: {e}"),
            Self::Refused(request, answer) => write!(f, "{request}: {answer}"),
            Self::Header(e) => write!(f, "{e}"),
            Self::Body(e) => write!(f, "{e}"),
            Self::Unusable(text) | Self::Replica(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for ControllerError {}

impl From<HeaderError> for ControllerError {
    fn from(e: HeaderError) -> Self {
        Self::Header(e)
    }
}

impl From<BodyError> for ControllerError {
    fn from(e: BodyError) -> Self {
        Self::Body(e)
    }
}
