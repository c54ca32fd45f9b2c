//! A consumer that stops reading its socket must cost the broker nothing but that
//! connection. The real `tern-broker --standalone` process, real sockets: consumers of
//! one group register, then flood the broker with pulls whose answers they never read,
//! keeping the TCP connection open. Meanwhile other members join and leave: their
//! heartbeats and other requests are answered promptly, the members that read are told
//! of every change promptly, the broker closes each stuck connection (write timeout),
//! and the expiry task still expires a silent member and tells the group.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tern_shell::body::{GetConsumerListByGroupResponseBody, from_json};
use tern_shell::headers::{ConsumerGroupRequestHeader, UnregisterClientRequestHeader};
use tern_shell::runtime::{sleep, spawn};
use tern_shell::{FrameLimits, RemotingCommand, RequestCode, ResponseCode};

const GROUP: &str = "G_STUCK";
const TOPIC: &str = "Stuck";

/// Longest a request or a notification may take while a member is stuck. The broker
/// answers these in milliseconds; the write timeout a stuck member could cost is 3 s.
const PROMPT: Duration = Duration::from_secs(1);

/// Pulls each stuck consumer sends: 256 KiB answers, 50 MiB in all, more than the
/// socket buffers of both ends hold, so the broker's writes to it stall.
const FLOOD_PULLS: i32 = 200;

/// A consumer that registered and then stopped reading, its connection kept open.
struct StuckConsumer {
    stream: TcpStream,
    client_id: String,
}

impl StuckConsumer {
    /// Connects, heartbeats into [`GROUP`] (reading that one answer), then sends
    /// [`FLOOD_PULLS`] pulls and never reads again.
    fn register_and_stop_reading(addr: &str, client_id: &str) -> StuckConsumer {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut hb = heartbeat(client_id, GROUP, TOPIC, "*", vec![]);
        hb.opaque = 1;
        stream.write_all(&hb.encode().unwrap()).unwrap();
        // The broker may tell us of our own join (NOTIFY_CONSUMER_IDS_CHANGED) first.
        let answer = loop {
            let f = read_frame(&mut stream);
            if f.is_response() && f.opaque == 1 {
                break f;
            }
        };
        expect_code(&answer, ResponseCode::Success);
        let mut flood = Vec::new();
        for i in 0..FLOOD_PULLS {
            let mut pull = pull_req(GROUP, TOPIC, 0, 0, Some("*"));
            pull.opaque = 2 + i;
            flood.extend_from_slice(&pull.encode().unwrap());
        }
        stream.write_all(&flood).unwrap();
        StuckConsumer {
            stream,
            client_id: client_id.to_owned(),
        }
    }

    /// Reads what the broker had sent until the broker's end closes. Returns false if
    /// the connection is still open after `within`.
    fn closed_by_broker_within(mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        self.stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = vec![0u8; 1 << 20];
        while Instant::now() < deadline {
            match self.stream.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return true,
            }
        }
        false
    }
}

/// One whole frame from a blocking socket.
fn read_frame(s: &mut TcpStream) -> RemotingCommand {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut payload = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut payload).unwrap();
    RemotingCommand::decode_payload(&payload, &FrameLimits::default()).unwrap()
}

/// Records how long `what` took, failing at once if it was not [`PROMPT`].
fn prompt(log: &mut Vec<(&'static str, Duration)>, (what, took): (&'static str, Duration)) {
    assert!(
        took < PROMPT,
        "{what} took {took:?} while a member was stuck"
    );
    log.push((what, took));
}

/// Sends `cmd` on `c` and returns the answer and how long it took.
async fn timed(c: &Client, cmd: RemotingCommand) -> (RemotingCommand, Duration) {
    let t = Instant::now();
    let resp = c.call(cmd).await;
    (resp, t.elapsed())
}

fn list_req() -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GetConsumerListByGroup,
        &ConsumerGroupRequestHeader {
            consumer_group: GROUP.into(),
        },
    )
}

async fn members(c: &Client) -> Vec<String> {
    let resp = c.call(list_req()).await;
    expect_code(&resp, ResponseCode::Success);
    let ids: GetConsumerListByGroupResponseBody = from_json(&resp.body).unwrap();
    ids.consumer_id_list
}

#[test]
fn a_consumer_that_stops_reading_delays_no_other_client_and_no_broker_task() {
    // Silent clients expire after 3 s, at the expiry task's next 10 s tick.
    let (_dir, b) = start("channelExpiredTimeout=3000\n");
    let notify = RequestCode::NotifyConsumerIdsChanged;
    let stuck = run(async {
        let admin = Client::connect(&b.addr).await;
        create_topic(&admin, TOPIC, 1).await;
        // 512 KiB in the queue: every pull answer carries the 256 KiB maximum.
        let body = vec![b's'; 32 << 10];
        for _ in 0..16 {
            send_ok(&admin, send_v2(&msg(TOPIC, &body, &[]), 0)).await;
        }

        // A member that reads everything and heartbeats as a live client does.
        let rec_l = Arc::new(Recorder::default());
        let l = Client::connect_with(&b.addr, rec_l.clone()).await;
        expect_code(
            &l.call(heartbeat("10.0.0.1@L", GROUP, TOPIC, "*", vec![]))
                .await,
            ResponseCode::Success,
        );
        let keep_alive = {
            let l = l.clone();
            spawn(async move {
                loop {
                    sleep(Duration::from_millis(500)).await;
                    if l.conn.is_closed() {
                        return;
                    }
                    let hb = heartbeat("10.0.0.1@L", GROUP, TOPIC, "*", vec![]);
                    let _ = l.conn.request(hb, RPC_TIMEOUT).await;
                }
            })
        };
        // A member that reads but goes silent: the expiry task must drop it.
        let rec_s = Arc::new(Recorder::default());
        let silent = Client::connect_with(&b.addr, rec_s).await;
        expect_code(
            &silent
                .call(heartbeat("10.0.0.2@S", GROUP, TOPIC, "*", vec![]))
                .await,
            ResponseCode::Success,
        );
        let silent_since = Instant::now();

        // Three stuck members, 2 s apart, so one is stalled at every moment of the churn
        // (each stalls once its socket buffers fill, until the broker's write timeout).
        let mut stuck = Vec::new();
        let mut latencies = Vec::new();
        let started = Instant::now();
        let mut i = 0;
        while started.elapsed() < Duration::from_secs(7) {
            if stuck.len() < 3 && started.elapsed() >= Duration::from_secs(2) * stuck.len() as u32 {
                let id = format!("10.0.9.{}@STUCK", stuck.len());
                let addr = b.addr.clone();
                let s = async_std::task::spawn_blocking(move || {
                    StuckConsumer::register_and_stop_reading(&addr, &id)
                })
                .await;
                stuck.push(s);
                sleep(Duration::from_millis(200)).await;
            }
            i += 1;
            let id = format!("10.0.1.{i}@J");
            let joiner = Client::connect(&b.addr).await;
            let told_before = rec_l.count(notify);
            let (resp, took) = timed(&joiner, heartbeat(&id, GROUP, TOPIC, "*", vec![])).await;
            expect_code(&resp, ResponseCode::Success);
            prompt(&mut latencies, ("join heartbeat", took));
            let t = Instant::now();
            let told = rec_l.wait_for(notify, told_before + 1, PROMPT * 2).await;
            assert!(told > told_before, "L was not told that {id} joined");
            prompt(&mut latencies, ("notify of the join", t.elapsed()));

            let (resp, took) = timed(&joiner, list_req()).await;
            expect_code(&resp, ResponseCode::Success);
            prompt(&mut latencies, ("consumer list", took));
            let (resp, took) = timed(&admin, send_v2(&msg(TOPIC, b"tick", &[]), 0)).await;
            expect_code(&resp, ResponseCode::Success);
            prompt(&mut latencies, ("send", took));

            if i % 2 == 0 {
                let bye = RemotingCommand::request(
                    RequestCode::UnregisterClient,
                    &UnregisterClientRequestHeader {
                        client_id: id.clone(),
                        producer_group: None,
                        consumer_group: Some(GROUP.into()),
                    },
                );
                let (resp, took) = timed(&joiner, bye).await;
                expect_code(&resp, ResponseCode::Success);
                prompt(&mut latencies, ("unregister", took));
            }
            joiner.conn.close();
            sleep(Duration::from_millis(100)).await;
        }
        let slowest = latencies.iter().max_by_key(|(_, d)| *d).unwrap();
        eprintln!(
            "{} churn rounds, {} answers and notifications timed; slowest: {} in {:?}",
            i,
            latencies.len(),
            slowest.0,
            slowest.1
        );
        assert_eq!(stuck.len(), 3);
        // The first stuck member stalled about 7 s ago: its write timeout (3 s) has closed
        // it, before the expiry task's first tick (10 s after start) could.
        let now = members(&l).await;
        assert!(
            !now.iter().any(|m| m == "10.0.9.0@STUCK"),
            "the first stuck member is still registered: {now:?}"
        );

        // The expiry task is alive: the silent member is dropped, its connection
        // closed, and L told, at the first tick after 3 s of silence (ticks every 10 s).
        sleep(Duration::from_millis(500)).await;
        let told_before = rec_l.count(notify);
        let within = Duration::from_secs(25).saturating_sub(silent_since.elapsed());
        assert!(
            async_std::future::timeout(within, silent.conn.closed())
                .await
                .is_ok(),
            "the silent member was not expired"
        );
        assert!(
            rec_l.wait_for(notify, told_before + 1, PROMPT * 2).await > told_before,
            "L was not told of the expiry"
        );
        let left = members(&l).await;
        assert!(!left.iter().any(|m| m.ends_with("@S")), "{left:?}");
        assert!(
            !left.iter().any(|m| m.ends_with("@STUCK")),
            "stuck members are gone: {left:?}"
        );
        assert!(left.iter().any(|m| m == "10.0.0.1@L"), "{left:?}");
        l.conn.close();
        keep_alive.await;
        stuck
    });
    // The broker gave up on every stuck connection: the write timeout closed it.
    for s in stuck {
        let id = s.client_id.clone();
        assert!(
            s.closed_by_broker_within(Duration::from_secs(10)),
            "the broker kept the connection of {id} open"
        );
    }
    assert!(
        b.wait_for_log(&["took no byte"], Duration::from_secs(1))
            .is_some()
            || b.wait_for_log(&["writes stalled"], Duration::from_secs(1))
                .is_some(),
        "the broker logs why it closed a stuck connection"
    );
}
