//! One remoting connection, used the same way by clients and servers.
//!
//! A reader task owns the read half: it completes pending requests by `opaque`, and hands
//! requests from the peer (client→broker, or broker→client such as
//! CHECK_TRANSACTION_STATE) to a [`Processor`], one task per request so a long-polling
//! pull does not stall the connection. Writers share the write half under a lock, whole
//! frames at a time (gathered by the `outbox` when several are under way). A malformed
//! frame closes only this connection.
//!
//! Every wait has a bound a peer cannot stretch: requests in flight by count and by bytes
//! (beyond either the answer is SYSTEM_BUSY), and writes by
//! [`ConnectionConfig::write_timeout`]: a peer that stops reading gets its connection
//! closed after that long without taking a byte, so no writer waits on it for ever.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_std::net::{Shutdown as NetShutdown, TcpStream};

use crate::code::ResponseCode;
use crate::frame::{FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand};
use crate::runtime::{self, Shutdown};
use crate::tls::{Socket, Stream, WriteHalf};

mod config;
mod outbox;
mod pending;
mod read;
mod write;

pub use config::{
    ConnectionConfig, DEFAULT_MAX_IN_FLIGHT_BYTES, DEFAULT_WRITE_TIMEOUT, IoCause, RemotingError,
};
pub(crate) use read::read_frame;

/// Handles requests the peer sends on a connection.
///
/// Return `Some(response)` to answer; it is sent with the request's opaque (and, for JSON
/// requests, JSON encoding). The answer to a oneway request is dropped, as RocketMQ does.
pub trait Processor: Send + Sync + 'static {
    /// Processes one request.
    fn process(
        &self,
        conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> impl Future<Output = Option<RemotingCommand>> + Send;

    /// True when `req` is answered without waiting on anything but CPU and short locks:
    /// the connection then processes it in its read loop instead of in a task of its
    /// own, saving the hand-over to another thread. The connection reads nothing more
    /// meanwhile, so a request that can wait (a held pull, a sync flush) must say false.
    fn is_quick(&self, _req: &RemotingCommand) -> bool {
        false
    }
}

/// What a processor sees of the connection a request came on: the peer's address, and a
/// handle to send server-initiated requests back (NOTIFY_CONSUMER_IDS_CHANGED...).
pub type ConnectionCtx = Connection;

/// Answers every request with REQUEST_CODE_NOT_SUPPORTED: for connections that expect no
/// requests from their peer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProcessor;

impl Processor for NoProcessor {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(not_supported(&req))
    }
}

/// Java's answer to an unknown code (§1.5).
pub fn not_supported(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::error_response(
        req,
        ResponseCode::RequestCodeNotSupported,
        format!(" request type {} not supported", req.code),
    )
}

/// A cheap, cloneable handle to one connection.
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: u64,
    peer: SocketAddr,
    local: SocketAddr,
    /// The socket under the stream, plain or TLS: shut down to close at once.
    socket: Socket,
    /// True when the stream is TLS.
    tls: bool,
    writer: Arc<async_lock::Mutex<WriteHalf>>,
    /// See [`ConnectionConfig::write_timeout`].
    write_timeout: Duration,
    /// Bytes the socket accepted so far: a writer waiting for the lock tells a holder
    /// that is slowly getting through from one the peer stopped reading.
    written_bytes: AtomicU64,
    /// Writes that the stream took bytes from (a `writev` of whole or part frames; over
    /// TLS, a write into the TLS layer).
    writes: AtomicU64,
    /// Requests waiting for answers; see [`pending`].
    pending: Mutex<pending::Pending>,
    /// Frames of requests gathered into one write; see [`outbox`].
    outbox: Mutex<outbox::Outbox>,
    /// Wakes the task that fails requests past their deadline.
    expiry: runtime::Wakeup,
    next_opaque: AtomicI32,
    closed: AtomicBool,
    /// Why the read side failed, when it did: requests failed by the close report it.
    close_reason: OnceLock<IoCause>,
    close_signal: Shutdown,
    done: Shutdown,
    started: Instant,
    last_activity_ms: AtomicU64,
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// Connecting `addr` failed with `e`: its text after the address, `e` the source.
fn connect_failed(addr: &str, e: std::io::Error) -> RemotingError {
    RemotingError::Connect {
        reason: format!("{addr}: {e}"),
        cause: Some(e.into()),
    }
}

impl Connection {
    /// Connects to `addr` (e.g. `"127.0.0.1:9876"`); requests from the peer are refused.
    pub async fn connect(
        addr: &str,
        config: ConnectionConfig,
        connect_timeout: Duration,
    ) -> Result<Self, RemotingError> {
        Self::connect_with(addr, config, connect_timeout, Arc::new(NoProcessor)).await
    }

    /// Connects to `addr`; requests from the peer go to `processor` (a client's handler of
    /// CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED, ...).
    pub async fn connect_with<P: Processor>(
        addr: &str,
        config: ConnectionConfig,
        connect_timeout: Duration,
        processor: Arc<P>,
    ) -> Result<Self, RemotingError> {
        // One budget for the TCP connect and the TLS handshake: the caller asked to be
        // connected within it.
        let stream = runtime::timeout(connect_timeout, async {
            let addrs = runtime::resolve(addr)
                .await
                .map_err(|e| connect_failed(addr, e))?;
            let tcp = TcpStream::connect(&addrs[..])
                .await
                .map_err(|e| connect_failed(addr, e))?;
            let peer = tcp.peer_addr().map_err(|e| connect_failed(addr, e))?;
            let stream = match &config.tls {
                None => Stream::Plain(tcp),
                Some(tls) => tls.connect(tcp, addr).await.map_err(|e| {
                    let (reason, cause) = e.into_parts();
                    RemotingError::Connect {
                        reason,
                        cause: cause.map(IoCause::from),
                    }
                })?,
            };
            Ok((stream, peer))
        })
        .await
        .map_err(|_| RemotingError::Connect {
            reason: format!("{addr}: timed out"),
            cause: Some(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        })??;
        Self::start(stream.0, stream.1, config, processor).map_err(|e| connect_failed(addr, e))
    }

    /// Wraps an accepted or connected stream (plain TCP or TLS) from `peer` and spawns
    /// its reader task. The peer's address is the caller's (from accept or connect): a
    /// peer that reset right after connecting has none left to ask the socket for, and
    /// what it sent before is still read. Fails only if the socket cannot be registered
    /// with the reactor.
    pub fn start<P: Processor>(
        stream: impl Into<Stream>,
        peer: SocketAddr,
        config: ConnectionConfig,
        processor: Arc<P>,
    ) -> std::io::Result<Self> {
        let stream = stream.into();
        let tls = stream.is_tls();
        let _ = stream.tcp().set_nodelay(true);
        let local = stream.tcp().local_addr().unwrap_or_else(|_| match peer {
            SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
            SocketAddr::V6(_) => SocketAddr::from(([0u16; 8], 0)),
        });
        let (reader, writer, socket) = stream.split()?;
        let inner = Arc::new(Inner {
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            peer,
            local,
            writer: Arc::new(async_lock::Mutex::new(writer)),
            write_timeout: config.write_timeout,
            written_bytes: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            socket,
            tls,
            pending: Mutex::new(pending::Pending::default()),
            outbox: Mutex::new(outbox::Outbox::default()),
            expiry: runtime::Wakeup::new(),
            next_opaque: AtomicI32::new(1),
            closed: AtomicBool::new(false),
            close_reason: OnceLock::new(),
            close_signal: Shutdown::new(),
            done: Shutdown::new(),
            started: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        });
        let conn = Connection { inner };
        let looping = conn.clone();
        runtime::spawn(async move { looping.read_loop(reader, config, processor).await });
        Ok(conn)
    }

    /// True when the connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.tls
    }

    /// Process-unique id of this connection.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The peer's address (the broker records it as a message's born host).
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer
    }

    /// Our side's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// How many writes put bytes on the socket so far. Requests in flight together share
    /// writes, so this can be well below the frames sent.
    pub fn writes(&self) -> u64 {
        self.inner.writes.load(Ordering::Relaxed)
    }

    /// True once the connection has closed (or is draining).
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Asks the connection to stop reading, finish in-flight requests and close.
    pub fn close(&self) {
        self.inner.close_signal.trigger();
    }

    /// Resolves once the connection is fully closed.
    pub async fn closed(&self) {
        self.inner.done.wait().await;
    }

    /// Sends a request and waits for its response, both within `timeout` (as Java's
    /// `invokeSync` counts it from the call). The opaque is assigned here so that it is
    /// unique on this connection.
    pub async fn request(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.request_mut(&mut cmd, timeout).await
    }

    /// [`Self::request`] with the command left to the caller (its opaque and flag set for
    /// this send), who can send it again without building it anew: a producer's retry
    /// on another broker, whose body would otherwise be copied for every attempt.
    pub async fn request_mut(
        &self,
        cmd: &mut RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.opaque = opaque;
        cmd.flag &= !(FLAG_RESPONSE | FLAG_ONEWAY);
        let (tx, rx) = futures_channel::oneshot::channel();
        let (deadline, alone) = self.wait_for_answer(opaque, tx, timeout);
        // Checked after inserting: a close that drained `pending` before our insert is seen here.
        if self.is_closed() {
            self.take_waiter(opaque);
            return Err(self.closed_error());
        }
        if let Err(e) = self.write_sharing(cmd, !alone).await {
            self.take_waiter(opaque);
            return Err(e);
        }
        // No timer here: the connection's expiry task answers `Timeout` once the
        // deadline passes (see `pending`), and a close answers its error. A channel
        // closed without either (the connection dropped) is judged by the clock.
        match rx.await {
            Ok(outcome) => outcome,
            Err(_) if Instant::now() >= deadline => Err(RemotingError::Timeout),
            Err(_) => Err(self.closed_error()),
        }
    }

    /// Sends a oneway request: no response is expected or awaited.
    pub async fn oneway(&self, mut cmd: RemotingCommand) -> Result<(), RemotingError> {
        cmd.opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.flag = (cmd.flag & !FLAG_RESPONSE) | FLAG_ONEWAY;
        self.write(&cmd).await
    }

    pub(crate) fn touch(&self) {
        let ms = self.inner.started.elapsed().as_millis() as u64;
        self.inner.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn idle_for(&self) -> Duration {
        let last = self.inner.last_activity_ms.load(Ordering::Relaxed);
        self.inner
            .started
            .elapsed()
            .saturating_sub(Duration::from_millis(last))
    }

    /// Records why the connection failed (the first reason wins).
    pub(crate) fn set_close_reason(&self, why: std::io::Error) {
        let _ = self.inner.close_reason.set(why.into());
    }

    /// [`RemotingError::Closed`], or the reason the read side failed when known.
    pub(crate) fn closed_error(&self) -> RemotingError {
        match self.inner.close_reason.get() {
            Some(why) => RemotingError::Io {
                reason: format!("connection closed: {}", why.io()),
                cause: why.clone(),
            },
            None => RemotingError::Closed,
        }
    }

    /// Closes the socket now and fails every pending request.
    pub(crate) fn abort(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let _ = self.inner.socket.shutdown(NetShutdown::Both);
        // Every waiter is told why.
        self.fail_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::io::ErrorKind;

    use super::*;

    #[test]
    fn connecting_a_closed_port_fails_with_the_refusal_as_its_source() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let addr = format!("127.0.0.1:{port}");
        let e = runtime::block_on(Connection::connect(
            &addr,
            ConnectionConfig::default(),
            Duration::from_secs(5),
        ))
        .unwrap_err();
        let RemotingError::Connect { reason, cause } = &e else {
            panic!("{e:?}")
        };
        assert!(reason.starts_with(&format!("{addr}: ")), "{reason}");
        assert_eq!(
            cause.as_ref().map(IoCause::kind),
            Some(ErrorKind::ConnectionRefused)
        );
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(ErrorKind::ConnectionRefused)
        );
        assert_eq!(e.to_string(), format!("connect failed: {reason}"));
    }

    #[test]
    fn a_request_failed_by_a_bad_frame_keeps_why_as_its_source() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut prefix = [0u8; 4];
            s.read_exact(&mut prefix).unwrap();
            // A length prefix too short to hold a header mark: the frame is refused.
            s.write_all(&2u32.to_be_bytes()).unwrap();
            // Held open until the client has read it and closed: a close with the
            // request's bytes unread would reset, and a reset may overtake the frame.
            let mut rest = [0u8; 4096];
            while s.read(&mut rest).is_ok_and(|n| n > 0) {}
        });
        let e = runtime::block_on(async {
            let conn =
                Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(5))
                    .await
                    .unwrap();
            let req = RemotingCommand::request_code(crate::code::RequestCode::HeartBeat);
            conn.request(req, Duration::from_secs(5)).await.unwrap_err()
        });
        peer.join().unwrap();
        let RemotingError::Io { reason, cause } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(
            reason,
            "connection closed: bad length: frame shorter than its header mark"
        );
        assert_eq!(cause.kind(), ErrorKind::InvalidData);
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(ErrorKind::InvalidData)
        );
    }
}
