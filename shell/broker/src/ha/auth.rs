//! Slaves prove who they are before a master streams them its log (`aclEnable=true` on
//! the master; RocketMQ's HA port streams the whole log to any peer that sends 8 bytes).
//!
//! A challenge and an answer, before the first report:
//! 1. slave → master: [`HELLO`], 8 bytes whose value as a report would be a negative
//!    offset, which no plain slave sends;
//! 2. master → slave: [`HELLO`] again and a 16-byte nonce, fresh per connection;
//! 3. slave → master: its access key (a 2-byte big-endian length, then the key) and
//!    HMAC-SHA1 under its secret over `HELLO ‖ nonce ‖ key` (20 bytes).
//!
//! The master checks the key against its ACL rules: the account must exist and be an
//! admin (a slave reads every topic), and the tag must match (compared in constant time).
//! A captured answer is worthless on another connection: the nonce differs. A slave
//! signs in when it has `innerClientAuthenticationCredentials`; a master without
//! `aclEnable` goes through the same exchange and accepts any answer, and takes a slave
//! that skips it, as before. Anything else is closed and logged by the caller.

use std::time::Duration;

use async_std::io::{ReadExt, WriteExt};
use tern_shell::acl::guard::Acl;
use tern_shell::acl::{AclRefusal, SessionCredentials, random_bytes, tag, verify_tag};
use tern_shell::tls::SharedStream;

use super::error::{HaError, timed};

/// The slave's first bytes when it signs in (negative as an i64 report).
pub const HELLO: [u8; 8] = *b"\xffTERNHA1";
/// Bytes of the master's nonce.
const NONCE: usize = 16;
/// HMAC-SHA1's output.
const TAG: usize = 20;
/// Longest access key accepted.
const MAX_KEY: usize = 255;
/// How long each side waits for the other's part of the exchange: a peer that connects
/// and says nothing holds a connection slot no longer than this.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads `buf` full within [`AUTH_TIMEOUT`] (the HA port's exchanges before streaming).
pub(crate) async fn read(
    mut stream: &SharedStream,
    buf: &mut [u8],
    what: &str,
) -> Result<(), HaError> {
    timed(
        AUTH_TIMEOUT,
        stream.read_exact(buf),
        || format!("no {what} within {AUTH_TIMEOUT:?}"),
        format!("reading the {what}"),
    )
    .await
}

/// Writes and flushes `buf` within [`AUTH_TIMEOUT`].
pub(crate) async fn write(stream: &SharedStream, buf: &[u8], what: &str) -> Result<(), HaError> {
    timed(
        AUTH_TIMEOUT,
        send(stream, buf),
        || format!("sending the {what} took over {AUTH_TIMEOUT:?}"),
        format!("sending the {what}"),
    )
    .await
}

/// Writes and flushes `buf`: over TLS a write may stay in the session's buffer otherwise.
pub(crate) async fn send(mut stream: &SharedStream, buf: &[u8]) -> std::io::Result<()> {
    stream.write_all(buf).await?;
    stream.flush().await
}

/// The master's side, run first on every connection: `Ok(Some(offset))` when the slave
/// skipped the exchange and sent its first report (only without `acl`), `Ok(None)` when
/// it signed in (and, with `acl`, proved an admin account), `Err` why it is refused.
pub async fn admit(stream: &SharedStream, acl: Option<&Acl>) -> Result<Option<[u8; 8]>, HaError> {
    let mut first = [0u8; 8];
    read(stream, &mut first, "first report or HELLO").await?;
    if first != HELLO {
        return match acl {
            None => Ok(Some(first)),
            Some(_) => Err(HaError::Protocol(
                "not signed in: aclEnable is on and the slave sent no HELLO (give it \
                 innerClientAuthenticationCredentials of an admin account)"
                    .into(),
            )),
        };
    }
    let nonce: [u8; NONCE] = random_bytes();
    let mut challenge = [0u8; 8 + NONCE];
    challenge[..8].copy_from_slice(&HELLO);
    challenge[8..].copy_from_slice(&nonce);
    write(stream, &challenge, "challenge").await?;
    let mut len = [0u8; 2];
    read(stream, &mut len, "answer").await?;
    let len = usize::from(u16::from_be_bytes(len));
    if len == 0 || len > MAX_KEY {
        return Err(HaError::Protocol(format!("an access key of {len} bytes")));
    }
    let mut key = vec![0u8; len];
    read(stream, &mut key, "answer").await?;
    let mut sent = [0u8; TAG];
    read(stream, &mut sent, "answer").await?;
    let Some(acl) = acl else {
        return Ok(None);
    };
    let key = String::from_utf8(key)
        .map_err(|_| HaError::Protocol("an access key that is not UTF-8".into()))?;
    let rules = acl.rules();
    let Some(account) = rules.accounts.get(&key) else {
        return Err(HaError::Protocol(AclRefusal::NoAccount(key).to_string()));
    };
    if !verify_tag(
        &account.secret_key,
        &[&HELLO, &nonce, key.as_bytes()],
        &sent,
    ) {
        return Err(HaError::Protocol(AclRefusal::BadSignature(key).to_string()));
    }
    if !account.admin {
        return Err(HaError::Protocol(format!(
            "accessKey={key} is not admin: a slave reads every topic, so it needs an admin account"
        )));
    }
    log::info!("slave signed in as {key}");
    Ok(None)
}

/// The slave's side, right after connecting, when it has credentials.
pub async fn sign_in(stream: &SharedStream, creds: &SessionCredentials) -> Result<(), HaError> {
    let key = creds.access_key.as_bytes();
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(HaError::Local(format!(
            "an access key of {} bytes",
            key.len()
        )));
    }
    write(stream, &HELLO, "HELLO").await?;
    let mut challenge = [0u8; 8 + NONCE];
    read(
        stream,
        &mut challenge,
        "master's challenge (a master without Tern's HA sign-in?)",
    )
    .await?;
    if challenge[..8] != HELLO {
        return Err(HaError::Protocol(
            "the master answered HELLO with something else".into(),
        ));
    }
    let mut nonce = [0u8; NONCE];
    nonce.copy_from_slice(&challenge[8..]);
    let mut answer = Vec::with_capacity(2 + key.len() + TAG);
    answer.extend_from_slice(&(key.len() as u16).to_be_bytes());
    answer.extend_from_slice(key);
    answer.extend_from_slice(&tag(&creds.secret_key, &[&HELLO, &nonce, key]));
    write(stream, &answer, "answer").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_is_no_report_a_plain_slave_sends() {
        assert!(i64::from_be_bytes(HELLO) < 0);
    }

    #[test]
    fn an_answer_holds_only_for_its_nonce_key_and_secret() {
        let (n1, n2): ([u8; NONCE], [u8; NONCE]) = (random_bytes(), random_bytes());
        assert_ne!(n1, n2);
        let t = tag("secret12", &[&HELLO, &n1, b"slave1"]);
        assert!(verify_tag("secret12", &[&HELLO, &n1, b"slave1"], &t));
        assert!(!verify_tag("secret12", &[&HELLO, &n2, b"slave1"], &t));
        assert!(!verify_tag("secret13", &[&HELLO, &n1, b"slave1"], &t));
        assert!(!verify_tag("secret12", &[&HELLO, &n1, b"slave2"], &t));
    }
}
