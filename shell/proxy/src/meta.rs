//! What every call's metadata says: the `x-mq-*` headers 5.x clients send, the
//! `authorization` header, the deadline, and the peer. RocketMQ's proxy reads the same
//! (`GrpcMessagingApplication.validateContext`, `DefaultAuthenticationContextBuilder`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use tonic::metadata::MetadataMap;

use crate::pb::Code;
use crate::status::status;

/// The signature scheme 5.x clients use (`MQv2-HMAC-SHA1`).
const ALGORITHM: &str = "MQv2-HMAC-SHA1";

/// One call's context.
#[derive(Debug, Clone)]
pub struct CallCtx {
    /// `x-mq-client-id`: the client, across all its calls and connections.
    pub client_id: String,
    /// `x-mq-language` (`JAVA`, `PYTHON`, ...).
    pub language: String,
    /// `x-mq-client-version`.
    pub version: String,
    /// `x-mq-namespace` (Tern has no namespaces: must be empty).
    pub namespace: String,
    /// `x-mq-request-id`, for logs.
    pub request_id: String,
    /// `x-mq-date-time`, the signed content.
    pub date_time: Option<String>,
    /// The parsed `authorization`, when one was sent.
    pub authorization: Option<Authorization>,
    /// Time left before the client gives up (`grpc-timeout`).
    pub deadline: Option<Duration>,
    /// The connection's peer.
    pub peer: SocketAddr,
}

/// A parsed `authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The account (`Credential=ak`, the first `/` part); empty when none was given.
    pub access_key: String,
    /// The HMAC-SHA1 tag (`Signature=`, hex: either case).
    pub signature: Vec<u8>,
}

fn text(meta: &MetadataMap, key: &str) -> Option<String> {
    meta.get(key)?.to_str().ok().map(str::to_owned)
}

impl CallCtx {
    /// Reads `meta`; `Err` is the status the call is answered with (CLIENT_ID_REQUIRED
    /// first, as the proxy checks it before anything else).
    pub fn read(meta: &MetadataMap, peer: Option<SocketAddr>) -> Result<Self, crate::pb::Status> {
        let client_id = text(meta, "x-mq-client-id").unwrap_or_default();
        if client_id.trim().is_empty() {
            return Err(status(Code::ClientIdRequired, "client id cannot be empty"));
        }
        let namespace = text(meta, "x-mq-namespace").unwrap_or_default();
        if !namespace.is_empty() {
            return Err(status(
                Code::BadRequest,
                format!("namespace {namespace:?} is not supported: Tern has no namespaces"),
            ));
        }
        let authorization = match text(meta, "authorization").filter(|a| !a.trim().is_empty()) {
            None => None,
            Some(a) => Some(
                parse_authorization(&a).map_err(|e| status(Code::Unauthorized, e))?,
            ),
        };
        Ok(Self {
            client_id,
            language: text(meta, "x-mq-language").unwrap_or_default(),
            version: text(meta, "x-mq-client-version").unwrap_or_default(),
            namespace,
            request_id: text(meta, "x-mq-request-id").unwrap_or_default(),
            date_time: text(meta, "x-mq-date-time"),
            authorization,
            deadline: text(meta, "grpc-timeout").and_then(|t| parse_grpc_timeout(&t)),
            peer: peer.unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)),
        })
    }
}

/// `MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=hex`, split as
/// RocketMQ splits it: the algorithm, then `,`-separated `key=value` items.
pub fn parse_authorization(s: &str) -> Result<Authorization, String> {
    let (algorithm, rest) = s
        .trim()
        .split_once(' ')
        .ok_or("authorization header is not '<algorithm> <items>'")?;
    if algorithm != ALGORITHM {
        return Err(format!("authorization algorithm {algorithm:?} is not {ALGORITHM}"));
    }
    let (mut access_key, mut signature) = (None, None);
    for item in rest.split(',') {
        let (k, v) = item
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("authorization item {:?} has no '='", item.trim()))?;
        match k {
            "Credential" => access_key = Some(v.split('/').next().unwrap_or("").to_owned()),
            "Signature" => signature = Some(hex(v).ok_or("authorization signature is not hex")?),
            _ => {}
        }
    }
    Ok(Authorization {
        access_key: access_key.unwrap_or_default(),
        signature: signature.unwrap_or_default(),
    })
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// gRPC's `grpc-timeout`: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    if s.len() < 2 || s.len() > 9 {
        return None;
    }
    let (digits, unit) = s.split_at(s.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_python_clients_authorization_parses() {
        let a = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=ak1, SignedHeaders=x-mq-date-time, \
             Signature=b2d1c3efa8cb48d34e20c4dfc23f0885ddc57333",
        )
        .unwrap();
        assert_eq!(a.access_key, "ak1");
        assert_eq!(a.signature.len(), 20);
        // Java signs in upper case; both decode to the same bytes.
        let upper = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=ak1/x, SignedHeaders=x-mq-date-time, \
             Signature=B2D1C3EFA8CB48D34E20C4DFC23F0885DDC57333",
        )
        .unwrap();
        assert_eq!(upper, a);
        // The tag is HMAC-SHA1(sk, date-time), checked here against a value computed
        // by the real client.
        assert!(tern_shell::acl::verify_tag(
            "sk1",
            &[b"20261201T212901Z"],
            &a.signature
        ));
        let empty = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=",
        )
        .unwrap();
        assert_eq!(empty.access_key, "");
        for bad in ["", "MQv2-HMAC-SHA1", "Basic abc", "MQv2-HMAC-SHA1 Credential", "MQv2-HMAC-SHA1 Signature=zz"] {
            assert!(parse_authorization(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("23S"), Some(Duration::from_secs(23)));
        assert_eq!(parse_grpc_timeout("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("12X"), None);
        assert_eq!(parse_grpc_timeout("1234567890S"), None);
    }
}
