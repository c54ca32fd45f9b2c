//! Consuming through the Tern client's pull consumer, against any RocketMQ-protocol
//! broker: delivery latency while producing (e2e) and pull throughput over a backlog
//! (catch-up), and POP receive+ack over the same backlog ([`catch_up`], [`CatchUp`]); [`pull`] and [`consumer`] also serve the stalls scenario's SQL92 and
//! catch-up consumers.
//!
//! Pulls are PULL_MESSAGE with the broker's per-pull maximum of 32 messages; e2e pulls set
//! SUSPEND so the broker holds them until a message arrives (long polling), as push
//! consumers do, instead of the harness polling in a loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tern_client::consumer::pull::broker_addr;
use tern_client::{ClientConfig, MessageQueue, PullConsumer};
use tern_engine::record::RecordView;
use tern_shell::body::{BatchAck, BatchAckMessageRequestBody, encode_bit_set, to_json};
use tern_shell::headers::{
    PopMessageResponseHeader, PullMessageRequestHeader, PullMessageResponseHeader,
};
use tern_shell::message::{pulled_body, pulled_records};
use tern_shell::pop::parse_start_offset_info;
use tern_shell::runtime;
use tern_shell::{FromExtFields, RemotingCommand, RequestCode, ResponseCode};

use crate::load::{self, Load, LoadResult, now_ns, stamp_of};
use crate::table::{histogram, record};

/// Messages asked for per pull (the broker's cap).
pub const PULL_BATCH: i32 = 32;
/// How long the broker may hold an e2e pull.
const SUSPEND_MS: i64 = 500;

/// What a pull subscribes with: `TAG` `*` (everything) or an SQL92 expression, with a
/// check each delivered message must pass (the filter's own rule, applied again here).
#[derive(Clone, Copy, Debug)]
pub struct Sub<'a> {
    /// `TAG` or `SQL92`.
    pub kind: &'a str,
    /// The expression.
    pub expression: &'a str,
    /// Does a delivered message match? Those that do not are counted in
    /// [`Pulled::mismatched`].
    pub check: Option<fn(&RecordView<'_>) -> bool>,
}

impl Sub<'static> {
    /// Every message (`TAG` `*`).
    pub const ALL: Sub<'static> = Sub {
        kind: "TAG",
        expression: "*",
        check: None,
    };
}

/// One pull's outcome: next offset and the send stamps of the messages found.
#[derive(Debug)]
pub struct Pulled {
    /// Where the next pull starts.
    pub next: i64,
    /// Send stamps of the messages delivered (one per message).
    pub stamps: Vec<u64>,
    /// Messages delivered that fail the subscription's check.
    pub mismatched: u64,
}

/// Pulls up to [`PULL_BATCH`] messages of `queue` from `offset` (held by the broker
/// until one arrives when `suspend`); decodes them as a consumer would.
pub async fn pull(
    c: &PullConsumer,
    addr: &str,
    queue: &MessageQueue,
    offset: i64,
    suspend: bool,
    sub: &Sub<'_>,
) -> Result<Pulled, String> {
    let header = PullMessageRequestHeader::new(
        c.group(),
        queue.topic.clone(),
        queue.queue_id,
        offset,
        PULL_BATCH,
    )
    .suspend(suspend, SUSPEND_MS)
    .filter(Some(sub.expression.into()), sub.kind, 0);
    let cmd = RemotingCommand::request(RequestCode::PullMessage, &header);
    let timeout = Duration::from_millis(SUSPEND_MS as u64 + 10_000);
    let resp = c
        .client()
        .invoke(addr, cmd, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let code = resp.response_code();
    if !matches!(
        code,
        ResponseCode::Success
            | ResponseCode::PullNotFound
            | ResponseCode::PullRetryImmediately
            | ResponseCode::PullOffsetMoved
    ) {
        // The broker's remark says why; the header of a refusal has no offsets.
        return Err(format!(
            "pull answered {code:?}: {}",
            resp.remark.as_deref().unwrap_or_default()
        ));
    }
    let h = PullMessageResponseHeader::from_ext_fields(&resp.ext_fields)
        .map_err(|e| format!("pull response ({code:?}): {e}"))?;
    let mut stamps = Vec::new();
    let mut mismatched = 0;
    if code == ResponseCode::Success {
        // Read in place, as a consumer that keeps no copy would: building a `MessageExt`
        // (a string per property) costs more here than the broker's whole pull.
        for record in pulled_records(&resp.body, false) {
            let record = record.map_err(|e| e.to_string())?;
            let body = pulled_body(&record).map_err(|e| e.to_string())?;
            stamps.extend(stamp_of(&body));
            mismatched += u64::from(sub.check.is_some_and(|check| !check(&record)));
        }
    }
    Ok(Pulled {
        next: h.next_begin_offset,
        stamps,
        mismatched,
    })
}

/// A started consumer with the topic's queues assigned, and each queue's broker address.
pub async fn consumer(
    namesrv: &str,
    topic: &str,
    group: &str,
) -> Result<(PullConsumer, Vec<(MessageQueue, String)>), String> {
    let c = PullConsumer::new(group, ClientConfig::new(namesrv)).map_err(|e| e.to_string())?;
    c.start().await;
    let queues = c.fetch_queues(topic).await.map_err(|e| e.to_string())?;
    c.assign(queues.clone()).await;
    let mut out = Vec::new();
    for q in queues {
        let addr = broker_addr(c.client(), &q)
            .await
            .map_err(|e| e.to_string())?;
        out.push((q, addr));
    }
    Ok((c, out))
}

/// What an e2e run measured.
#[derive(Debug)]
pub struct E2e {
    /// The producers' side.
    pub send: LoadResult,
    /// Send → consumer receipt, nanoseconds, for messages sent in the timed part.
    pub delivery: Histogram<u64>,
    /// Messages consumed per second over the timed part.
    pub consumed_per_s: f64,
    /// Messages sent in the timed part that the consumer received.
    pub received: u64,
    /// From the timed part's start to the last of them received: with `received`, the
    /// rate they came through end to end, once a backlog (a gateway behind its
    /// producers) is counted in.
    pub through_secs: f64,
}

/// Produces with `load` while one long-polling consumer task per queue reads from the
/// queues' ends; times every message from its send to its receipt.
pub async fn e2e(load: &Load) -> Result<E2e, String> {
    e2e_across(load, &load.namesrv, Duration::ZERO).await
}

/// [`e2e`] with the consumer on the cluster of name server `consume_from` (a gateway's
/// upstream, when `load` sends to the gateway), which keeps reading after the load
/// until it has received nothing new for a second or `drain` passed (at least 300 ms in
/// all): what a gateway still holds when its producers stop arrives in the figures.
pub async fn e2e_across(load: &Load, consume_from: &str, drain: Duration) -> Result<E2e, String> {
    let (c, queues) = consumer(consume_from, &load.topic, "bench_e2e").await?;
    let stop = Arc::new(AtomicBool::new(false));
    let timed = Arc::new(AtomicU64::new(0));
    let last_ns = Arc::new(AtomicU64::new(0));
    // Stamps of the timed part: from warm-up end to run end, in epoch nanoseconds.
    let t0 = now_ns() + load.warmup.as_nanos() as u64;
    let t1 = t0 + load.duration.as_nanos() as u64;
    let mut tasks = Vec::new();
    for (q, addr) in queues {
        let start = c
            .max_offset(&q)
            .await
            .map_err(|e| format!("max offset: {e}"))?;
        let (c, stop, timed, last_ns) = (c.clone(), stop.clone(), timed.clone(), last_ns.clone());
        tasks.push(runtime::spawn(async move {
            let mut hist = histogram();
            let mut offset = start;
            while !stop.load(Ordering::Relaxed) {
                let p = match pull(&c, &addr, &q, offset, true, &Sub::ALL).await {
                    Ok(p) => p,
                    Err(e) => return Err(e),
                };
                let now = now_ns();
                for s in p.stamps {
                    if (t0..t1).contains(&s) {
                        record(&mut hist, now.saturating_sub(s));
                        timed.fetch_add(1, Ordering::Relaxed);
                        last_ns.fetch_max(now, Ordering::Relaxed);
                    }
                }
                offset = p.next.max(offset);
            }
            Ok(hist)
        }));
    }
    let send = load::run(load).await;
    // Let the consumers catch the last messages, then stop them.
    runtime::sleep(Duration::from_millis(300)).await;
    let drain_end = Instant::now() + drain;
    let mut seen = timed.load(Ordering::Relaxed);
    let mut quiet_since = Instant::now();
    while Instant::now() < drain_end && quiet_since.elapsed() < Duration::from_secs(1) {
        runtime::sleep(Duration::from_millis(100)).await;
        let now = timed.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            quiet_since = Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut delivery = histogram();
    for t in tasks {
        let _ = delivery.add(&t.await?);
    }
    c.shutdown().await;
    let send = send?;
    let received = timed.load(Ordering::Relaxed);
    let through_ns = last_ns.load(Ordering::Relaxed).saturating_sub(t0);
    Ok(E2e {
        consumed_per_s: received as f64 / load.duration.as_secs_f64(),
        received,
        through_secs: (through_ns as f64 / 1e9).max(load.duration.as_secs_f64() * 0.5),
        send,
        delivery,
    })
}

/// How a catch-up reads the backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// PULL_MESSAGE from offset 0, 32 a pull.
    Pull,
    /// POP, 32 a call, each batch acked with one BATCH_ACK_MESSAGE as the Java client does.
    Pop,
}

/// Reads every queue of `topic` from offset 0 to the end it had at the start, one task per
/// queue, as `how` says. Returns messages read (received and acked) and seconds taken;
/// `progress` gets each pull's or POP's count. The two over one backlog compare POP
/// receive+ack with pull.
pub async fn catch_up(
    namesrv: &str,
    topic: &str,
    group: &str,
    progress: &(dyn Fn(u64) + Sync),
    how: CatchUp,
) -> Result<(u64, f64), String> {
    match how {
        CatchUp::Pull => read_every_queue(namesrv, topic, group, progress, pull_to_end).await,
        CatchUp::Pop => read_every_queue(namesrv, topic, group, progress, pop_to_end).await,
    }
}

/// Pulls `q` from 0 to `end`, counting the messages in `done`.
async fn pull_to_end(r: QueueRead) -> Result<(), String> {
    let mut offset = 0;
    while offset < r.end {
        let p = pull(&r.c, &r.addr, &r.q, offset, false, &Sub::ALL).await?;
        if p.next <= offset {
            return Err(format!("pull at {offset} of {:?} did not advance", r.q));
        }
        r.done.fetch_add(p.stamps.len() as u64, Ordering::Relaxed);
        offset = p.next;
    }
    Ok(())
}

/// One queue's reading task's inputs.
struct QueueRead {
    c: PullConsumer,
    /// The queue's broker.
    addr: String,
    q: MessageQueue,
    /// The queue's end when the reading began.
    end: i64,
    /// Messages read by every task.
    done: Arc<AtomicU64>,
}

/// Reads every queue of `topic` to the end it has at the start, one task per queue
/// running `read`; returns what the tasks counted and seconds taken. `progress` gets
/// the count as it grows.
async fn read_every_queue<F, Fut>(
    namesrv: &str,
    topic: &str,
    group: &str,
    progress: &(dyn Fn(u64) + Sync),
    read: F,
) -> Result<(u64, f64), String>
where
    F: Fn(QueueRead) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let (c, queues) = consumer(namesrv, topic, group).await?;
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (q, addr) in queues {
        let end = c.max_offset(&q).await.map_err(|e| e.to_string())?;
        let (c, done) = (c.clone(), done.clone());
        tasks.push(runtime::spawn(read(QueueRead {
            c,
            addr,
            q,
            end,
            done,
        })));
    }
    join_reporting(tasks, &done, progress).await?;
    let secs = start.elapsed().as_secs_f64();
    c.shutdown().await;
    Ok((done.load(Ordering::Relaxed), secs))
}

/// Waits for every task in turn, calling `progress` with what `done` counted since the
/// last call every 200 ms meanwhile; the first task's error ends the wait.
async fn join_reporting(
    tasks: Vec<runtime::JoinHandle<Result<(), String>>>,
    done: &AtomicU64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), String> {
    let mut seen = 0;
    for t in tasks {
        let mut t = Box::pin(t);
        loop {
            let r = runtime::timeout(Duration::from_millis(200), &mut t).await;
            let now = done.load(Ordering::Relaxed);
            progress(now - seen);
            seen = now;
            if let Ok(r) = r {
                r?;
                break;
            }
        }
    }
    Ok(())
}

/// POPs and acks `q` until `end` messages came, counting them in `done`.
async fn pop_to_end(r: QueueRead) -> Result<(), String> {
    let mut got = 0i64;
    while got < r.end {
        let n = pop_and_ack(&r.c, &r.addr, &r.q).await?;
        if n == 0 {
            return Err(format!(
                "POP of {:?} found nothing at {got} of {}",
                r.q, r.end
            ));
        }
        got += n as i64;
        r.done.fetch_add(n, Ordering::Relaxed);
    }
    Ok(())
}

/// One POP of up to 32 messages of `queue` (no hold) and the batch ack of all of them;
/// returns how many.
async fn pop_and_ack(c: &PullConsumer, addr: &str, queue: &MessageQueue) -> Result<u64, String> {
    let group = c.group().to_owned();
    let cmd = RemotingCommand::request_code(RequestCode::PopMessage)
        .with_ext("consumerGroup", group.clone())
        .with_ext("topic", queue.topic.clone())
        .with_ext("queueId", queue.queue_id.to_string())
        .with_ext("maxMsgNums", PULL_BATCH.to_string())
        .with_ext("invisibleTime", "60000")
        .with_ext("pollTime", "0")
        .with_ext("bornTime", tern_shell::runtime::now_ms().to_string())
        .with_ext("initMode", "0")
        .with_ext("expType", "TAG")
        .with_ext("exp", "*");
    let resp = c
        .client()
        .invoke(addr, cmd, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    match resp.response_code() {
        ResponseCode::Success => {}
        ResponseCode::PollingTimeout => return Ok(0),
        code => {
            return Err(format!(
                "POP answered {code:?}: {}",
                resp.remark.as_deref().unwrap_or_default()
            ));
        }
    }
    let h =
        PopMessageResponseHeader::from_ext_fields(&resp.ext_fields).map_err(|e| e.to_string())?;
    let records = pulled_records(&resp.body, false)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let starts = parse_start_offset_info(h.start_offset_info.as_deref().unwrap_or_default())?;
    let mut acks = Vec::new();
    for ((flag, qid), so) in starts {
        let bits: Vec<usize> = records
            .iter()
            .filter(|r| r.queue_id() == qid && u8::from(r.topic().starts_with(b"%RETRY%")) == flag)
            .map(|r| (r.queue_offset() - so) as usize)
            .collect();
        acks.push(BatchAck {
            consumer_group: group.clone(),
            topic: queue.topic.clone(),
            retry: flag.to_string(),
            start_offset: so,
            queue_id: qid,
            revive_queue_id: h.revive_qid,
            pop_time: h.pop_time,
            invisible_time: h.invisible_time,
            bit_set: encode_bit_set(&bits),
        });
    }
    let body = BatchAckMessageRequestBody {
        broker_name: queue.broker_name.clone(),
        acks,
    };
    let ack = RemotingCommand::request_code(RequestCode::BatchAckMessage).with_body(to_json(&body));
    let r = c
        .client()
        .invoke(addr, ack, Duration::from_secs(10))
        .await
        .map_err(|e| e.to_string())?;
    if r.response_code() != ResponseCode::Success {
        return Err(format!("BATCH_ACK answered {:?}", r.response_code()));
    }
    Ok(records.len() as u64)
}
