//! The console's HTTP surface over a real socket: the login, the CSRF rule, bounded
//! bodies, readable errors when the cluster cannot be reached, and the page's assets with
//! their security headers. (The pages themselves are driven in a browser by
//! shell/client/tests/console.rs.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tern_console::{Console, ConsoleConfig};
use tern_shell::runtime;

/// Sends `request` (with `Host: addr` after its first line unless it names a host, as a
/// browser does); returns the status, the head and the body.
fn http(addr: &str, request: &str) -> (u16, String, String) {
    let request = match request.split_once("\r\n") {
        Some((line, rest)) if !request.contains("\r\nHost:") => {
            format!("{line}\r\nHost: {addr}\r\n{rest}")
        }
        _ => request.to_owned(),
    };
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    // All sent: a server that refuses a request unread drains until this end.
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

fn start(login: Option<(&str, &str)>) -> Console {
    let config = ConsoleConfig {
        listen: "127.0.0.1:0".into(),
        // Nothing listens on port 1: the name server is down.
        namesrv_addrs: "127.0.0.1:1".into(),
        login: login.map(|(u, p)| (u.to_owned(), p.to_owned())),
        ..ConsoleConfig::default()
    };
    runtime::block_on(Console::start(config)).unwrap()
}

#[test]
fn the_login_guards_the_api_and_errors_are_readable() {
    let console = start(Some(("admin", "s3cret")));
    let addr = console.local_addr().to_string();
    let (status, _, body) = http(&addr, "GET /api/topics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 401, "{body}");
    let (status, _, body) = http(&addr, "GET /api/session HTTP/1.1\r\n\r\n");
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"loggedIn":false,"loginRequired":true}"#)
    );
    // A login without the CSRF header, and a wrong password: no cookie.
    let creds = r#"{"user":"admin","password":"s3cret"}"#;
    let (status, head, _) = http(&addr, &post("/api/login", creds, ""));
    assert_eq!(status, 403);
    assert!(!head.contains("Set-Cookie"));
    let wrong = r#"{"user":"admin","password":"guess"}"#;
    let (status, head, body) = http(&addr, &post("/api/login", wrong, "X-Tern-Console: 1\r\n"));
    assert_eq!(status, 401);
    assert!(!head.contains("Set-Cookie") && body.contains("wrong user or password"));
    let (status, head, _) = http(&addr, &post("/api/login", creds, "X-Tern-Console: 1\r\n"));
    assert_eq!(status, 200);
    let cookie = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: "))
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap();
    // Logged in, the cluster is down: a 502 naming the name server, never a blank answer.
    let (status, _, body) = http(
        &addr,
        &format!("GET /api/cluster HTTP/1.1\r\nCookie: {session}\r\n\r\n"),
    );
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("cannot reach name server 127.0.0.1:1"),
        "{body}"
    );
    // A changing request needs the CSRF header even with the cookie.
    let delete = r#"{"topic":"T"}"#;
    let (status, _, _) = http(
        &addr,
        &post(
            "/api/topic/delete",
            delete,
            &format!("Cookie: {session}\r\n"),
        ),
    );
    assert_eq!(status, 403);
    // Bad input is refused before the cluster is asked.
    let (status, _, body) = http(
        &addr,
        &post(
            "/api/topics",
            r#"{"topic":"bad topic!"}"#,
            &format!("Cookie: {session}\r\nX-Tern-Console: 1\r\n"),
        ),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("letters, digits"), "{body}");
    let (status, _, body) = http(
        &addr,
        &post(
            "/api/topics",
            "{not json",
            &format!("Cookie: {session}\r\nX-Tern-Console: 1\r\n"),
        ),
    );
    assert_eq!(status, 400);
    assert!(body.contains("not JSON"), "{body}");
    // A body over the limit is refused unread.
    let huge = format!(
        "POST /api/topics HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        tern_shell::http::MAX_BODY + 1
    );
    assert_eq!(http(&addr, &huge).0, 413);
    // Logged out, the cookie is worth nothing.
    let (status, _, _) = http(
        &addr,
        &post(
            "/api/logout",
            "{}",
            &format!("Cookie: {session}\r\nX-Tern-Console: 1\r\n"),
        ),
    );
    assert_eq!(status, 200);
    let (status, _, _) = http(
        &addr,
        &format!("GET /api/cluster HTTP/1.1\r\nCookie: {session}\r\n\r\n"),
    );
    assert_eq!(status, 401);
    runtime::block_on(console.shutdown());
}

#[test]
fn the_page_is_served_from_the_binary_with_its_security_headers() {
    let console = start(None);
    let addr = console.local_addr().to_string();
    let (status, head, body) = http(&addr, "GET / HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    assert!(body.contains("<script src=\"/app.js\""), "{body}");
    assert!(
        head.contains("Content-Security-Policy: default-src 'self'"),
        "{head}"
    );
    assert!(head.contains("X-Frame-Options: DENY"), "{head}");
    let (status, head, _) = http(&addr, "GET /app.js HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    assert!(head.contains("text/javascript"), "{head}");
    assert_eq!(http(&addr, "GET /etc/passwd HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(&addr, "GET /api/nothing HTTP/1.1\r\n\r\n").0, 404);
    assert_eq!(http(&addr, "garbage\r\n\r\n").0, 400);
    // No login on loopback: the API answers (here: the name server is down).
    let (status, _, body) = http(&addr, "GET /api/topics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 502, "{body}");
    // ... but only to a loopback name: a site that rebinds its own name to 127.0.0.1
    // sends that name.
    let (status, _, body) = http(
        &addr,
        "GET /api/topics HTTP/1.1\r\nHost: evil.example:8080\r\n\r\n",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("loopback"), "{body}");
    // A changing request from another origin is refused, from its own it is not.
    let (status, _, body) = http(
        &addr,
        &post(
            "/api/topic/delete",
            r#"{"topic":"T"}"#,
            "X-Tern-Console: 1\r\nOrigin: http://localhost:9999\r\n",
        ),
    );
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = http(
        &addr,
        &post(
            "/api/topic/delete",
            r#"{"topic":"T"}"#,
            &format!("X-Tern-Console: 1\r\nOrigin: http://{addr}\r\n"),
        ),
    );
    assert_eq!(status, 502, "{body}");
    // Chunked bodies are not read: 411, not an empty body.
    let (status, _, _) = http(
        &addr,
        "POST /api/topics HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-Tern-Console: 1\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    assert_eq!(status, 411);
    runtime::block_on(console.shutdown());
}

#[test]
fn a_console_reachable_from_other_hosts_needs_a_login() {
    let config = ConsoleConfig {
        listen: "0.0.0.0:0".into(),
        ..ConsoleConfig::default()
    };
    let e = runtime::block_on(Console::start(config)).unwrap_err();
    assert!(e.contains("consoleUser and consolePassword"), "{e}");
}
