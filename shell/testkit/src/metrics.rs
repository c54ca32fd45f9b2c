//! Reading a Prometheus endpoint (`metricsExporterType=PROM`) the way a scraper does:
//! one plain HTTP/1.1 request on a fresh connection.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends `request` (a whole HTTP/1.1 request) to `addr`; the status code (0 when the
/// answer has none) and the body. Reads up to 30 s: a gateway under qemu-user is slow.
pub fn http(addr: &str, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

/// A GET of `/metrics` from `addr`, which must answer 200: the body.
pub fn scrape(addr: &str) -> String {
    let (status, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample of `name` whose labels include every one of `labels`.
pub fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
