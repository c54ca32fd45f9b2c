//! Tern's executor: worker threads that run the tasks their own turn of the reactor woke.
//!
//! Why not async-std's (async-executor's): it queues every woken task on one shared queue
//! and wakes whichever worker went idle last, so a request whose socket turned readable in
//! one thread's `epoll_wait` ran on the other: a futex wake and a thread switch per request.
//! At one sync sender the broker made 5.8 futex calls and 8 context switches per message,
//! and over half its CPU went to the kernel switching threads.
//!
//! Here each worker runs async-io's `block_on` over its own loop, so an idle worker is the
//! one waiting in `epoll_wait` (async-io has one reactor; one thread at a time drives it).
//! A task woken on a worker thread, by that thread's reactor turn or by a task running
//! there, goes to that worker's queue and runs there next: no other thread is involved,
//! and async-io wakes its own thread without interrupting the reactor. A second task
//! queued on a busy worker wakes an idle one to take it, so load still spreads over the
//! cores. Tasks woken off the workers (the blocking pool, async-io's driver thread, a
//! thread of the broker's own) go to the shared queue and wake one idle worker.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};

use async_task::{Builder, Runnable, Task};
use concurrent_queue::ConcurrentQueue;

use crate::sync::MutexExt;

/// Tasks a worker runs between turns of the reactor, so readiness is still collected
/// while it is busy.
const BUDGET: usize = 64;
/// Every this many tasks a worker takes from the shared queue before its own, so tasks
/// woken off the workers are not starved by a worker busy with its own.
const SHARED_FIRST_EVERY: usize = 16;

/// Name prefix of the workers (`tern-worker-0`, ...), for `top -H` and tests.
pub const THREAD_PREFIX: &str = "tern-worker-";

struct Pool {
    shared: ConcurrentQueue<Runnable>,
    /// One queue per worker: its owner pops from it, idle workers steal from it.
    locals: Box<[ConcurrentQueue<Runnable>]>,
    idle: Idle,
}

/// The workers with nothing to run, each with the waker of its `block_on`.
///
/// A worker registers before it looks at the queues a last time, and a scheduler pushes
/// before it looks here: under the lock (and the counter's sequential consistency) one of
/// the two sees the other, so no task is left queued while every worker sleeps.
struct Idle {
    count: AtomicUsize,
    wakers: Mutex<Vec<(usize, Waker)>>,
    /// Per worker: registered in `wakers` (read without the lock to skip it when not).
    registered: Box<[AtomicBool]>,
}

static POOL: OnceLock<Pool> = OnceLock::new();

thread_local! {
    /// Which worker this thread is; `usize::MAX` on every other thread.
    static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Starts `threads` workers; called once, by `runtime::install` (or its default). If
/// the system refuses a thread part-way, the pool runs on the workers it got (a worker
/// never started takes no tasks: only its own thread queues on it).
pub(super) fn start(threads: usize) -> std::io::Result<()> {
    assert!(threads > 0, "a pool needs a worker");
    let mut fresh = false;
    let pool = POOL.get_or_init(|| {
        fresh = true;
        Pool {
            shared: ConcurrentQueue::unbounded(),
            locals: (0..threads).map(|_| ConcurrentQueue::unbounded()).collect(),
            idle: Idle {
                count: AtomicUsize::new(0),
                wakers: Mutex::new(Vec::with_capacity(threads)),
                registered: (0..threads).map(|_| AtomicBool::new(false)).collect(),
            },
        }
    });
    if !fresh {
        return Err(std::io::Error::other(
            "the pool's workers were started once already",
        ));
    }
    for me in 0..threads {
        let started = std::thread::Builder::new()
            .name(format!("{THREAD_PREFIX}{me}"))
            .spawn(move || {
                WORKER.set(me);
                smol::block_on(std::future::poll_fn(|cx| pool.work(me, cx)))
            });
        match started {
            Ok(_) => {}
            Err(e) if me == 0 => return Err(e),
            Err(e) => {
                eprintln!("starting executor worker {me} of {threads}: {e}; running on {me}");
                break;
            }
        }
    }
    Ok(())
}

/// Runs `f` with this thread off the pool, for a `block_on` called on a worker: the
/// worker's queued tasks go to the shared queue, and what `f` wakes meanwhile goes there
/// too, so no task waits on a worker that is blocked until `f` returns.
pub(super) fn off_worker<T>(f: impl FnOnce() -> T) -> T {
    let me = WORKER.get();
    let Some(pool) = POOL.get().filter(|p| me < p.locals.len()) else {
        return f();
    };
    WORKER.set(usize::MAX);
    while let Ok(r) = pool.locals[me].pop() {
        let _ = pool.shared.push(r);
        pool.idle.wake_one();
    }
    struct Back(usize);
    impl Drop for Back {
        fn drop(&mut self) {
            WORKER.set(self.0);
        }
    }
    let _back = Back(me);
    f()
}

/// Spawns `fut` on the pool (started by then: the runtime chooses it before any spawn).
/// A panic in the task is kept for whoever awaits its handle, as async-std does; the
/// worker runs on.
pub(super) fn spawn<F, T>(fut: F) -> Task<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let pool = POOL
        .get()
        .expect("the pool runs before anything spawns on it");
    let (runnable, task) = Builder::new()
        .propagate_panic(true)
        .spawn(|()| fut, |r| pool.schedule(r));
    runnable.schedule();
    task
}

impl Pool {
    fn schedule(&self, r: Runnable) {
        let me = WORKER.get();
        let Some(local) = self.locals.get(me) else {
            // Pushing to an unbounded queue fails only once it is closed; ours never is.
            let _ = self.shared.push(r);
            fence(Ordering::SeqCst);
            self.idle.wake_one();
            return;
        };
        let _ = local.push(r);
        fence(Ordering::SeqCst);
        // This worker is idle only while this thread runs its reactor turn: waking it
        // is an atomic store (async-io skips the eventfd from the polling thread). A
        // second task waiting here is work for an idle sibling. A lone task queued
        // behind a running one waits for it, as behind tokio's LIFO slot: tasks here do
        // not block their thread (disk waits go to the blocking pool), and a `block_on`
        // on a worker hands the queue over first ([`off_worker`]).
        self.idle.wake_here(me, local.len() > 1);
    }

    /// The worker's loop, polled by its thread's `block_on`: runs up to [`BUDGET`] tasks,
    /// then yields to the reactor; with nothing to run it registers idle and returns
    /// pending, so `block_on` waits in the reactor (or parks while another worker does).
    fn work(&self, me: usize, cx: &mut Context<'_>) -> Poll<()> {
        self.idle.leave(me);
        for tick in 0..BUDGET {
            match self.next(me, tick) {
                Some(r) => {
                    r.run();
                }
                None => {
                    self.idle.enter(me, cx.waker());
                    if !self.has_work(me) {
                        return Poll::Pending;
                    }
                    self.idle.leave(me);
                }
            }
        }
        // Come back after a turn of the reactor that does not block.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn next(&self, me: usize, tick: usize) -> Option<Runnable> {
        let local = &self.locals[me];
        let first = if tick % SHARED_FIRST_EVERY == SHARED_FIRST_EVERY - 1 {
            self.shared.pop().ok()
        } else {
            None
        };
        first
            .or_else(|| local.pop().ok())
            .or_else(|| self.shared.pop().ok())
            .or_else(|| self.steal(me))
    }

    /// One task from another worker's queue, looking from the next worker round.
    fn steal(&self, me: usize) -> Option<Runnable> {
        let n = self.locals.len();
        (1..n).find_map(|k| self.locals[(me + k) % n].pop().ok())
    }

    fn has_work(&self, me: usize) -> bool {
        !self.shared.is_empty()
            || self.locals.iter().enumerate().any(|(i, q)| {
                // Our own queue always counts; another's only when it holds a task its
                // owner is not about to run (the owner may be busy with a long one).
                !q.is_empty()
                    && (i == me || q.len() > 1 || !self.idle.registered[i].load(Ordering::SeqCst))
            })
    }
}

impl Idle {
    fn enter(&self, me: usize, waker: &Waker) {
        let mut wakers = self.wakers.guard();
        if !self.registered[me].swap(true, Ordering::SeqCst) {
            wakers.push((me, waker.clone()));
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        // Ordered before the caller's last look at the queues, as a scheduler's push is
        // before its look at `count`.
        fence(Ordering::SeqCst);
    }

    fn leave(&self, me: usize) {
        if !self.registered[me].load(Ordering::SeqCst) {
            return;
        }
        let mut wakers = self.wakers.guard();
        if let Some(at) = wakers.iter().position(|(w, _)| *w == me) {
            self.remove(&mut wakers, at);
        }
    }

    /// Takes the entry at `at` out of `wakers` (held locked), and its worker out of the
    /// count.
    fn remove(&self, wakers: &mut Vec<(usize, Waker)>, at: usize) -> Waker {
        let (w, waker) = wakers.swap_remove(at);
        self.count.fetch_sub(1, Ordering::SeqCst);
        self.registered[w].store(false, Ordering::SeqCst);
        waker
    }

    /// Wakes the worker that went idle last (its caches are the warmest).
    fn wake_one(&self) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let woken = {
            let mut wakers = self.wakers.guard();
            let last = wakers.len().checked_sub(1);
            last.map(|at| self.remove(&mut wakers, at))
        };
        if let Some(waker) = woken {
            waker.wake();
        }
    }

    /// Wakes worker `me` if it is idle (its own reactor turn scheduled a task), and with
    /// `sibling` one other idle worker too.
    fn wake_here(&self, me: usize, sibling: bool) {
        // Only this thread registers worker `me`, so its flag is current here.
        if self.count.load(Ordering::SeqCst) == 0
            || (!sibling && !self.registered[me].load(Ordering::SeqCst))
        {
            return;
        }
        let mut woken: [Option<Waker>; 2] = [None, None];
        {
            let mut wakers = self.wakers.guard();
            if let Some(at) = wakers.iter().position(|(w, _)| *w == me) {
                woken[0] = Some(self.remove(&mut wakers, at));
            }
            if sibling {
                let last = wakers.len().checked_sub(1);
                woken[1] = last.map(|at| self.remove(&mut wakers, at));
            }
        }
        for w in woken.into_iter().flatten() {
            w.wake();
        }
    }
}
