//! Executor glue in one place: spawning (tasks and blocking work), sleeping, timeouts and
//! the shutdown signal.
//!
//! Servers run on async-std; the edge gateway will run on smol. Both drive IO with
//! async-io's reactor, so only this module names an executor: switching means changing
//! these few functions, not the connection or server code.

use std::future::Future;
use std::time::Duration;

use async_std::channel::{Receiver, Sender, bounded};

/// Handle of a spawned task; awaiting it yields the task's output.
pub type JoinHandle<T> = async_std::task::JoinHandle<T>;

/// Spawns a task on the executor.
pub fn spawn<F, T>(fut: F) -> JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    async_std::task::spawn(fut)
}

/// Runs blocking work (file writes, fsync) on the executor's pool of threads for
/// blocking calls, so no executor thread waits on it.
pub fn spawn_blocking<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    async_std::task::spawn_blocking(f)
}

/// Runs a future to completion on the current thread (tests, binaries' `main`).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    async_std::task::block_on(fut)
}

/// Lets other tasks run before this one goes on (between bounded batches of work).
pub async fn yield_now() {
    async_std::task::yield_now().await;
}

/// Sleeps for `d`.
pub async fn sleep(d: Duration) {
    async_std::task::sleep(d).await;
}

/// The deadline passed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedOut;

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("timed out")
    }
}

impl std::error::Error for TimedOut {}

/// Runs `fut` for at most `d`; the future is dropped on timeout.
pub async fn timeout<F: Future>(d: Duration, fut: F) -> Result<F::Output, TimedOut> {
    async_std::future::timeout(d, fut)
        .await
        .map_err(|_| TimedOut)
}

/// Polls both futures and returns the output of whichever finishes first.
pub async fn race<T, A, B>(a: A, b: B) -> T
where
    A: Future<Output = T>,
    B: Future<Output = T>,
{
    use async_std::prelude::FutureExt;
    a.race(b).await
}

/// Wall-clock milliseconds since the Unix epoch, as RocketMQ stamps messages and offsets
/// (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A one-shot signal every task can wait on: triggering it wakes all waiters, now and later.
///
/// Cloning shares the signal. It is a closed channel underneath, so waiting costs nothing
/// and a trigger is never missed.
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A new, untriggered signal.
    pub fn new() -> Self {
        let (tx, rx) = bounded(1);
        Self { tx, rx }
    }

    /// Triggers the signal (idempotent).
    pub fn trigger(&self) {
        self.tx.close();
    }

    /// True once triggered.
    pub fn is_triggered(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves when the signal is triggered.
    pub async fn wait(&self) {
        // Nothing is ever sent: recv returns only when the channel is closed.
        let _ = self.rx.recv().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_wakes_waiters_before_and_after_trigger() {
        block_on(async {
            let s = Shutdown::new();
            let s2 = s.clone();
            let waiter = spawn(async move { s2.wait().await });
            sleep(Duration::from_millis(10)).await;
            s.trigger();
            timeout(Duration::from_secs(1), waiter).await.unwrap();
            timeout(Duration::from_secs(1), s.wait()).await.unwrap();
            assert!(s.is_triggered());
        });
    }

    #[test]
    fn timeout_reports_expiry() {
        block_on(async {
            let r = timeout(Duration::from_millis(5), sleep(Duration::from_secs(5))).await;
            assert_eq!(r, Err(TimedOut));
        });
    }
}
