//! Executor glue in one place: the choice of executor, spawning (tasks and blocking work),
//! address resolution, sleeping, timeouts and the shutdown signal.
//!
//! The executor is chosen once per process, before the first task is spawned
//! ([`install`]): servers run Tern's own ([`pool`]: a task woken by a worker's turn of
//! the reactor runs on that worker, one thread per core), the edge gateway a smol
//! executor with a thread or two. Both drive IO with async-io's reactor (one version in
//! Cargo.lock), so async-std's net types, its timers and channels work under either;
//! only this module names an executor. Nothing here starts async-std's executor threads:
//! host names are resolved through [`resolve`], not async-std's `ToSocketAddrs` (which
//! spawns on async-std's executor).

mod pool;

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use async_std::channel::{Receiver, Sender, bounded};

use crate::sync::MutexExt;

/// Which executor runs the process's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// Tern's executor ([`pool`]) on `threads` workers named `tern-worker-<n>`. The
    /// default, with one worker per core ([`POOL_THREADS_ENV`] overrides).
    Pool {
        /// Worker threads to start.
        threads: usize,
    },
    /// A smol executor on `threads` threads named `tern-smol-<n>` (1 to
    /// [`MAX_THREADS`]): a small device's few cores and little memory.
    Smol {
        /// Executor threads to start.
        threads: usize,
    },
}

/// Most threads an executor is given.
pub const MAX_THREADS: usize = 64;

/// Environment variable that sets the default executor's worker count (1 to
/// [`MAX_THREADS`]); unset, one per core.
pub const POOL_THREADS_ENV: &str = "TERN_WORKER_THREADS";

pub use pool::THREAD_PREFIX as POOL_THREAD_PREFIX;

/// Name prefix of the smol executor's threads (`tern-smol-0`, ...), so a test or an
/// operator's `top -H` can tell which executor runs.
pub const SMOL_THREAD_PREFIX: &str = "tern-smol-";

/// Why [`install`] did not take the choice.
#[derive(Debug)]
pub enum InstallError {
    /// The executor was already chosen, by an earlier `install` or by the first spawn
    /// (which takes the default); it is this one.
    AlreadyChosen(Runtime),
    /// A thread count of 0 or above [`MAX_THREADS`].
    Threads(usize),
    /// An executor thread could not be started.
    Thread(std::io::Error),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyChosen(rt) => write!(f, "the executor was already chosen: {rt:?}"),
            Self::Threads(n) => {
                write!(f, "{n} executor threads: expected 1 to {MAX_THREADS}")
            }
            Self::Thread(e) => write!(f, "starting an executor thread: {e}"),
        }
    }
}

impl std::error::Error for InstallError {}

/// The smol executor, when chosen; its threads run it until the process exits.
static SMOL: smol::Executor<'static> = smol::Executor::new();
/// The choice; set by [`install`] or, on first use, to the default.
static CHOSEN: OnceLock<Runtime> = OnceLock::new();

/// Chooses the executor for the whole process; call it first in `main`, before anything
/// spawns. The executor's threads start now.
///
/// Fails if the choice was already made (a second `install`, or a spawn before it took
/// the default): tasks already running stay where they are, so the process would run
/// on two executors.
pub fn install(rt: Runtime) -> Result<(), InstallError> {
    let (Runtime::Pool { threads } | Runtime::Smol { threads }) = rt;
    if threads == 0 || threads > MAX_THREADS {
        return Err(InstallError::Threads(threads));
    }
    choose(rt).map(|_| ())
}

/// The executor this process runs on: the default ([`Runtime::Pool`], one worker per
/// core or [`POOL_THREADS_ENV`]) once anything used it without an [`install`].
pub fn chosen() -> Runtime {
    if let Some(&rt) = CHOSEN.get() {
        return rt;
    }
    match choose(Runtime::Pool {
        threads: default_threads(),
    }) {
        Ok(rt) | Err(InstallError::AlreadyChosen(rt)) => rt,
        // No thread to run anything on: nothing can go on.
        Err(e) => panic!("starting the executor: {e}"),
    }
}

/// Serializes the choice: the first chooser starts the threads, every later one finds
/// them chosen.
static CHOOSING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn choose(rt: Runtime) -> Result<Runtime, InstallError> {
    let _choosing = CHOOSING.guard();
    if let Some(&running) = CHOSEN.get() {
        return Err(InstallError::AlreadyChosen(running));
    }
    match rt {
        Runtime::Pool { threads } => pool::start(threads).map_err(InstallError::Thread)?,
        Runtime::Smol { threads } => {
            for n in 0..threads {
                std::thread::Builder::new()
                    .name(format!("{SMOL_THREAD_PREFIX}{n}"))
                    .spawn(|| smol::block_on(SMOL.run(std::future::pending::<()>())))
                    .map_err(InstallError::Thread)?;
            }
        }
    }
    // Threads first, then the choice: a task spawned once the choice is visible finds
    // threads to run it.
    let _ = CHOSEN.set(rt);
    Ok(rt)
}

/// Workers of the default executor: [`POOL_THREADS_ENV`] when it holds 1 to
/// [`MAX_THREADS`], else one per core.
fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let Ok(set) = std::env::var(POOL_THREADS_ENV) else {
        return cores.min(MAX_THREADS);
    };
    match set.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => n,
        _ => {
            // Read before any logger may be set up: said where it is always seen.
            eprintln!(
                "{POOL_THREADS_ENV}={set:?}: expected 1 to {MAX_THREADS}; running one worker \
                 per core ({cores})"
            );
            cores.min(MAX_THREADS)
        }
    }
}

/// Handle of a spawned task; awaiting it yields the task's output. Dropping it detaches
/// the task (it runs on), under either executor.
pub struct JoinHandle<T>(Handle<T>);

/// `None` only inside `drop`, which detaches the task.
struct Handle<T>(Option<async_task::Task<T>>);

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The choice as made, without making it: a task exists, so it was.
        f.debug_tuple("JoinHandle").field(&CHOSEN.get()).finish()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.0.0 {
            Some(t) => Pin::new(t).poll(cx),
            // Not reachable: the task is taken only when the handle is dropped.
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        // An async-task task is cancelled when its handle drops. Callers rely on the
        // other meaning (async-std's): fire-and-forget spawns run on.
        if let Some(t) = self.0.0.take() {
            t.detach();
        }
    }
}

/// Spawns a task on the chosen executor.
pub fn spawn<F, T>(fut: F) -> JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    JoinHandle(Handle(Some(match chosen() {
        Runtime::Pool { .. } => pool::spawn(fut),
        Runtime::Smol { .. } => SMOL.spawn(fut),
    })))
}

/// Runs blocking work (file writes, fsync, name look-ups) on a pool of threads for
/// blocking calls (the `blocking` crate's, under either executor), so no executor thread
/// waits on it.
pub fn spawn_blocking<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    JoinHandle(Handle(Some(smol::unblock(f))))
}

/// Runs a future to completion on the current thread (tests, binaries' `main`); the
/// future's spawned tasks run on the chosen executor. Under the pool the thread only
/// parks between polls: were it to wait in the reactor, the IO it collected would wake
/// tasks away from the workers. Called inside a task, it blocks that worker: the
/// worker's queued tasks move to the others first.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    match chosen() {
        Runtime::Pool { .. } => pool::off_worker(|| smol::future::block_on(fut)),
        Runtime::Smol { .. } => smol::block_on(fut),
    }
}

/// The addresses `addr` (`"host:port"`) names: a literal address at once, a host name
/// through the system resolver on the blocking pool.
pub async fn resolve(addr: &str) -> std::io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let owned = addr.to_string();
    let found = spawn_blocking(move || {
        std::net::ToSocketAddrs::to_socket_addrs(owned.as_str()).map(Iterator::collect)
    })
    .await;
    let found: Vec<SocketAddr> = found.map_err(|e| {
        std::io::Error::new(e.kind(), format!("could not resolve address '{addr}': {e}"))
    })?;
    if found.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("'{addr}' names no address"),
        ));
    }
    Ok(found)
}

/// Lets other tasks run before this one goes on (between bounded batches of work).
pub async fn yield_now() {
    async_std::task::yield_now().await;
}

/// Sleeps for `d`.
pub async fn sleep(d: Duration) {
    async_std::task::sleep(d).await;
}

/// A periodic wake-up for a task that waits on a notification and, as a safety net,
/// looks again now and then anyway. Its one timer stays registered with the reactor
/// between waits; a [`timeout`] around each wait registers a new timer every time it
/// does not complete at once, and each registration interrupts the reactor (an eventfd
/// write and an extra `epoll_wait`): once per message for a task woken per append.
#[derive(Debug)]
pub struct Ticker(async_std::stream::Interval);

impl Ticker {
    /// Ticks every `period`, the first `period` from now.
    pub fn new(period: Duration) -> Self {
        Self(async_std::stream::interval(period))
    }

    /// Resolves at the next tick (at once when one passed unawaited). Dropping the wait
    /// keeps the timer registered: the next wait, from the same task, costs nothing.
    pub async fn tick(&mut self) {
        use async_std::stream::StreamExt;
        let _ = self.0.next().await;
    }
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
    let mut fut = std::pin::pin!(fut);
    // Most futures bounded here are ready at once (a write the socket takes whole, a
    // flush with nothing buffered): the timer, and the clock read that makes one, only
    // for those that are not. Two clock reads a request were 2% of a client's CPU.
    let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
    if let Poll::Ready(out) = first {
        return Ok(out);
    }
    async_std::future::timeout(d, fut)
        .await
        .map_err(|_| TimedOut)
}

/// Waits (at most `within`) until `done()` holds, looking again each time `event`
/// fires; says whether it held before the time ran out (`false` at the deadline, with
/// no last look). A listener is taken before each look, so a notification between the
/// look and the wait is not lost.
pub async fn wait_on(
    event: &event_listener::Event,
    within: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let listener = event.listen();
        if done() {
            return true;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || timeout(left, listener).await.is_err() {
            return false;
        }
    }
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

/// A wake-up for a task that loops: [`Self::wake`] fires the signal the task holds, and
/// [`Self::next`] hands out a fresh one once that fired. A task that takes `next()` before
/// its work and waits on it after never misses a wake that came during the work (the
/// re-armable notify of the rebalance loops, the lite consumer's poll and the broker's
/// registration task).
#[derive(Debug, Default)]
pub struct Wakeup {
    /// The signal, and whether a waiter has taken it: a wake before anyone took the
    /// signal is still owed to the first taker.
    current: std::sync::Mutex<(Shutdown, bool)>,
}

impl Wakeup {
    /// A wake-up with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes whoever waits on the current signal, or the next wait if none does yet.
    pub fn wake(&self) {
        self.current.guard().0.trigger();
    }

    /// The signal to wait on next: the current one, or a fresh one if it fired after a
    /// waiter took it (that wake was for the round that took it).
    pub fn next(&self) -> Shutdown {
        let mut current = self.current.guard();
        let (signal, taken) = &mut *current;
        if *taken && signal.is_triggered() {
            *signal = Shutdown::new();
        }
        *taken = true;
        signal.clone()
    }
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

    /// Sleeps `d`, or less when the signal comes first: true when it did (a periodic
    /// task's "wait for the next round, unless we are stopping").
    pub async fn sleep(&self, d: Duration) -> bool {
        self.until(sleep(d)).await
    }

    /// Awaits `fut`, or less when the signal comes first: true when it did (a loop's
    /// "wait for the next round or a kick, unless we are stopping").
    pub async fn until(&self, fut: impl Future<Output = ()>) -> bool {
        race(
            async {
                fut.await;
                false
            },
            async {
                self.wait().await;
                true
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_on_looks_again_at_each_notification_until_the_deadline() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};
        let event = Arc::new(event_listener::Event::new());
        let count = Arc::new(AtomicU32::new(0));
        // Held at once: no wait.
        assert!(block_on(wait_on(&event, Duration::ZERO, || true)));
        // Never held: false once the time is out.
        let started = std::time::Instant::now();
        assert!(!block_on(wait_on(
            &event,
            Duration::from_millis(30),
            || false
        )));
        assert!(started.elapsed() >= Duration::from_millis(30));
        // Held after a few notifications, each a look.
        let (e, c) = (Arc::clone(&event), Arc::clone(&count));
        let bumper = std::thread::spawn(move || {
            for _ in 0..3 {
                std::thread::sleep(Duration::from_millis(5));
                c.fetch_add(1, Ordering::SeqCst);
                e.notify(usize::MAX);
            }
        });
        let held = block_on(wait_on(&event, Duration::from_secs(10), || {
            count.load(Ordering::SeqCst) == 3
        }));
        assert!(held);
        bumper.join().unwrap();
    }

    #[test]
    fn a_wakeup_is_owed_to_the_next_wait_and_spent_by_it() {
        let w = Wakeup::new();
        // A wake before anyone waited is kept for the first taker.
        w.wake();
        assert!(w.next().is_triggered());
        // Spent by that round: the next round gets a fresh signal...
        let round = w.next();
        assert!(!round.is_triggered());
        // ...which a wake during the round's work fires.
        w.wake();
        assert!(round.is_triggered());
        assert!(!w.next().is_triggered());
    }

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
    fn a_ticker_ticks_each_period_and_a_dropped_wait_loses_nothing() {
        block_on(async {
            let mut t = Ticker::new(Duration::from_millis(20));
            let start = std::time::Instant::now();
            // A wait given up early (as when the notification wins the race).
            let early = timeout(Duration::from_millis(5), t.tick()).await;
            assert_eq!(early, Err(TimedOut));
            t.tick().await;
            let first = start.elapsed();
            assert!(first >= Duration::from_millis(20), "{first:?}");
            t.tick().await;
            let second = start.elapsed();
            assert!(second >= Duration::from_millis(40), "{second:?}");
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
