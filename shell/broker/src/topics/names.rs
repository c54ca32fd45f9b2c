//! Topic and group names as RocketMQ's clients check them (`Validators`), and the reason
//! a name is refused, in their wording: the client is shown it.

use std::fmt;

use tern_shell::{Refusal, ResponseCode};

use super::MAX_TOPIC_LEN;
use crate::groups::MAX_GROUP_NAME_LEN;

/// What a checked name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameOf {
    /// A topic ([`super::validate_topic`]).
    Topic,
    /// A subscription group (`validate_group`).
    Group,
}

/// Why a topic or group name is refused: RocketMQ's client-side checks
/// (`Validators.checkTopic`, `checkGroup`) in their wording, which the client is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// Empty (a group: blank).
    Blank(NameOf),
    /// Longer than RocketMQ allows.
    TooLong(NameOf),
    /// The name, and its first character outside `^[%|a-zA-Z0-9_-]+$`.
    IllegalChar(NameOf, String, char),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let of = |n: &NameOf| match n {
            NameOf::Topic => "topic",
            NameOf::Group => "group",
        };
        match self {
            Self::Blank(n) => write!(f, "the specified {} is blank", of(n)),
            Self::TooLong(NameOf::Topic) => write!(
                f,
                "the specified topic is longer than topic max length {MAX_TOPIC_LEN}"
            ),
            Self::TooLong(NameOf::Group) => write!(
                f,
                "the specified group is longer than group max length {MAX_GROUP_NAME_LEN}."
            ),
            Self::IllegalChar(n, name, c) => write!(
                f,
                "the specified {}[{name}] contains illegal characters ('{c}'), allowing only ^[%|a-zA-Z0-9_-]+$",
                of(n)
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// A request naming a topic it may not: SYSTEM_ERROR with the reason, as RocketMQ answers.
impl From<NameError> for Refusal {
    fn from(e: NameError) -> Self {
        Refusal::new(ResponseCode::SystemError, e.to_string())
    }
}

/// RocketMQ's checks of a topic or group name: a group of only spaces is blank too.
pub(crate) fn validate_name(of: NameOf, name: &str) -> Result<(), NameError> {
    let (blank, max) = match of {
        NameOf::Topic => (name.is_empty(), MAX_TOPIC_LEN),
        NameOf::Group => (name.trim().is_empty(), MAX_GROUP_NAME_LEN),
    };
    if blank {
        return Err(NameError::Blank(of));
    }
    if name.len() > max {
        return Err(NameError::TooLong(of));
    }
    match illegal_char(name) {
        Some(c) => Err(NameError::IllegalChar(of, name.to_owned(), c)),
        None => Ok(()),
    }
}

/// The first character outside RocketMQ's charset for topic and group names,
/// `^[%|a-zA-Z0-9_-]+$`.
fn illegal_char(name: &str) -> Option<char> {
    name.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '%' | '|' | '-' | '_')))
}
