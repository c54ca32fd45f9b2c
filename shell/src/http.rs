//! A small HTTP/1.1 server for scrape endpoints (Prometheus `GET /metrics`) and the web
//! console's pages and JSON API: one task per connection, one request per connection,
//! bounded in what it reads and how long it waits, so a client that misbehaves costs a
//! task and never the broker.
//!
//! Why not a web framework: the endpoints answer a handful of paths; a framework would
//! bring its own runtime and a dependency tree larger than the broker's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_std::io::{ReadExt, WriteExt};
use async_std::net::TcpListener;

use crate::runtime::{self, JoinHandle, Shutdown};
use crate::tls::{ReadHalf, ServerTls, Stream, WriteHalf};

/// Longest request head read (request line and headers).
const MAX_HEAD: usize = 8 * 1024;
/// Longest request body [`HttpServer::bind_app`] reads (`Content-Length`); larger ones
/// get 413. ([`HttpServer::bind`] reads none.)
pub const MAX_BODY: usize = 1 << 20;
/// Longest a connection may take to send its request, and to take the answer. (The
/// handler's own work is not bounded here: it bounds its own calls.)
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once; more are closed on arrival.
const MAX_CONNECTIONS: usize = 64;

/// One request: method, path, decoded query, headers and body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query's pairs, percent-decoded, in order.
    pub query: Vec<(String, String)>,
    /// The headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body (`Content-Length` bytes, within the server's limit).
    pub body: Vec<u8>,
}

impl Request {
    /// A `GET` of `path` (tests, and callers that have only a path).
    pub fn get(path: &str) -> Self {
        Request {
            method: "GET".into(),
            path: path.into(),
            ..Request::default()
        }
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }

    /// Parses the head (request line and headers, up to the blank line).
    fn parse_head(head: &[u8]) -> Result<Self, &'static str> {
        let head = std::str::from_utf8(head).map_err(|_| "request head is not UTF-8")?;
        let mut lines = head.split("\r\n");
        let line = lines.next().unwrap_or_default();
        let mut parts = line.split(' ');
        let (method, target) = match (parts.next(), parts.next()) {
            (Some(m), Some(t)) if !m.is_empty() && t.starts_with('/') => (m, t),
            _ => return Err("malformed request line"),
        };
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let mut headers = Vec::new();
        for l in lines.take_while(|l| !l.is_empty()) {
            let (k, v) = l.split_once(':').ok_or("malformed header line")?;
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        Ok(Request {
            method: method.to_owned(),
            path: percent_decode(path),
            query: parse_query(query),
            headers,
            body: Vec::new(),
        })
    }
}

/// `a=1&b=x%20y` as pairs (`+` is a space, as forms send it).
pub fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

/// `%XX` escapes decoded (bad escapes kept as they are; invalid UTF-8 replaced).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An answer: status, content type, extra headers, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code (200, 404, ...).
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// More headers (`Set-Cookie`, `Cache-Control`, ...).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A 200 answer.
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self::with_status(200, content_type, body)
    }

    /// An answer with `status`.
    pub fn with_status(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// A plain-text answer.
    pub fn plain(status: u16, text: &str) -> Self {
        Self::with_status(status, "text/plain; charset=utf-8", text)
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// What answers a request; `None` is a 404.
pub type Handler = Arc<dyn Fn(&Request) -> Option<Response> + Send + Sync>;

/// A running HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    local_addr: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<()>,
}

impl HttpServer {
    /// Binds `addr` and serves `handler` until [`HttpServer::shutdown`]; with `tls`,
    /// through its mode as the remoting ports are (HTTPS, and plain HTTP too under
    /// `permissive`).
    pub async fn bind(
        addr: &str,
        handler: Handler,
        tls: Option<ServerTls>,
    ) -> std::io::Result<Self> {
        Self::bind_with(addr, handler, tls, 0).await
    }

    /// Binds `addr` for an application that takes request bodies (up to [`MAX_BODY`]).
    pub async fn bind_app(addr: &str, handler: Handler) -> std::io::Result<Self> {
        Self::bind_with(addr, handler, None, MAX_BODY).await
    }

    async fn bind_with(
        addr: &str,
        handler: Handler,
        tls: Option<ServerTls>,
        max_body: usize,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&runtime::resolve(addr).await?[..]).await?;
        let local_addr = listener.local_addr()?;
        let shutdown = Shutdown::new();
        let task = runtime::spawn(accept_loop(
            listener,
            handler,
            tls,
            max_body,
            shutdown.clone(),
        ));
        Ok(HttpServer {
            local_addr,
            shutdown,
            task,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting; a request being answered finishes on its own task.
    pub async fn shutdown(self) {
        self.shutdown.trigger();
        self.task.await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    handler: Handler,
    tls: Option<ServerTls>,
    max_body: usize,
    shutdown: Shutdown,
) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = runtime::race(async { Some(listener.accept().await) }, async {
            shutdown.wait().await;
            None
        })
        .await;
        let Some(accepted) = accepted else {
            return;
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                log::warn!("HTTP endpoint: accept failed: {e}");
                runtime::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (handler, tls) = (handler.clone(), tls.clone());
        // Given back however the connection's task ends.
        let slot = Slot(active.clone());
        runtime::spawn(async move {
            let _slot = slot;
            let stream = match &tls {
                None => Stream::Plain(stream),
                // Refusals are logged by the acceptor.
                Some(tls) => match tls.accept(stream).await {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let Ok((r, w, _socket)) = stream.split() else {
                return;
            };
            let _ = serve(r, w, &handler, max_body).await;
        });
    }
}

/// One of the [`MAX_CONNECTIONS`], released when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one request and writes its answer.
async fn serve(
    mut stream: ReadHalf,
    mut out: WriteHalf,
    handler: &Handler,
    max_body: usize,
) -> std::io::Result<()> {
    let Some(req) = runtime::timeout(IO_TIMEOUT, read_request(&mut stream, &mut out, max_body))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??
    else {
        return Ok(());
    };
    let head_only = req.method == "HEAD";
    // A handler renders a whole-process view (a broker's metrics read the newest
    // consumed record of every queue; the console asks the cluster): on a blocking
    // thread, so a request that meets cold pages or a slow broker holds up no
    // connection this executor thread serves.
    let handler = handler.clone();
    let resp = runtime::spawn_blocking(move || {
        // A handler's bug costs its request a 500, not the connection's task.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&req)))
    })
    .await
    .unwrap_or_else(|_| Some(Response::plain(500, "internal error\n")))
    .unwrap_or_else(|| Response::plain(404, "not found\n"));
    runtime::timeout(IO_TIMEOUT, async {
        write(&mut out, &resp, !head_only).await?;
        // A TLS peer is told the answer is complete (close_notify); a TCP one gets FIN.
        smol::io::AsyncWriteExt::close(&mut out).await
    })
    .await
    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// Reads the head and the body; `None` when the peer left, or was answered already
/// (a head or body too large, a malformed head).
async fn read_request(
    stream: &mut ReadHalf,
    out: &mut WriteHalf,
    max_body: usize,
) -> std::io::Result<Option<Request>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    // Bounded by MAX_HEAD.
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if head.len() >= MAX_HEAD {
            refuse(
                stream,
                out,
                Response::plain(431, "request head too large\n"),
            )
            .await?;
            return Ok(None);
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    };
    let mut req = match Request::parse_head(&head[..end]) {
        Ok(r) => r,
        Err(why) => {
            refuse(stream, out, Response::plain(400, &format!("{why}\n"))).await?;
            return Ok(None);
        }
    };
    if req.header("transfer-encoding").is_some() {
        // Chunked bodies are not read: say so rather than take the body as empty.
        let resp = Response::plain(411, "send the body with a Content-Length\n");
        refuse(stream, out, resp).await?;
        return Ok(None);
    }
    let length = match req.header("content-length").map(|v| v.parse::<usize>()) {
        None => 0,
        Some(Ok(n)) if n <= max_body => n,
        Some(Ok(_)) => {
            let text = format!("request body over {max_body} bytes\n");
            refuse(stream, out, Response::plain(413, &text)).await?;
            return Ok(None);
        }
        Some(Err(_)) => {
            refuse(stream, out, Response::plain(400, "bad Content-Length\n")).await?;
            return Ok(None);
        }
    };
    let mut body = head.split_off(end + 4);
    body.truncate(length);
    while body.len() < length {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        let take = n.min(length - body.len());
        body.extend_from_slice(&buf[..take]);
    }
    req.body = body;
    Ok(Some(req))
}

/// Answers `resp` to a request not read whole. Closing with the rest of the request
/// unread would reset the connection and could discard the answer on the client's side:
/// stop writing, then read (and drop) what the client still sends, within bounds.
async fn refuse(stream: &mut ReadHalf, out: &mut WriteHalf, resp: Response) -> std::io::Result<()> {
    write(out, &resp, true).await?;
    smol::io::AsyncWriteExt::close(out).await?;
    let mut buf = [0u8; 1024];
    let mut left = 16 * MAX_HEAD;
    while left > 0 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

async fn write(stream: &mut WriteHalf, r: &Response, body: bool) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        204 => "No Content",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        _ => "",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    for (k, v) in &r.headers {
        // A value is ours, but a CR or LF in it would end the head: never written.
        if !v.contains(['\r', '\n']) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    if body {
        stream.write_all(&r.body).await?;
    }
    stream.flush().await
}
