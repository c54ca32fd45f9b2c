//! The bounds a peer cannot stretch on a connection, over real sockets on 127.0.0.1: the
//! write timeout (a peer that stops reading) and the budget of request bytes in flight.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_std::net::{TcpListener, TcpStream};
use tern_shell::runtime::{Shutdown, block_on, spawn, timeout};
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, Processor, RemotingCommand, RemotingError,
    RequestCode, ResponseCode, Server, ServerConfig,
};
use tern_testkit::wait_until;

const HOLD: RequestCode = RequestCode::Other(9101);
const ECHO: RequestCode = RequestCode::Other(9102);

/// Answers ECHO at once; holds HOLD requests until `release` is triggered.
#[derive(Default)]
struct Holder {
    held: AtomicUsize,
    release: Shutdown,
}

impl Processor for Holder {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        if req.request_code_enum() == HOLD {
            self.held.fetch_add(1, Ordering::SeqCst);
            self.release.wait().await;
        }
        Some(RemotingCommand::response_to(&req, ResponseCode::Success))
    }
}

/// A oneway ECHO with a body of `bytes`.
fn oneway_of(bytes: usize) -> RemotingCommand {
    RemotingCommand::request_code(ECHO)
        .with_body(vec![7u8; bytes])
        .oneway()
}

/// A connection to `addr` whose writes give up after `write_timeout`.
async fn connect_with_write_timeout(addr: &str, write_timeout: Duration) -> Connection {
    let config = ConnectionConfig {
        write_timeout,
        ..ConnectionConfig::default()
    };
    Connection::connect(addr, config, Duration::from_secs(2))
        .await
        .unwrap()
}

/// Large frames (written from where their bodies lie) and small ones (copied behind their
/// header, many writers queued on the lock) alike.
#[test]
fn writers_to_a_peer_that_stops_reading_fail_within_the_write_timeout_and_close_it() {
    for (writers, frame) in [(4, 1 << 20), (64, 2 << 10)] {
        senders_to_a_stalled_peer_fail(writers, move |c| async move {
            loop {
                if let Err(e) = c.oneway(oneway_of(frame)).await {
                    return e;
                }
            }
        });
    }
}

/// Requests in flight together are gathered into shared writes: when the write that took
/// them stalls, the connection closes and every request ends with the timeout or the
/// close, none left waiting on frames nobody writes.
#[test]
fn gathered_requests_to_a_peer_that_stops_reading_fail_with_the_close() {
    senders_to_a_stalled_peer_fail(64, |c| async move {
        loop {
            // The largest body that is gathered; a request that is never answered times
            // out, and the task sends the next.
            let req = RemotingCommand::request_code(ECHO).with_body(vec![7u8; 8 << 10]);
            match c.request(req, Duration::from_millis(10)).await {
                Err(RemotingError::Timeout) => {}
                Err(e) => return e,
                Ok(resp) => panic!("a peer that reads nothing answered: {resp:?}"),
            }
        }
    });
}

/// Runs `senders` tasks, each `send` on one connection to a peer that never reads, until
/// it fails; every one must end with the write timeout or the close it caused.
fn senders_to_a_stalled_peer_fail<F, Fut>(senders: usize, send: F)
where
    F: Fn(Connection) -> Fut,
    Fut: std::future::Future<Output = RemotingError> + Send + 'static,
{
    block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = spawn(async move { listener.accept().await.unwrap().0 });
        let write_timeout = Duration::from_millis(300);
        let conn = connect_with_write_timeout(&addr, write_timeout).await;
        // Held open and never read: the socket buffers fill, then nothing moves.
        let _peer: TcpStream = accepted.await;
        let started = Instant::now();
        let senders: Vec<_> = (0..senders).map(|_| spawn(send(conn.clone()))).collect();
        let mut errors = Vec::new();
        for s in senders {
            errors.push(
                timeout(Duration::from_secs(20), s)
                    .await
                    .expect("every sender returns once the peer stops reading"),
            );
        }
        assert!(
            errors.contains(&RemotingError::WriteTimeout),
            "the stalled write reports the timeout: {errors:?}"
        );
        assert!(
            errors
                .iter()
                .all(|e| matches!(e, RemotingError::WriteTimeout | RemotingError::Closed)),
            "{errors:?}"
        );
        assert!(started.elapsed() >= write_timeout);
        assert!(conn.is_closed());
        timeout(Duration::from_secs(2), conn.closed())
            .await
            .expect("the connection closes");
        let late = conn.request(RemotingCommand::request_code(ECHO), Duration::from_secs(1));
        assert_eq!(late.await.unwrap_err(), RemotingError::Closed);
    });
}

#[test]
fn a_slow_reader_that_keeps_reading_is_not_cut_off_by_the_write_timeout() {
    block_on(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        const TOTAL_BYTES: usize = 48 << 20;
        // Reads 512 KiB every 20 ms: always moving, far slower than loopback.
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 512 << 10];
            let mut got = 0usize;
            while got < TOTAL_BYTES {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            got
        });
        let write_timeout = Duration::from_millis(300);
        let conn = connect_with_write_timeout(&addr, write_timeout).await;
        let started = Instant::now();
        let frame = 1 << 20;
        for i in 0..TOTAL_BYTES / frame {
            if let Err(e) = conn.oneway(oneway_of(frame - 64)).await {
                panic!("frame {i} after {:?}: {e}", started.elapsed());
            }
        }
        let took = started.elapsed();
        assert!(!conn.is_closed());
        conn.close();
        // More than the socket buffers hold, so the writes outlasted the timeout.
        assert!(took > write_timeout, "took {took:?}");
        let got = async_std::task::spawn_blocking(move || reader.join().unwrap()).await;
        assert!(got > TOTAL_BYTES / 2, "the reader got {got} bytes");
    });
}

#[test]
fn request_bytes_in_flight_past_the_budget_are_answered_system_busy() {
    block_on(async {
        let budget = 1 << 20;
        let mut config = ServerConfig::default();
        config.connection.max_in_flight_bytes = budget;
        let p = Arc::new(Holder::default());
        let server = Server::bind("127.0.0.1:0", config, p.clone())
            .await
            .unwrap();
        let addr = server.local_addr().to_string();
        let conn = Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(2))
            .await
            .unwrap();
        let hold = |bytes: usize| RemotingCommand::request_code(HOLD).with_body(vec![1u8; bytes]);
        let call = |cmd: RemotingCommand| {
            let c = conn.clone();
            spawn(async move { c.request(cmd, Duration::from_secs(10)).await })
        };
        // Alone, a frame larger than the whole budget is still taken.
        let first = call(hold(budget + (budget >> 1)));
        wait_until("first held", Duration::from_secs(5), async || {
            p.held.load(Ordering::SeqCst) == 1
        })
        .await;
        let busy = conn
            .request(hold(1024), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(busy.response_code(), ResponseCode::SystemBusy);
        assert_eq!(
            busy.remark.as_deref(),
            Some("[OVERLOAD]too many request bytes in flight")
        );
        let small = conn
            .request(RemotingCommand::request_code(ECHO), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            small.response_code(),
            ResponseCode::SystemBusy,
            "even a tiny frame waits for bytes to come back"
        );
        p.release.trigger();
        assert_eq!(first.await.unwrap().response_code(), ResponseCode::Success);
        // Given back: two frames that fit together are both taken.
        let (a, b) = (call(hold(budget / 3)), call(hold(budget / 3)));
        assert_eq!(a.await.unwrap().response_code(), ResponseCode::Success);
        assert_eq!(b.await.unwrap().response_code(), ResponseCode::Success);
        server.shutdown().await;
    });
}
