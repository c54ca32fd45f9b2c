//! The consume worker pool (Java's consume thread pool): OS threads, so listeners may
//! block without stalling the executor that drives the network. Starts with
//! `consume_thread_min` threads and grows to `consume_thread_max` when every thread is
//! busy and work is waiting.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tern_shell::sync::{CondvarExt, MutexExt};

type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    threads: AtomicUsize,
    idle: AtomicUsize,
    /// Jobs queued or running.
    pending: AtomicUsize,
    closed: AtomicBool,
}

/// A bounded pool of worker threads.
#[derive(Clone)]
pub struct WorkerPool {
    shared: Arc<Shared>,
    max: usize,
    name: String,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("threads", &self.shared.threads.load(Ordering::Relaxed))
            .field("max", &self.max)
            .finish()
    }
}

impl WorkerPool {
    /// A pool of `min..=max` threads named after `name`.
    pub fn new(name: &str, min: usize, max: usize) -> Self {
        let max = max.max(min).max(1);
        let pool = Self {
            shared: Arc::new(Shared::default()),
            max,
            name: name.to_owned(),
        };
        for _ in 0..min.max(1) {
            pool.spawn_thread();
        }
        pool
    }

    fn spawn_thread(&self) {
        let n = self.shared.threads.fetch_add(1, Ordering::AcqRel);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{n}", self.name))
            .spawn(move || worker(shared));
        if let Err(e) = spawned {
            log::warn!("cannot start a consume thread: {e}");
            self.shared.threads.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Queues a job; ignored once the pool is closed.
    pub fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if self.shared.closed.load(Ordering::Acquire) {
            return;
        }
        self.shared.pending.fetch_add(1, Ordering::AcqRel);
        self.shared.queue.guard().push_back(Box::new(job));
        if self.shared.idle.load(Ordering::Acquire) == 0
            && self.shared.threads.load(Ordering::Acquire) < self.max
        {
            self.spawn_thread();
        }
        self.shared.ready.notify_one();
    }

    /// Jobs queued or running.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// Threads running.
    pub fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::Acquire)
    }

    /// Stops the threads once the queue is empty; later submits are ignored.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.ready.notify_all();
    }
}

fn worker(shared: Arc<Shared>) {
    loop {
        let job = {
            let mut q = shared.queue.guard();
            loop {
                if let Some(j) = q.pop_front() {
                    break Some(j);
                }
                if shared.closed.load(Ordering::Acquire) {
                    break None;
                }
                shared.idle.fetch_add(1, Ordering::AcqRel);
                q = shared.ready.wait_guard(q);
                shared.idle.fetch_sub(1, Ordering::AcqRel);
            }
        };
        let Some(job) = job else {
            shared.threads.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        // A panicking listener must not take the worker (and its pending count) with it.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            log::error!("a consume job panicked");
        }
        shared.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn runs_jobs_and_grows_to_max_only() {
        let pool = WorkerPool::new("t", 1, 3);
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..6 {
            let d = done.clone();
            pool.submit(move || {
                std::thread::sleep(Duration::from_millis(20));
                d.fetch_add(1, Ordering::SeqCst);
            });
        }
        let t = Instant::now();
        while pool.pending() > 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(done.load(Ordering::SeqCst), 6);
        assert!(pool.threads() <= 3);
        pool.close();
    }
}
