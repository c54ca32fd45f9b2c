//! This process's threads, for the tests of which executor runs (`runtime_pool.rs`,
//! `runtime_smol.rs`), included with `#[path]`.

/// The current thread's name ("" when unnamed).
pub fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_owned()
}

/// The names of this process's threads, as the kernel reports them (15 bytes at most).
pub fn process_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_owned())
        .collect()
}

/// Awaits `tasks` in turn; their results, in order.
pub async fn join_all<T>(tasks: Vec<impl std::future::Future<Output = T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await);
    }
    out
}
