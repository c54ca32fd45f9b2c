//! RocketMQ's ACL signature (4.x "plain ACL"), the same on both sides of a request.
//!
//! A client adds `AccessKey` (and `SecurityToken` when it has one) to a request's
//! extFields, then signs: HMAC-SHA1 with its secret key over the values of every extField
//! but `Signature`, in key order, followed by the body; the Base64 of that is sent as
//! `Signature`. A broker recomputes it from what arrived with the account's secret. Both
//! sides sign the fields as they are on the wire, so extra fields a client adds (the C++
//! client's `OnsChannel`) are covered without either side knowing them.
//!
//! Tern's client also signs a time and a nonce ([`TIMESTAMP`], [`NONCE`]), so a server
//! with a replay window ([`guard`]) can refuse a captured request sent again; RocketMQ's
//! servers sign-check them like any other field.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;

use crate::ext_fields::ToCompactString;
use crate::frame::{ExtFields, RemotingCommand};

pub mod guard;
mod refusal;
mod replay;
pub mod rules;
pub mod settings;

pub use refusal::AclRefusal;

/// extField naming the account.
pub const ACCESS_KEY: &str = "AccessKey";
/// extField carrying the signature.
pub const SIGNATURE: &str = "Signature";
/// extField carrying an optional session token.
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// extField a Java client adds to unique-key queries; not signed (RocketMQ's
/// `MixAll.UNIQUE_MSG_QUERY_FLAG`).
pub const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

/// extField with the signing time (ms since the epoch), sent by Tern's client.
pub const TIMESTAMP: &str = "AclTimestamp";
/// extField with a value never repeated by one client process, sent by Tern's client:
/// two requests signed in the same millisecond with the same fields still differ.
pub const NONCE: &str = "AclNonce";

/// A keyed HMAC-SHA1.
pub(crate) fn mac(secret: &[u8]) -> Hmac<Sha1> {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mac) = Hmac::<Sha1>::new_from_slice(secret) else {
        unreachable!("HMAC accepts keys of any length")
    };
    mac
}

fn signed_mac(fields: &ExtFields, body: &[u8], secret: &str) -> Hmac<Sha1> {
    let mut mac = mac(secret.as_bytes());
    for (k, v) in fields {
        if k != SIGNATURE && k != UNIQUE_MSG_QUERY_FLAG {
            mac.update(v.as_bytes());
        }
    }
    mac.update(body);
    mac
}

/// The signature of `fields` and `body` under `secret`: Base64 (with padding) of
/// HMAC-SHA1 over the field values in key order (`Signature` and the unique-key query
/// flag left out) followed by the body.
pub fn signature(fields: &ExtFields, body: &[u8], secret: &str) -> String {
    let tag = signed_mac(fields, body, secret).finalize().into_bytes();
    base64::engine::general_purpose::STANDARD.encode(tag)
}

/// Whether `sent` (a `Signature` as it arrived) is the signature of `fields` and `body`
/// under `secret`, compared in constant time: how far a guess matches takes no longer
/// to find out than a wrong first byte.
pub fn verify(fields: &ExtFields, body: &[u8], secret: &str, sent: &str) -> bool {
    let Ok(tag) = base64::engine::general_purpose::STANDARD.decode(sent) else {
        return false;
    };
    signed_mac(fields, body, secret).verify_slice(&tag).is_ok()
}

/// HMAC-SHA1 under `secret` over `parts` in order: a challenge's answer (the HA
/// port's sign-in).
pub fn tag(secret: &str, parts: &[&[u8]]) -> [u8; 20] {
    let mut mac = mac(secret.as_bytes());
    parts.iter().for_each(|p| mac.update(p));
    mac.finalize().into_bytes().into()
}

/// Whether `sent` is [`tag`]`(secret, parts)`, compared in constant time.
pub fn verify_tag(secret: &str, parts: &[&[u8]], sent: &[u8]) -> bool {
    let mut mac = mac(secret.as_bytes());
    parts.iter().for_each(|p| mac.update(p));
    mac.verify_slice(sent).is_ok()
}

/// A comma-separated ACL list (topic and group permissions, white addresses):
/// `a, b,,c` → `[a, b, c]`, items trimmed and empty ones skipped. The broker, `tern-admin`
/// and the console read these lists by this one rule.
pub fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `N` bytes of the OS's randomness, for nonces and challenges. Without it (no
/// entropy source at all) the process cannot promise fresh challenges: it stops.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    if let Err(e) = getrandom::fill(&mut out) {
        panic!("the OS gave no random bytes: {e}");
    }
    out
}

/// A nonce for [`NONCE`]: a random per-process prefix and a counter.
fn nonce() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| u64::from_be_bytes(random_bytes()));
    format!("{prefix:016x}{:x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One account as an admin sends it to be created or updated (RocketMQ's
/// `PlainAccessConfig`): the admin client builds it, the broker applies it to
/// `plain_acl.yml`. `None` keeps what the account has.
#[derive(Debug, Clone, Default)]
pub struct AccessConfig {
    /// The account (at least 6 characters).
    pub access_key: String,
    /// Its secret (at least 6 characters).
    pub secret_key: Option<String>,
    /// Addresses that need no signature.
    pub white_remote_address: Option<String>,
    /// Admin account (always sent and written, as RocketMQ does).
    pub admin: bool,
    /// Default permission on topics (`DENY`, `PUB`, `SUB`, `PUB|SUB`, `ANY`).
    pub default_topic_perm: Option<String>,
    /// Default permission on groups.
    pub default_group_perm: Option<String>,
    /// `topic=PERM` entries (replacing the account's list).
    pub topic_perms: Option<Vec<String>>,
    /// `group=PERM` entries (replacing the account's list).
    pub group_perms: Option<Vec<String>>,
}

/// An account's credentials, as a client holds them.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionCredentials {
    /// The account name.
    pub access_key: String,
    /// The shared secret (never sent).
    pub secret_key: String,
    /// Optional session token, signed and sent as `SecurityToken`.
    pub security_token: Option<String>,
}

impl std::fmt::Debug for SessionCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("SessionCredentials")
            .field("access_key", &self.access_key)
            .field("security_token", &self.security_token.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl SessionCredentials {
    /// Credentials without a session token.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }

    /// Adds `AccessKey` (and `SecurityToken`), the time and a nonce to `cmd` and signs
    /// it, as RocketMQ's `AclClientRPCHook` does before a request leaves.
    pub fn sign(&self, cmd: &mut RemotingCommand) {
        cmd.ext_fields.insert(ACCESS_KEY, self.access_key.as_str());
        if let Some(t) = &self.security_token {
            cmd.ext_fields.insert(SECURITY_TOKEN, t.as_str());
        }
        cmd.ext_fields
            .insert(TIMESTAMP, now_ms().to_compact_string());
        cmd.ext_fields.insert(NONCE, nonce());
        let sig = signature(&cmd.ext_fields, &cmd.body, &self.secret_key);
        cmd.ext_fields.insert(SIGNATURE, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Reference values from Python's `hmac` module, an independent implementation:
    /// `base64.b64encode(hmac.new(b"12345678", b"RocketMQ0TopicAbody", "sha1").digest())`.
    #[test]
    fn a_list_is_trimmed_and_skips_empty_items() {
        assert_eq!(split_list(" a, b,,c ,"), ["a", "b", "c"]);
        assert!(split_list("").is_empty());
    }

    #[test]
    fn signature_is_hmac_sha1_base64_over_sorted_values_then_body() {
        let f = fields(&[
            ("topic", "TopicA"),
            ("AccessKey", "RocketMQ"),
            ("queueId", "0"),
        ]);
        assert_eq!(
            signature(&f, b"body", "12345678"),
            "Jxl6VWMQAbS2UxjFPtHYK0mYAOE="
        );
        // The signature field and the unique-key query flag are not signed.
        let mut g = f.clone();
        g.insert(SIGNATURE, "x");
        g.insert(UNIQUE_MSG_QUERY_FLAG, "true");
        assert_eq!(
            signature(&g, b"body", "12345678"),
            signature(&f, b"body", "12345678")
        );
        assert_ne!(
            signature(&f, b"bodx", "12345678"),
            signature(&f, b"body", "12345678")
        );
        assert_ne!(
            signature(&f, b"body", "12345679"),
            signature(&f, b"body", "12345678")
        );
    }

    #[test]
    fn signing_adds_the_key_and_a_signature_a_verifier_recomputes() {
        let mut cmd = RemotingCommand::request_code(crate::RequestCode::GetMaxOffset);
        cmd.ext_fields.insert("topic", "T");
        cmd.body = b"payload".to_vec();
        let mut creds = SessionCredentials::new("ak", "sk");
        creds.security_token = Some("tok".into());
        creds.sign(&mut cmd);
        assert_eq!(cmd.ext_fields[ACCESS_KEY], "ak");
        assert_eq!(cmd.ext_fields[SECURITY_TOKEN], "tok");
        let sent = cmd.ext_fields[SIGNATURE].clone();
        assert_eq!(signature(&cmd.ext_fields, &cmd.body, "sk"), sent);
        assert!(verify(&cmd.ext_fields, &cmd.body, "sk", &sent));
        assert!(!verify(&cmd.ext_fields, &cmd.body, "sk2", &sent));
        assert!(!verify(&cmd.ext_fields, &cmd.body, "sk", "not base64!"));
        // Time and nonce are signed, and a second signing gets another nonce.
        assert!(cmd.ext_fields[TIMESTAMP].parse::<u64>().unwrap() > 1_700_000_000_000);
        let first_nonce = cmd.ext_fields[NONCE].clone();
        creds.sign(&mut cmd);
        assert_ne!(cmd.ext_fields[NONCE], first_nonce);
        assert!(!format!("{creds:?}").contains("sk\""), "{creds:?}");
    }
}
