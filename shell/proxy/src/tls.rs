//! TLS on the gRPC port, through the broker's TLS policy (`tls.server.mode`, its
//! certificate and its reloads: `tern_shell::tls::ServerTls`): `permissive` serves TLS and
//! plaintext on the one port, as RocketMQ's proxy does, `enforcing` only TLS. The
//! handshake offers ALPN `h2`, which gRPC clients require.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tern_shell::tls::{ServerTls, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Handshakes in progress at once; past it new connections wait to be accepted.
const MAX_HANDSHAKES: usize = 256;

/// One accepted connection, TLS or plaintext as the mode allowed.
#[derive(Debug)]
pub struct Conn {
    io: Compat<Stream>,
    local: SocketAddr,
    remote: SocketAddr,
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo {
            local_addr: Some(self.local),
            remote_addr: Some(self.remote),
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Accepts on `listener` and takes each connection through `tls`; the connections that
/// pass come out of the returned stream. Refusals are logged by `tls`.
pub fn incoming(
    listener: tokio::net::TcpListener,
    tls: ServerTls,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let Ok(slot) = slots.clone().acquire_owned().await else {
                return;
            };
            let (tcp, remote) = match listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    log::warn!("gRPC endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (Ok(local), Ok(std)) = (tcp.local_addr(), tcp.into_std()) else {
                continue;
            };
            let (tls, sink) = (tls.clone(), tx.clone());
            tokio::spawn(async move {
                let _slot = slot;
                if let Ok(stream) = tls.accept_std(std).await {
                    let conn = Conn {
                        io: stream.compat(),
                        local,
                        remote,
                    };
                    let _ = sink.send(Ok(conn)).await;
                }
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
