//! A small HTTP/1.1 server for scrape endpoints (Prometheus `GET /metrics`): one task per
//! connection, one request per connection, bounded in what it reads and how long it
//! waits, so a scraper that misbehaves costs a task and never the broker.
//!
//! Why not a web framework: the endpoint answers one GET with text; a framework would
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
/// Longest a connection may take to send its request, and to take the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once; more are closed on arrival.
const MAX_CONNECTIONS: usize = 64;

/// An answer: status, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code (200, 404, ...).
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A 200 answer.
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status: 200,
            content_type,
            body: body.into(),
        }
    }

    fn plain(status: u16, text: &str) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: text.as_bytes().to_vec(),
        }
    }
}

/// What answers a GET for a path; `None` is a 404.
pub type Handler = Arc<dyn Fn(&str) -> Option<Response> + Send + Sync>;

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
        let listener = TcpListener::bind(&runtime::resolve(addr).await?[..]).await?;
        let local_addr = listener.local_addr()?;
        let shutdown = Shutdown::new();
        let task = runtime::spawn(accept_loop(listener, handler, tls, shutdown.clone()));
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
                log::warn!("metrics endpoint: accept failed: {e}");
                runtime::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::AcqRel);
            continue;
        }
        let (handler, active, tls) = (handler.clone(), active.clone(), tls.clone());
        runtime::spawn(async move {
            let served = async {
                let stream = match &tls {
                    None => Stream::Plain(stream),
                    // Refusals are logged by the acceptor.
                    Some(tls) => tls.accept(stream).await.ok()?,
                };
                let (r, w) = stream.split();
                serve(r, w, &handler).await.ok()
            };
            let _ = runtime::timeout(IO_TIMEOUT, served).await;
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Reads one request head and writes its answer.
async fn serve(mut stream: ReadHalf, mut out: WriteHalf, handler: &Handler) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    // Bounded by MAX_HEAD.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            write(
                &mut out,
                &Response::plain(431, "request head too large\n"),
                true,
            )
            .await?;
            // Closing with the rest of the request unread would reset the connection and
            // could discard the answer on the client's side: stop writing, then read
            // (and drop) what the client still sends, within bounds.
            smol::io::AsyncWriteExt::close(&mut out).await?;
            let mut left = 16 * MAX_HEAD;
            while left > 0 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => left = left.saturating_sub(n),
                }
            }
            return Ok(());
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let resp = match method {
        "GET" | "HEAD" => {
            // A handler renders a whole-process view (a broker's metrics read the newest
            // consumed record of every queue): on a blocking thread, so a scrape that
            // meets cold pages holds up no connection this executor thread serves.
            let (handler, path) = (handler.clone(), path.to_owned());
            runtime::spawn_blocking(move || handler(&path))
                .await
                .unwrap_or_else(|| Response::plain(404, "not found\n"))
        }
        _ => Response::plain(405, "only GET is served\n"),
    };
    write(&mut out, &resp, method != "HEAD").await?;
    // A TLS peer is told the answer is complete (close_notify); a TCP one gets FIN.
    smol::io::AsyncWriteExt::close(&mut out).await
}

async fn write(stream: &mut WriteHalf, r: &Response, body: bool) -> std::io::Result<()> {
    let reason = match r.status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    if body {
        stream.write_all(&r.body).await?;
    }
    stream.flush().await
}
