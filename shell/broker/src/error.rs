//! Why the broker did not start ([`StartError`]).
//!
//! The texts are the ones `tern-broker` has always printed after its name (operators and
//! the process tests read them), and the convention is the store's errors' (see
//! `store/error.rs`): the Display text is the whole story, the inner error's text
//! included; `source()` returns the inner error wherever there is one.

use std::fmt;
use std::io;
use std::net::SocketAddr;

use tern_engine_fs::fs_store::FsStoreError;

use crate::controller::EpochsError;
use crate::timer::TimerSetupError;

/// Which listener a [`StartError::Bind`] was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The remoting port (`listenAddr:listenPort`).
    Remoting,
    /// The HA port as `haListenPort` names it.
    HaListenPort,
    /// A free HA port: no `haListenPort`, and the port above the remoting port taken or
    /// the remoting port picked freely.
    HaFree,
}

/// Why [`Broker::start`](crate::Broker::start) failed.
#[derive(Debug)]
pub enum StartError {
    /// `aclEnable=true` but the rules cannot be used (the text names the key and file).
    Acl(String),
    /// The store could not be opened or recovered.
    Store(FsStoreError),
    /// The timer could not be opened.
    Timer(TimerSetupError),
    /// The `tls.server.*` or `tls.client.*` files cannot be used.
    Tls(String),
    /// A port could not be bound.
    Bind {
        /// Which one.
        listener: Listener,
        /// What was bound (port 0 for [`Listener::HaFree`]).
        addr: SocketAddr,
        /// The OS error.
        error: io::Error,
    },
    /// The bound HA port's address could not be read.
    HaAddr(io::Error),
    /// Controller mode: the replica's epoch files could not be opened.
    Controller(EpochsError),
    /// The gRPC endpoint's TLS (`tls.server.*` offering h2, `tls.client.*`) cannot be used.
    #[cfg(feature = "grpc")]
    GrpcTls(String),
    /// The gRPC endpoint could not start on `host:port`.
    #[cfg(feature = "grpc")]
    Grpc {
        /// The remoting port's address.
        host: std::net::IpAddr,
        /// `grpcServerPort`.
        port: u16,
        /// Why: the bind, or the endpoint's runtime.
        error: io::Error,
    },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Acl(why) | Self::Tls(why) => f.write_str(why),
            Self::Store(e) => write!(f, "opening the store: {e}"),
            Self::Timer(e) => e.fmt(f),
            Self::Bind {
                listener,
                addr,
                error,
            } => match listener {
                Listener::Remoting => write!(f, "binding {addr}: {error}"),
                Listener::HaListenPort => {
                    write!(f, "binding the HA port {addr} (haListenPort): {error}")
                }
                Listener::HaFree => write!(f, "binding an HA port on {}: {error}", addr.ip()),
            },
            Self::HaAddr(e) => e.fmt(f),
            Self::Controller(e) => e.fmt(f),
            #[cfg(feature = "grpc")]
            Self::GrpcTls(why) => write!(f, "gRPC endpoint TLS: {why}"),
            #[cfg(feature = "grpc")]
            Self::Grpc { host, port, error } => {
                write!(f, "gRPC endpoint on {host}:{port}: {error}")
            }
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Acl(_) | Self::Tls(_) => None,
            Self::Store(e) => Some(e),
            Self::Timer(e) => Some(e),
            Self::Bind { error, .. } | Self::HaAddr(error) => Some(error),
            Self::Controller(e) => Some(e),
            #[cfg(feature = "grpc")]
            Self::GrpcTls(_) => None,
            #[cfg(feature = "grpc")]
            Self::Grpc { error, .. } => Some(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn bind(listener: Listener, port: u16) -> StartError {
        StartError::Bind {
            listener,
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            error: io::Error::new(io::ErrorKind::AddrInUse, "Address in use"),
        }
    }

    #[test]
    fn a_bind_says_which_port_and_keeps_the_os_error() {
        let e = bind(Listener::Remoting, 10911);
        assert_eq!(e.to_string(), "binding 127.0.0.1:10911: Address in use");
        let io = e.source().and_then(|s| s.downcast_ref::<io::Error>());
        assert_eq!(io.map(io::Error::kind), Some(io::ErrorKind::AddrInUse));
        assert_eq!(
            bind(Listener::HaListenPort, 10912).to_string(),
            "binding the HA port 127.0.0.1:10912 (haListenPort): Address in use"
        );
        assert_eq!(
            bind(Listener::HaFree, 0).to_string(),
            "binding an HA port on 127.0.0.1: Address in use"
        );
    }
}
