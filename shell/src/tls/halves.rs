//! A connection's read and write halves, and the socket under them.
//!
//! A plain socket is registered with async-io's reactor here rather than through
//! async-std's `TcpStream`, so that its reader asks the reactor for readiness itself
//! ([`ReadHalf`]); both halves and the [`Socket`] handle share it. A TLS stream's
//! halves share its one state machine as [`SharedStream`](super::SharedStream) does.

use std::io::{self, IoSlice, Read};
use std::net::{Shutdown, SocketAddr};
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

impl Stream {
    /// Read and write halves usable from two tasks at once, and the socket under them
    /// (to shut it down from a third). Fails only if the socket cannot be registered
    /// with the reactor, or the stream's socket is shared with another handle.
    pub fn split(self) -> io::Result<(ReadHalf, WriteHalf, Socket)> {
        match self {
            Stream::Plain(tcp) => {
                let socket = Arc::new(Async::new(std::net::TcpStream::try_from(tcp)?)?);
                Ok((
                    ReadHalf(Reader::Plain {
                        socket: socket.clone(),
                        waiting: false,
                    }),
                    WriteHalf(Writer::Plain(socket.clone())),
                    Socket(SocketKind::Plain(socket)),
                ))
            }
            Stream::Tls(tls) => {
                let tcp = tls.get_ref().0.clone();
                let shared = Arc::new(Mutex::new(tls));
                Ok((
                    ReadHalf(Reader::Tls(shared.clone())),
                    WriteHalf(Writer::Tls(shared)),
                    Socket(SocketKind::Tls(tcp)),
                ))
            }
        }
    }
}

/// The half a connection's reader owns.
///
/// A plain socket's reader asks the reactor before reading again once it waited. Async-io's
/// own `poll_read` reads first and asks after: the read after a wake-up succeeds but
/// leaves the reactor's event unclaimed, so at the next empty socket it reads, is told
/// "ready" by that old event, and reads again, both reads finding nothing. That was
/// three reads for every frame a request-response peer sends; this is two.
#[derive(Debug)]
pub struct ReadHalf(Reader);

#[derive(Debug)]
enum Reader {
    Plain {
        socket: Plain,
        /// A read found the socket empty: readiness comes from the reactor before the
        /// next read.
        waiting: bool,
    },
    Tls(Arc<Mutex<Box<TlsStream>>>),
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Reader::Plain { socket, waiting } => loop {
                if *waiting {
                    ready!(socket.poll_readable(cx))?;
                    *waiting = false;
                }
                match socket.get_ref().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => *waiting = true,
                    done => return Poll::Ready(done),
                }
            },
            Reader::Tls(s) => Pin::new(&mut **s.guard()).poll_read(cx, buf),
        }
    }
}

/// The half a connection's writers share.
#[derive(Debug)]
pub struct WriteHalf(Writer);

#[derive(Debug)]
enum Writer {
    Plain(Plain),
    Tls(Arc<Mutex<Box<TlsStream>>>),
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Writer::Plain(s) => Pin::new(&mut &**s).poll_write(cx, buf),
            Writer::Tls(s) => Pin::new(&mut **s.guard()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            Writer::Plain(s) => Pin::new(&mut &**s).poll_write_vectored(cx, bufs),
            Writer::Tls(s) => Pin::new(&mut **s.guard()).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            Writer::Plain(s) => Pin::new(&mut &**s).poll_flush(cx),
            Writer::Tls(s) => Pin::new(&mut **s.guard()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            // As async-std's `TcpStream` closes: the writing direction shut.
            Writer::Plain(s) => Poll::Ready(s.get_ref().shutdown(Shutdown::Write)),
            Writer::Tls(s) => Pin::new(&mut **s.guard()).poll_close(cx),
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

    /// Sets TCP_NODELAY.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match &self.0 {
            SocketKind::Plain(s) => s.get_ref().set_nodelay(on),
            SocketKind::Tls(s) => s.set_nodelay(on),
        }
    }

    /// Our side's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            SocketKind::Plain(s) => s.get_ref().local_addr(),
            SocketKind::Tls(s) => s.local_addr(),
        }
    }
}
