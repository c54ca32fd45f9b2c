//! What a request processor answers: a response, or a [`Refusal`] that becomes RocketMQ's
//! error response (a code and a remark written for the client).
//!
//! Processors return [`Answer`] so that a header or body the peer got wrong ends the
//! request with `?`, one way, instead of each processor matching on the decode and
//! building the error response itself.

use std::fmt;

use crate::body::BodyError;
use crate::code::ResponseCode;
use crate::frame::RemotingCommand;
use crate::headers::HeaderError;

/// A processor's answer to one request.
pub type Answer = Result<RemotingCommand, Refusal>;

/// Why a request is refused: the response code and the remark the client is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    code: ResponseCode,
    remark: String,
}

impl Refusal {
    /// A refusal with `code` and a remark written for the client.
    pub fn new(code: ResponseCode, remark: impl Into<String>) -> Self {
        Self {
            code,
            remark: remark.into(),
        }
    }

    /// The response code the client gets.
    pub fn code(&self) -> ResponseCode {
        self.code
    }

    /// The remark the client gets.
    pub fn remark(&self) -> &str {
        &self.remark
    }

    /// The error response to `req` that carries this refusal.
    pub fn into_response(self, req: &RemotingCommand) -> RemotingCommand {
        RemotingCommand::error_response(req, self.code, self.remark)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.remark)
    }
}

/// A header that does not decode: SYSTEM_ERROR naming the field, as Java's
/// `RemotingCommandException` is answered.
impl From<HeaderError> for Refusal {
    fn from(e: HeaderError) -> Self {
        Self::new(ResponseCode::SystemError, e.to_string())
    }
}

/// A body that does not decode: SYSTEM_ERROR saying why, as Java answers a fastjson failure.
impl From<BodyError> for Refusal {
    fn from(e: BodyError) -> Self {
        Self::new(ResponseCode::SystemError, e.to_string())
    }
}

/// Either side of an [`Answer`] as the response to `req`.
pub fn respond(req: &RemotingCommand, answer: Answer) -> RemotingCommand {
    answer.unwrap_or_else(|refusal| refusal.into_response(req))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::RequestCode;

    #[test]
    fn a_refusal_answers_with_its_code_and_remark_under_the_request_opaque() {
        let mut req = RemotingCommand::request_code(RequestCode::PullMessage);
        req.opaque = 7;
        let missing: Answer = Err(HeaderError::Missing("consumerGroup").into());
        let resp = respond(&req, missing);
        assert_eq!(resp.opaque, req.opaque);
        assert_eq!(resp.code, ResponseCode::SystemError.raw());
        assert_eq!(
            resp.remark.as_deref(),
            Some("the custom field <consumerGroup> is null")
        );
        let refused = Refusal::new(ResponseCode::NoPermission, "no");
        assert_eq!(refused.code(), ResponseCode::NoPermission);
        let resp = respond(&req, Err(refused));
        assert_eq!(resp.code, ResponseCode::NoPermission.raw());
    }
}
