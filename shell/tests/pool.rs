//! The connection pool over real sockets on 127.0.0.1: callers for one address share one
//! connection and one connect attempt; a slow connect delays only its own address.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_std::net::TcpStream;
use tern_shell::runtime::{block_on, sleep, spawn, timeout};
use tern_shell::{
    ConnectionConfig, ConnectionCtx, ConnectionPool, Processor, RemotingCommand, RemotingError,
    ResponseCode, Server, ServerConfig,
};
use tern_testkit::wait_until;

/// Answers everything with SUCCESS.
struct Ok200;

impl Processor for Ok200 {
    async fn process(
        &self,
        _conn: &ConnectionCtx,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(RemotingCommand::response_to(&req, ResponseCode::Success))
    }
}

/// An address whose connects hang: a listener that never accepts, its accept queue
/// filled, so the kernel drops further SYNs. The returned streams keep the queue full.
async fn black_hole() -> (String, std::net::TcpListener, Vec<TcpStream>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut fill = Vec::new();
    for _ in 0..4096 {
        match timeout(Duration::from_millis(300), TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => fill.push(s),
            Ok(Err(e)) => panic!("filling the accept queue: {e}"),
            Err(_) => return (addr, listener, fill),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

/// The ids of the connections `n` concurrent gets of `addr` from `pool` were handed, each
/// run of the same id once.
async fn concurrent_gets(pool: &Arc<ConnectionPool>, addr: &str, n: usize) -> Vec<u64> {
    let gets: Vec<_> = (0..n)
        .map(|_| {
            let (pool, addr) = (pool.clone(), addr.to_owned());
            spawn(async move { pool.get(&addr).await.unwrap().id() })
        })
        .collect();
    let mut ids = Vec::new();
    for g in gets {
        ids.push(g.await);
    }
    ids.dedup();
    ids
}

#[test]
fn a_slow_connect_delays_only_its_own_address_and_its_callers_share_one_outcome() {
    block_on(async {
        let (dead, _listener, _fill) = black_hole().await;
        let server = Server::bind("127.0.0.1:0", ServerConfig::default(), Arc::new(Ok200))
            .await
            .unwrap();
        let good = server.local_addr().to_string();
        let connect_timeout = Duration::from_secs(2);
        let pool = Arc::new(ConnectionPool::new(
            ConnectionConfig::default(),
            connect_timeout,
        ));
        let started = Instant::now();
        let stuck: Vec<_> = (0..3)
            .map(|_| {
                let (pool, dead) = (pool.clone(), dead.clone());
                spawn(async move { (pool.get(&dead).await, Instant::now()) })
            })
            .collect();
        sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        let c = pool.get(&good).await.expect("the good address connects");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the good address waited {:?} behind the dead one",
            t.elapsed()
        );
        assert!(!c.is_closed());
        let mut ends = Vec::new();
        for s in stuck {
            let (r, at) = s.await;
            assert!(matches!(r, Err(RemotingError::Connect { .. })), "{r:?}");
            ends.push(at.duration_since(started));
        }
        let (first, last) = (ends.iter().min().unwrap(), ends.iter().max().unwrap());
        assert!(*first >= connect_timeout - Duration::from_millis(100));
        assert!(
            *last - *first < Duration::from_secs(1),
            "one shared attempt, not one after another: {ends:?}"
        );
        server.shutdown().await;
    });
}

#[test]
fn concurrent_callers_for_one_address_share_one_connection() {
    block_on(async {
        let server = Server::bind("127.0.0.1:0", ServerConfig::default(), Arc::new(Ok200))
            .await
            .unwrap();
        let addr = server.local_addr().to_string();
        let pool = Arc::new(ConnectionPool::new(
            ConnectionConfig::default(),
            Duration::from_secs(2),
        ));
        let ids = concurrent_gets(&pool, &addr, 32).await;
        assert_eq!(ids.len(), 1, "one connection for every caller");
        wait_until("the server sees it", Duration::from_secs(5), async || {
            !server.connections().is_empty()
        })
        .await;
        sleep(Duration::from_millis(100)).await;
        assert_eq!(server.connections().len(), 1, "and only one");
        // A closed connection is replaced by one new one, shared again.
        pool.get(&addr).await.unwrap().close();
        wait_until("old connection gone", Duration::from_secs(5), async || {
            server.connections().is_empty()
        })
        .await;
        let new_ids = concurrent_gets(&pool, &addr, 8).await;
        assert_eq!(new_ids.len(), 1);
        assert_ne!(new_ids[0], ids[0]);
        wait_until("the server sees it", Duration::from_secs(5), async || {
            !server.connections().is_empty()
        })
        .await;
        sleep(Duration::from_millis(100)).await;
        assert_eq!(server.connections().len(), 1);
        server.shutdown().await;
    });
}
