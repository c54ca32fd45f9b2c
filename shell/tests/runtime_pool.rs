//! Tern's executor (the servers' default): tasks run on its workers, load spreads over
//! them, nothing woken from other threads is lost, and a panicking task takes no worker
//! with it. (That a task woken by its socket runs where the reactor saw it, without a
//! thread switch, shows in `tern-bench`'s context switches and CPU per message, not in
//! a count a test can hold steady.)
//!
//! Its own test binary, so its own process: the choice is once per process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, Once};
use std::time::Duration;

use tern_shell::runtime::{self, POOL_THREAD_PREFIX, Runtime};

#[path = "support/threads.rs"]
mod threads;

use threads::{join_all, process_threads, thread_name};

const THREADS: usize = 3;

/// Chooses the pool once, and runs the tests one at a time: one test's tasks blocking
/// workers or waking them would show in another's counts.
fn pool_chosen() -> MutexGuard<'static, ()> {
    static INSTALL: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    INSTALL.call_once(|| runtime::install(Runtime::Pool { threads: THREADS }).unwrap());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on a thread of its own and gives up after 10 s: a pool that cannot spread
/// the work hangs rather than fails.
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: not done in 10 s"))
}

#[test]
fn tasks_run_on_the_pools_named_workers_one_per_thread_asked() {
    let _serial = pool_chosen();
    assert_eq!(runtime::chosen(), Runtime::Pool { threads: THREADS });
    let on = runtime::block_on(runtime::spawn(async { thread_name() }));
    assert!(on.starts_with(POOL_THREAD_PREFIX), "a task ran on '{on}'");
    let workers = process_threads()
        .iter()
        .filter(|n| n.starts_with(POOL_THREAD_PREFIX))
        .count();
    assert_eq!(workers, THREADS);
    assert!(
        !process_threads().iter().any(|n| n.starts_with("async-std")),
        "async-std's executor started"
    );
}

#[test]
fn tasks_spawned_by_one_worker_spread_over_every_worker() {
    let _serial = pool_chosen();
    // Each task blocks its worker until all have arrived: they finish only if idle
    // workers take the tasks a busy one queued.
    let all_there = Arc::new(Barrier::new(THREADS));
    let names = within_10s("tasks blocking their workers", move || {
        runtime::block_on(runtime::spawn(async move {
            let tasks: Vec<_> = (0..THREADS)
                .map(|_| {
                    let b = all_there.clone();
                    runtime::spawn(async move {
                        b.wait();
                        thread_name()
                    })
                })
                .collect();
            join_all(tasks).await
        }))
    });
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), THREADS, "{names:?}");
}

#[test]
fn a_block_on_inside_a_task_hands_its_workers_queue_to_the_others() {
    let _serial = pool_chosen();
    // The inner task is queued on the outer one's worker, which `block_on` then blocks:
    // it runs only if the queue was handed over (and what the blocked future wakes
    // meanwhile goes to the shared queue).
    let got = within_10s("a block_on on a worker", || {
        runtime::block_on(runtime::spawn(async {
            let (tx, rx) = async_std::channel::bounded::<u32>(1);
            let inner = runtime::spawn(async move { rx.recv().await.unwrap() + 1 });
            runtime::block_on(async move {
                tx.send(41).await.unwrap();
                inner.await
            })
        }))
    });
    assert_eq!(got, 42);
}

#[test]
fn tasks_woken_from_threads_outside_the_pool_all_run() {
    let _serial = pool_chosen();
    const MESSAGES: usize = 20_000;
    let (tx, rx) = async_std::channel::bounded::<usize>(8);
    let got = Arc::new(AtomicUsize::new(0));
    let counted = got.clone();
    let consumer = runtime::spawn(async move {
        while rx.recv().await.is_ok() {
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    // Two plain threads send (their wakes go through the shared queue); a worker task
    // sends too (its wakes through a worker's own queue).
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..MESSAGES {
                    runtime::block_on(tx.send(i)).unwrap();
                }
            })
        })
        .collect();
    let from_pool = runtime::spawn(async move {
        for i in 0..MESSAGES {
            tx.send(i).await.unwrap();
        }
    });
    for s in senders {
        s.join().unwrap();
    }
    runtime::block_on(async {
        runtime::timeout(Duration::from_secs(30), async {
            from_pool.await;
            consumer.await;
        })
        .await
        .expect("every message received");
    });
    assert_eq!(got.load(Ordering::Relaxed), 3 * MESSAGES);
}

#[test]
fn a_panicking_task_reports_to_its_awaiter_and_the_workers_run_on() {
    let _serial = pool_chosen();
    let awaited =
        std::thread::spawn(|| runtime::block_on(runtime::spawn(async { panic!("boom") })));
    assert!(awaited.join().is_err(), "the panic reaches the awaiter");
    // Every worker ran a panicking task; all still run tasks.
    for _ in 0..THREADS * 4 {
        drop(runtime::spawn(async { panic!("detached boom") }));
    }
    let all_there = Arc::new(Barrier::new(THREADS));
    within_10s("a task on each worker", move || {
        runtime::block_on(async {
            let tasks: Vec<_> = (0..THREADS)
                .map(|_| {
                    let b = all_there.clone();
                    runtime::spawn(async move {
                        b.wait();
                    })
                })
                .collect();
            for t in tasks {
                t.await;
            }
        })
    });
}
