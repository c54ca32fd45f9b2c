//! The read loop: frames from the peer, responses matched to waiting requests, requests
//! dispatched to the processor within the connection's budgets.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_lock::Semaphore;
use async_std::io::{BufReader, prelude::*};

use super::{Connection, ConnectionConfig, Processor};
use crate::code::ResponseCode;
use crate::frame::{
    FLAG_RESPONSE, FrameError, FrameLimits, RemotingCommand, SerializeType, body_offset,
    check_frame_length,
};
use crate::runtime;
use crate::tls::ReadHalf;

impl Connection {
    pub(super) async fn read_loop<P: Processor>(
        self,
        stream: ReadHalf,
        config: ConnectionConfig,
        processor: Arc<P>,
    ) {
        let mut reader = BufReader::new(stream);
        let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
        let in_flight_bytes = Arc::new(AtomicUsize::new(0));
        if let Some(idle) = config.idle_timeout {
            runtime::spawn(self.clone().close_when_idle(idle));
        }
        // Answers to quick requests, encoded back to back: written once no whole frame
        // is left in the read buffer (Redis's reply buffering). A client with many
        // requests in flight (async sends, a shared producer connection) gets one write
        // for what one read brought in, instead of one per request.
        let mut answers: Vec<u8> = Vec::new();
        // Frames read since this task last let others run. A peer that keeps the socket
        // full never makes a read wait, and async-io has no budget of its own: without a
        // yield, a flood of quick requests (oneway sends) held a worker for seconds, and
        // the connections queued behind it timed out their writes.
        let mut turn = 0usize;
        loop {
            let turn_over = turn >= FRAMES_PER_TURN;
            if !answers.is_empty()
                && (turn_over
                    || answers.len() >= ANSWERS_FLUSH_BYTES
                    || !holds_frame(reader.buffer()))
            {
                let _ = self.write_encoded(&answers).await;
                answers.clear();
                answers.shrink_to(ANSWERS_FLUSH_BYTES);
            }
            if turn_over {
                turn = 0;
                runtime::yield_now().await;
            }
            // Wait for data without consuming it, so a close never cuts a frame. Idleness
            // is the watchdog's business: a timer armed here for every request cost two
            // timer operations and a reactor wake-up each.
            reader.get_mut().between_frames(true);
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
                        Ok(true) => Wait::Eof,
                        Err(e) => Wait::Failed(e),
                    }
                },
                async {
                    self.inner.close_signal.wait().await;
                    Wait::Close
                },
            )
            .await;
            match ready {
                Wait::Data => reader.get_mut().between_frames(false),
                Wait::Eof => break,
                // Our own close (a stalled write) shows as an error too: only the
                // peer's reasons are kept.
                Wait::Failed(_) if self.is_closed() => break,
                Wait::Failed(e) => {
                    // A reset, or a TLS alert (a certificate refused after a TLS 1.3
                    // handshake completed): kept so waiting requests can say why.
                    if self.is_tls() {
                        log::warn!(
                            "TLS connection {} with {} closed: {e}",
                            self.id(),
                            self.peer_addr()
                        );
                    }
                    self.set_close_reason(e);
                    break;
                }
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
                    self.set_close_reason(e.into());
                    break;
                }
            };
            self.touch();
            turn += 1;
            if cmd.is_response() {
                let waiter = self.take_waiter(cmd.opaque);
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(Ok(cmd));
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
            self.dispatch(
                cmd,
                frame_bytes,
                &processor,
                &in_flight,
                budget,
                &mut answers,
            )
            .await;
        }
        if !answers.is_empty() {
            // The peer may only have shut its writing side: it still reads.
            let _ = self.write_encoded(&answers).await;
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
    /// quick (reading waits meanwhile, so it holds no budget; its answer joins
    /// `answers`), else in a task of its own holding a slot and its frame's bytes of the
    /// connection's budgets.
    async fn dispatch<P: Processor>(
        &self,
        req: RemotingCommand,
        frame_bytes: usize,
        processor: &Arc<P>,
        in_flight: &Arc<Semaphore>,
        budget: ByteBudget<'_>,
        answers: &mut Vec<u8>,
    ) {
        if processor.is_quick(&req) {
            let (opaque, ser, oneway) = (req.opaque, req.serialize_type, req.is_oneway());
            let resp = processor.process(self, req).await;
            if let Some(resp) = answer(resp, opaque, ser, oneway) {
                match resp.encode() {
                    Ok(frame) => answers.extend_from_slice(&frame),
                    Err(e) => log::warn!("answer to request {opaque} not encoded: {e}"),
                }
            }
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
        let (slot, bytes) = held;
        runtime::spawn(async move {
            let (opaque, ser, oneway) = (req.opaque, req.serialize_type, req.is_oneway());
            let resp = processor.process(&conn, req).await;
            // The request's bytes are gone once it is processed: give them back before
            // answering, or a client that sends its next request on the answer can find
            // the budget still taken. Its slot is held until the answer is written: a
            // draining connection waits for every slot before it closes.
            let others_in_flight = bytes.give_back();
            if let Some(resp) = answer(resp, opaque, ser, oneway) {
                let _ = conn.write_sharing(&resp, others_in_flight).await;
            }
            drop(slot);
        });
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

/// A processor's answer made the response to request `opaque`: none for a oneway one.
fn answer(
    resp: Option<RemotingCommand>,
    opaque: i32,
    ser: SerializeType,
    oneway: bool,
) -> Option<RemotingCommand> {
    let mut resp = resp.filter(|_| !oneway)?;
    resp.opaque = opaque;
    resp.flag |= FLAG_RESPONSE;
    if ser == SerializeType::Json {
        // The C++ client reads JSON only: a JSON request gets a JSON answer.
        resp.serialize_type = SerializeType::Json;
    }
    Some(resp)
}

/// Frames a read loop handles before it lets the other tasks of its worker run (Netty's
/// `maxMessagesPerRead` is 16 reads).
const FRAMES_PER_TURN: usize = 32;

/// Gathered answers are written at the latest once they reach this.
const ANSWERS_FLUSH_BYTES: usize = 64 << 10;

/// Whether `buffered` starts with a whole frame (its 4-byte length and that many bytes).
fn holds_frame(buffered: &[u8]) -> bool {
    match buffered.first_chunk::<4>() {
        Some(len) => buffered.len() - 4 >= u32::from_be_bytes(*len) as usize,
        None => false,
    }
}

enum Wait {
    Data,
    Eof,
    Failed(std::io::Error),
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

impl HeldBytes {
    /// Gives the bytes back; returns whether other requests of the connection still hold
    /// some (they are being processed: their answers are coming).
    fn give_back(mut self) -> bool {
        let before = self.held.fetch_sub(self.bytes, Ordering::AcqRel);
        let others = before > self.bytes;
        self.bytes = 0;
        others
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// Most bytes a frame's buffer grows by before they arrive.
const PREALLOCATE_MAX_BYTES: usize = 1 << 20;

/// Reads one frame; returns the command and the frame's length. Memory grows with the
/// bytes actually received, so a peer that announces 16 MiB and sends nothing costs
/// nothing.
pub(crate) async fn read_frame<R: async_std::io::Read + Unpin>(
    reader: &mut R,
    limits: &FrameLimits,
) -> Result<(RemotingCommand, usize), ReadError> {
    let mut len = [0u8; 4];
    reader.read_exact(&mut len).await.map_err(ReadError::Io)?;
    let length = check_frame_length(u32::from_be_bytes(len), limits).map_err(|e| {
        // A TLS record (handshake 0x16, version 3.x) read as a length is far past any
        // limit: name it, so the log says what happened rather than "frame too large".
        if len[0] == crate::tls::HANDSHAKE_RECORD && len[1] == 3 {
            ReadError::TlsHello
        } else {
            ReadError::Frame(e)
        }
    })? as usize;
    let mut mark = [0u8; 4];
    reader.read_exact(&mut mark).await.map_err(ReadError::Io)?;
    let mark = u32::from_be_bytes(mark);
    let body_at = body_offset(mark, length, limits).map_err(ReadError::Frame)?;
    // Header and body each read straight into their own buffer, the body's becoming
    // the command's: nothing is copied after the socket read.
    let header = read_exact_growing(reader, body_at - 4).await?;
    let body = read_exact_growing(reader, length - body_at).await?;
    let cmd =
        RemotingCommand::decode_parts(mark, &header, body, limits).map_err(ReadError::Frame)?;
    Ok((cmd, length + 4))
}

/// Reads exactly `len` bytes, the buffer growing at most [`PREALLOCATE_MAX_BYTES`] ahead
/// of what arrived. Not `read_to_end` into a buffer sized for them: once full it grows
/// the buffer to look for more, which reallocated and copied every frame.
async fn read_exact_growing<R: async_std::io::Read + Unpin>(
    reader: &mut R,
    len: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut buf = Vec::new();
    while buf.len() < len {
        let from = buf.len();
        let to = len.min(from + PREALLOCATE_MAX_BYTES);
        // Exact: `resize` alone doubles, leaving a body just over a power of two in
        // twice its size for as long as the command lives.
        buf.reserve_exact(to - from);
        buf.resize(to, 0);
        reader
            .read_exact(&mut buf[from..])
            .await
            .map_err(ReadError::Io)?;
    }
    Ok(buf)
}

#[derive(Debug)]
pub(crate) enum ReadError {
    Io(std::io::Error),
    Frame(FrameError),
    /// The peer started a TLS handshake on a plaintext connection.
    TlsHello,
}

impl From<ReadError> for std::io::Error {
    /// The I/O error; a frame the peer got wrong is [`std::io::ErrorKind::InvalidData`]
    /// with the same text.
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => e,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Frame(e) => write!(f, "{e}"),
            Self::TlsHello => f.write_str(
                "the peer started a TLS handshake, but this connection is plaintext \
                 (tls.server.mode=disabled on a server; tls.enable=false on a client)",
            ),
        }
    }
}
