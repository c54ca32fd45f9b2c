//! The background load of the loaded run, beside the senders:
//!
//! - a QUERY_MESSAGE-by-key flood: [`QUERY_TASKS`] tasks, one query at a time each,
//!   alternating a random backlog key (index lookup, then a cold commit-log read) and a
//!   random live key already acknowledged (warm pages);
//! - two SQL92 consumers (`a > 5`), long-polling every queue from its end at the start;
//! - a catch-up consumer reading every queue from offset 0: the backlog (dropped from the
//!   page cache beforehand, so read cold), then, caught up, following the live end.
//!
//! The queries are QUERY_MESSAGE requests built as `Admin::query_by_key` builds them, with
//! the route resolved once: `query_by_key` asks the name server for the route first, which
//! would halve the flood and load the name server, not the store.
//!
//! A failed operation is counted and its message kept, and the task goes on; set-up
//! failures (no route, a consumer that cannot start) fail the run.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tern_shell::sync::MutexExt;

use tern_client::admin::Admin;
use tern_client::{ClientConfig, PullConsumer};
use tern_engine::record::RecordView;
use tern_shell::headers::QueryMessageRequestHeader;
use tern_shell::message::{decode_pulled, property};
use tern_shell::runtime::{self, JoinHandle};
use tern_shell::{RemotingCommand, RequestCode, ResponseCode};

use super::send::{Acked, PROP, backlog_key, live_key};
use crate::consume::{self, Sub};

/// Tasks flooding QUERY_MESSAGE.
pub const QUERY_TASKS: usize = 2;
/// SQL92 consumers (groups), each pulling every queue.
pub const SQL_CONSUMERS: usize = 2;
/// Their expression: `a` is `n % 10`, so 4 messages in 10 match.
pub const SQL_EXPR: &str = "a > 5";
/// Longest wait for one background request.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed operation before the next.
const ERROR_PAUSE: Duration = Duration::from_millis(50);

fn sql_match(r: &RecordView<'_>) -> bool {
    tern_engine::properties::get(r.properties(), PROP)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|a| a > 5)
}

const SQL: Sub<'static> = Sub {
    kind: "SQL92",
    expression: SQL_EXPR,
    check: Some(sql_match),
};

/// Counts of the background operations.
#[derive(Debug, Default)]
pub struct Counters {
    /// Queries for backlog keys answered with the message.
    pub cold_found: AtomicU64,
    /// … answered "not found" (the key exists: a miss is wrong).
    pub cold_missed: AtomicU64,
    /// Queries for live keys answered with the message.
    pub live_found: AtomicU64,
    /// … answered "not found" (possible: the index lags the acknowledgement).
    pub live_missed: AtomicU64,
    /// Queries that failed (RPC error, other codes, a wrong message).
    pub query_errors: AtomicU64,
    /// Messages the SQL92 consumers received.
    pub sql_msgs: AtomicU64,
    /// … of which did not match the expression.
    pub sql_mismatched: AtomicU64,
    /// SQL92 pulls that failed.
    pub sql_errors: AtomicU64,
    /// Messages the catch-up consumer read (backlog and live).
    pub catchup_msgs: AtomicU64,
    /// … of which from the backlog (the cold pass).
    pub cold_msgs: AtomicU64,
    /// When the cold pass finished (every queue past the backlog), ns from the start of
    /// the timed part; 0 while it runs.
    pub cold_done_ns: AtomicU64,
    /// Catch-up pulls that failed.
    pub catchup_errors: AtomicU64,
    /// The first few distinct failures, with what failed, and how often each happened.
    pub first_errors: Mutex<Vec<(String, u64)>>,
}

impl Counters {
    fn fail(&self, which: &AtomicU64, what: &str, e: impl std::fmt::Display) {
        which.fetch_add(1, Ordering::Relaxed);
        let text = format!("{what}: {e}");
        let mut first = self.first_errors.guard();
        if let Some((_, n)) = first.iter_mut().find(|(t, _)| *t == text) {
            *n += 1;
        } else if first.len() < 8 {
            first.push((text, 1));
        }
    }

    /// Queries answered (found or not).
    pub fn queries(&self) -> u64 {
        [
            &self.cold_found,
            &self.cold_missed,
            &self.live_found,
            &self.live_missed,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    /// Every failed background operation.
    pub fn errors(&self) -> u64 {
        self.query_errors.load(Ordering::Relaxed)
            + self.sql_errors.load(Ordering::Relaxed)
            + self.sql_mismatched.load(Ordering::Relaxed)
            + self.catchup_errors.load(Ordering::Relaxed)
            + self.cold_missed.load(Ordering::Relaxed)
    }

    /// The first distinct failures, each with its count when it happened more than once.
    pub fn first_errors(&self) -> Vec<String> {
        self.first_errors
            .guard()
            .iter()
            .map(|(t, n)| {
                if *n > 1 {
                    format!("{t} (×{n})")
                } else {
                    t.clone()
                }
            })
            .collect()
    }
}

/// A tiny xorshift generator: which key to ask for.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The running background load.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
    go: Arc<Go>,
    tasks: Vec<JoinHandle<()>>,
    admins: Vec<Admin>,
    consumers: Vec<PullConsumer>,
    /// What it did so far.
    pub counters: Arc<Counters>,
}

/// When the tasks start their work: set once by [`Background::go`].
#[derive(Debug, Default)]
struct Go(OnceLock<Instant>);

impl Go {
    /// Waits until the start is set and reached; `None` when stopped before it.
    async fn wait(&self, stop: &AtomicBool) -> Option<Instant> {
        loop {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            match self.0.get() {
                Some(&t0) if Instant::now() >= t0 => return Some(t0),
                Some(&t0) => runtime::sleep(t0 - Instant::now()).await,
                None => runtime::sleep(Duration::from_millis(5)).await,
            }
        }
    }
}

/// Sets everything up (routes, consumers, each queue's offsets) and starts the tasks,
/// which wait for [`Background::go`].
pub async fn start(
    namesrv: &str,
    topic: &str,
    backlog: u64,
    acked: &Acked,
) -> Result<Background, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Go::default());
    let counters = Arc::new(Counters::default());
    let mut bg = Background {
        stop: stop.clone(),
        go: go.clone(),
        tasks: Vec::new(),
        admins: Vec::new(),
        consumers: Vec::new(),
        counters: counters.clone(),
    };

    // Query flood.
    for i in 0..QUERY_TASKS {
        let admin = Admin::new(ClientConfig::new(namesrv)).map_err(|e| e.to_string())?;
        let route = admin
            .topic_route(topic)
            .await
            .map_err(|e| format!("route of {topic}: {e}"))?;
        let addr = route
            .broker_datas
            .iter()
            .find_map(|b| b.master_addr().map(str::to_owned))
            .ok_or_else(|| format!("{topic} has no master"))?;
        let (topic, acked, stop, go, c, a) = (
            topic.to_owned(),
            acked.clone(),
            stop.clone(),
            go.clone(),
            counters.clone(),
            admin.clone(),
        );
        bg.admins.push(admin);
        bg.tasks.push(runtime::spawn(async move {
            if go.wait(&stop).await.is_none() {
                return;
            }
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
            let mut turn = 0u64;
            while !stop.load(Ordering::Relaxed) {
                turn += 1;
                let s = rng.below(acked.len() as u64) as usize;
                let sent = acked[s].load(Ordering::Acquire);
                let cold = backlog > 0 && (turn % 2 == 0 || sent == 0);
                let key = if cold {
                    backlog_key(rng.below(backlog))
                } else if sent > 0 {
                    live_key(s, rng.below(sent))
                } else {
                    runtime::sleep(Duration::from_millis(1)).await;
                    continue;
                };
                let (found, missed) = if cold {
                    (&c.cold_found, &c.cold_missed)
                } else {
                    (&c.live_found, &c.live_missed)
                };
                match query(&a, &addr, &topic, &key).await {
                    Ok(true) => found.fetch_add(1, Ordering::Relaxed),
                    Ok(false) if cold => {
                        c.fail(
                            missed,
                            "QUERY_MESSAGE",
                            format!("backlog key {key} not found"),
                        );
                        0
                    }
                    Ok(false) => missed.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        c.fail(&c.query_errors, "QUERY_MESSAGE", e);
                        runtime::sleep(ERROR_PAUSE).await;
                        0
                    }
                };
            }
        }));
    }

    // SQL92 consumers, from each queue's end.
    for i in 0..SQL_CONSUMERS {
        let (pc, queues) = consume::consumer(namesrv, topic, &format!("bench_sql_{i}")).await?;
        for (q, addr) in queues {
            let start = pc
                .max_offset(&q)
                .await
                .map_err(|e| format!("max offset: {e}"))?;
            let (pc, stop, go, c) = (pc.clone(), stop.clone(), go.clone(), counters.clone());
            bg.tasks.push(runtime::spawn(async move {
                if go.wait(&stop).await.is_none() {
                    return;
                }
                let mut offset = start;
                while !stop.load(Ordering::Relaxed) {
                    match consume::pull(&pc, &addr, &q, offset, true, &SQL).await {
                        Ok(p) => {
                            c.sql_msgs
                                .fetch_add(p.stamps.len() as u64, Ordering::Relaxed);
                            if p.mismatched > 0 {
                                c.fail(
                                    &c.sql_mismatched,
                                    "SQL92 pull",
                                    format!("{} messages do not match {SQL_EXPR}", p.mismatched),
                                );
                            }
                            offset = p.next.max(offset);
                        }
                        Err(e) => {
                            c.fail(&c.sql_errors, "SQL92 pull", e);
                            runtime::sleep(ERROR_PAUSE).await;
                        }
                    }
                }
            }));
        }
        bg.consumers.push(pc);
    }

    // Catch-up from offset 0.
    let (pc, queues) = consume::consumer(namesrv, topic, "bench_catchup").await?;
    let queue_count = queues.len() as u32;
    let passed = Arc::new(AtomicU32::new(0));
    for (q, addr) in queues {
        let end = pc.max_offset(&q).await.map_err(|e| e.to_string())?;
        let (pc, stop, go, c) = (pc.clone(), stop.clone(), go.clone(), counters.clone());
        let passed = passed.clone();
        bg.tasks.push(runtime::spawn(async move {
            let Some(t0) = go.wait(&stop).await else {
                return;
            };
            let mut offset = 0;
            let mut past = false;
            while !stop.load(Ordering::Relaxed) {
                if !past && offset >= end {
                    past = true;
                    if passed.fetch_add(1, Ordering::AcqRel) + 1 == queue_count {
                        let ns = t0.elapsed().as_nanos().max(1) as u64;
                        c.cold_done_ns.store(ns, Ordering::Release);
                    }
                }
                match consume::pull(&pc, &addr, &q, offset, past, &Sub::ALL).await {
                    Ok(p) if !past && p.next <= offset => {
                        c.fail(
                            &c.catchup_errors,
                            "catch-up pull",
                            format!("at {offset} of queue {} did not advance", q.queue_id),
                        );
                        runtime::sleep(ERROR_PAUSE).await;
                    }
                    Ok(p) => {
                        let n = p.stamps.len() as u64;
                        c.catchup_msgs.fetch_add(n, Ordering::Relaxed);
                        if !past {
                            c.cold_msgs.fetch_add(n, Ordering::Relaxed);
                        }
                        offset = p.next.max(offset);
                    }
                    Err(e) => {
                        c.fail(&c.catchup_errors, "catch-up pull", e);
                        runtime::sleep(ERROR_PAUSE).await;
                    }
                }
            }
        }));
    }
    bg.consumers.push(pc);
    Ok(bg)
}

/// One QUERY_MESSAGE for `key`: `Ok(true)` when the answer holds a message with that key.
async fn query(admin: &Admin, addr: &str, topic: &str, key: &str) -> Result<bool, String> {
    let h = QueryMessageRequestHeader {
        topic: topic.to_owned(),
        key: key.to_owned(),
        max_num: 32,
        begin_timestamp: 0,
        end_timestamp: i64::MAX,
        unique_key_query: None,
    };
    let cmd = RemotingCommand::request(RequestCode::QueryMessage, &h);
    let resp = admin
        .client()
        .invoke(addr, cmd, RPC_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    match resp.response_code() {
        ResponseCode::Success => {
            let msgs = decode_pulled(&resp.body, false).map_err(|e| e.to_string())?;
            let hit = msgs.iter().any(|m| {
                m.properties
                    .get(property::KEYS)
                    .is_some_and(|ks| tern_engine::properties::has_key(ks, key))
            });
            if hit {
                Ok(true)
            } else {
                Err(format!(
                    "key {key}: {} messages, none with that key",
                    msgs.len()
                ))
            }
        }
        ResponseCode::QueryNotFound => Ok(false),
        other => Err(format!(
            "key {key}: answered {other:?} {}",
            resp.remark.unwrap_or_default()
        )),
    }
}

impl Background {
    /// Starts the work at `t0` (the start of the timed part).
    pub fn go(&self, t0: Instant) {
        let _ = self.go.0.set(t0);
    }

    /// Stops every task and waits for them (held pulls return within their suspend time).
    pub async fn stop(self) -> Arc<Counters> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await;
        }
        for c in &self.consumers {
            c.shutdown().await;
        }
        for a in &self.admins {
            a.shutdown().await;
        }
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rng_stays_below_its_bound_and_moves() {
        let mut r = Rng(7);
        let v: Vec<u64> = (0..100).map(|_| r.below(10)).collect();
        assert!(v.iter().all(|x| *x < 10));
        assert!(v.iter().collect::<std::collections::BTreeSet<_>>().len() > 5);
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn errors_are_counted_and_the_first_kept() {
        let c = Counters::default();
        for i in 0..10 {
            c.fail(&c.sql_errors, "SQL92 pull", i);
        }
        c.fail(&c.query_errors, "QUERY_MESSAGE", "timed out");
        c.fail(&c.query_errors, "SQL92 pull", 0);
        assert_eq!(c.errors(), 12);
        assert_eq!(c.first_errors().len(), 8);
        assert_eq!(c.first_errors()[0], "SQL92 pull: 0 (×2)");
        assert_eq!(c.first_errors()[7], "SQL92 pull: 7");
    }
}
