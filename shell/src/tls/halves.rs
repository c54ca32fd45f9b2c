//! A connection's read and write halves, and the socket under them.
//!
//! A plain socket is registered with async-io's reactor here rather than through
//! async-std's `TcpStream`, so that its reader can tell the reactor's old news from new
//! ([`ReadHalf`]); both halves and the [`Socket`] handle share it. A TLS stream's
//! halves share its one state machine as [`SharedStream`](super::SharedStream) does.

use std::io::{self, IoSlice, Read};
use std::net::Shutdown;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use async_io::Async;
use async_std::io::{Read as AsyncRead, Write as AsyncWrite};
use async_std::net::TcpStream;

use super::{Stream, TlsStream};
use crate::sync::MutexExt;

/// A plain socket as the halves share it.
type Plain = Arc<Async<std::net::TcpStream>>;

/// What each half holds: the plain socket, or the TLS state machine both halves use.
#[derive(Debug)]
enum Shared {
    Plain(Plain),
    Tls(Arc<Mutex<Box<TlsStream>>>),
}

impl Stream {
    /// Read and write halves usable from two tasks at once, and the socket under them
    /// (to shut it down from a third). Fails only if the socket cannot be registered
    /// with the reactor, or the stream's socket is shared with another handle.
    pub fn split(self) -> io::Result<(ReadHalf, WriteHalf, Socket)> {
        match self {
            Stream::Plain(tcp) => {
                let socket = Arc::new(Async::new(std::net::TcpStream::try_from(tcp)?)?);
                Ok((
                    ReadHalf {
                        shared: Shared::Plain(socket.clone()),
                        guess: EmptyGuess::default(),
                    },
                    WriteHalf(Shared::Plain(socket.clone())),
                    Socket(SocketKind::Plain(socket)),
                ))
            }
            Stream::Tls(tls) => {
                let tcp = tls.get_ref().0.clone();
                let shared = Arc::new(Mutex::new(tls));
                Ok((
                    ReadHalf {
                        shared: Shared::Tls(shared.clone()),
                        guess: EmptyGuess::default(),
                    },
                    WriteHalf(Shared::Tls(shared)),
                    Socket(SocketKind::Tls(tcp)),
                ))
            }
        }
    }
}

/// The half a connection's reader owns.
///
/// A plain socket's reader reads first, as async-io's own `poll_read` does (after a
/// wake-up the data is there; asking the reactor first instead cost a turn whenever the
/// event came in the same reactor tick as the registration, which under pipelined load
/// was often). It differs after a read that found the socket empty: async-io asks the
/// reactor, is told "ready" by the event that woke it last time (unclaimed, since the
/// read after that wake-up succeeded), and reads again, finding nothing again: three
/// reads for every frame a request-response peer sends. Here a "ready" right after an
/// empty read is taken for that old event and the reactor asked again, which registers
/// for the next: two reads.
///
/// And one read for a peer that sends nothing until it is answered (a sync producer,
/// a consumer's long poll): between frames ([`ReadHalf::between_frames`]), once a read
/// that followed a draining read has found the socket empty, later such reads are
/// skipped and the reactor asked first, as Redis reads only what epoll reported. At 16
/// sync senders that read was one in five of the broker's system calls. Every
/// [`RELEARN_AFTER`] skips one read is tried again, so a peer that starts pipelining is
/// read at once again. Within a frame (the rest of a large message) reads come first.
#[derive(Debug)]
pub struct ReadHalf {
    shared: Shared,
    guess: EmptyGuess,
}

/// Skipped reads before one is tried again to learn whether the peer still waits.
const RELEARN_AFTER: u8 = 32;

/// What the reader has learnt about its peer's sending.
#[derive(Debug, Default)]
struct EmptyGuess {
    /// The last read took less than it asked for: the socket was empty after it.
    drained: bool,
    /// The last read tried right after a draining one found nothing.
    peer_waits: bool,
    /// Reads skipped since the last one tried.
    skipped: u8,
    /// The next read waits for a new frame: the only reads the guess skips or learns from.
    between_frames: bool,
}

impl ReadHalf {
    /// Tells the reader whether its next read waits for a new frame (`true`) or is
    /// the rest of one (`false`, the default). Only the former may be skipped.
    pub fn between_frames(&mut self, between: bool) {
        self.guess.between_frames = between;
    }
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match &mut this.shared {
            Shared::Plain(socket) => {
                let guess = &mut this.guess;
                let between = guess.between_frames;
                if between && guess.drained && guess.peer_waits && guess.skipped < RELEARN_AFTER {
                    guess.drained = false;
                    guess.skipped += 1;
                    // The last wake-up's event, then a registration for the next.
                    ready!(socket.poll_readable(cx))?;
                    ready!(socket.poll_readable(cx))?;
                }
                // A read between frames with no event behind it: what it finds teaches
                // the guess.
                let mut unprompted = std::mem::take(&mut guess.drained) && between;
                loop {
                    match socket.get_ref().read(buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if std::mem::take(&mut unprompted) {
                                guess.peer_waits = true;
                                guess.skipped = 0;
                            }
                        }
                        Ok(n) => {
                            if unprompted {
                                guess.peer_waits = false;
                            }
                            guess.drained = n < buf.len();
                            return Poll::Ready(Ok(n));
                        }
                        failed => return Poll::Ready(failed),
                    }
                    // The socket was empty after this poll began, so a "ready" now is the
                    // last wake-up's event (an event needs a registration, which only the
                    // call below makes): asking again registers for the next one. Bytes
                    // that came since the read are not missed: re-arming the one-shot
                    // registration reports data already queued.
                    ready!(socket.poll_readable(cx))?;
                    ready!(socket.poll_readable(cx))?;
                }
            }
            Shared::Tls(s) => Pin::new(&mut **s.guard()).poll_read(cx, buf),
        }
    }
}

/// The half a connection's writers share.
#[derive(Debug)]
pub struct WriteHalf(Shared);

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Shared::Plain(s) => Pin::new(&mut &**s).poll_write(cx, buf),
            Shared::Tls(s) => Pin::new(&mut **s.guard()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Shared::Plain(s) => Pin::new(&mut &**s).poll_write_vectored(cx, bufs),
            Shared::Tls(s) => Pin::new(&mut **s.guard()).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Shared::Plain(s) => Pin::new(&mut &**s).poll_flush(cx),
            Shared::Tls(s) => Pin::new(&mut **s.guard()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            // The writing direction shut, so the peer reads the end of the stream (the
            // HTTP server's answers end so). async-std's `TcpStream` only flushed.
            Shared::Plain(s) => Poll::Ready(s.get_ref().shutdown(Shutdown::Write)),
            Shared::Tls(s) => Pin::new(&mut **s.guard()).poll_close(cx),
        }
    }
}

/// The TCP socket under a split stream: shut it down to close the connection at once,
/// from any task.
#[derive(Debug)]
pub struct Socket(SocketKind);

#[derive(Debug)]
enum SocketKind {
    Plain(Plain),
    Tls(TcpStream),
}

impl Socket {
    /// Shuts down `how` of the socket.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match &self.0 {
            SocketKind::Plain(s) => s.get_ref().shutdown(how),
            SocketKind::Tls(s) => s.shutdown(how),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_std::io::{ReadExt, WriteExt};
    use async_std::net::TcpListener;

    use super::*;
    use crate::runtime::{block_on, sleep, spawn, timeout};

    /// The reader learns that its peer waits to be answered and then asks the reactor
    /// before reading; when the peer starts pipelining, the bytes already queued are
    /// still read (the registration reports them), and a tried read unlearns the guess.
    #[test]
    fn a_peer_that_waits_is_read_when_the_reactor_says_and_a_pipelining_one_at_once() {
        block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut peer = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (ours, _) = listener.accept().await.unwrap();
            let (mut reader, _writer, _socket) = Stream::Plain(ours).split().unwrap();
            reader.between_frames(true);
            let mut buf = [0u8; 64];
            let within = Duration::from_secs(2);

            // Request-response: the read tried after each draining one finds nothing.
            for n in 0..3u8 {
                let mut later = peer.clone();
                let send = spawn(async move {
                    sleep(Duration::from_millis(20)).await;
                    later.write_all(&[n; 10]).await.unwrap();
                });
                let read = timeout(within, reader.read(&mut buf)).await;
                send.await;
                assert_eq!(read.unwrap().unwrap(), 10);
                assert_eq!(buf[..10], [n; 10]);
            }
            assert!(reader.guess.peer_waits && reader.guess.drained);
            let skipped = reader.guess.skipped;

            // Within a frame nothing is skipped (nor learnt).
            reader.between_frames(false);
            peer.write_all(&[7; 5]).await.unwrap();
            let read = timeout(within, reader.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert_eq!((read, reader.guess.skipped), (5, skipped));
            assert!(reader.guess.peer_waits);
            reader.between_frames(true);

            // Pipelining: each read is skipped, yet finds the bytes queued before it.
            let mut got = Vec::new();
            for n in 0..(RELEARN_AFTER as usize + 3) {
                peer.write_all(&[n as u8; 5]).await.unwrap();
                sleep(Duration::from_millis(1)).await;
                let read = timeout(within, reader.read(&mut buf))
                    .await
                    .unwrap()
                    .unwrap();
                got.extend_from_slice(&buf[..read]);
            }
            let sent: Vec<u8> = (0..(RELEARN_AFTER + 3)).flat_map(|n| [n; 5]).collect();
            while got.len() < sent.len() {
                let read = timeout(within, reader.read(&mut buf))
                    .await
                    .unwrap()
                    .unwrap();
                got.extend_from_slice(&buf[..read]);
            }
            assert_eq!(got, sent);
            // The tried read after the skips found data: reads come first again.
            assert!(!reader.guess.peer_waits);
        });
    }
}
