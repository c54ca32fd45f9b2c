//! Connection, server and pool behaviour over real sockets on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_std::io::{ReadExt, WriteExt};
use async_std::net::TcpStream;
use tern_shell::runtime::{block_on, sleep, spawn, timeout};
use tern_shell::{
    Connection, ConnectionConfig, ConnectionCtx, ConnectionPool, Processor, RemotingCommand,
    RemotingError, RequestCode, ResponseCode, Server, ServerConfig,
};

const ECHO: RequestCode = RequestCode::Other(9001);
const SLOW: RequestCode = RequestCode::Other(9002);
const ASK_CLIENT: RequestCode = RequestCode::Other(9003);
const COUNT: RequestCode = RequestCode::Other(9004);
/// Answered in the read loop (`Processor::is_quick`).
const QUICK: RequestCode = RequestCode::Other(9005);

#[derive(Default)]
struct TestProcessor {
    oneways: AtomicUsize,
    /// Requests processed, of any code.
    seen: AtomicUsize,
}

impl Processor for TestProcessor {
    fn is_quick(&self, req: &RemotingCommand) -> bool {
        req.request_code_enum() == QUICK
    }

    async fn process(&self, conn: &ConnectionCtx, req: RemotingCommand) -> Option<RemotingCommand> {
        self.seen.fetch_add(1, Ordering::SeqCst);
        let n = req
            .ext_fields
            .get("n")
            .map(str::to_owned)
            .unwrap_or_default();
        match req.request_code_enum() {
            QUICK => {
                Some(RemotingCommand::response_to(&req, ResponseCode::Success).with_ext("n", n))
            }
            ECHO => {
                // Answer out of order: later requests may finish first.
                let delay = n.parse::<u64>().unwrap_or(0) % 7;
                sleep(Duration::from_millis(delay)).await;
                Some(RemotingCommand::response_to(&req, ResponseCode::Success).with_ext("n", n))
            }
            SLOW => {
                sleep(Duration::from_millis(300)).await;
                Some(RemotingCommand::response_to(&req, ResponseCode::Success).with_ext("n", n))
            }
            ASK_CLIENT => {
                // A server-initiated request on the same connection, like CHECK_TRANSACTION_STATE.
                let ask = RemotingCommand::request_code(RequestCode::CheckTransactionState);
                let answer = conn.request(ask, Duration::from_secs(2)).await.ok()?;
                Some(
                    RemotingCommand::response_to(&req, ResponseCode::Success)
                        .with_remark(answer.remark.unwrap_or_default()),
                )
            }
            COUNT => {
                self.oneways.fetch_add(1, Ordering::SeqCst);
                Some(RemotingCommand::response_to(&req, ResponseCode::Success))
            }
            _ => Some(tern_shell::connection::not_supported(&req)),
        }
    }
}

struct ClientHandler;

impl Processor for ClientHandler {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(
            RemotingCommand::response_to(&req, ResponseCode::Success).with_remark("client says hi"),
        )
    }
}

async fn start(config: ServerConfig) -> (Server, Arc<TestProcessor>) {
    let p = Arc::new(TestProcessor::default());
    let server = Server::bind("127.0.0.1:0", config, p.clone())
        .await
        .unwrap();
    (server, p)
}

async fn connect(server: &Server) -> Connection {
    let addr = server.local_addr().to_string();
    Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(2))
        .await
        .unwrap()
}

/// Runs `f` against a fresh server with the default config and its processor, then shuts
/// the server down.
fn with_server(f: impl AsyncFnOnce(&Server, &Arc<TestProcessor>)) {
    block_on(async {
        let (server, p) = start(ServerConfig::default()).await;
        f(&server, &p).await;
        server.shutdown().await;
    })
}

fn echo(n: usize) -> RemotingCommand {
    RemotingCommand::request_code(ECHO).with_ext("n", n.to_string())
}

#[test]
fn concurrent_requests_on_one_connection_get_their_own_responses() {
    with_server(async |server, _| {
        let conn = connect(server).await;
        let tasks: Vec<_> = (0..300)
            .map(|n| {
                let c = conn.clone();
                spawn(async move { (n, c.request(echo(n), Duration::from_secs(5)).await) })
            })
            .collect();
        for t in tasks {
            let (n, resp) = t.await;
            let resp = resp.unwrap();
            assert_eq!(resp.ext_fields["n"], n.to_string());
            assert!(resp.is_response());
        }
    });
}

#[test]
fn requests_issued_together_share_writes() {
    with_server(async |server, p| {
        let conn = connect(server).await;
        const N: usize = 32;
        // One task issuing N requests at once, as a producer's async sends do.
        let mut requests: Vec<_> = (0..N)
            .map(|n| Some(Box::pin(conn.request(echo(n), Duration::from_secs(5)))))
            .collect();
        let mut answers: Vec<_> = (0..N).map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut left = 0;
            for (slot, answer) in requests.iter_mut().zip(&mut answers) {
                let Some(req) = slot else { continue };
                match req.as_mut().poll(cx) {
                    std::task::Poll::Ready(r) => {
                        *answer = Some(r);
                        *slot = None;
                    }
                    std::task::Poll::Pending => left += 1,
                }
            }
            if left == 0 {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        for (n, answer) in answers.into_iter().enumerate() {
            let resp = answer.unwrap().unwrap();
            assert_eq!(resp.ext_fields["n"], n.to_string());
        }
        assert_eq!(p.seen.load(Ordering::SeqCst), N, "each frame sent once");
        // The first went out alone; the rest were gathered behind it.
        assert!(
            conn.writes() <= 4,
            "{N} requests issued together took {} writes",
            conn.writes()
        );
    });
}

/// Polls `fut` once.
async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
}

#[test]
fn a_request_given_up_while_its_frame_waits_in_the_outbox_still_has_it_written() {
    with_server(async |server, p| {
        let conn = connect(server).await;
        let slow = RemotingCommand::request_code(SLOW).with_ext("n", "1");
        let mut first = Box::pin(conn.request(slow, Duration::from_secs(5)));
        assert!(
            poll_once(&mut first).await.is_pending(),
            "SLOW waits 300 ms"
        );
        // Not alone: the second queues its frame and yields; then its caller gives up.
        let count = RemotingCommand::request_code(COUNT);
        let mut second = Box::pin(conn.request(count, Duration::from_secs(5)));
        assert!(poll_once(&mut second).await.is_pending());
        drop(second);
        // Nobody else writes: the task the second left behind does.
        let written = async {
            while p.oneways.load(Ordering::SeqCst) == 0 {
                sleep(Duration::from_millis(5)).await;
            }
        };
        timeout(Duration::from_secs(2), written)
            .await
            .expect("the dropped request's frame reaches the server");
        assert_eq!(first.await.unwrap().ext_fields["n"], "1");
    });
}

#[test]
fn a_write_given_up_part_way_is_finished_before_the_next_frame() {
    block_on(async {
        let listener = async_std::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = spawn(async move { listener.accept().await.unwrap().0 });
        let conn = Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(2))
            .await
            .unwrap();
        let mut peer: TcpStream = accepted.await;
        // Larger than loopback's socket buffers: the peer reads nothing yet, so the write
        // stops part-way and its caller drops it.
        const BODY: usize = 15 << 20;
        let big = RemotingCommand::request_code(ECHO)
            .with_body(vec![7u8; BODY])
            .oneway();
        let mut write = Box::pin(conn.oneway(big));
        assert!(
            poll_once(&mut write).await.is_pending(),
            "the socket took {BODY} bytes at once: the test needs a write that stops part-way"
        );
        drop(write);
        let next = spawn({
            let conn = conn.clone();
            async move { conn.oneway(RemotingCommand::request_code(COUNT)).await }
        });
        // Both frames arrive whole and in order: the rest of the first before the second.
        let first = read_answer(&mut peer).await;
        assert_eq!(first.request_code_enum(), ECHO);
        assert_eq!(first.body.len(), BODY);
        assert!(first.body.iter().all(|b| *b == 7));
        let second = read_answer(&mut peer).await;
        assert_eq!(second.request_code_enum(), COUNT);
        next.await.unwrap();
        assert!(!conn.is_closed());
    });
}

#[test]
fn peers_flooding_quick_requests_do_not_starve_the_other_connections() {
    with_server(async |server, _| {
        let addr = server.local_addr();
        let conn = connect(server).await;
        let quick = |n: &str| RemotingCommand::request_code(QUICK).with_ext("n", n);
        conn.request(quick("0"), Duration::from_secs(2))
            .await
            .unwrap();
        // More floods than the pool has workers, each writing oneway quick requests
        // faster than a read loop handles them: its socket never runs dry.
        let workers = std::env::var(tern_shell::runtime::POOL_THREADS_ENV)
            .ok()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
        let frame = quick("flood").oneway().encode().unwrap();
        let chunk: Vec<u8> = frame
            .iter()
            .copied()
            .cycle()
            .take(frame.len() * 512)
            .collect();
        let floods: Vec<_> = (0..workers + 2)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                let stop = s.try_clone().unwrap();
                let chunk = chunk.clone();
                let t = std::thread::spawn(move || {
                    use std::io::Write;
                    while s.write_all(&chunk).is_ok() {}
                });
                (stop, t)
            })
            .collect();
        sleep(Duration::from_millis(300)).await;
        let asked = std::time::Instant::now();
        let answer = conn.request(quick("1"), Duration::from_secs(10)).await;
        let waited = asked.elapsed();
        for (stop, t) in floods {
            let _ = stop.shutdown(std::net::Shutdown::Both);
            t.join().unwrap();
        }
        assert_eq!(answer.unwrap().ext_fields["n"], "1");
        assert!(
            waited < Duration::from_secs(5),
            "answered after {waited:?} beside the floods"
        );
    });
}

/// Reads one frame from `raw` (within 2 s).
async fn read_answer(raw: &mut TcpStream) -> RemotingCommand {
    let read = async {
        let mut len = [0u8; 4];
        raw.read_exact(&mut len).await.unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
        raw.read_exact(&mut payload).await.unwrap();
        RemotingCommand::decode_payload(&payload, &Default::default()).unwrap()
    };
    timeout(Duration::from_secs(2), read)
        .await
        .expect("an answer within 2 s")
}

#[test]
fn pipelined_quick_requests_are_all_answered_before_the_loop_waits_for_more() {
    with_server(async |server, _| {
        let mut raw = TcpStream::connect(server.local_addr()).await.unwrap();
        // 40 whole quick requests in one write, then the first bytes of one more: their
        // answers (gathered while more were buffered) must go out before the server
        // waits for the rest, which this client sends only once it has them all.
        let reqs: Vec<RemotingCommand> = (0..41)
            .map(|n| RemotingCommand::request_code(QUICK).with_ext("n", n.to_string()))
            .collect();
        let mut bytes = Vec::new();
        for r in &reqs[..40] {
            bytes.extend(r.encode().unwrap());
        }
        let last = reqs[40].encode().unwrap();
        bytes.extend_from_slice(&last[..5]);
        raw.write_all(&bytes).await.unwrap();
        for r in &reqs[..40] {
            let a = read_answer(&mut raw).await;
            assert_eq!(
                (a.opaque, &a.ext_fields["n"]),
                (r.opaque, &r.ext_fields["n"])
            );
            assert!(a.is_response());
        }
        raw.write_all(&last[5..]).await.unwrap();
        let a = read_answer(&mut raw).await;
        assert_eq!(
            (a.opaque, a.ext_fields["n"].as_str()),
            (reqs[40].opaque, "40")
        );
    });
}

#[test]
fn timed_out_request_fails_cleanly_and_late_response_is_dropped() {
    with_server(async |server, _| {
        let conn = connect(server).await;
        let slow = RemotingCommand::request_code(SLOW).with_ext("n", "late");
        let r = conn.request(slow, Duration::from_millis(50)).await;
        assert_eq!(r.unwrap_err(), RemotingError::Timeout);
        // Let the late response arrive; it must not be taken for the next request's answer.
        sleep(Duration::from_millis(400)).await;
        let resp = conn.request(echo(5), Duration::from_secs(2)).await.unwrap();
        assert_eq!(resp.ext_fields["n"], "5");
        assert!(!conn.is_closed());
    });
}

#[test]
fn a_short_timeout_behind_a_long_one_expires_on_time() {
    with_server(async |server, _| {
        let conn = connect(server).await;
        let c = conn.clone();
        let long = spawn(async move {
            let slow = RemotingCommand::request_code(SLOW).with_ext("n", "long");
            c.request(slow, Duration::from_secs(10)).await
        });
        // The long request's deadline is the one the connection's expiry sleeps until...
        sleep(Duration::from_millis(20)).await;
        // ...and this earlier one must wake it: SLOW answers after 300 ms, so an answer
        // here means the deadline went by unnoticed.
        let slow = RemotingCommand::request_code(SLOW).with_ext("n", "short");
        let r = conn.request(slow, Duration::from_millis(50)).await;
        assert_eq!(r.unwrap_err(), RemotingError::Timeout);
        assert_eq!(long.await.unwrap().ext_fields["n"], "long");
    });
}

#[test]
fn a_close_before_the_deadline_is_reported_as_the_close_however_late_the_request_looks() {
    block_on(async {
        let listener = async_std::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (got_tx, got) = async_std::channel::bounded::<()>(1);
        let (go, go_rx) = async_std::channel::bounded::<()>(1);
        let peer = spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await.unwrap();
            got_tx.send(()).await.unwrap();
            go_rx.recv().await.unwrap();
            // Serialize type 7: the client closes the connection, saying why.
            s.write_all(&[0, 0, 0, 8, 7, 0, 0, 4, b'{', b'}', b' ', b' '])
                .await
                .unwrap();
            sleep(Duration::from_secs(2)).await;
        });
        let conn = Connection::connect(&addr, ConnectionConfig::default(), Duration::from_secs(2))
            .await
            .unwrap();
        let mut req = Box::pin(conn.request(echo(1), Duration::from_secs(1)));
        // Polled until the request is on the wire, then left alone past its deadline
        // while the connection closes (a busy executor runs a task late like this).
        for _ in 0..200 {
            assert!(smol::future::poll_once(&mut req).await.is_none());
            if got.try_recv().is_ok() {
                break;
            }
            sleep(Duration::from_millis(5)).await;
        }
        go.send(()).await.unwrap();
        sleep(Duration::from_millis(1300)).await;
        let e = req.await.unwrap_err();
        assert!(
            e.to_string().contains("unknown serialize type"),
            "the close's reason, not a timeout: {e:?}"
        );
        peer.await;
    });
}

#[test]
fn malformed_frame_closes_only_that_connection() {
    with_server(async |server, _| {
        let good = connect(server).await;
        let mut bad = TcpStream::connect(server.local_addr()).await.unwrap();
        // Length 8, serialize type 7 (unknown), header length 4.
        bad.write_all(&[0, 0, 0, 8, 7, 0, 0, 4, b'{', b'}', b' ', b' '])
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        let n = timeout(Duration::from_secs(2), bad.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(
            n, 0,
            "the server closes the malformed connection without answering"
        );
        let resp = good.request(echo(1), Duration::from_secs(2)).await.unwrap();
        assert_eq!(resp.ext_fields["n"], "1");
    });
}

#[test]
fn oversized_frame_announcement_closes_the_connection() {
    with_server(async |server, _| {
        let mut bad = TcpStream::connect(server.local_addr()).await.unwrap();
        bad.write_all(&0x7fff_ffffu32.to_be_bytes()).await.unwrap();
        let mut buf = [0u8; 16];
        let n = timeout(Duration::from_secs(2), bad.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0);
    });
}

#[test]
fn oneway_requests_are_processed_and_never_answered() {
    with_server(async |server, p| {
        let conn = connect(server).await;
        for _ in 0..3 {
            conn.oneway(RemotingCommand::request_code(COUNT))
                .await
                .unwrap();
        }
        // A normal request after them gets its own answer, not a stray oneway reply.
        let resp = conn.request(echo(2), Duration::from_secs(2)).await.unwrap();
        assert_eq!(resp.ext_fields["n"], "2");
        sleep(Duration::from_millis(50)).await;
        assert_eq!(p.oneways.load(Ordering::SeqCst), 3);
    });
}

#[test]
fn requests_of_a_peer_that_reset_right_after_sending_are_processed() {
    with_server(async |server, p| {
        let frame = RemotingCommand::request_code(COUNT)
            .oneway()
            .encode()
            .unwrap();
        const PEERS: usize = 50;
        for _ in 0..PEERS {
            // Sent, then closed with SO_LINGER 0: an RST, often before the server
            // accepted, so the socket has no peer address left to ask for.
            let mut s = std::net::TcpStream::connect(server.local_addr()).unwrap();
            std::io::Write::write_all(&mut s, &frame).unwrap();
            rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
            drop(s);
        }
        let mut waited = 0;
        while p.oneways.load(Ordering::SeqCst) < PEERS && waited < 100 {
            sleep(Duration::from_millis(50)).await;
            waited += 1;
        }
        assert_eq!(p.oneways.load(Ordering::SeqCst), PEERS);
    });
}

#[test]
fn server_initiated_requests_reach_the_client_handler() {
    with_server(async |server, _| {
        let addr = server.local_addr().to_string();
        let conn = Connection::connect_with(
            &addr,
            ConnectionConfig::default(),
            Duration::from_secs(2),
            Arc::new(ClientHandler),
        )
        .await
        .unwrap();
        let resp = conn
            .request(
                RemotingCommand::request_code(ASK_CLIENT),
                Duration::from_secs(3),
            )
            .await
            .unwrap();
        assert_eq!(resp.remark.as_deref(), Some("client says hi"));
    });
}

#[test]
fn unknown_codes_are_answered_not_supported() {
    with_server(async |server, _| {
        let conn = connect(server).await;
        let resp = conn
            .request(
                RemotingCommand::request_code(RequestCode::Other(31337)),
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        assert_eq!(resp.response_code(), ResponseCode::RequestCodeNotSupported);
        assert_eq!(
            resp.remark.as_deref(),
            Some(" request type 31337 not supported")
        );
    });
}

#[test]
fn idle_connections_are_closed_by_the_server() {
    block_on(async {
        let mut config = ServerConfig::default();
        config.connection.idle_timeout = Some(Duration::from_millis(150));
        let (server, _) = start(config).await;
        let conn = connect(&server).await;
        timeout(Duration::from_secs(3), conn.closed())
            .await
            .expect("closed after idling");
        assert!(conn.is_closed());
        server.shutdown().await;
    });
}

#[test]
fn shutdown_drains_in_flight_requests() {
    block_on(async {
        let (server, _) = start(ServerConfig::default()).await;
        let conn = connect(&server).await;
        let c = conn.clone();
        let pending = spawn(async move {
            c.request(
                RemotingCommand::request_code(SLOW).with_ext("n", "x"),
                Duration::from_secs(3),
            )
            .await
        });
        sleep(Duration::from_millis(50)).await;
        server.shutdown().await;
        let resp = pending.await.unwrap();
        assert_eq!(resp.ext_fields["n"], "x");
        timeout(Duration::from_secs(2), conn.closed())
            .await
            .expect("closed after drain");
    });
}

#[test]
fn pool_reuses_a_connection_and_replaces_a_closed_one() {
    with_server(async |server, _| {
        let addr = server.local_addr().to_string();
        let pool = ConnectionPool::new(ConnectionConfig::default(), Duration::from_secs(2));
        let a = pool.get(&addr).await.unwrap();
        let b = pool.get(&addr).await.unwrap();
        assert_eq!(a.id(), b.id());
        a.close();
        timeout(Duration::from_secs(2), a.closed()).await.unwrap();
        let resp = pool
            .invoke(&addr, echo(3), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(resp.ext_fields["n"], "3");
        assert_ne!(pool.get(&addr).await.unwrap().id(), a.id());
        assert!(matches!(
            pool.get("127.0.0.1:1").await,
            Err(RemotingError::Connect { .. })
        ));
    });
}
