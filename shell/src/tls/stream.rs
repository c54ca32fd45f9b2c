//! A connection's byte stream, plain TCP or TLS over it, whole or shared by tasks
//! ([`SharedStream`]); a connection's two halves are in `halves`.
//!
//! A TLS stream is one state machine (records, keys, alerts), so its users share it
//! under a mutex held only for the length of one poll; one waiting for the socket holds
//! nothing. Reading never writes here: rustls queues what a read produces (alerts, key
//! updates) and the writer's next write or flush sends it.

use crate::sync::MutexExt;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_std::io::{Read as AsyncRead, Write as AsyncWrite};
use async_std::net::TcpStream;

/// TLS over a TCP socket, either side.
pub type TlsStream = futures_rustls::TlsStream<TcpStream>;

/// A connected stream: plain TCP, or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    /// Plaintext.
    Plain(TcpStream),
    /// TLS, handshake done.
    Tls(Box<TlsStream>),
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Self {
        Stream::Plain(s)
    }
}

impl Stream {
    /// The TCP socket under the stream (addresses, `set_nodelay`, `shutdown`).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }

    /// True for TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// The certificate chain the peer presented and the handshake verified (mutual
    /// TLS); none for plaintext or a peer that sent none.
    pub fn peer_certificates(&self) -> Option<&[rustls_pki_types::CertificateDer<'static>]> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(s) => match s.as_ref() {
                futures_rustls::TlsStream::Client(c) => c.get_ref().1.peer_certificates(),
                futures_rustls::TlsStream::Server(c) => c.get_ref().1.peer_certificates(),
            },
        }
    }
}

/// One direction's handle on a shared stream.
#[derive(Debug)]
enum Half {
    Plain(TcpStream),
    Tls(Arc<Mutex<Box<TlsStream>>>),
}

/// The whole stream as one reader and writer, for a server that does not split it (the
/// gRPC endpoint hands it to HTTP/2 whole).
impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_close(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

/// A stream whose two directions are used at once through shared references, as
/// `&TcpStream` is: `&SharedStream` reads and writes (the HA port's reader and writer
/// tasks share one connection this way).
#[derive(Debug)]
pub struct SharedStream {
    tcp: TcpStream,
    half: Half,
}

impl Stream {
    /// The stream for use through `&SharedStream` from several tasks.
    pub fn shared(self) -> SharedStream {
        let tcp = self.tcp().clone();
        let half = match self {
            Stream::Plain(s) => Half::Plain(s),
            Stream::Tls(s) => Half::Tls(Arc::new(Mutex::new(s))),
        };
        SharedStream { tcp, half }
    }
}

impl SharedStream {
    /// The TCP socket under it (shut it down to close at once).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl AsyncRead for &SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match &self.half {
            Half::Plain(s) => Pin::new(&mut &*s).poll_read(cx, buf),
            Half::Tls(s) => Pin::new(&mut **s.guard()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for &SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &self.half {
            Half::Plain(s) => Pin::new(&mut &*s).poll_write(cx, buf),
            Half::Tls(s) => Pin::new(&mut **s.guard()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.half {
            Half::Plain(s) => Pin::new(&mut &*s).poll_flush(cx),
            Half::Tls(s) => Pin::new(&mut **s.guard()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.half {
            Half::Plain(s) => Pin::new(&mut &*s).poll_close(cx),
            Half::Tls(s) => Pin::new(&mut **s.guard()).poll_close(cx),
        }
    }
}
