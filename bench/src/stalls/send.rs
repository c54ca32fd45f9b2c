//! The measured load: sync senders, every message with a unique key and the property the
//! SQL92 consumers filter on, each send timed into a histogram and a 100 ms timeline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use hdrhistogram::Histogram;
use tern_client::{Message, MessageBuilder, Producer, SendStatus};
use tern_shell::message::decode_offset_msg_id;
use tern_shell::runtime;

use crate::load::{self, stamped_body};
use crate::table::{Latency, histogram, record};

/// Width of one timeline bucket.
pub const BUCKET: Duration = Duration::from_millis(100);
/// A send slower than this is listed with where it was stored.
pub const SLOW: Duration = Duration::from_millis(5);
/// Most slow sends one sender lists.
const MAX_SLOW: usize = 10_000;

/// Key of message `seq` of sender `id`.
pub fn live_key(id: usize, seq: u64) -> String {
    format!("s{id}-{seq}")
}

/// Key of backlog message `n`.
pub fn backlog_key(n: u64) -> String {
    format!("b{n}")
}

/// The property the SQL92 consumers filter on: `n % 10`.
pub const PROP: &str = "a";

/// A message of the scenario: stamped body, one key, property [`PROP`].
pub fn message(topic: &str, body: usize, key: String, n: u64) -> Message {
    Message::new(topic, stamped_body(body))
        .with_keys([key])
        .with_property(PROP, (n % 10).to_string())
}

/// Sends in one [`BUCKET`] of the timed part.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bucket {
    /// Sends that started in the bucket and were timed.
    pub sends: u32,
    /// Slowest of them, ns.
    pub max_ns: u64,
    /// Sum of their latencies, ns.
    pub sum_ns: u64,
    /// How many took longer than [`SLOW`].
    pub slow: u32,
}

impl Bucket {
    fn add(&mut self, o: &Bucket) {
        self.sends += o.sends;
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.slow += o.slow;
    }
}

/// A send slower than [`SLOW`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slow {
    /// When it started, from the start of the timed part.
    pub at: Duration,
    /// How long it took.
    pub latency: Duration,
    /// Where the broker stored it (commit-log offset), when its msgId says.
    pub log_offset: Option<u64>,
}

/// What the senders measured over the timed part.
#[derive(Debug)]
pub struct Sent {
    /// Messages acknowledged in the timed part.
    pub msgs: u64,
    /// Seconds of the timed part.
    pub secs: f64,
    /// Send latencies, ns.
    pub hist: Histogram<u64>,
    /// Failed sends (errors and answers other than SEND_OK), warm-up included.
    pub errors: u64,
    /// The first few failures.
    pub first_errors: Vec<String>,
    /// The timed part in [`BUCKET`]s.
    pub timeline: Vec<Bucket>,
    /// Sends slower than [`SLOW`], in time order.
    pub slow: Vec<Slow>,
}

impl Sent {
    /// Messages acknowledged per second of the timed part: the runs' rate, and what a
    /// paced run offers a share of.
    pub fn msgs_per_s(&self) -> f64 {
        self.msgs as f64 / self.secs
    }

    /// The send latencies' percentiles, zeros when no send was timed (the run still gets
    /// its line and its row).
    pub fn latency(&self) -> Latency {
        Latency::of(&self.hist).unwrap_or_default()
    }
}

/// How many messages each sender has had acknowledged: the query flood picks live keys
/// below these.
pub type Acked = Arc<Vec<AtomicU64>>;

/// One sender's tally.
struct Tally {
    msgs: u64,
    hist: Histogram<u64>,
    timeline: Vec<Bucket>,
    slow: Vec<Slow>,
}

/// Runs `producers` sync senders from now: untimed until `t0`, timed until `end`. With
/// `paced`, they offer that many msgs/s in all: each sends on its own schedule, spread
/// over the others', and one behind its schedule sends at once (latency is timed from the
/// send, so a stall shows as a slow send and a rate below the offered one).
pub async fn run(
    producers: &[Producer],
    topic: &str,
    body: usize,
    (t0, end): (Instant, Instant),
    paced: Option<f64>,
    acked: &Acked,
) -> Sent {
    let buckets = ((end - t0).as_nanos() / BUCKET.as_nanos()) as usize + 1;
    let errors = Arc::new(AtomicU64::new(0));
    let first_errors = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let began = Instant::now();
    // Each sender's interval between sends, and its offset in it.
    let interval =
        paced.map(|rate| Duration::from_secs_f64(producers.len() as f64 / rate.max(1.0)));
    for (id, p) in producers.iter().enumerate() {
        let first = interval.map(|i| began + i.mul_f64(id as f64 / producers.len().max(1) as f64));
        let (p, topic, acked) = (p.clone(), topic.to_owned(), acked.clone());
        let (errors, first_errors) = (errors.clone(), first_errors.clone());
        tasks.push(runtime::spawn(async move {
            let mut t = Tally {
                msgs: 0,
                hist: histogram(),
                timeline: vec![Bucket::default(); buckets],
                slow: Vec::new(),
            };
            let mut seq = 0u64;
            loop {
                if let (Some(first), Some(i)) = (first, interval) {
                    let due = first + i.mul_f64(seq as f64);
                    if due >= end {
                        break;
                    }
                    let now = Instant::now();
                    if due > now {
                        runtime::sleep(due - now).await;
                    }
                }
                let start = Instant::now();
                if start >= end {
                    break;
                }
                let msg = message(&topic, body, live_key(id, seq), seq);
                let r = p.send(msg).await;
                let done = Instant::now();
                let failure = match r {
                    Ok(res) if res.status == SendStatus::SendOk => {
                        acked[id].store(seq + 1, Ordering::Release);
                        if start >= t0 && done <= end {
                            let ns = (done - start).as_nanos() as u64;
                            record(&mut t.hist, ns);
                            t.msgs += 1;
                            let at = start - t0;
                            let b = &mut t.timeline[(at.as_nanos() / BUCKET.as_nanos()) as usize];
                            b.sends += 1;
                            b.max_ns = b.max_ns.max(ns);
                            b.sum_ns += ns;
                            if done - start > SLOW {
                                b.slow += 1;
                                if t.slow.len() < MAX_SLOW {
                                    t.slow.push(Slow {
                                        at,
                                        latency: done - start,
                                        log_offset: decode_offset_msg_id(&res.offset_msg_id)
                                            .ok()
                                            .map(|o| o.commit_log_offset.max(0) as u64),
                                    });
                                }
                            }
                        }
                        None
                    }
                    Ok(res) => Some(format!("send answered {:?}", res.status)),
                    Err(e) => Some(format!("send failed: {e}")),
                };
                seq += 1;
                if let Some(e) = failure {
                    errors.fetch_add(1, Ordering::Relaxed);
                    let mut first = first_errors.guard();
                    if first.len() < 5 {
                        first.push(e);
                    }
                }
            }
            t
        }));
    }
    let mut out = Sent {
        msgs: 0,
        secs: (end - t0).as_secs_f64(),
        hist: histogram(),
        errors: 0,
        first_errors: Vec::new(),
        timeline: vec![Bucket::default(); buckets],
        slow: Vec::new(),
    };
    for task in tasks {
        let t = task.await;
        out.msgs += t.msgs;
        let _ = out.hist.add(&t.hist);
        for (o, b) in out.timeline.iter_mut().zip(&t.timeline) {
            o.add(b);
        }
        out.slow.extend(t.slow);
    }
    out.slow.sort_by_key(|s| s.at);
    out.errors = errors.load(Ordering::Relaxed);
    out.first_errors = std::mem::take(&mut *first_errors.guard());
    out
}

/// Fills the backlog: `n` messages keyed [`backlog_key`], in batches from 4 senders.
pub async fn fill_backlog(
    namesrv: &str,
    topic: &str,
    body: usize,
    n: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<f64, String> {
    let t = topic.to_owned();
    let make: load::MakeMessage = Arc::new(move |i| message(&t, body, backlog_key(i), i));
    load::fill_with(namesrv, topic, n, 4, progress, make).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_a_key_and_the_filtered_property() {
        let m = message("T", 64, live_key(3, 17), 17);
        assert_eq!(m.properties["KEYS"], "s3-17");
        assert_eq!(m.properties[PROP], "7");
        assert_eq!(m.body.len(), 64);
        assert_eq!(backlog_key(5), "b5");
    }

    #[test]
    fn buckets_add_up() {
        let mut a = Bucket {
            sends: 2,
            max_ns: 10,
            sum_ns: 15,
            slow: 0,
        };
        a.add(&Bucket {
            sends: 1,
            max_ns: 30,
            sum_ns: 30,
            slow: 1,
        });
        assert_eq!(
            a,
            Bucket {
                sends: 3,
                max_ns: 30,
                sum_ns: 45,
                slow: 1
            }
        );
    }
}
