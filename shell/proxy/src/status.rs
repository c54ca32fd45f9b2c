//! Answers' `apache.rocketmq.v2.Status`: errors are in-band (the RPC itself succeeds and
//! carries the code), as RocketMQ's proxy answers. One table maps a broker's remoting code
//! or a client-side failure to a v2 `Code`.

use tern_client::ClientError;
use tern_shell::ResponseCode;

use crate::pb::{Code, Status};

/// A status with `code` and `message`.
pub fn status(code: Code, message: impl Into<String>) -> Status {
    Status {
        code: code as i32,
        message: message.into(),
    }
}

/// `OK`.
pub fn ok() -> Status {
    status(Code::Ok, "OK")
}

/// The v2 code for a broker's answer `code` (RocketMQ's proxy: `ResponseBuilder`, with
/// NO_PERMISSION, TOPIC_NOT_EXIST and the send durability codes made precise where the
/// Java proxy in LOCAL mode says INTERNAL_SERVER_ERROR).
pub fn from_remoting(code: ResponseCode) -> Code {
    match code {
        ResponseCode::Success => Code::Ok,
        ResponseCode::SystemBusy | ResponseCode::FlowControl => Code::TooManyRequests,
        ResponseCode::RequestCodeNotSupported => Code::NotImplemented,
        ResponseCode::SubscriptionGroupNotExist => Code::ConsumerGroupNotFound,
        ResponseCode::TopicNotExist => Code::TopicNotFound,
        ResponseCode::NoPermission => Code::Forbidden,
        ResponseCode::MessageIllegal => Code::BadRequest,
        ResponseCode::FlushDiskTimeout => Code::MasterPersistenceTimeout,
        ResponseCode::FlushSlaveTimeout => Code::SlavePersistenceTimeout,
        ResponseCode::SlaveNotAvailable => Code::HaNotAvailable,
        _ => Code::InternalServerError,
    }
}

/// The status for a failed call to a broker or name server.
pub fn from_client_error(e: &ClientError) -> Status {
    let code = match e {
        ClientError::TopicNotExist { .. } | ClientError::NoRoute { .. } => Code::TopicNotFound,
        ClientError::BrokerBusy { .. } => Code::TooManyRequests,
        ClientError::MessageTooLarge { .. } => Code::MessageBodyTooLarge,
        ClientError::InvalidMessage(_) => Code::BadRequest,
        ClientError::Timeout { .. } => Code::ProxyTimeout,
        ClientError::Broker { code, .. } => from_remoting(ResponseCode::from_raw(*code)),
        ClientError::NotFound(_) => Code::NotFound,
        ClientError::NameServerUnreachable { .. }
        | ClientError::Network { .. }
        | ClientError::Protocol(_)
        | ClientError::Shutdown => Code::InternalServerError,
    };
    status(code, e.to_string())
}

/// The top-level status of a batch of entries: the single code when they agree,
/// `MULTIPLE_RESULTS` when they do not (the proxy's rule).
pub fn overall<'a>(entries: impl IntoIterator<Item = &'a Status>) -> Status {
    let mut first: Option<&Status> = None;
    for s in entries {
        match first {
            None => first = Some(s),
            Some(f) if f.code != s.code => return status(Code::MultipleResults, "multiple results"),
            Some(_) => {}
        }
    }
    first.cloned().unwrap_or_else(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remoting_codes_map_as_the_proxy_maps_them() {
        assert_eq!(from_remoting(ResponseCode::Success), Code::Ok);
        assert_eq!(from_remoting(ResponseCode::SystemBusy), Code::TooManyRequests);
        assert_eq!(from_remoting(ResponseCode::TopicNotExist), Code::TopicNotFound);
        assert_eq!(from_remoting(ResponseCode::SystemError), Code::InternalServerError);
        let e = ClientError::Broker {
            code: 16,
            remark: "no".into(),
        };
        assert_eq!(from_client_error(&e).code, Code::Forbidden as i32);
    }

    #[test]
    fn entries_that_differ_are_multiple_results() {
        let a = ok();
        let b = status(Code::InternalServerError, "x");
        assert_eq!(overall([&a, &a]).code, Code::Ok as i32);
        assert_eq!(overall([&a, &b]).code, Code::MultipleResults as i32);
        assert_eq!(overall([&b]).message, "x");
    }
}
