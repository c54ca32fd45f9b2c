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
                    ReadHalf(Shared::Plain(socket.clone())),
                    WriteHalf(Shared::Plain(socket.clone())),
                    Socket(SocketKind::Plain(socket)),
                ))
            }
            Stream::Tls(tls) => {
                let tcp = tls.get_ref().0.clone();
                let shared = Arc::new(Mutex::new(tls));
                Ok((
                    ReadHalf(Shared::Tls(shared.clone())),
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
#[derive(Debug)]
pub struct ReadHalf(Shared);

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Shared::Plain(socket) => loop {
                match socket.get_ref().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return Poll::Ready(done),
                }
                // The socket was empty after this poll began, so a "ready" now is the
                // last wake-up's event (an event needs a registration, which only the
                // call below makes): asking again registers for the next one. Bytes
                // that came since the read are not missed: re-arming the one-shot
                // registration reports data already queued.
                ready!(socket.poll_readable(cx))?;
                ready!(socket.poll_readable(cx))?;
            },
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
