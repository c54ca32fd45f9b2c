//! Why a call to the controllers, or the step it was for, did not go through. Each is
//! logged by the role loop, which tries again; the text is the log line's, word for word.
//! Also why this replica's own files (its identity, its epoch file) failed it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use tern_engine_fs::MetaError;

use tern_shell::body::BodyError;
use tern_shell::headers::HeaderError;
use tern_shell::{RemotingCommand, RemotingError};

use super::epoch::{EpochEntry, EpochError};
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
    /// This replica's identity files could not be read, used or written.
    Identity(IdentityError),
    /// This replica's epoch file could not take the new term.
    Epochs(EpochsError),
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
            Self::Unusable(text) => f.write_str(text),
            Self::Identity(e) => e.fmt(f),
            Self::Epochs(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ControllerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Remoting(_, e) => Some(e),
            Self::Refused(_, answer) => Some(answer),
            Self::Header(e) => Some(e),
            Self::Body(e) => Some(e),
            Self::Identity(e) => Some(e),
            Self::Epochs(e) => Some(e),
            Self::NoLeader(_) | Self::NotLeader(_) | Self::Unusable(_) => None,
        }
    }
}

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

impl From<IdentityError> for ControllerError {
    fn from(e: IdentityError) -> Self {
        Self::Identity(e)
    }
}

impl From<EpochsError> for ControllerError {
    fn from(e: EpochsError) -> Self {
        Self::Epochs(e)
    }
}

/// Why an identity file (`brokerIdentity`, or `brokerIdentity-temp` with the id applied
/// for) could not be read, used or written. `path` is always the file's; the Display text
/// is for the role loop's log line.
#[derive(Debug)]
pub enum IdentityError {
    /// Reading it failed (its absence is no error: no identity yet).
    Read { path: PathBuf, error: io::Error },
    /// It is over 4 KiB: not an identity.
    TooLarge { path: PathBuf },
    /// `brokerIdentity` is not `cluster#name#id`.
    Malformed { path: PathBuf },
    /// Its id is not a number.
    BadId { path: PathBuf, id: String },
    /// `brokerIdentity` names another broker-set: this store is another broker's.
    OtherBroker {
        path: PathBuf,
        /// The cluster and broker name it holds.
        found: (String, String),
        /// This broker's.
        ours: (String, String),
    },
    /// `brokerIdentity-temp` is not this broker's application (another cluster or name,
    /// or not `cluster#name#id#code`).
    NotThisBrokers { path: PathBuf },
    /// Writing it failed.
    Write { path: PathBuf, error: MetaError },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, error } => write!(f, "reading {}: {error}", path.display()),
            Self::TooLarge { path } => write!(f, "{} is too large", path.display()),
            Self::Malformed { path } => write!(f, "{}: not cluster#name#id", path.display()),
            Self::BadId { path, id } => write!(f, "{}: bad broker id '{id}'", path.display()),
            Self::OtherBroker {
                path,
                found: (c, n),
                ours: (cluster, name),
            } => write!(
                f,
                "{} belongs to {c}/{n}, not {cluster}/{name}: this store is another broker's",
                path.display()
            ),
            Self::NotThisBrokers { path } => write!(f, "{}: not this broker's", path.display()),
            Self::Write { path, error } => write!(f, "writing {}: {error}", path.display()),
        }
    }
}

impl std::error::Error for IdentityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { error, .. } => Some(error),
            Self::Write { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why the epoch file could not be opened or take a term (one this broker begins as
/// master, or the master's list a rejoining slave adopts).
#[derive(Debug)]
pub enum EpochsError {
    /// Neither the file nor its backup could be used (at start).
    Open(EpochError),
    /// The new term does not follow the last one: a master never goes back to an epoch.
    Begin(EpochError),
    /// The master's list is not ascending, or starts below 0.
    MasterOutOfOrder(Vec<EpochEntry>),
    /// This replica began a term (promoted meanwhile) newer than the master's last.
    NewerThanMaster { ours: i32, theirs: i32 },
    /// Writing the file (or its backup) failed.
    Save(io::Error),
}

impl fmt::Display for EpochsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(e) => write!(f, "the epoch file: {e}"),
            Self::Begin(e) => e.fmt(f),
            Self::MasterOutOfOrder(entries) => {
                // As the file writes them: epoch-startOffset.
                f.write_str("the master's epochs are out of order:")?;
                for e in entries {
                    write!(f, " {}-{}", e.epoch, e.start_offset)?;
                }
                Ok(())
            }
            Self::NewerThanMaster { ours, theirs } => write!(
                f,
                "this replica's epoch {ours} is newer than the master's {theirs}"
            ),
            Self::Save(e) => write!(f, "writing the epoch file: {e}"),
        }
    }
}

impl std::error::Error for EpochsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(e) | Self::Begin(e) => Some(e),
            Self::Save(e) => Some(e),
            _ => None,
        }
    }
}
