//! The console's own login: a configured user and password, checked once, then a random
//! session token in an `HttpOnly; SameSite=Strict` cookie. Sessions live in memory (a
//! restart logs everyone out) and expire after [`SESSION_TTL`] unused.
//!
//! CSRF: a request that changes something (any method but GET and HEAD) must carry the
//! header `X-Tern-Console: 1`, which a form on another site cannot send; with the
//! SameSite cookie that is the rule OWASP calls "custom request header".

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tern_shell::http::Request;
use tern_shell::sync::MutexExt;

/// The session cookie's name.
pub const COOKIE: &str = "tern_console";
/// The header every changing request carries.
pub const CSRF_HEADER: &str = "x-tern-console";
/// How long a session lasts without a request.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Most sessions kept; the oldest is dropped past it.
const MAX_SESSIONS: usize = 1024;

/// Who may use the console.
#[derive(Debug)]
pub struct Auth {
    login: Option<(String, String)>,
    sessions: Mutex<HashMap<String, Instant>>,
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No valid session (401).
    LoginRequired,
    /// A changing request without the CSRF header (403).
    MissingCsrfHeader,
}

impl Auth {
    /// With `login`, every API call but the login itself needs a session.
    pub fn new(login: Option<(String, String)>) -> Self {
        Self {
            login,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a login is needed at all.
    pub fn required(&self) -> bool {
        self.login.is_some()
    }

    /// Checks a request to the API.
    pub fn check(&self, req: &Request) -> Result<(), Refusal> {
        check_csrf(req)?;
        if self.login.is_none() {
            return Ok(());
        }
        let token = req.cookie(COOKIE).ok_or(Refusal::LoginRequired)?;
        let mut sessions = self.sessions.guard();
        match sessions.get_mut(token) {
            Some(seen) if seen.elapsed() < SESSION_TTL => {
                *seen = Instant::now();
                Ok(())
            }
            Some(_) => {
                sessions.remove(token);
                Err(Refusal::LoginRequired)
            }
            None => Err(Refusal::LoginRequired),
        }
    }

    /// A new session's token when `user` and `password` match (compared in constant
    /// time, so the answer's timing does not tell how much of a guess was right).
    pub fn login(&self, user: &str, password: &str) -> Option<String> {
        let (u, p) = self.login.as_ref()?;
        let ok = constant_time_eq(u.as_bytes(), user.as_bytes())
            & constant_time_eq(p.as_bytes(), password.as_bytes());
        if !ok {
            return None;
        }
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).ok()?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut sessions = self.sessions.guard();
        sessions.retain(|_, seen| seen.elapsed() < SESSION_TTL);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, seen)| **seen)
                .map(|(t, _)| t.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(token.clone(), Instant::now());
        Some(token)
    }

    /// Ends the request's session.
    pub fn logout(&self, req: &Request) {
        if let Some(token) = req.cookie(COOKIE) {
            self.sessions.guard().remove(token);
        }
    }
}

/// Whether `req` changes something (any method but GET and HEAD).
pub fn changes(req: &Request) -> bool {
    !matches!(req.method.as_str(), "GET" | "HEAD")
}

/// The CSRF rule alone: a changing request carries [`CSRF_HEADER`]`: 1`.
pub fn check_csrf(req: &Request) -> Result<(), Refusal> {
    if changes(req) && req.header(CSRF_HEADER) != Some("1") {
        return Err(Refusal::MissingCsrfHeader);
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, cookie: Option<&str>, csrf: bool) -> Request {
        let mut r = Request::get("/api/topics");
        r.method = method.into();
        if let Some(c) = cookie {
            r.headers
                .push(("cookie".into(), format!("a=b; {COOKIE}={c}")));
        }
        if csrf {
            r.headers.push((CSRF_HEADER.into(), "1".into()));
        }
        r
    }

    #[test]
    fn a_session_comes_only_from_the_right_password() {
        let auth = Auth::new(Some(("admin".into(), "pw".into())));
        assert_eq!(
            auth.check(&req("GET", None, false)),
            Err(Refusal::LoginRequired)
        );
        assert!(auth.login("admin", "pX").is_none());
        assert!(auth.login("admin", "pw2").is_none());
        assert!(auth.login("admi", "pw").is_none());
        let token = auth.login("admin", "pw").unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(auth.check(&req("GET", Some(&token), false)), Ok(()));
        assert_eq!(
            auth.check(&req("GET", Some("0f"), false)),
            Err(Refusal::LoginRequired)
        );
        assert_eq!(
            auth.check(&req("POST", Some(&token), false)),
            Err(Refusal::MissingCsrfHeader)
        );
        assert_eq!(auth.check(&req("POST", Some(&token), true)), Ok(()));
        auth.logout(&req("GET", Some(&token), false));
        assert_eq!(
            auth.check(&req("GET", Some(&token), false)),
            Err(Refusal::LoginRequired)
        );
    }

    #[test]
    fn without_a_login_only_the_csrf_rule_holds() {
        let auth = Auth::new(None);
        assert_eq!(auth.check(&req("GET", None, false)), Ok(()));
        assert_eq!(
            auth.check(&req("DELETE", None, false)),
            Err(Refusal::MissingCsrfHeader)
        );
        assert!(auth.login("", "").is_none());
    }
}
