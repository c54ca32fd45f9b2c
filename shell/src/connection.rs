//! One remoting connection, used the same way by clients and servers.
//!
//! A reader task owns the read half: it completes pending requests by `opaque`, and hands
//! requests from the peer (client→broker, or broker→client such as
//! CHECK_TRANSACTION_STATE) to a [`Processor`], one task per request so a long-polling
//! pull does not stall the connection. Writers share the write half under a lock, one whole
//! frame at a time. A malformed frame closes only this connection.
//!
//! Every wait has a bound a peer cannot stretch: requests in flight by count and by bytes
//! (beyond either the answer is SYSTEM_BUSY), and writes by
//! [`ConnectionConfig::write_timeout`]: a peer that stops reading gets its connection
//! closed after that long without taking a byte, so no writer waits on it for ever.

use std::collections::HashMap;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_lock::Semaphore;
use async_std::channel::{Sender, bounded};
use async_std::io::{BufReader, prelude::*};
use async_std::net::{Shutdown as NetShutdown, TcpStream};

use crate::code::ResponseCode;
use crate::frame::{
    FLAG_ONEWAY, FLAG_RESPONSE, FrameError, FrameLimits, RemotingCommand, SerializeType,
    check_frame_length,
};
use crate::runtime::{self, Shutdown};

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

/// Errors of remote calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemotingError {
    /// Connecting failed.
    Connect(String),
    /// Reading or writing the socket failed.
    Io(String),
    /// No response within the timeout; a late response will be dropped.
    Timeout,
    /// The connection closed before the response came.
    Closed,
    /// The peer took no byte of a write for the write timeout; the connection is closed.
    WriteTimeout,
    /// The command could not be encoded.
    Frame(FrameError),
}

impl std::fmt::Display for RemotingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "connect failed: {e}"),
            Self::Io(e) => write!(f, "io error: {e}"),
            Self::Timeout => write!(f, "request timed out"),
            Self::Closed => write!(f, "connection closed"),
            Self::WriteTimeout => write!(f, "write timed out: the peer stopped reading"),
            Self::Frame(e) => write!(f, "frame error: {e}"),
        }
    }
}

impl std::error::Error for RemotingError {}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Frame size limits applied to the peer's frames.
    pub limits: FrameLimits,
    /// Close after this long without traffic either way (Java servers: 120 s).
    pub idle_timeout: Option<Duration>,
    /// Requests from the peer processed at once; beyond it the answer is SYSTEM_BUSY.
    pub max_in_flight: usize,
    /// Bytes of request frames from the peer held by requests in flight; a frame that
    /// would go past it is answered SYSTEM_BUSY. Without it a peer could park
    /// `max_in_flight` frames of the largest size (16 GiB by default) on one connection.
    /// A request is always taken when none is in flight, so a budget below the frame
    /// limit slows big frames down but never refuses them all.
    pub max_in_flight_bytes: usize,
    /// Longest a write waits with the peer taking no byte (RocketMQ's send timeout is
    /// 3 s). Past it the connection closes and the write fails with
    /// [`RemotingError::WriteTimeout`], and so do writers queued behind it. Measured as
    /// no progress rather than a whole-frame deadline, so a large answer over a slow but
    /// moving link still goes out.
    pub write_timeout: Duration,
    /// How long a graceful close waits for in-flight requests.
    pub drain_timeout: Duration,
}

/// Default [`ConnectionConfig::max_in_flight_bytes`]: four frames of the largest size.
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 64 << 20;

/// Default [`ConnectionConfig::write_timeout`].
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(3);

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            limits: FrameLimits::default(),
            idle_timeout: None,
            max_in_flight: 1024,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            drain_timeout: Duration::from_secs(10),
        }
    }
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
    stream: TcpStream,
    writer: async_lock::Mutex<TcpStream>,
    /// See [`ConnectionConfig::write_timeout`].
    write_timeout: Duration,
    /// Bytes the socket accepted so far: a writer waiting for the lock tells a holder
    /// that is slowly getting through from one the peer stopped reading.
    written_bytes: AtomicU64,
    pending: Mutex<HashMap<i32, Sender<RemotingCommand>>>,
    next_opaque: AtomicI32,
    closed: AtomicBool,
    close_signal: Shutdown,
    done: Shutdown,
    started: Instant,
    last_activity_ms: AtomicU64,
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

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
        let stream = runtime::timeout(connect_timeout, async {
            let addrs = runtime::resolve(addr).await?;
            TcpStream::connect(&addrs[..]).await
        })
        .await
        .map_err(|_| RemotingError::Connect(format!("{addr}: timed out")))?
        .map_err(|e| RemotingError::Connect(format!("{addr}: {e}")))?;
        Self::start(stream, config, processor).map_err(|e| RemotingError::Connect(e.to_string()))
    }

    /// Wraps an accepted or connected stream and spawns its reader task.
    pub fn start<P: Processor>(
        stream: TcpStream,
        config: ConnectionConfig,
        processor: Arc<P>,
    ) -> std::io::Result<Self> {
        let _ = stream.set_nodelay(true);
        let inner = Arc::new(Inner {
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            peer: stream.peer_addr()?,
            local: stream.local_addr()?,
            writer: async_lock::Mutex::new(stream.clone()),
            write_timeout: config.write_timeout,
            written_bytes: AtomicU64::new(0),
            stream: stream.clone(),
            pending: Mutex::new(HashMap::new()),
            next_opaque: AtomicI32::new(1),
            closed: AtomicBool::new(false),
            close_signal: Shutdown::new(),
            done: Shutdown::new(),
            started: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        });
        let conn = Connection { inner };
        let reader = conn.clone();
        runtime::spawn(async move { reader.read_loop(stream, config, processor).await });
        Ok(conn)
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

    /// Sends a request and waits up to `timeout` for its response. The opaque is assigned
    /// here so that it is unique on this connection.
    pub async fn request(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        let opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.opaque = opaque;
        cmd.flag &= !(FLAG_RESPONSE | FLAG_ONEWAY);
        let (tx, rx) = bounded(1);
        self.lock_pending().insert(opaque, tx);
        // Checked after inserting: a close that drained `pending` before our insert is seen here.
        if self.is_closed() {
            self.lock_pending().remove(&opaque);
            return Err(RemotingError::Closed);
        }
        if let Err(e) = self.write(&cmd).await {
            self.lock_pending().remove(&opaque);
            return Err(e);
        }
        match runtime::timeout(timeout, rx.recv()).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => Err(RemotingError::Closed),
            Err(_) => {
                self.lock_pending().remove(&opaque);
                Err(RemotingError::Timeout)
            }
        }
    }

    /// Sends a oneway request: no response is expected or awaited.
    pub async fn oneway(&self, mut cmd: RemotingCommand) -> Result<(), RemotingError> {
        cmd.opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.flag = (cmd.flag & !FLAG_RESPONSE) | FLAG_ONEWAY;
        self.write(&cmd).await
    }

    /// Writes one command as a whole frame, bounded by the write timeout (see
    /// [`ConnectionConfig::write_timeout`]): on expiry the connection is closed.
    pub async fn write(&self, cmd: &RemotingCommand) -> Result<(), RemotingError> {
        if self.is_closed() {
            return Err(RemotingError::Closed);
        }
        // Small bodies go behind the header in one buffer (one syscall); large ones
        // (batches, pulled records) are written from where they lie, saving a copy.
        let inline = cmd.body.len() <= INLINE_BODY_BYTES;
        let head = cmd
            .encode_head(if inline { cmd.body.len() } else { 0 })
            .map_err(RemotingError::Frame)?;
        let mut bytes = head;
        if inline {
            bytes.extend_from_slice(&cmd.body);
        }
        let mut w = self.lock_writer().await?;
        if self.is_closed() {
            // Closed while we queued (a stalled write before ours, or a close).
            return Err(RemotingError::Closed);
        }
        let res = if inline {
            self.write_bounded(&mut w, &mut [IoSlice::new(&bytes)])
                .await
        } else {
            let mut bufs = [IoSlice::new(&bytes), IoSlice::new(&cmd.body)];
            self.write_bounded(&mut w, &mut bufs).await
        };
        drop(w);
        match res {
            Ok(()) => {
                self.touch();
                Ok(())
            }
            // Someone else closed it under us (a writer queued behind that saw no
            // progress, or a close): the shut socket's error says nothing more.
            Err(RemotingError::Io(_)) if self.is_closed() => Err(RemotingError::Closed),
            Err(e) => {
                if e == RemotingError::WriteTimeout {
                    log::warn!(
                        "closing connection {} to {}: it took no byte for {:?}",
                        self.id(),
                        self.peer_addr(),
                        self.inner.write_timeout
                    );
                }
                self.abort();
                Err(e)
            }
        }
    }

    /// The write half, waiting while the writer ahead makes progress. A wait of a whole
    /// write timeout during which the socket took nothing means the peer stopped reading:
    /// the connection is closed (the writer ahead times out too).
    async fn lock_writer(&self) -> Result<async_lock::MutexGuard<'_, TcpStream>, RemotingError> {
        loop {
            let seen = self.inner.written_bytes.load(Ordering::Relaxed);
            match runtime::timeout(self.inner.write_timeout, self.inner.writer.lock()).await {
                Ok(w) => return Ok(w),
                Err(_) if self.is_closed() => return Err(RemotingError::Closed),
                Err(_) if self.inner.written_bytes.load(Ordering::Relaxed) == seen => {
                    log::warn!(
                        "closing connection {} to {}: writes stalled for {:?}",
                        self.id(),
                        self.peer_addr(),
                        self.inner.write_timeout
                    );
                    self.abort();
                    return Err(RemotingError::WriteTimeout);
                }
                Err(_) => {}
            }
        }
    }

    /// `write_all` over several buffers with `writev`, resuming after partial writes;
    /// each call must make progress within the write timeout. A timer is armed only
    /// when the socket is full: a write that goes through at once costs none.
    async fn write_bounded(
        &self,
        w: &mut TcpStream,
        mut bufs: &mut [IoSlice<'_>],
    ) -> Result<(), RemotingError> {
        let limit = self.inner.write_timeout;
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match runtime::timeout(limit, w.write_vectored(bufs)).await {
                Err(_) => return Err(RemotingError::WriteTimeout),
                Ok(Ok(0)) => return Err(io_error(std::io::ErrorKind::WriteZero.into())),
                Ok(Ok(n)) => {
                    self.inner
                        .written_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                    IoSlice::advance_slices(&mut bufs, n);
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(io_error(e)),
            }
        }
        match runtime::timeout(limit, w.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(io_error(e)),
            Err(_) => Err(RemotingError::WriteTimeout),
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Sender<RemotingCommand>>> {
        // A poisoned map is still a valid map: the panicking holder only inserted or removed.
        self.inner.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        let ms = self.inner.started.elapsed().as_millis() as u64;
        self.inner.last_activity_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = self.inner.last_activity_ms.load(Ordering::Relaxed);
        self.inner
            .started
            .elapsed()
            .saturating_sub(Duration::from_millis(last))
    }

    /// Closes the socket now and fails every pending request.
    fn abort(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let _ = self.inner.stream.shutdown(NetShutdown::Both);
        // Dropping the senders wakes every waiter with `Closed`.
        self.lock_pending().clear();
    }

    async fn read_loop<P: Processor>(
        self,
        stream: TcpStream,
        config: ConnectionConfig,
        processor: Arc<P>,
    ) {
        let mut reader = BufReader::new(stream);
        let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
        let in_flight_bytes = Arc::new(AtomicUsize::new(0));
        if let Some(idle) = config.idle_timeout {
            runtime::spawn(self.clone().close_when_idle(idle));
        }
        loop {
            // Wait for data without consuming it, so a close never cuts a frame. Idleness
            // is the watchdog's business: a timer armed here for every request cost two
            // timer operations and a reactor wake-up each.
            let ready = runtime::race(
                async {
                    let fill = std::future::poll_fn(|cx| {
                        use async_std::io::BufRead;
                        std::pin::Pin::new(&mut reader)
                            .poll_fill_buf(cx)
                            .map(|r| r.map(|buf| buf.is_empty()))
                    });
                    match fill.await {
                        Ok(false) => Wait::Data,
                        Ok(true) | Err(_) => Wait::Eof,
                    }
                },
                async {
                    self.inner.close_signal.wait().await;
                    Wait::Close
                },
            )
            .await;
            match ready {
                Wait::Data => {}
                Wait::Eof => break,
                Wait::Close => {
                    self.drain(&in_flight, &config).await;
                    break;
                }
            }
            let (cmd, frame_bytes) = match read_frame(&mut reader, &config.limits).await {
                Ok(read) => read,
                Err(e) => {
                    log::warn!(
                        "closing connection {} from {}: {e}",
                        self.id(),
                        self.peer_addr()
                    );
                    break;
                }
            };
            self.touch();
            if cmd.is_response() {
                let waiter = self.lock_pending().remove(&cmd.opaque);
                match waiter {
                    Some(tx) => {
                        let _ = tx.try_send(cmd);
                    }
                    None => log::debug!(
                        "dropping response with unknown opaque {} (timed out?)",
                        cmd.opaque
                    ),
                }
                continue;
            }
            let budget = ByteBudget {
                held: &in_flight_bytes,
                max: config.max_in_flight_bytes,
            };
            self.dispatch(cmd, frame_bytes, &processor, &in_flight, budget)
                .await;
        }
        self.abort();
        self.inner.done.trigger();
    }

    /// Closes the connection once nothing was read or written for `idle`; ends with it.
    async fn close_when_idle(self, idle: Duration) {
        loop {
            let idle_for = self.idle_for();
            if idle_for >= idle {
                log::info!(
                    "closing idle connection {} from {}",
                    self.id(),
                    self.peer_addr()
                );
                // The read loop sees the shut socket as end of stream and finishes.
                self.abort();
                return;
            }
            let done = runtime::race(
                async {
                    runtime::sleep(idle - idle_for).await;
                    false
                },
                async {
                    self.inner.done.wait().await;
                    true
                },
            )
            .await;
            if done {
                return;
            }
        }
    }

    /// Runs one request from the peer: in the read loop when the processor says it is
    /// quick (reading waits meanwhile, so it holds no budget), else in a task of its own
    /// holding a slot and its frame's bytes of the connection's budgets.
    async fn dispatch<P: Processor>(
        &self,
        req: RemotingCommand,
        frame_bytes: usize,
        processor: &Arc<P>,
        in_flight: &Arc<Semaphore>,
        budget: ByteBudget<'_>,
    ) {
        if processor.is_quick(&req) {
            let (opaque, ser, oneway) = (req.opaque, req.serialize_type, req.is_oneway());
            let resp = processor.process(self, req).await;
            self.respond(resp, opaque, ser, oneway).await;
            return;
        }
        let admitted = in_flight
            .try_acquire_arc()
            .ok_or("[OVERLOAD]too many requests in flight")
            .and_then(|permit| {
                budget
                    .take(frame_bytes)
                    .map(|bytes| (permit, bytes))
                    .ok_or("[OVERLOAD]too many request bytes in flight")
            });
        let held = match admitted {
            Ok(held) => held,
            Err(why) => {
                if !req.is_oneway() {
                    let busy = RemotingCommand::error_response(&req, ResponseCode::SystemBusy, why);
                    let _ = self.write(&busy).await;
                }
                return;
            }
        };
        let conn = self.clone();
        let processor = processor.clone();
        runtime::spawn(async move {
            let (opaque, ser, oneway) = (req.opaque, req.serialize_type, req.is_oneway());
            let resp = processor.process(&conn, req).await;
            conn.respond(resp, opaque, ser, oneway).await;
            drop(held);
        });
    }

    /// Sends a processor's answer to the request `opaque` (none for oneway requests).
    async fn respond(
        &self,
        resp: Option<RemotingCommand>,
        opaque: i32,
        ser: SerializeType,
        oneway: bool,
    ) {
        if let (Some(mut resp), false) = (resp, oneway) {
            resp.opaque = opaque;
            resp.flag |= FLAG_RESPONSE;
            if ser == SerializeType::Json {
                // The C++ client reads JSON only: a JSON request gets a JSON answer.
                resp.serialize_type = SerializeType::Json;
            }
            let _ = self.write(&resp).await;
        }
    }

    /// Waits (bounded) until every in-flight request has been answered.
    async fn drain(&self, in_flight: &Arc<Semaphore>, config: &ConnectionConfig) {
        let all = async {
            let mut held = Vec::with_capacity(config.max_in_flight);
            for _ in 0..config.max_in_flight {
                held.push(in_flight.acquire().await);
            }
        };
        let _ = runtime::timeout(config.drain_timeout, all).await;
    }
}

enum Wait {
    Data,
    Eof,
    Close,
}

/// A connection's budget of request-frame bytes in flight
/// ([`ConnectionConfig::max_in_flight_bytes`]).
#[derive(Clone, Copy)]
struct ByteBudget<'a> {
    held: &'a Arc<AtomicUsize>,
    max: usize,
}

impl ByteBudget<'_> {
    /// Takes `bytes` unless that would pass the budget with something already held.
    /// Only the read loop takes, so the check and the add cannot interleave with another
    /// take; tasks only give back.
    fn take(self, bytes: usize) -> Option<HeldBytes> {
        let before = self.held.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before.saturating_add(bytes) > self.max {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return None;
        }
        Some(HeldBytes {
            held: self.held.clone(),
            bytes,
        })
    }
}

/// Bytes of the budget held by one request; given back when it is answered.
struct HeldBytes {
    held: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Most bytes reserved for a frame before its bytes arrive.
const PREALLOCATE_MAX_BYTES: usize = 1 << 20;

/// Bodies up to this size are copied behind the header and sent in one write.
const INLINE_BODY_BYTES: usize = 8 << 10;

fn io_error(e: std::io::Error) -> RemotingError {
    RemotingError::Io(e.to_string())
}

/// Reads one frame; returns the command and the frame's length. Memory grows with the
/// bytes actually received, so a peer that announces 16 MiB and sends nothing costs
/// nothing.
async fn read_frame<R: async_std::io::Read + Unpin>(
    reader: &mut R,
    limits: &FrameLimits,
) -> Result<(RemotingCommand, usize), ReadError> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).await.map_err(ReadError::Io)?;
    let length = check_frame_length(u32::from_be_bytes(len), limits).map_err(ReadError::Frame)?;
    // Sized up front (bounded, so a peer announcing 16 MiB and sending nothing does not
    // get it reserved); the buffer becomes the command's body.
    let mut payload = Vec::with_capacity((length as usize).min(PREALLOCATE_MAX_BYTES));
    reader
        .take(u64::from(length))
        .read_to_end(&mut payload)
        .await
        .map_err(ReadError::Io)?;
    if payload.len() != length as usize {
        return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    let cmd = RemotingCommand::decode_payload_owned(payload, limits).map_err(ReadError::Frame)?;
    Ok((cmd, length as usize + 4))
}

#[derive(Debug)]
enum ReadError {
    Io(std::io::Error),
    Frame(FrameError),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Frame(e) => write!(f, "{e}"),
        }
    }
}
